// Building the registry of one scrape. Families are created per scrape: processes come and go,
// and a series of a dead process must vanish rather than linger with its last value.
#include "exposition.hpp"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <unistd.h>

#include <exception>
#include <fstream>
#include <set>

#include "telemetry/names.hpp"
#include "xport/provider.hpp"
#include "xport/xport.hpp"

namespace xport::exporter {
namespace {

using telemetry::MetricType;

struct Families {
  prometheus::Registry& reg;
  std::map<std::string, prometheus::Family<prometheus::Counter>*> counters;
  std::map<std::string, prometheus::Family<prometheus::Gauge>*> gauges;

  prometheus::Family<prometheus::Counter>& counter(const std::string& name,
                                                   const std::string& help) {
    auto& f = counters[name];
    if (f == nullptr) f = &prometheus::BuildCounter().Name(name).Help(help).Register(reg);
    return *f;
  }
  prometheus::Family<prometheus::Gauge>& gauge(const std::string& name, const std::string& help) {
    auto& f = gauges[name];
    if (f == nullptr) f = &prometheus::BuildGauge().Name(name).Help(help).Register(reg);
    return *f;
  }
};

// The help of a metric: the first non-empty help among the table rows of that name.
const std::map<std::string, std::string>& helps() {
  static const std::map<std::string, std::string> m = [] {
    std::map<std::string, std::string> out;
    for (const auto& n : telemetry::counter_names()) {
      if (out[n.metric].empty()) out[n.metric] = n.help;
    }
    return out;
  }();
  return m;
}

// Seconds since the epoch of a process's start, from its start time in clock ticks since boot;
// 0 when the boot time cannot be read.
double start_time_seconds(uint64_t start_ticks) {
  static const double boot = [] {
    std::ifstream in("/proc/stat");
    for (std::string key; in >> key;) {
      if (key == "btime") {
        double v = 0;
        in >> v;
        return v;
      }
      in.ignore(1 << 16, '\n');
    }
    return 0.0;
  }();
  static const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
  if (boot <= 0 || hz <= 0 || start_ticks == 0) return 0;
  return boot + static_cast<double>(start_ticks) / hz;
}

}  // namespace

std::map<std::string, std::string> process_labels(const ProcessView& p) {
  std::map<std::string, std::string> l = {{"process", std::to_string(p.slot)}};
  if (!p.job.empty()) l.emplace("xport_job", p.job);
  if (!p.rank.empty()) l.emplace("rank", p.rank);
  return l;
}

std::vector<std::string> Exposition::metric_names() {
  std::set<std::string> names;
  for (const auto& n : telemetry::counter_names()) names.insert(n.metric);
  for (const char* n :
       {"xport_build_info", "xport_process_info", "xport_process_start_time_seconds",
        "xport_exporter_segments", "xport_exporter_segments_rejected_total",
        "xport_exporter_segments_removed_total", "xport_exporter_series_dropped_total",
        "xport_exporter_scrape_duration_seconds"}) {
    names.insert(n);
  }
  return {names.begin(), names.end()};
}

std::string Exposition::render(const ScanResult& scan, const NodeScan& node,
                               double scrape_seconds) {
  try {
    prometheus::Registry reg;
    Families fam{reg, {}, {}};
    auto& info = fam.gauge("xport_process_info",
                           "1 per process publishing counters; labels pid and program say which "
                           "process holds the process ordinal now");
    auto& started = fam.gauge("xport_process_start_time_seconds",
                              "start time of the process since the Unix epoch, in seconds");
    for (const auto& p : scan.processes) {
      // A label without a value is left out (no rank=""): absent and empty are the same series
      // to Prometheus, but not to a person reading the exposition or to label_values(). No
      // label is named job or instance: those are the scrape target's (honor_labels: false).
      const std::map<std::string, std::string> base = process_labels(p);
      auto with = base;
      with.emplace("pid", std::to_string(p.snapshot.pid));
      if (!p.program.empty()) with.emplace("program", p.program);
      info.Add(with).Set(1);
      if (const double t = start_time_seconds(p.snapshot.start_ticks); t > 0) {
        started.Add(base).Set(t);
      }
      size_t series = 0;
      for (const auto& b : p.snapshot.blocks) {
        for (const auto& [id, value] : b.counters) {
          const telemetry::CounterName* n = telemetry::find_counter(id);
          if (n == nullptr) {
            dropped_["unknown_counter"] += 1;  // a newer library than this exporter
            continue;
          }
          if (series >= max_series_per_process_) {
            dropped_["series_limit"] += 1;
            continue;
          }
          std::map<std::string, std::string> labels = base;
          // Process labels win over a block that names the same key.
          for (const auto& l : b.labels) {
            if (!l.value.empty()) labels.emplace(telemetry::label_key_name(l.key), l.value);
          }
          for (const char* target : {"job", "instance"}) labels.erase(target);
          if (n->extra_key != telemetry::LabelKey::count && n->extra_value[0] != '\0') {
            labels[telemetry::label_key_name(n->extra_key)] = n->extra_value;
          }
          const std::string& help = helps().at(n->metric);
          if (n->type == MetricType::counter) {
            // Add() returns the existing series for equal labels: duplicates are summed.
            fam.counter(n->metric, help).Add(labels).Increment(static_cast<double>(value));
          } else {
            fam.gauge(n->metric, help).Add(labels).Set(static_cast<double>(value));
          }
          ++series;
        }
      }
    }
    const FabricInfo fi = fabric_info();
    fam.gauge("xport_build_info",
              "1; the exporter's libxport version, git revision and the libfabric it loaded")
        .Add({{"version", version()}, {"revision", build_id()}, {"libfabric", fi.runtime_version}})
        .Set(1);
    fam.gauge("xport_exporter_segments", "stats segments of live processes read in this scrape")
        .Add({})
        .Set(static_cast<double>(scan.processes.size()));
    auto& rej = fam.counter("xport_exporter_segments_rejected_total",
                            "stats segments skipped, by reason (owner, size, version, corrupt, "
                            "torn, dead, io, limit)");
    for (const auto& [reason, n] : node.rejected()) {
      rej.Add({{"reason", reason}}).Increment(static_cast<double>(n));
    }
    fam.counter("xport_exporter_segments_removed_total",
                "segments of dead processes the exporter removed")
        .Add({})
        .Increment(static_cast<double>(node.removed()));
    auto& drop = fam.counter("xport_exporter_series_dropped_total",
                             "series left out of an exposition, by reason (series_limit, "
                             "unknown_counter)");
    for (const auto& [reason, n] : dropped_) {
      drop.Add({{"reason", reason}}).Increment(static_cast<double>(n));
    }
    fam.gauge("xport_exporter_scrape_duration_seconds",
              "time the exporter took to read the segments of this scrape")
        .Add({})
        .Set(scrape_seconds);
    return prometheus::TextSerializer().Serialize(reg.Collect());
  } catch (const std::exception& e) {
    return std::string("# xport-exporter: exposition failed: ") + e.what() + "\n";
  }
}

}  // namespace xport::exporter
