// What xport-bench measures and prints (printer.hpp renders it): a point's figures, the run's
// description (rails, link rate, pool and progress counters), the --expect-* acceptance checks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops.hpp"
#include "options.hpp"

namespace bench {

struct Point {
  size_t size = 0;
  int iterations = 0, warmup = 0, depth = 0;
  int streams = 1;  // MPI mode: concurrent initiator-target pairs summed into this point
  double p50_us = 0, p99_us = 0, max_us = 0, mean_us = 0;
  double bw = 0;    // bytes per second
  double rate = 0;  // messages per second
  // What the rates came from; MPI mode adds streams up over the longest wall time.
  double bytes = 0, messages = 0, wall_s = 0;
  // MPI mode: the phase in seconds since this rank left the point's barrier.
  double start_s = 0, end_s = 0;
  double call_ns = -1, wait_ns = -1;  // Measured's (--time-calls); not in pack()
  int slots = 0;                      // put and get: the plan's slots (0: not said); not in pack()
};
Point summarize(const Plan& plan, const Measured& m);
// MPI mode: bytes and messages of all streams over the time from the first stream's start to
// the last one's end (a sum of per-stream rates would overstate streams that took turns);
// latency: the worst stream's.
Point aggregate(const std::vector<Point>& streams);
// A point as numbers, for MPI's gathers and the line protocol of alltoall between two processes.
inline constexpr int kPointDoubles = 15;
void pack(const Point& p, double* d);
Point unpack(const double* d);

struct RunInfo {
  Op op = Op::send;
  std::string provider;
  std::vector<std::string> rails;  // names, in rail order
  uint64_t link_bits_per_s = 0;    // sum over the rails; 0 when any rail's rate is unknown
  std::string mode;                // "local", "two-host", "mpi"
  std::string pattern;             // MPI mode, and alltoall in local and two-host modes
  int ranks = 2;
  bool check = false;
  bool sliding = false;
  bool cuda = false;          // --memory cuda
  bool device = false;        // --initiator device
  bool round_trip = false;    // put-signal round trips
  int comms = 1;  // communicators per peer and direction
  int depth = 1;  // --depth as asked (the table's description of the bandwidth)
  // This process's device's channel pool, read after the latest point with its comms still open
  // (Device::stats().pool).
  xport::PoolStats pool;
  // This process's device's progress counters from the start of the run to the latest point
  // (warm-ups, latency phases and the bootstrap's messages included), read with the pool:
  // summed over its CQs and endpoints.
  struct Progress {
    uint64_t cq_polls = 0, cq_empty_polls = 0, cq_completions = 0;
    uint64_t posts = 0, eagain_retries = 0;
    uint64_t window_ops_held = 0, deferred_posts = 0;
  } progress;
};
// RunInfo::Progress from a Stats snapshot.
RunInfo::Progress progress_of(const xport::Stats& s);
RunInfo describe_run(const Options& opt, const xport::Device& dev, const std::string& mode);

// Prints a line naming every size that falls short; returns kExitFailed if any does.
int check_expectations(const Options& opt, const std::vector<Point>& points);

}  // namespace bench
