// Renderings of the probe's checklist: aligned table for people, one JSON object for machines.
#include "report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

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

std::string json_string(std::string_view s) {
  std::string o = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (u < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof(esc), "\\u%04x", u);
      o += esc;
    } else {
      o += c;
    }
  }
  return o + "\"";
}

std::string json_array(const std::vector<std::string>& raw_items) {
  std::string o = "[";
  for (size_t i = 0; i < raw_items.size(); ++i) {
    if (i > 0) o += ',';
    o += raw_items[i];
  }
  return o + "]";
}

std::string json_strings(const std::vector<std::string>& items) {
  std::vector<std::string> raw;
  for (const auto& s : items) raw.push_back(json_string(s));
  return json_array(raw);
}

JsonObject& JsonObject::str(std::string_view key, std::string_view value) {
  return raw(key, json_string(value));
}

JsonObject& JsonObject::num(std::string_view key, double value) {
  if (!std::isfinite(value)) return raw(key, "null");
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", value);
  return raw(key, buf);
}

JsonObject& JsonObject::integer(std::string_view key, int64_t value) {
  return raw(key, std::to_string(value));
}

JsonObject& JsonObject::boolean(std::string_view key, bool value) {
  return raw(key, value ? "true" : "false");
}

JsonObject& JsonObject::raw(std::string_view key, std::string json) {
  fields_.emplace_back(std::string(key), std::move(json));
  return *this;
}

std::string JsonObject::render() const {
  std::string o = "{";
  // Appended piece by piece: `"," + std::string&&` trips GCC 12's -Wrestrict at -O3 (a false
  // positive that failed release builds).
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (i > 0) o += ',';
    o += json_string(fields_[i].first);
    o += ':';
    o += fields_[i].second;
  }
  return o + "}";
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
  std::vector<std::string> checks;
  for (const Check& c : r.checks) {
    JsonObject o;
    o.str("name", c.name)
        .raw("rail", c.rail.empty() ? "null" : json_string(c.rail))
        .str("status", to_string(c.status))
        .str("reason", c.reason)
        .num("seconds", c.seconds)
        .raw("details", c.details.render());
    checks.push_back(o.render());
  }
  std::vector<std::string> knobs;
  for (const KnobRow& k : r.knobs) {
    JsonObject o;
    o.str("name", k.name).str("value", k.value).str("source", k.source).str("error", k.error);
    knobs.push_back(o.render());
  }
  JsonObject summary;
  summary.integer("pass", count(r, Verdict::pass))
      .integer("warn", count(r, Verdict::warn))
      .integer("fail", count(r, Verdict::fail))
      .integer("skip", count(r, Verdict::skip));
  JsonObject top;
  top.str("tool", "xport-probe")
      .str("version", r.version)
      .str("host", r.host)
      .num("budget_s", r.budget_s)
      .num("elapsed_s", r.elapsed_s)
      .raw("checks", json_array(checks))
      .raw("knobs", json_array(knobs))
      .raw("summary", summary.render())
      .integer("exit_status", r.exit_status());
  return top.render() + "\n";
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
