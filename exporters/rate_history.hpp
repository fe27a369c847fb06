// The status page's rates over time: every scan of the exporter's tick adds a sample of each
// process's totals (bytes out and in, operations, errors, bytes per rail); rates are the
// differences of consecutive samples, summed over the processes present in both (a process
// that starts or exits is no jump). A bounded ring: kSamples samples, at most kMaxProcesses
// processes a sample.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "node_scan.hpp"

namespace xport::exporter {

// What one process has counted so far, summed over its devices.
struct ProcessTotals {
  double out_bytes = 0;                      // send + write
  double in_bytes = 0;                       // recv + read
  double ops = 0;                            // every endpoint op
  double errors = 0;                         // endpoint error completions + rail errors
  std::map<std::string, double> rail_bytes;  // out + in, by rail
};
ProcessTotals totals_of(const telemetry::SegmentSnapshot& s);

// A series of per-second rates, oldest first, against seconds before the newest sample.
struct RateSeries {
  std::string name;
  std::vector<double> values;
};
struct RateChart {
  std::vector<double> ages_s;  // seconds before now, oldest first (positive)
  std::vector<RateSeries> series;
};

class RateHistory {
 public:
  static constexpr size_t kSamples = 180;
  static constexpr size_t kMaxProcesses = 256;

  // Adds a sample of `scan` taken at `now_s` (a steady clock, seconds).
  void add(const ScanResult& scan, double now_s);

  // The node: bytes out and in per second, operations and errors per second.
  RateChart node() const;
  // Bytes per second (out + in) of each rail of the node (the busiest kMaxRails).
  RateChart rails() const;
  // One process (pid and start ticks): bytes out and in per second.
  RateChart process(uint64_t pid, uint64_t start_ticks) const;
  size_t samples() const { return samples_.size(); }

  static constexpr size_t kMaxRails = 8;

 public:
  using Key = std::pair<uint64_t, uint64_t>;  // pid, start ticks

 private:
  struct Sample {
    double t = 0;
    std::map<Key, ProcessTotals> processes;
  };
  std::deque<Sample> samples_;
};

}  // namespace xport::exporter
