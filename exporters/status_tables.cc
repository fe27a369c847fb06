// The status page's per-process section: a throughput chart and one table per block kind, each
// column a counter, a rate against the earlier scan, or a label.
#include "status_tables.hpp"

#include <cstdio>
#include <ctime>
#include <functional>
#include <map>
#include <vector>

namespace xport::exporter::page {
namespace {

using telemetry::BlockKind;
using telemetry::BlockSnapshot;
using telemetry::CounterId;
using telemetry::LabelKey;

std::string block_key(const BlockSnapshot& b) {
  std::string k = std::to_string(b.kind);
  for (const auto& l : b.labels) {  // appended piece by piece (GCC 12 -Wrestrict at -O3)
    k += '|';
    k += std::to_string(static_cast<int>(l.key));
    k += '=';
    k += l.value;
  }
  return k;
}

// Per-second rates of one block against its match in the earlier scan.
struct Rates {
  const BlockSnapshot* before = nullptr;
  double seconds = 0;
  double of(const BlockSnapshot& b, CounterId id) const {
    if (before == nullptr || seconds <= 0) return 0;
    uint64_t a = value(*before, id), z = value(b, id);
    return z >= a ? static_cast<double>(z - a) / seconds : 0;
  }
  double sum(const BlockSnapshot& b, std::initializer_list<CounterId> ids) const {
    double s = 0;
    for (CounterId id : ids) s += of(b, id);
    return s;
  }
};

std::string ratio(uint64_t num, uint64_t den) {
  if (den == 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", static_cast<double>(num) / static_cast<double>(den));
  return buf;
}

// A cell: text (escaped here), right-aligned numbers, red when `bad`.
struct Cell {
  std::string text;
  bool number = false;
  bool bad = false;
};
Cell text(const std::string& s) { return {s, false, false}; }
Cell num(const std::string& s, bool bad = false) { return {s, true, bad}; }
Cell count(uint64_t v, bool bad_if_nonzero = false) {
  return {std::to_string(v), true, bad_if_nonzero && v != 0};
}

struct Column {
  const char* header;
  std::function<Cell(const BlockSnapshot&, const Rates&)> cell;
};

// One table of the blocks of `kind` (none: no table).
template <typename RatesOf>
void table(std::ostream& os, const telemetry::SegmentSnapshot& s, BlockKind kind, const char* title,
           const std::vector<Column>& cols, const RatesOf& rates) {
  bool header = false;
  for (const auto& b : s.blocks) {
    if (b.kind != static_cast<uint16_t>(kind)) continue;
    if (!header) {
      os << "<h3>" << title << "</h3><table><tr>";
      for (const auto& c : cols) os << "<th>" << c.header;
      os << "</tr>\n";
      header = true;
    }
    const Rates r = rates(b);
    os << "<tr>";
    for (const auto& c : cols) {
      const Cell v = c.cell(b, r);
      os << "<td" << (v.number ? " class=n" : "")
         << (v.bad ? " style=\"color:#b00;font-weight:bold\"" : "") << ">" << esc(v.text);
    }
    os << "</tr>\n";
  }
  if (header) os << "</table>\n";
}

Column label_col(const char* header, LabelKey k) {
  return {header, [k](const BlockSnapshot& b, const Rates&) {
            const std::string v = label(b, k);
            return text(v.empty() ? "-" : v);
          }};
}

}  // namespace

void process_section(std::ostream& os, const ProcessView& p, const ProcessView* prev,
                     const RateHistory& history) {
  const auto& s = p.snapshot;
  std::map<std::string, const BlockSnapshot*> earlier;
  double dt = 0;
  if (prev != nullptr) {
    for (const auto& b : prev->snapshot.blocks) earlier[block_key(b)] = &b;
    dt = (static_cast<double>(s.publish_time_ns) -
          static_cast<double>(prev->snapshot.publish_time_ns)) /
         1e9;
  }
  auto rates = [&](const BlockSnapshot& b) {
    auto it = earlier.find(block_key(b));
    return Rates{it != earlier.end() ? it->second : nullptr, dt};
  };
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  double age = (static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec) -
                static_cast<double>(s.publish_time_ns)) /
               1e9;
  char agebuf[32];
  std::snprintf(agebuf, sizeof(agebuf), "%.1f s", age < 0 ? 0.0 : age);
  // Labels without a value are left out here as in /metrics.
  os << "<section class=process id=\"pid-" << s.pid << "\"><h2>pid " << s.pid
     << (p.job.empty() ? "" : " &middot; job " + esc(p.job))
     << (p.rank.empty() ? "" : " &middot; rank " + esc(p.rank)) << " &middot; process " << p.slot
     << "</h2>\n"
     << "<p>program <b>" << esc(p.program) << "</b>, segment " << esc(p.file) << ", snapshot "
     << s.snapshots << " (" << agebuf << " ago, every " << s.interval_ms << " ms)"
     << (prev == nullptr ? ", rates after the next refresh" : "") << "</p>\n";
  chart(os, "throughput of this process", history.process(s.pid, s.start_ticks), "B/s");

  using C = CounterId;
  table(os, s, BlockKind::endpoint, "Endpoints",
        {label_col("device", LabelKey::device),
         label_col("rail", LabelKey::rail),
         label_col("endpoint", LabelKey::endpoint),
         {"send+write/s",
          [](auto& b, auto& r) {
            return num(human(r.sum(b, {C::endpoint_bytes_send, C::endpoint_bytes_write}), "B"));
          }},
         {"recv+read/s",
          [](auto& b, auto& r) {
            return num(human(r.sum(b, {C::endpoint_bytes_recv, C::endpoint_bytes_read}), "B"));
          }},
         {"ops/s",
          [](auto& b, auto& r) {
            return num(
                human(r.sum(b, {C::endpoint_ops_send, C::endpoint_ops_recv, C::endpoint_ops_write,
                                C::endpoint_ops_read, C::endpoint_ops_atomic}),
                      ""));
          }},
         {"sent bytes",
          [](auto& b, auto&) {
            return num(human(static_cast<double>(value(b, C::endpoint_bytes_send) +
                                                 value(b, C::endpoint_bytes_write)),
                             "B"));
          }},
         {"received bytes",
          [](auto& b, auto&) {
            return num(human(static_cast<double>(value(b, C::endpoint_bytes_recv) +
                                                 value(b, C::endpoint_bytes_read)),
                             "B"));
          }},
         {"error completions",
          [](auto& b, auto&) { return count(value(b, C::endpoint_error_completions), true); }},
         {"EAGAIN retries",
          [](auto& b, auto&) { return count(value(b, C::endpoint_eagain_retries)); }}},
        rates);

  table(
      os, s, BlockKind::rail, "Rails",
      {label_col("device", LabelKey::device),
       label_col("rail", LabelKey::rail),
       {"state",
        [](auto& b, auto&) {
          const bool up = value(b, C::rail_up) != 0;
          return Cell{up ? "up" : "down", false, !up};
        }},
       {"stripes out/s",
        [](auto& b, auto& r) { return num(human(r.of(b, C::rail_stripes_out), "")); }},
       {"stripes in/s",
        [](auto& b, auto& r) { return num(human(r.of(b, C::rail_stripes_in), "")); }},
       {"writes landed/s",
        [](auto& b, auto& r) { return num(human(r.of(b, C::rail_write_bytes_in), "B")); }},
       {"quarantines",
        [](auto& b, auto&) { return count(value(b, C::rail_quarantine_events), true); }},
       {"error completions", [](auto& b, auto&) { return count(value(b, C::rail_errors), true); }},
       {"low-latency control",
        [](auto& b, auto&) { return text(value(b, C::rail_low_latency_control) ? "yes" : "no"); }}},
      rates);

  table(os, s, BlockKind::cq, "Completion queues",
        {label_col("device", LabelKey::device),
         label_col("cq", LabelKey::cq),
         {"polls/s", [](auto& b, auto& r) { return num(human(r.of(b, C::cq_polls), "")); }},
         {"empty polls",
          [](auto& b, auto&) {
            const uint64_t polls = value(b, C::cq_polls);
            char e[32];
            std::snprintf(e, sizeof(e), "%.1f%%",
                          polls ? 100.0 * static_cast<double>(value(b, C::cq_empty_polls)) /
                                      static_cast<double>(polls)
                                : 0.0);
            return num(e);
          }},
         {"completions/s",
          [](auto& b, auto& r) { return num(human(r.of(b, C::cq_completions), "")); }},
         {"error completions",
          [](auto& b, auto&) { return count(value(b, C::cq_error_completions), true); }},
         {"max batch", [](auto& b, auto&) { return count(value(b, C::cq_max_batch)); }}},
        rates);

  table(os, s, BlockKind::device, "Devices",
        {label_col("device", LabelKey::device),
         label_col("provider", LabelKey::provider),
         label_col("GPU", LabelKey::gpu),
         {"comms open", [](auto& b, auto&) { return count(value(b, C::device_comms_open)); }},
         {"peers", [](auto& b, auto&) { return count(value(b, C::device_peers)); }},
         {"peers lost", [](auto& b, auto&) { return count(value(b, C::device_peers_lost), true); }},
         {"registrations", [](auto& b, auto&) { return count(value(b, C::device_registrations)); }},
         {"registered bytes",
          [](auto& b, auto&) {
            return num(human(static_cast<double>(value(b, C::device_registered_bytes)), "B"));
          }},
         {"deferred posts/s",
          [](auto& b, auto& r) { return num(human(r.of(b, C::device_deferred_posts), "")); }},
         {"routing misses",
          [](auto& b, auto&) { return count(value(b, C::device_routing_misses), true); }}},
        rates);

  // The channel pool of each device: how many communicators share how many channels and CQs,
  // and how evenly the operations spread over the channels. Routing misses should stay 0.
  table(os, s, BlockKind::pool, "Channel pool",
        {label_col("device", LabelKey::device),
         label_col("provider", LabelKey::provider),
         {"groups &times; channels",
          [](auto& b, auto&) {
            return num(std::to_string(value(b, C::pool_groups)) + " x " +
                       std::to_string(value(b, C::pool_channels_per_group)));
          }},
         {"channels", [](auto& b, auto&) { return count(value(b, C::pool_channels)); }},
         {"CQs", [](auto& b, auto&) { return count(value(b, C::pool_cqs)); }},
         {"comms attached", [](auto& b, auto&) { return count(value(b, C::pool_comms_attached)); }},
         {"comms/channel",
          [](auto& b, auto&) {
            return num(ratio(value(b, C::pool_comms_attached), value(b, C::pool_channels)));
          }},
         {"primaries", [](auto& b, auto&) { return count(value(b, C::pool_primaries)); }},
         {"secondaries", [](auto& b, auto&) { return count(value(b, C::pool_secondaries)); }},
         {"routing misses",
          [](auto& b, auto&) { return count(value(b, C::pool_routing_misses), true); }},
         {"channel ops", [](auto& b, auto&) { return count(value(b, C::pool_channel_ops)); }},
         {"ops/s", [](auto& b, auto& r) { return num(human(r.of(b, C::pool_channel_ops), "")); }},
         {"ops/channel",
          [](auto& b, auto&) {
            return num(ratio(value(b, C::pool_channel_ops), value(b, C::pool_channels)));
          }},
         {"busiest channel",
          [](auto& b, auto&) {
            const uint64_t ops = value(b, C::pool_channel_ops);
            const uint64_t busiest = value(b, C::pool_busiest_channel_ops);
            char share[32] = "";
            if (ops > 0) {
              std::snprintf(share, sizeof(share), " (%.0f%%)",
                            100.0 * static_cast<double>(busiest) / static_cast<double>(ops));
            }
            return num(std::to_string(busiest) + share);
          }}},
        rates);

  table(os, s, BlockKind::gpu_staging, "GPU staging",
        {label_col("CUDA device", LabelKey::cuda_device),
         {"to GPU/s",
          [](auto& b, auto& r) { return num(human(r.of(b, C::gpu_staging_to_gpu_bytes), "B")); }},
         {"to host/s",
          [](auto& b, auto& r) { return num(human(r.of(b, C::gpu_staging_to_host_bytes), "B")); }},
         {"shadows", [](auto& b, auto&) { return count(value(b, C::gpu_staging_shadows)); }},
         {"shadow bytes",
          [](auto& b, auto&) {
            return num(human(static_cast<double>(value(b, C::gpu_staging_shadow_bytes)), "B"));
          }},
         {"copy errors",
          [](auto& b, auto&) { return count(value(b, C::gpu_staging_copy_errors), true); }}},
        rates);

  table(os, s, BlockKind::gpu_proxy, "GPU proxy",
        {label_col("proxy", LabelKey::proxy),
         label_col("CUDA device", LabelKey::cuda_device),
         {"descriptors/s",
          [](auto& b, auto& r) { return num(human(r.of(b, C::gpu_proxy_descriptors), "")); }},
         {"in flight", [](auto& b, auto&) { return count(value(b, C::gpu_proxy_in_flight)); }},
         {"queued", [](auto& b, auto&) { return count(value(b, C::gpu_proxy_queued)); }},
         {"capacity", [](auto& b, auto&) { return count(value(b, C::gpu_proxy_capacity)); }},
         {"timeouts", [](auto& b, auto&) { return count(value(b, C::gpu_proxy_timeouts), true); }},
         {"failures", [](auto& b, auto&) { return count(value(b, C::gpu_proxy_failures), true); }}},
        rates);

  // Kinds this exporter has no table for (a newer library): their counters, compactly.
  bool header = false;
  for (const auto& b : s.blocks) {
    const auto k = static_cast<BlockKind>(b.kind);
    if (k == BlockKind::process || k == BlockKind::device || k == BlockKind::endpoint ||
        k == BlockKind::cq || k == BlockKind::info || k == BlockKind::rail ||
        k == BlockKind::pool || k == BlockKind::gpu_staging || k == BlockKind::gpu_proxy) {
      continue;
    }
    if (!header) {
      os << "<h3>Other counters</h3><table><tr><th>kind<th>labels<th>counters</tr>\n";
      header = true;
    }
    os << "<tr><td>" << telemetry::block_kind_name(b.kind) << "<td>";
    for (const auto& l : b.labels) {
      if (!l.value.empty())
        os << esc(telemetry::label_key_name(l.key)) << "=" << esc(l.value) << " ";
    }
    os << "<td>";
    for (const auto& [id, v] : b.counters) {
      const auto* n = telemetry::find_counter(id);
      os << esc(n ? n->metric : "id " + std::to_string(id)) << " " << v << "; ";
    }
    os << "</tr>\n";
  }
  if (header) os << "</table>\n";
  os << "</section>\n";
}

}  // namespace xport::exporter::page
