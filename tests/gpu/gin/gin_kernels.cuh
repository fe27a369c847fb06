// The GIN kernels of xport-gin-nccl (gin_kernels.cu) and what the host hands them. nvcc only:
// ncclDevComm and ncclGin come from nccl_device.h.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <cstdint>

namespace gin_nccl {

// Our GIN signals (ncclDevCommRequirements::ginSignalCount = kSignalCount; ids from 0). Each
// carries one operator only (SignalInc), as gin.h requires between resets; none is ever reset.
constexpr ncclGinSignal_t kSignalPingPong = 0;  // one increment per ping-pong message
constexpr ncclGinSignal_t kSignalAlltoall = 1;  // one per chunk received
constexpr ncclGinSignal_t kSignalBarrier = 2;   // one per peer per bounded barrier
constexpr int kSignalCount = 4;                 // the fourth is spare

// What each signal has been waited up to, in device memory across kernels. A kernel starts
// from here rather than from gin.readSignal: a peer's put can land before this rank's kernel
// starts, and a value read then would already count it.
struct SignalBook {
  uint64_t expected[kSignalCount];
};

enum DeviceError : int { kDeviceOk = 0, kDeviceSignalTimeout = 1, kDeviceBarrierTimeout = 2 };

struct DeviceStatus {
  int error;                                // DeviceError
  long long iteration;                      // where it happened (-1: the barrier before the loop)
  unsigned long long expected;              // the signal value waited for
  unsigned long long seen;                  // and the last one read
  unsigned long long mismatches;            // ping-pong words that were not this round's tag
  unsigned long long t_start_ns, t_end_ns;  // %globaltimer around the timed iterations
};

struct PingPongArgs {
  ncclDevComm dev;
  ncclWindow_t send_win, recv_win;
  uint64_t* send_words;  // the same memory as the windows, this rank's view
  uint64_t* recv_words;
  size_t bytes;
  uint64_t first_round;  // tags of this launch: first_round .. first_round+warmup+iters-1
  int warmup, iters;
  unsigned long long* samples;  // nullptr, or iters round-trip times (ns; rank 0)
  unsigned long long wait_ns;
  bool nccl_barrier;
  SignalBook* book;
  DeviceStatus* status;
};

struct AlltoallArgs {
  ncclDevComm dev;
  ncclWindow_t send_win, recv_win;
  size_t chunk;  // bytes to each rank; rank r's chunk sits at r*chunk in both windows
  int iters;
  unsigned long long wait_ns;
  bool nccl_barrier;
  SignalBook* book;
  DeviceStatus* status;
};

constexpr int kAlltoallThreads = 32;  // one CTA: railGinBarrierCount = 1

// book->expected[] = the signals' values now. Only while no peer can be putting (the host makes
// sure: right after ncclDevCommCreate, before an all-reduce that both ranks wait for).
cudaError_t launch_read_signals(const ncclDevComm& dev, SignalBook* book, cudaStream_t s);
cudaError_t launch_pingpong(const PingPongArgs& a, cudaStream_t s);
cudaError_t launch_alltoall(const AlltoallArgs& a, cudaStream_t s);

}  // namespace gin_nccl
