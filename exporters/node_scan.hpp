// Finding and reading the stats segments of this node: every file xport-<uid>-<pid> in the
// segment directory is read without trust; dead owners' segments are removed; each rejection is
// counted by reason (xport_exporter_segments_rejected_total).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "telemetry/segment_reader.hpp"

namespace xport::exporter {

struct ProcessView {
  std::string file;  // segment file name
  telemetry::SegmentSnapshot snapshot;
  std::string job, rank, program;
  // The `process` label: the lowest ordinal free among the live processes of the same job and
  // rank on this node, kept while the process lives. A restarted process takes its
  // predecessor's ordinal, so its series continue (a pid label made new series on every
  // restart); two processes of one job and rank stay apart.
  unsigned slot = 0;
};

struct ScanResult {
  std::vector<ProcessView> processes;  // sorted by pid
};

class NodeScan {
 public:
  struct Options {
    std::string dir = "/dev/shm";
    size_t max_processes = 1024;
  };
  explicit NodeScan(Options options) : options_(std::move(options)) {}

  ScanResult scan();

  // Cumulative since start, by reason name (every reason present, zero included).
  const std::map<std::string, uint64_t>& rejected() const { return rejected_; }
  uint64_t removed() const { return removed_; }
  const Options& options() const { return options_; }
  static std::vector<std::string> reject_reasons();

 private:
  // Counts a rejection once per file (persistent reasons would otherwise grow every scan).
  void count(const std::string& reason, uint64_t dev, uint64_t ino, bool once);

  // Gives each process of `out` its slot, keeping those of processes still there.
  void assign_slots(ScanResult& out);

  Options options_;
  // (pid, start ticks) -> (job and rank, slot) of the processes of the last scan.
  std::map<std::pair<uint64_t, uint64_t>, std::pair<std::string, unsigned>> slots_;
  std::map<std::string, uint64_t> rejected_ = initial();
  uint64_t removed_ = 0;
  std::set<std::tuple<uint64_t, uint64_t, std::string>> counted_, counted_now_;
  static std::map<std::string, uint64_t> initial();
};

}  // namespace xport::exporter
