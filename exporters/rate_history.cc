// Samples of each process's totals and the per-second rates between them.
#include "rate_history.hpp"

#include <algorithm>
#include <functional>

#include "telemetry/names.hpp"

namespace xport::exporter {
namespace {

using telemetry::BlockKind;
using telemetry::CounterId;
using telemetry::LabelKey;

double counter(const telemetry::BlockSnapshot& b, CounterId id) {
  for (const auto& [i, v] : b.counters) {
    if (i == static_cast<uint16_t>(id)) return static_cast<double>(v);
  }
  return 0;
}

std::string label(const telemetry::BlockSnapshot& b, LabelKey k) {
  for (const auto& l : b.labels) {
    if (l.key == k) return l.value;
  }
  return "";
}

// Counters only grow while a process lives: a smaller value is no negative rate.
double grew(double before, double after) { return after > before ? after - before : 0; }

// A chart of `names.size()` series: for each step between consecutive samples, the sum over the
// processes in both (and accepted by `which`) of `deltas(before, after)`, over the step's time.
using Deltas = std::function<std::vector<double>(const ProcessTotals&, const ProcessTotals&)>;
template <typename Samples, typename Which>
RateChart chart(const Samples& samples, const std::vector<std::string>& names, const Deltas& deltas,
                const Which& which) {
  RateChart c;
  for (const auto& n : names) c.series.push_back({n, {}});
  if (samples.size() < 2) return c;
  const double now = samples.back().t;
  for (size_t i = 1; i < samples.size(); ++i) {
    const auto& a = samples[i - 1];
    const auto& b = samples[i];
    const double dt = b.t - a.t;
    if (dt <= 0) continue;
    std::vector<double> sum(names.size(), 0.0);
    for (const auto& [key, after] : b.processes) {
      if (!which(key)) continue;
      auto it = a.processes.find(key);
      if (it == a.processes.end()) continue;
      const std::vector<double> d = deltas(it->second, after);
      for (size_t k = 0; k < sum.size() && k < d.size(); ++k) sum[k] += d[k];
    }
    c.ages_s.push_back(now - b.t);
    for (size_t k = 0; k < sum.size(); ++k) c.series[k].values.push_back(sum[k] / dt);
  }
  return c;
}

}  // namespace

ProcessTotals totals_of(const telemetry::SegmentSnapshot& s) {
  ProcessTotals t;
  for (const auto& b : s.blocks) {
    if (b.kind == static_cast<uint16_t>(BlockKind::endpoint)) {
      const double out =
          counter(b, CounterId::endpoint_bytes_send) + counter(b, CounterId::endpoint_bytes_write);
      const double in =
          counter(b, CounterId::endpoint_bytes_recv) + counter(b, CounterId::endpoint_bytes_read);
      t.out_bytes += out;
      t.in_bytes += in;
      for (auto id : {CounterId::endpoint_ops_send, CounterId::endpoint_ops_recv,
                      CounterId::endpoint_ops_write, CounterId::endpoint_ops_read,
                      CounterId::endpoint_ops_atomic}) {
        t.ops += counter(b, id);
      }
      t.errors += counter(b, CounterId::endpoint_error_completions);
      t.rail_bytes[label(b, LabelKey::rail)] += out + in;
    } else if (b.kind == static_cast<uint16_t>(BlockKind::rail)) {
      t.errors += counter(b, CounterId::rail_errors);
    }
  }
  return t;
}

void RateHistory::add(const ScanResult& scan, double now_s) {
  Sample s;
  s.t = now_s;
  for (const auto& p : scan.processes) {
    if (s.processes.size() >= kMaxProcesses) break;
    s.processes[{p.snapshot.pid, p.snapshot.start_ticks}] = totals_of(p.snapshot);
  }
  samples_.push_back(std::move(s));
  while (samples_.size() > kSamples) samples_.pop_front();
}

RateChart RateHistory::node() const {
  return chart(
      samples_, {"out B/s", "in B/s", "ops/s", "errors/s"},
      [](const ProcessTotals& a, const ProcessTotals& b) {
        return std::vector<double>{grew(a.out_bytes, b.out_bytes), grew(a.in_bytes, b.in_bytes),
                                   grew(a.ops, b.ops), grew(a.errors, b.errors)};
      },
      [](const Key&) { return true; });
}

RateChart RateHistory::rails() const {
  // The rails the newest sample knows, busiest (most bytes so far) first.
  std::map<std::string, double> seen;
  if (!samples_.empty()) {
    for (const auto& [key, t] : samples_.back().processes) {
      for (const auto& [rail, bytes] : t.rail_bytes) seen[rail] += bytes;
    }
  }
  std::vector<std::pair<double, std::string>> order;
  for (const auto& [rail, bytes] : seen) order.emplace_back(-bytes, rail);
  std::sort(order.begin(), order.end());
  std::vector<std::string> names;
  for (size_t i = 0; i < order.size() && i < kMaxRails; ++i) names.push_back(order[i].second);
  return chart(
      samples_, names,
      [names](const ProcessTotals& a, const ProcessTotals& b) {
        std::vector<double> d;
        for (const auto& rail : names) {
          auto x = a.rail_bytes.find(rail), y = b.rail_bytes.find(rail);
          d.push_back(
              x != a.rail_bytes.end() && y != b.rail_bytes.end() ? grew(x->second, y->second) : 0);
        }
        return d;
      },
      [](const Key&) { return true; });
}

RateChart RateHistory::process(uint64_t pid, uint64_t start_ticks) const {
  const Key want{pid, start_ticks};
  return chart(
      samples_, {"out B/s", "in B/s"},
      [](const ProcessTotals& a, const ProcessTotals& b) {
        return std::vector<double>{grew(a.out_bytes, b.out_bytes), grew(a.in_bytes, b.in_bytes)};
      },
      [want](const Key& k) { return k == want; });
}

}  // namespace xport::exporter
