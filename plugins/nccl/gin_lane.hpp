// A GIN comm's lanes beyond its first (XPORT_NCCL_GIN_LANES, docs/nccl.md "GIN lanes"): each a
// team of its own on a libxport device of its own (GpuHostLanes), driven by a thread of its own.
// A large put is split over the comm's lanes (lane 0 is the comm's own team, driven by NCCL's
// GIN thread); the parts on lanes 1.. are handed to their lane's thread, which alone posts
// them, drives its device's progress (on shm and tcp the CPU copies of the peers' writes into
// this rank land there, in parallel with the other lanes') and reports each part once it is
// delivered. NCCL's threads never take a lane's device. A peer's parts arrive unannounced, so
// the thread never sleeps outright: it polls flat out while it has parts of its own or its
// passes read completions, for `spin` after that, then once per kDoze, and once it has been
// idle for kDeepAfter once per kDeepDoze, until a submit or a pass that reads something. (Idle
// lanes polling every 100 µs for good slowed small GIN operations by 5-20% on a VM.)
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "xport/gpu_host.hpp"

namespace xport::nccl {

// One put of a lane: source and destination ranges of the lane's own registrations, and what
// to do once it is delivered (or failed, or the lane closed first).
struct GinPart {
  int peer = 0;
  const Region* src = nullptr;
  size_t src_off = 0;
  const RemoteRegion* dst = nullptr;
  size_t dst_off = 0;
  size_t size = 0;
  std::shared_ptr<const void> keep;  // the registrations, alive while the part is
  std::function<void(const Status&)> done;
  Ticket ticket = 0;  // (the lane's thread's)
};

class GinLane {
 public:
  // How often a dozing lane's thread makes a pass: soon after its last work, and long after.
  static constexpr std::chrono::microseconds kDoze{100};
  static constexpr std::chrono::milliseconds kDeepAfter{10};
  static constexpr std::chrono::microseconds kDeepDoze{1000};
  // Starts the thread; the team's windows read staged sources as progress goes.
  GinLane(std::unique_ptr<GpuTeam> team, std::chrono::microseconds spin);
  // Stops the thread; parts not delivered yet are reported closed.
  ~GinLane();
  GinLane(const GinLane&) = delete;
  GinLane& operator=(const GinLane&) = delete;

  GpuTeam& team() { return *team_; }
  // NCCL's thread: posted by the lane's thread in the order submitted.
  void submit(GinPart part);

 private:
  void run();

  std::unique_ptr<GpuTeam> team_;
  const std::chrono::microseconds spin_;
  std::mutex mu_;
  std::condition_variable cv_;  // a dozing thread waits on it (with mu_)
  std::vector<GinPart> inbox_;  // guarded by mu_
  std::atomic<bool> has_inbox_{false};
  std::atomic<bool> dozing_{false};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace xport::nccl
