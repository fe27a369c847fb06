// The Prometheus side: node scan -> prometheus-cpp registry -> text exposition format.
// Every library series carries process (an ordinal stable across restarts), and xport_job and
// rank where they have a value (a label with no value is left out); never job or instance,
// which are the scrape target's. The pid is on xport_process_info alone. A process's series
// are capped (bounded label sets).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "node_scan.hpp"

namespace xport::exporter {

// The labels every series of `p` carries: process, and xport_job and rank where set.
std::map<std::string, std::string> process_labels(const ProcessView& p);

class Exposition {
 public:
  explicit Exposition(size_t max_series_per_process)
      : max_series_per_process_(max_series_per_process) {}

  // The text exposition of one scan plus the exporter's own metrics. Never throws.
  std::string render(const ScanResult& scan, const NodeScan& node, double scrape_seconds);

  // Every metric name render() may produce (the library's counter table + the exporter's own).
  static std::vector<std::string> metric_names();

 private:
  size_t max_series_per_process_;
  std::map<std::string, uint64_t> dropped_ = {{"series_limit", 0}, {"unknown_counter", 0}};
};

}  // namespace xport::exporter
