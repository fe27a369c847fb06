// Concurrent streams of xport-bench (MPI mode, and alltoall between two processes): one point
// run at once on every session this process initiates on and served on every session it is the
// target of, a thread each.
#pragma once

#include <chrono>
#include <thread>
#include <vector>

#include "ops.hpp"
#include "report.hpp"

namespace bench {

// Runs fn(i) for i in [0, n) on a thread each; the first error wins.
template <typename F>
xport::Status in_parallel(size_t n, F fn) {
  std::vector<xport::Status> st(n);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i) threads.emplace_back([&, i] { st[i] = fn(i); });
  for (auto& t : threads) t.join();
  for (auto& s : st) {
    if (!s.ok()) return s;
  }
  return xport::Status();
}

// One point of `plan` on every session of `outs` (initiator) while every session of `ins`
// serves it. Returns the points of `outs`, in order, their phases in seconds since `t0`. A
// failed session closes its comms at once, so its peer's pending receive fails then, not at
// its deadline.
xport::Result<std::vector<Point>> run_streams(const std::vector<Session*>& outs,
                                              const std::vector<Session*>& ins, const Plan& plan,
                                              std::chrono::steady_clock::time_point t0);

}  // namespace bench
