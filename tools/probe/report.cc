// Renderings of the probe's checklist: aligned table for people, one JSON object for machines.
#include "report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/json.hpp"

namespace probe {

std::string_view to_string(Verdict v) {
  switch (v) {
    case Verdict::pass:
      return "PASS";
    case Verdict::warn:
      return "WARN";
    case Verdict::fail:
      return "FAIL";
    case Verdict::skip:
      return "SKIP";
  }
  return "FAIL";
}

using xport::core::JsonGeneral;
using xport::core::JsonWriter;

std::string json_string(std::string_view s) { return xport::core::json_string(s); }

std::string json_array(const std::vector<std::string>& raw_items) {
  std::string o;
  JsonWriter w(o);
  w.begin_array();
  for (const auto& item : raw_items) w.raw(item);
  w.end_array();
  return o;
}

std::string json_strings(const std::vector<std::string>& items) {
  std::string o;
  JsonWriter w(o);
  w.begin_array();
  for (const auto& s : items) w.value(s);
  w.end_array();
  return o;
}

namespace {

template <typename T>
std::string json_value(const T& v) {
  std::string o;
  JsonWriter(o).value(v);
  return o;
}

}  // namespace

JsonObject& JsonObject::str(std::string_view key, std::string_view value) {
  return raw(key, json_value(value));
}

JsonObject& JsonObject::num(std::string_view key, double value) {
  return raw(key, json_value(JsonGeneral{value}));  // null when not finite
}

JsonObject& JsonObject::integer(std::string_view key, int64_t value) {
  return raw(key, json_value(value));
}

JsonObject& JsonObject::boolean(std::string_view key, bool value) {
  return raw(key, json_value(value));
}

JsonObject& JsonObject::raw(std::string_view key, std::string json) {
  fields_.emplace_back(std::string(key), std::move(json));
  return *this;
}

std::string JsonObject::render() const {
  std::string o;
  JsonWriter w(o);
  w.begin_object();
  for (const auto& [key, json] : fields_) w.raw_field(key, json);
  w.end_object();
  return o;
}

int Report::exit_status() const {
  for (const Check& c : checks) {
    if (c.status == Verdict::fail) return 1;
  }
  return 0;
}

std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0 || v == std::floor(v))
    std::snprintf(buf, sizeof(buf), "%.0f %s", v, units[u]);
  else
    std::snprintf(buf, sizeof(buf), "%.1f %s", v, units[u]);
  return buf;
}

namespace {

int count(const Report& r, Verdict v) {
  return static_cast<int>(std::count_if(r.checks.begin(), r.checks.end(),
                                        [v](const Check& c) { return c.status == v; }));
}

}  // namespace

std::string to_json(const Report& r) {
  std::string o;
  JsonWriter w(o);
  w.begin_object()
      .field("tool", "xport-probe")
      .field("version", r.version)
      .field("host", r.host)
      .field("budget_s", JsonGeneral{r.budget_s})
      .field("elapsed_s", JsonGeneral{r.elapsed_s})
      .begin_array("checks");
  for (const Check& c : r.checks) {
    w.begin_object().field("name", c.name).field_or_null("rail", !c.rail.empty(), c.rail);
    w.field("status", to_string(c.status))
        .field("reason", c.reason)
        .field("seconds", JsonGeneral{c.seconds})
        .raw_field("details", c.details.render())
        .end_object();
  }
  w.end_array().begin_array("knobs");
  for (const KnobRow& k : r.knobs) {
    w.begin_object()
        .field("name", k.name)
        .field("value", k.value)
        .field("source", k.source)
        .field("error", k.error)
        .end_object();
  }
  w.end_array()
      .begin_object("summary")
      .field("pass", count(r, Verdict::pass))
      .field("warn", count(r, Verdict::warn))
      .field("fail", count(r, Verdict::fail))
      .field("skip", count(r, Verdict::skip))
      .end_object()
      .field("exit_status", r.exit_status())
      .end_object();
  o += '\n';
  return o;
}

namespace {

// `text` in lines of at most `width` characters, cut at spaces (a word longer than a line is cut
// where it must): the first line starts at column `first`, the others are indented by `indent`
// spaces.
std::string wrap(const std::string& text, size_t first, size_t indent, size_t width) {
  std::string out;
  size_t pos = 0;
  for (bool first_line = true; pos < text.size(); first_line = false) {
    const size_t at = first_line ? first : indent;
    const size_t room = width > at + 20 ? width - at : 20;
    size_t end = pos + room;
    if (end >= text.size()) {
      end = text.size();
    } else {
      const size_t space = text.rfind(' ', end);
      if (space != std::string::npos && space > pos) end = space;
    }
    if (!first_line) {  // (two appends: "\n" + std::string&& trips GCC 12's -Wrestrict at -O3)
      out += '\n';
      out.append(indent, ' ');
    }
    out += text.substr(pos, end - pos);
    pos = end;
    while (pos < text.size() && text[pos] == ' ') ++pos;
  }
  return out;
}

}  // namespace

std::string to_table(const Report& r) {
  std::string o = "xport-probe " + r.version + " on " + r.host + "\n\n";
  size_t width = 5;
  std::vector<std::string> labels;
  for (const Check& c : r.checks) {
    labels.push_back(c.rail.empty() ? c.name : c.name + " " + c.rail);
    width = std::max(width, labels.back().size());
  }
  char line[256];
  std::snprintf(line, sizeof(line), "  %-6s %-*s  %s\n", "STATUS", static_cast<int>(width), "CHECK",
                "REASON");
  o += line;
  const size_t indent = 2 + 6 + 1 + width + 2;
  for (size_t i = 0; i < r.checks.size(); ++i) {
    std::snprintf(line, sizeof(line), "  %-6s %-*s  ",
                  std::string(to_string(r.checks[i].status)).c_str(), static_cast<int>(width),
                  labels[i].c_str());
    o += line + wrap(r.checks[i].reason, indent, indent, kTableWidth) + "\n";
  }
  if (r.show_knobs) {
    o += "\nknobs in effect\n";
    size_t kw = 0, vw = 2;
    for (const KnobRow& k : r.knobs) {
      kw = std::max(kw, k.name.size());
      vw = std::max(vw, std::min<size_t>(k.value.size() + 2, 40));
    }
    for (const KnobRow& k : r.knobs) {
      std::snprintf(line, sizeof(line), "  %-*s  %-*s  %s", static_cast<int>(kw), k.name.c_str(),
                    static_cast<int>(vw), ("'" + k.value + "'").c_str(), k.source.c_str());
      std::string row = line;
      if (!k.error.empty()) row += "  rejected: " + k.error;
      o += wrap(row, 0, 4 + kw, kTableWidth) + "\n";
    }
  }
  std::snprintf(line, sizeof(line), "\n%d PASS, %d WARN, %d FAIL, %d SKIP in %.2f s: exit %d%s\n",
                count(r, Verdict::pass), count(r, Verdict::warn), count(r, Verdict::fail),
                count(r, Verdict::skip), r.elapsed_s, r.exit_status(),
                r.show_knobs ? "" : " (--knobs: every knob in effect)");
  return o + line;
}

}  // namespace probe
