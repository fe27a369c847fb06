// The host proxy for GPU-initiated operations (docs/semantics.md, "GPU-initiated operations"):
// a thread that takes the descriptors kernels put on the proxy ring (xport/device.cuh) off in
// bounded batches and executes them through Windows, then tells the kernels which are complete.
#pragma once

#include <cstdint>
#include <memory>

#include "xport/gpu_ring.hpp"
#include "xport/region.hpp"
#include "xport/status.hpp"
#include "xport/window.hpp"

namespace xport {

class Device;

struct GpuProxyOptions {
  uint32_t capacity = 1024;  // ring slots (a power of two)
  uint32_t batch = 64;       // descriptors taken per pass
  int gpu = 0;               // the GPU whose memory holds the producers' counter
  // After the last descriptor, completion or arrival, the thread keeps polling (yielding the
  // core between passes) this long before it sleeps between passes; while it sleeps, a
  // descriptor waits up to a scheduler tick. A kernel waiting on a peer's reply needs the
  // proxy awake: its progress is what applies the peer's puts and signals.
  uint32_t spin_us = 10000;
  uint32_t sleep_us = 50;    // the nap between idle passes after spin_us
};

struct GpuProxyStats {
  uint64_t batches = 0;          // passes that took at least one descriptor
  uint64_t descriptors = 0;      // descriptors executed
  uint64_t completed = 0;        // ... and reported complete to the kernels
  uint64_t max_occupancy = 0;    // most descriptors taken in one pass
  uint64_t in_flight = 0;        // taken off the ring, not yet complete (gauge)
  uint64_t queued = 0;           // filled on the ring, not yet taken (gauge; a snapshot)
  uint64_t again = 0;            // executions the window refused for now (credits), retried
  uint64_t timeouts = 0;         // 1 once a kernel's wait passed its deadline (Abort::timeout)
  uint64_t failures = 0;         // 1 once an operation or descriptor aborted the ring
  uint32_t capacity = 0;         // ring slots
  gpu_ring::Abort aborted = gpu_ring::Abort::none;
};

class GpuProxy {
 public:
  // A ring in page-locked host memory mapped into the GPUs, on `device`'s windows. Needs a GPU
  // (Code::unsupported without one).
  static Result<std::unique_ptr<GpuProxy>> open(Device& device, const GpuProxyOptions& options = {});
  ~GpuProxy();  // aborts the ring (Abort::stopped), stops the thread
  GpuProxy(const GpuProxy&) = delete;
  GpuProxy& operator=(const GpuProxy&) = delete;

  // The tables descriptors index (window, local_region/counter_region, remote_region/
  // signal_region): filled before start(); the objects must outlive the proxy.
  Result<uint16_t> add_window(Window& window);
  Result<uint16_t> add_region(const Region& region);
  Result<uint16_t> add_remote(const RemoteRegion& region);
  Status start();

  // What kernels are given (xport::device::Ring).
  gpu_ring::DeviceRing ring() const;
  // The error that aborted the ring (Abort::failed or bad_descriptor), ok while it runs.
  Status last_error() const;
  gpu_ring::Abort aborted() const;
  GpuProxyStats stats() const;

 private:
  GpuProxy() = default;
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace xport
