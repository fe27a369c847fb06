// Printing xport-scale's measurements (record.hpp): JSON Lines for machines, a table for people.
#include "record.hpp"

#include <cstdio>

#include "common.hpp"
#include "common/tool.hpp"
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
std::string num(double v) {
  if (v < 0) return "null";
  char b[48];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}
std::string str(const std::string& s) { return "\"" + xport::tool::json_escape(s) + "\""; }
std::string str_or_null(const std::string& s) { return s.empty() ? "null" : str(s); }

double per(const Record& r, uint64_t after, uint64_t before, size_t n) {
  if (n == 0 || !r.costs_measured) return -1;
  return (static_cast<double>(after) - static_cast<double>(before)) / static_cast<double>(n);
}

std::string passes_json(const PassFigures& p) {
  return "{\"passes\":" + std::to_string(p.passes) + ",\"mean_us\":" + num(p.mean_us) +
         ",\"p50_us\":" + num(p.p50_us) + ",\"p99_us\":" + num(p.p99_us) +
         ",\"max_us\":" + num(p.max_us) + "}";
}

std::string size_text(size_t s) {
  if (s % (1 << 20) == 0) return std::to_string(s >> 20) + "M";
  if (s % 1024 == 0) return std::to_string(s >> 10) + "K";
  return std::to_string(s);
}

void print_json(const Record& r) {
  const double lat50 = percentile(r.latencies_us, 0.50), lat99 = percentile(r.latencies_us, 0.99);
  const double rate = r.rounds_s > 0 ? r.rounds_done / r.rounds_s : -1;
  std::string o = "{\"tool\":\"xport-scale\",\"version\":" + str(xport::version());
  o += ",\"mode\":" + str(mode_name(r.mode)) + ",\"peers\":" + std::to_string(r.peers);
  o += ",\"provider\":" + str(r.provider) + ",\"rails\":" + str(r.rails);
  o += ",\"procs\":" + std::to_string(r.procs) + ",\"threads\":" + std::to_string(r.threads);
  if (r.mode == Mode::one_sided) o += ",\"size\":" + std::to_string(r.size);
  o += ",\"rounds\":" + std::to_string(r.rounds);
  o += ",\"devices\":" + std::to_string(r.devices) + ",\"opened\":" + std::to_string(r.opened);
  o += ",\"all_opened\":" + std::string(r.opened == r.peers ? "true" : "false");
  o += ",\"open_s\":" + num(r.open_s);
  o += ",\"open_ms_per_peer\":" +
       num(r.open_s >= 0 && r.peers ? r.open_s * 1e3 / static_cast<double>(r.peers) : -1);
  o += ",\"open_ms_max\":" + num(r.open_ms_max);
  o += ",\"open_slowest_peer\":" + std::to_string(r.open_slowest_peer);
  o += ",\"error\":" + str_or_null(r.error) + ",\"error_code\":" + str_or_null(r.error_code);
  o += ",\"errors\":[";
  for (size_t i = 0; i < r.errors.size(); ++i) {
    const ErrorKind& e = r.errors[i];
    o += std::string(i ? "," : "") + "{\"step\":" + str(e.step) + ",\"code\":" + str(e.code) +
         ",\"count\":" + std::to_string(e.count) +
         ",\"first_peer\":" + std::to_string(e.first_peer) + ",\"error\":" + str(e.text) + "}";
  }
  o += "]";
  if (r.mode == Mode::one_sided) {
    o += ",\"rounds_done\":" + std::to_string(r.rounds_done) + ",\"rounds_s\":" + num(r.rounds_s);
    o += ",\"rounds_per_s_per_initiator\":" + num(rate);
    o += ",\"put_signals_per_s\":" + num(rate >= 0 ? rate * static_cast<double>(r.opened) : -1);
    o += ",\"round_ms_max\":" + num(r.round_ms_max);
    o += ",\"lat_us_p50\":" + num(lat50) + ",\"lat_us_p99\":" + num(lat99);
    o += ",\"lat_samples\":" + std::to_string(r.latencies_us.size()) +
         ",\"lat_peers\":" + std::to_string(r.latency_peers);
  } else {
    o += ",\"sends\":[";
    for (size_t i = 0; i < r.sends.size(); ++i) {
      const SendFigures& s = r.sends[i];
      const double mps = s.seconds > 0 ? static_cast<double>(s.messages) / s.seconds : -1;
      o += std::string(i ? "," : "") + "{\"size\":" + std::to_string(s.size) +
           ",\"rounds\":" + std::to_string(s.rounds) + ",\"seconds\":" + num(s.seconds) +
           ",\"messages\":" + std::to_string(s.messages) + ",\"msgs_per_s\":" + num(mps) +
           ",\"bytes_per_s\":" + num(mps >= 0 ? mps * static_cast<double>(s.size) : -1) + "}";
    }
    o += "]";
  }
  o += ",\"bytes_verified\":" + std::to_string(r.bytes_verified);
  o += std::string(r.mode == Mode::one_sided ? ",\"signals_verified\":"
                                             : ",\"messages_verified\":") +
       std::to_string(r.signals_verified);
  o += ",\"bad\":" + std::to_string(r.bad);
  o += ",\"verified\":" + std::string(r.verified() ? "true" : "false");
  o += ",\"ok\":" + std::string(r.ok() ? "true" : "false");
  o += ",\"progress\":{\"alone\":" + passes_json(r.progress_alone) +
       ",\"idle\":" + passes_json(r.progress_idle) +
       ",\"serving\":" + passes_json(r.progress_serving) + "}";
  o += ",\"target\":{\"rss_before_bytes\":" + std::to_string(r.target_rss_before) +
       ",\"rss_after_bytes\":" + std::to_string(r.target_rss_after) +
       ",\"rss_per_peer_bytes\":" + num(per(r, r.target_rss_after, r.target_rss_before, r.opened)) +
       ",\"registered_before_bytes\":" + std::to_string(r.target_reg_before) +
       ",\"registered_after_bytes\":" + std::to_string(r.target_reg_after) +
       ",\"registered_per_peer_bytes\":" +
       num(per(r, r.target_reg_after, r.target_reg_before, r.opened)) +
       ",\"device_registered_bytes\":" + std::to_string(r.model_registered) +
       ",\"cq_room_per_peer\":null,\"cq_entries\":" + str_or_null(r.cq_entries) +
       ",\"window_credits\":" + str_or_null(r.window_credits) +
       ",\"window_streams\":" + std::to_string(r.window_streams) +
       ",\"peers\":" + std::to_string(r.peer_count) +
       ",\"pool_channels\":" + std::to_string(r.pool_channels) +
       ",\"cqs\":" + std::to_string(r.cqs) + ",\"endpoints\":" + std::to_string(r.endpoints) +
       ",\"deferred_posts\":" + std::to_string(r.deferred_posts) +
       ",\"signals_applied\":" + std::to_string(r.signals_applied) + "}";
  o += ",\"initiator\":{\"rss_per_device_bytes\":" + num(r.initiator_rss_per_device) +
       ",\"registered_per_device_bytes\":" + num(r.initiator_reg_per_device) +
       ",\"rss_per_open_bytes\":" + num(r.initiator_rss_per_peer_open) +
       ",\"registered_per_open_bytes\":" + num(r.initiator_reg_per_peer_open) +
       ",\"window_ops_held\":" + std::to_string(r.initiator_ops_held) +
       ",\"deferred_posts\":" + std::to_string(r.initiator_deferred_posts) + "}";
  o += ",\"knobs\":{";
  for (size_t i = 0; i < r.knobs.size(); ++i) {
    o += std::string(i ? "," : "") + str(r.knobs[i].first) + ":" + str(r.knobs[i].second);
  }
  o += "}}";
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
