// HTML rendering of the status page (no scripts; refreshes itself every 2 s).
#include "status_page.hpp"

#include <cstdio>
#include <ctime>
#include <map>
#include <sstream>

#include "telemetry/names.hpp"
#include "xport/xport.hpp"

namespace xport::exporter {
namespace {

using telemetry::BlockKind;
using telemetry::BlockSnapshot;
using telemetry::CounterId;
using telemetry::LabelKey;

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '&':
        o += "&amp;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

std::string human(double v, const char* unit) {
  const char* prefixes[] = {"", "K", "M", "G", "T", "P"};
  int i = 0;
  while (v >= 1000 && i < 5) {
    v /= 1000;
    ++i;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), i == 0 ? "%.0f %s%s" : "%.2f %s%s", v, prefixes[i], unit);
  return buf;
}

std::string label(const BlockSnapshot& b, LabelKey k) {
  for (const auto& l : b.labels) {
    if (l.key == k) return l.value;
  }
  return "";
}

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

uint64_t value(const BlockSnapshot& b, CounterId id) {
  for (const auto& [i, v] : b.counters) {
    if (i == static_cast<uint16_t>(id)) return v;
  }
  return 0;
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
  double sum(const BlockSnapshot& b, CounterId first, std::initializer_list<int> offsets) const {
    double s = 0;
    for (int o : offsets) s += of(b, static_cast<CounterId>(static_cast<int>(first) + o));
    return s;
  }
};

std::string ratio(uint64_t num, uint64_t den) {
  if (den == 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", static_cast<double>(num) / static_cast<double>(den));
  return buf;
}

// The channel pool of each device: how many communicators share how many channels and CQs, and
// how evenly the operations spread over the channels. Routing misses should stay 0.
template <typename RatesOf>
void pool_table(std::ostream& os, const telemetry::SegmentSnapshot& s, const RatesOf& rates) {
  bool header = false;
  for (const auto& b : s.blocks) {
    if (b.kind != static_cast<uint16_t>(BlockKind::pool)) continue;
    if (!header) {
      os << "<h3>Channel pool</h3><table><tr><th>device<th>provider<th>groups &times; channels"
            "<th>channels<th>CQs<th>comms attached<th>comms/channel<th>primaries<th>secondaries"
            "<th>routing misses<th>channel ops<th>ops/s<th>ops/channel<th>busiest channel</tr>\n";
      header = true;
    }
    Rates r = rates(b);
    const uint64_t channels = value(b, CounterId::pool_channels);
    const uint64_t ops = value(b, CounterId::pool_channel_ops);
    const uint64_t busiest = value(b, CounterId::pool_busiest_channel_ops);
    const uint64_t misses = value(b, CounterId::pool_routing_misses);
    char share[32] = "";
    if (ops > 0) {
      std::snprintf(share, sizeof(share), " (%.0f%%)",
                    100.0 * static_cast<double>(busiest) / static_cast<double>(ops));
    }
    os << "<tr><td>" << esc(label(b, LabelKey::device)) << "<td>"
       << esc(label(b, LabelKey::provider)) << "<td class=n>" << value(b, CounterId::pool_groups)
       << " &times; " << value(b, CounterId::pool_channels_per_group) << "<td class=n>" << channels
       << "<td class=n>" << value(b, CounterId::pool_cqs) << "<td class=n>"
       << value(b, CounterId::pool_comms_attached) << "<td class=n>"
       << ratio(value(b, CounterId::pool_comms_attached), channels) << "<td class=n>"
       << value(b, CounterId::pool_primaries) << "<td class=n>"
       << value(b, CounterId::pool_secondaries) << "<td class=n"
       << (misses ? " style=\"color:#b00;font-weight:bold\">" : ">") << misses << "<td class=n>"
       << ops << "<td class=n>" << human(r.of(b, CounterId::pool_channel_ops), "") << "<td class=n>"
       << ratio(ops, channels) << "<td class=n>" << busiest << share << "</tr>\n";
  }
  if (header) os << "</table>\n";
}

void process_section(std::ostream& os, const ProcessView& p, const ProcessView* prev) {
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
     << (p.rank.empty() ? "" : " &middot; rank " + esc(p.rank)) << "</h2>\n"
     << "<p>program <b>" << esc(p.program) << "</b>, segment " << esc(p.file) << ", snapshot "
     << s.snapshots << " (" << agebuf << " ago, every " << s.interval_ms << " ms)"
     << (prev == nullptr ? ", rates after the next refresh" : "") << "</p>\n";

  os << "<h3>Rails</h3><table><tr><th>device<th>rail<th>endpoint<th>provider"
        "<th>send+write/s<th>recv+read/s<th>ops/s<th>send+write bytes<th>recv+read bytes"
        "<th>error completions<th>EAGAIN retries</tr>\n";
  for (const auto& b : s.blocks) {
    if (b.kind != static_cast<uint16_t>(BlockKind::endpoint)) continue;
    Rates r = rates(b);
    uint64_t out =
        value(b, CounterId::endpoint_bytes_send) + value(b, CounterId::endpoint_bytes_write);
    uint64_t in =
        value(b, CounterId::endpoint_bytes_recv) + value(b, CounterId::endpoint_bytes_read);
    os << "<tr><td>" << esc(label(b, LabelKey::device)) << "<td>" << esc(label(b, LabelKey::rail))
       << "<td>" << esc(label(b, LabelKey::endpoint)) << "<td>" << esc(label(b, LabelKey::provider))
       << "<td class=n>" << human(r.sum(b, CounterId::endpoint_bytes_send, {0, 2}), "B")
       << "<td class=n>" << human(r.sum(b, CounterId::endpoint_bytes_send, {1, 3}), "B")
       << "<td class=n>" << human(r.sum(b, CounterId::endpoint_ops_send, {0, 1, 2, 3, 4}), "")
       << "<td class=n>" << human(static_cast<double>(out), "B") << "<td class=n>"
       << human(static_cast<double>(in), "B") << "<td class=n>"
       << value(b, CounterId::endpoint_error_completions) << "<td class=n>"
       << value(b, CounterId::endpoint_eagain_retries) << "</tr>\n";
  }
  os << "</table>\n";

  os << "<h3>Completion queues</h3><table><tr><th>device<th>cq<th>polls/s<th>empty polls"
        "<th>completions/s<th>error completions<th>max batch</tr>\n";
  for (const auto& b : s.blocks) {
    if (b.kind != static_cast<uint16_t>(BlockKind::cq)) continue;
    Rates r = rates(b);
    uint64_t polls = value(b, CounterId::cq_polls);
    char empty[32];
    std::snprintf(empty, sizeof(empty), "%.1f%%",
                  polls ? 100.0 * static_cast<double>(value(b, CounterId::cq_empty_polls)) /
                              static_cast<double>(polls)
                        : 0.0);
    os << "<tr><td>" << esc(label(b, LabelKey::device)) << "<td>" << esc(label(b, LabelKey::cq))
       << "<td class=n>" << human(r.of(b, CounterId::cq_polls), "") << "<td class=n>" << empty
       << "<td class=n>" << human(r.of(b, CounterId::cq_completions), "") << "<td class=n>"
       << value(b, CounterId::cq_error_completions) << "<td class=n>"
       << value(b, CounterId::cq_max_batch) << "</tr>\n";
  }
  os << "</table>\n";

  os << "<h3>Devices</h3><table><tr><th>device<th>provider<th>comms open<th>registrations"
        "<th>registered bytes<th>routing misses</tr>\n";
  for (const auto& b : s.blocks) {
    if (b.kind != static_cast<uint16_t>(BlockKind::device)) continue;
    os << "<tr><td>" << esc(label(b, LabelKey::device)) << "<td>"
       << esc(label(b, LabelKey::provider)) << "<td class=n>"
       << value(b, CounterId::device_comms_open) << "<td class=n>"
       << value(b, CounterId::device_registrations) << "<td class=n>"
       << human(static_cast<double>(value(b, CounterId::device_registered_bytes)), "B")
       << "<td class=n>" << value(b, CounterId::device_routing_misses) << "</tr>\n";
  }
  os << "</table>\n";

  pool_table(os, s, rates);

  // Kinds without a table of their own (rails, info, newer kinds): labels and counters.
  bool header = false;
  for (const auto& b : s.blocks) {
    auto k = static_cast<BlockKind>(b.kind);
    if (k == BlockKind::endpoint || k == BlockKind::cq || k == BlockKind::device ||
        k == BlockKind::pool || k == BlockKind::process) {
      continue;
    }
    if (!header) {
      os << "<h3>Rails and info</h3><table><tr><th>kind<th>labels<th>counters</tr>\n";
      header = true;
    }
    Rates r = rates(b);
    os << "<tr><td>" << telemetry::block_kind_name(b.kind) << "<td>";
    for (const auto& l : b.labels) {
      if (l.value.empty()) continue;  // as in /metrics: no label without a value
      os << esc(telemetry::label_key_name(l.key)) << "=" << esc(l.value) << " ";
    }
    os << "<td>";
    for (const auto& [id, v] : b.counters) {
      const auto* n = telemetry::find_counter(id);
      os << (n ? n->metric : "unknown") << (n && n->extra_value[0] ? "{" : "")
         << (n ? n->extra_value : "") << (n && n->extra_value[0] ? "}" : "") << " " << v;
      if (n && n->type == telemetry::MetricType::counter && r.before) {
        os << " (" << human(r.of(b, static_cast<CounterId>(id)), "") << "/s)";
      }
      os << "<br>";
    }
    os << "</tr>\n";
  }
  if (header) os << "</table>\n";
  os << "</section>\n";
}

}  // namespace

std::string status_page(const ScanResult& now, const std::deque<ScanResult>& history,
                        const NodeScan& node) {
  std::ostringstream os;
  os << "<!DOCTYPE html><html><head><meta charset=utf-8><meta http-equiv=refresh content=2>"
        "<title>xport-exporter</title><style>body{font-family:sans-serif;margin:1.5em}"
        "table{border-collapse:collapse;margin-bottom:1em}td,th{border:1px solid #ccc;"
        "padding:2px 8px;font-size:13px}th{background:#eee}td.n{text-align:right;"
        "font-family:monospace}section{border-top:2px solid #444;margin-top:1em}</style>"
        "</head><body>\n<h1>xport-exporter</h1>\n<p>libxport "
     << esc(version()) << ": " << now.processes.size() << " process"
     << (now.processes.size() == 1 ? "" : "es") << " publishing in " << esc(node.options().dir)
     << ". Metrics: <a href=\"/metrics\">/metrics</a>. Segments rejected:";
  for (const auto& [reason, n] : node.rejected()) os << " " << reason << " " << n;
  os << "; removed (dead) " << node.removed() << ".</p>\n";
  if (now.processes.empty()) os << "<p><b>No process is publishing counters.</b></p>\n";
  for (const auto& p : now.processes) {
    const ProcessView* prev = nullptr;
    for (auto scan = history.begin(); scan != history.end() && prev == nullptr; ++scan) {
      for (const auto& q : scan->processes) {
        if (q.snapshot.pid == p.snapshot.pid && q.snapshot.start_ticks == p.snapshot.start_ticks &&
            q.snapshot.publish_time_ns < p.snapshot.publish_time_ns) {
          prev = &q;
        }
      }
    }
    process_section(os, p, prev);
  }
  os << "</body></html>\n";
  return os.str();
}

}  // namespace xport::exporter
