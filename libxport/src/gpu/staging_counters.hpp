// What host staging moved, per CUDA device of the process: relaxed atomics bumped where the
// copies are enqueued (gpu/staged_memory.cc), read by telemetry (gpu/staging/placement.cc
// publishes them).
#pragma once

#include <atomic>
#include <cstdint>

namespace xport::gpu {

struct StagingCounters {
  std::atomic<uint64_t> to_host_bytes{0};
  std::atomic<uint64_t> to_gpu_bytes{0};
  std::atomic<uint64_t> copies_to_host{0};
  std::atomic<uint64_t> copies_to_gpu{0};
  std::atomic<uint64_t> copy_errors{0};
  std::atomic<uint64_t> shadows{0};       // gauge
  std::atomic<uint64_t> shadow_bytes{0};  // gauge
  // The staging pools of GPU sources (gpu/staging/staging_pool.hpp), every Device's together:
  std::atomic<uint64_t> pool_bytes{0};         // gauge: host memory their slabs hold
  std::atomic<uint64_t> pool_pinned_bytes{0};  // gauge: ... of it page-locked
  std::atomic<uint64_t> pool_in_use_bytes{0};  // gauge: taken by operations in flight
  std::atomic<uint64_t> pool_refusals{0};      // calls answered again: the pool at its bound
  std::atomic<bool> used{false};          // a shadow was ever made for this GPU
};

// GPUs counted one by one; a larger ordinal shares the last slot.
inline constexpr int kCountedGpus = 32;

// The counters of CUDA device `gpu` (clamped into [0, kCountedGpus)).
StagingCounters& staging_counters(int gpu);

}  // namespace xport::gpu
