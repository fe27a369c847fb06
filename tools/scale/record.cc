// Printing xport-scale's measurements (record.hpp): JSON Lines for machines, a table for people.
#include "record.hpp"

#include <cstdio>

#include "common.hpp"
#include "common/tool.hpp"
#include "core/json.hpp"
#include "xport/knobs.hpp"

namespace scale {

bool Record::verified() const {
  if (bad != 0) return false;
  if (mode == Mode::one_sided) {
    return signals_verified == static_cast<uint64_t>(rounds_done) * opened + latencies_us.size();
  }
  uint64_t expect = 0;
  for (const auto& s : sends) expect += static_cast<uint64_t>(s.rounds) * opened;
  return signals_verified == expect;
}

bool Record::ok() const {
  if (!error.empty() || opened != peers || !verified()) return false;
  if (mode == Mode::one_sided) return rounds_done == rounds;
  for (const auto& s : sends) {
    if (s.rounds != rounds) return false;
  }
  return true;
}

std::vector<std::pair<std::string, std::string>> changed_knobs() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& k : xport::knob_list()) {
    if (k.source == "default" || k.value == k.default_value) continue;
    out.emplace_back(k.name, k.value + " (default " + k.default_value + ")");
  }
  return out;
}

std::string knob_value(const std::string& name) {
  for (const auto& k : xport::knob_list()) {
    if (k.name == name) return k.value;
  }
  return "";
}

namespace {

const char* mode_name(Mode m) { return m == Mode::one_sided ? "one-sided" : "two-sided"; }

// A figure, or "n/a" / null when it was not measured (negative).
std::string fig(double v, const char* fmt) {
  if (v < 0) return "n/a";
  char b[48];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}
using xport::core::JsonGeneral;
using xport::core::JsonWriter;

// A figure (%.6g), or null when it was not measured (negative).
void num(JsonWriter& w, const char* key, double v) { w.field_or_null(key, v >= 0, JsonGeneral{v}); }
// A text, or null when there is none.
void str_or_null(JsonWriter& w, const char* key, const std::string& s) {
  w.field_or_null(key, !s.empty(), s);
}

double per(const Record& r, uint64_t after, uint64_t before, size_t n) {
  if (n == 0 || !r.costs_measured) return -1;
  return (static_cast<double>(after) - static_cast<double>(before)) / static_cast<double>(n);
}

void passes_json(JsonWriter& w, const char* key, const PassFigures& p) {
  w.begin_object(key).field("passes", p.passes);
  num(w, "mean_us", p.mean_us);
  num(w, "p50_us", p.p50_us);
  num(w, "p99_us", p.p99_us);
  num(w, "max_us", p.max_us);
  w.end_object();
}

std::string size_text(size_t s) {
  if (s % (1 << 20) == 0) return std::to_string(s >> 20) + "M";
  if (s % 1024 == 0) return std::to_string(s >> 10) + "K";
  return std::to_string(s);
}

void print_json(const Record& r) {
  const double lat50 = percentile(r.latencies_us, 0.50), lat99 = percentile(r.latencies_us, 0.99);
  const double rate = r.rounds_s > 0 ? r.rounds_done / r.rounds_s : -1;
  std::string o;
  JsonWriter w(o);
  w.begin_object()
      .field("tool", "xport-scale")
      .field("version", xport::version())
      .field("mode", mode_name(r.mode))
      .field("peers", r.peers)
      .field("provider", r.provider)
      .field("rails", r.rails)
      .field("procs", r.procs)
      .field("threads", r.threads);
  if (r.mode == Mode::one_sided) w.field("size", r.size);
  w.field("rounds", r.rounds)
      .field("devices", r.devices)
      .field("opened", r.opened)
      .field("all_opened", r.opened == r.peers);
  num(w, "open_s", r.open_s);
  num(w, "open_ms_per_peer",
      r.open_s >= 0 && r.peers ? r.open_s * 1e3 / static_cast<double>(r.peers) : -1);
  num(w, "open_ms_max", r.open_ms_max);
  w.field("open_slowest_peer", r.open_slowest_peer);
  str_or_null(w, "error", r.error);
  str_or_null(w, "error_code", r.error_code);
  w.begin_array("errors");
  for (const ErrorKind& e : r.errors) {
    w.begin_object()
        .field("step", e.step)
        .field("code", e.code)
        .field("count", e.count)
        .field("first_peer", e.first_peer)
        .field("error", e.text)
        .end_object();
  }
  w.end_array();
  if (r.mode == Mode::one_sided) {
    w.field("rounds_done", r.rounds_done);
    num(w, "rounds_s", r.rounds_s);
    num(w, "rounds_per_s_per_initiator", rate);
    num(w, "put_signals_per_s", rate >= 0 ? rate * static_cast<double>(r.opened) : -1);
    num(w, "round_ms_max", r.round_ms_max);
    num(w, "lat_us_p50", lat50);
    num(w, "lat_us_p99", lat99);
    w.field("lat_samples", r.latencies_us.size()).field("lat_peers", r.latency_peers);
  } else {
    w.begin_array("sends");
    for (const SendFigures& s : r.sends) {
      const double mps = s.seconds > 0 ? static_cast<double>(s.messages) / s.seconds : -1;
      w.begin_object().field("size", s.size).field("rounds", s.rounds);
      num(w, "seconds", s.seconds);
      w.field("messages", s.messages);
      num(w, "msgs_per_s", mps);
      num(w, "bytes_per_s", mps >= 0 ? mps * static_cast<double>(s.size) : -1);
      w.end_object();
    }
    w.end_array();
  }
  w.field("bytes_verified", r.bytes_verified)
      .field(r.mode == Mode::one_sided ? "signals_verified" : "messages_verified",
             r.signals_verified)
      .field("bad", r.bad)
      .field("verified", r.verified())
      .field("ok", r.ok())
      .begin_object("progress");
  passes_json(w, "alone", r.progress_alone);
  passes_json(w, "idle", r.progress_idle);
  passes_json(w, "serving", r.progress_serving);
  w.end_object()
      .begin_object("target")
      .field("rss_before_bytes", r.target_rss_before)
      .field("rss_after_bytes", r.target_rss_after);
  num(w, "rss_per_peer_bytes", per(r, r.target_rss_after, r.target_rss_before, r.opened));
  w.field("registered_before_bytes", r.target_reg_before)
      .field("registered_after_bytes", r.target_reg_after);
  num(w, "registered_per_peer_bytes", per(r, r.target_reg_after, r.target_reg_before, r.opened));
  w.field("device_registered_bytes", r.model_registered);
  num(w, "cq_room_per_peer", r.opened > 0 && r.mode == Mode::one_sided
                                 ? static_cast<double>(r.window_cq_room) / r.opened : -1);
  w.field("window_cq_room", r.window_cq_room)
      .field("window_streams_waiting", r.streams_waiting)
      .field("window_take_backs", r.take_backs);
  str_or_null(w, "cq_entries", r.cq_entries);
  str_or_null(w, "window_credits", r.window_credits);
  w.field("window_streams", r.window_streams)
      .field("peers", r.peer_count)
      .field("pool_channels", r.pool_channels)
      .field("cqs", r.cqs)
      .field("endpoints", r.endpoints)
      .field("shards", r.shards)
      .field("deferred_posts", r.deferred_posts)
      .field("signals_applied", r.signals_applied)
      .end_object()
      .begin_object("initiator");
  num(w, "rss_per_device_bytes", r.initiator_rss_per_device);
  num(w, "registered_per_device_bytes", r.initiator_reg_per_device);
  num(w, "rss_per_open_bytes", r.initiator_rss_per_peer_open);
  num(w, "registered_per_open_bytes", r.initiator_reg_per_peer_open);
  w.field("window_ops_held", r.initiator_ops_held)
      .field("deferred_posts", r.initiator_deferred_posts)
      .end_object()
      .begin_object("knobs");
  for (const auto& [name, value] : r.knobs) w.field(name, value);
  w.end_object().end_object();
  std::printf("%s\n", o.c_str());
}

constexpr double kMiB = 1024.0 * 1024.0;

void print_row(const Record& r) {
  const double rss = per(r, r.target_rss_after, r.target_rss_before, r.opened);
  const double reg = per(r, r.target_reg_after, r.target_reg_before, r.opened);
  const std::string prog = fig(r.progress_alone.mean_us, "%.1f") + "/" +
                           fig(r.progress_idle.mean_us, "%.1f") + "/" +
                           fig(r.progress_serving.mean_us, "%.1f");
  std::string traffic;
  if (r.mode == Mode::one_sided) {
    const double rate = r.rounds_s > 0 ? r.rounds_done / r.rounds_s : -1;
    char b[128];
    std::snprintf(b, sizeof b, "%3d %9s %8s %8s %8s", r.rounds_done, fig(rate, "%.1f").c_str(),
                  fig(r.round_ms_max, "%.1f").c_str(),
                  fig(percentile(r.latencies_us, 0.5), "%.1f").c_str(),
                  fig(percentile(r.latencies_us, 0.99), "%.1f").c_str());
    traffic = b;
  } else {
    for (const auto& s : r.sends) {
      const double mps = s.seconds > 0 ? static_cast<double>(s.messages) / s.seconds : -1;
      char b[64];
      std::snprintf(b, sizeof b, " %4s:%d:%s", size_text(s.size).c_str(), s.rounds,
                    fig(mps, "%.0f").c_str());
      traffic += b;
    }
    if (traffic.size() < 38) traffic.append(38 - traffic.size(), ' ');
  }
  std::printf(
      "%6zu %6zu %7s %7s %s %17s %8s %8s %8s %8s %-3s %s\n", r.peers, r.opened,
      fig(r.open_s, "%.2f").c_str(),
      fig(r.open_s >= 0 && r.peers ? r.open_s * 1e3 / static_cast<double>(r.peers) : -1, "%.1f")
          .c_str(),
      traffic.c_str(), prog.c_str(), fig(rss / kMiB, "%.2f").c_str(),
      fig(reg / 1024.0, "%.1f").c_str(), fig(r.initiator_rss_per_device / kMiB, "%.2f").c_str(),
      fig(r.initiator_reg_per_device / 1024.0, "%.1f").c_str(), r.ok() ? "ok" : "NO",
      r.error.empty() ? (r.verified() ? "" : "data or signals wrong or missing") : r.error.c_str());
  // Every distinct failure of the initiators, under the row.
  for (const ErrorKind& e : r.errors) {
    std::printf("       %s: %llu initiator%s (first %zu): %s\n", e.step.c_str(),
                static_cast<unsigned long long>(e.count), e.count == 1 ? "" : "s", e.first_peer,
                e.text.c_str());
  }
}

}  // namespace

void print_header(const Options& opt, const std::string& provider, uint64_t device_registered) {
  std::printf("%s\n", xport::tool::version_text("xport-scale").c_str());
  std::printf(
      "%s, provider %s%s, ", mode_name(opt.mode), provider.c_str(),
      opt.nics.empty() ? "" : (" on " + opt.nics[0] + (opt.nics.size() > 1 ? "+..." : "")).c_str());
  if (opt.mode == Mode::one_sided) {
    std::printf("put_signal of %zu B, %d rounds, latency %d x %d samples", opt.size, rounds_of(opt),
                opt.latency_peers, opt.latency_samples);
  } else {
    std::string s;
    for (size_t z : opt.sizes) s += (s.empty() ? "" : ",") + size_text(z);
    std::printf("sends of %s, %d rounds", s.c_str(), rounds_of(opt));
  }
  if (opt.procs == 0) {
    std::printf(", initiators in the target's process");
  } else {
    std::printf(", initiators in %d processes", opt.procs);
  }
  std::printf(", %d thread%s each, timeout %d s per phase\n", opt.threads,
              opt.threads == 1 ? "" : "s", opt.timeout_s);
  const auto knobs = changed_knobs();
  std::printf("knobs:");
  for (const auto& [name, value] : knobs) std::printf(" %s=%s", name.c_str(), value.c_str());
  std::printf("%s\n", knobs.empty() ? " all at their defaults" : "");
  std::printf(
      "each device registers %.1f KiB for its own endpoints "
      "(xport::device_registered_bytes; not in the columns below)\n",
      static_cast<double>(device_registered) / 1024.0);
  const char* what = opt.mode == Mode::one_sided ? "windows" : "comms";
  std::printf("%6s %6s %7s %7s ", "N", what, "open_s", "ms/open");
  if (opt.mode == Mode::one_sided) {
    std::printf("%3s %9s %8s %8s %8s", "rnd", "rounds/s", "rnd_ms", "lat_p50", "lat_p99");
  } else {
    std::printf("%-38s", " size:rounds:msgs/s");
  }
  std::printf(" %17s %8s %8s %8s %8s %-3s %s\n", "prog_us a/i/s", "tMiB/pr", "tKiB/pr", "iMiB/dv",
              "iKiB/dv", "ok", "error");
  std::fflush(stdout);
}

void print_record(const Record& r, bool json) {
  if (json) {
    print_json(r);
  } else {
    print_row(r);
  }
  std::fflush(stdout);
}

}  // namespace scale
