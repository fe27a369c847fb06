// GIN kernels of xport-gin-nccl: ping-pong (put + SignalInc each way) and alltoall (a put to
// every rank, then a barrier), with every wait bounded by %globaltimer so a lost put or signal
// ends the kernel with an error the host can print instead of hanging it.
#include <cuda/atomic>

#include "gin_kernels.cuh"
#include "gin_nccl.hpp"

namespace gin_nccl {
namespace {

__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Rolling comparison as gin.h's waits do: a count that wraps still compares right.
__device__ __forceinline__ bool reached(uint64_t seen, uint64_t least) {
  return static_cast<int64_t>(seen - least) >= 0;
}

// gin.waitSignal has no deadline. readSignal loads with acquire, so once the count is reached
// the payloads of the puts it counts are visible to this thread (gin.h: a put's signal becomes
// visible only after its payload and those of earlier puts on the context to that peer).
__device__ bool wait_signal(const ncclGin& gin, ncclGinSignal_t signal, uint64_t least,
                            unsigned long long wait_ns, uint64_t* seen) {
  const unsigned long long deadline = now_ns() + wait_ns;
  for (;;) {
    const uint64_t v = gin.readSignal(signal);
    *seen = v;
    if (reached(v, least)) return true;
    if (now_ns() > deadline) return false;
  }
}

// Received words are read at system scope: the data was written by the network path, not by
// this GPU's threads, and an L1 line from an earlier round must not answer.
__device__ __forceinline__ uint64_t load_system(uint64_t* p) {
  return cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(*p).load(cuda::memory_order_relaxed);
}

__device__ void record(DeviceStatus* st, int error, long long iteration, uint64_t expected,
                       uint64_t seen) {
  st->error = error;
  st->iteration = iteration;
  st->expected = expected;
  st->seen = seen;
}

// All ranks meet. Every thread of the CTA calls it; false once it timed out (the status says
// where). Ours signals each peer once and waits, bounded, for one signal from each; the count
// to wait for lives in the book, so no signal is ever reset.
__device__ bool barrier(const ncclGin& gin, const ncclDevComm& dev,
                        ncclGinBarrierSession<ncclCoopCta>& nccl_barrier, bool use_nccl,
                        SignalBook* book, unsigned long long wait_ns, DeviceStatus* st,
                        long long iteration, int* failed) {
  if (use_nccl) {
    nccl_barrier.sync(ncclCoopCta(), cuda::memory_order_acq_rel, ncclGinFenceLevel::Relaxed);
    return true;
  }
  if (threadIdx.x == 0) {
    const ncclTeam world = ncclTeamWorld(dev);
    for (int p = 0; p < dev.nRanks; ++p) {
      if (p != dev.rank) gin.signal(world, p, ncclGin_SignalInc{kSignalBarrier});
    }
    const uint64_t least = book->expected[kSignalBarrier] + uint64_t(dev.nRanks - 1);
    uint64_t seen = 0;
    if (wait_signal(gin, kSignalBarrier, least, wait_ns, &seen)) {
      book->expected[kSignalBarrier] = least;
    } else {
      record(st, kDeviceBarrierTimeout, iteration, least, seen);
      *failed = 1;
    }
  }
  __syncthreads();
  return *failed == 0;
}

__global__ void read_signals_kernel(ncclDevComm dev, SignalBook* book) {
  ncclGin gin{dev, 0};
  for (int i = 0; i < kSignalCount; ++i) book->expected[i] = gin.readSignal(i);
}

// One thread. Rank 0 puts `bytes` to rank 1 and waits for the reply; rank 1 waits, then puts
// back. The first and last word of each message carry the round's tag, written by the sender
// just before its put and compared by the receiver after its wait.
__global__ void pingpong_kernel(PingPongArgs a) {
  ncclGin gin{a.dev, 0};
  ncclGinBarrierSession<ncclCoopCta> nccl_barrier{ncclCoopCta(), gin, ncclTeamWorld(a.dev),
                                                  a.dev.railGinBarrier, blockIdx.x};
  __shared__ int failed;
  failed = 0;
  DeviceStatus* st = a.status;
  // Both ranks reset their buffers before this launch; the barrier keeps the peer's first put
  // behind that reset.
  if (!barrier(gin, a.dev, nccl_barrier, a.nccl_barrier, a.book, a.wait_ns, st, -1, &failed))
    return;
  const bool initiator = a.dev.rank == 0;
  const int peer = 1 - a.dev.rank;
  const ncclTeam world = ncclTeamWorld(a.dev);
  const size_t last = a.bytes / 8 - 1;
  uint64_t expect = a.book->expected[kSignalPingPong];
  unsigned long long mismatches = 0;
  unsigned long long t_start = now_ns();
  const int total = a.warmup + a.iters;
  int k = 0;
  for (; k < total; ++k) {
    const uint64_t round = a.first_round + uint64_t(k);
    if (k == a.warmup) t_start = now_ns();
    const unsigned long long t0 = now_ns();
    uint64_t seen = 0;
    if (!initiator) {
      if (!wait_signal(gin, kSignalPingPong, expect + 1, a.wait_ns, &seen)) {
        record(st, kDeviceSignalTimeout, k, expect + 1, seen);
        break;
      }
      ++expect;
      const uint64_t want = pingpong_tag(peer, round);
      mismatches += load_system(&a.recv_words[0]) != want;
      if (last > 0) mismatches += load_system(&a.recv_words[last]) != want;
    }
    // gin.h: flush makes the sources of earlier puts safe to reuse; the tags are about to be
    // rewritten in the buffer the previous put read.
    if (k > 0) gin.flush(ncclCoopThread());
    const uint64_t tag = pingpong_tag(a.dev.rank, round);
    a.send_words[0] = tag;
    a.send_words[last] = tag;
    // put() fences at system scope before handing the descriptor to the proxy (the default
    // release arguments), so the tags above travel with this put.
    gin.put(world, peer, a.recv_win, 0, a.send_win, 0, a.bytes, ncclGin_SignalInc{kSignalPingPong});
    if (initiator) {
      if (!wait_signal(gin, kSignalPingPong, expect + 1, a.wait_ns, &seen)) {
        record(st, kDeviceSignalTimeout, k, expect + 1, seen);
        break;
      }
      ++expect;
      const uint64_t want = pingpong_tag(peer, round);
      mismatches += load_system(&a.recv_words[0]) != want;
      if (last > 0) mismatches += load_system(&a.recv_words[last]) != want;
    }
    if (a.samples != nullptr && k >= a.warmup) a.samples[k - a.warmup] = now_ns() - t0;
  }
  const unsigned long long t_end = now_ns();
  if (k == total) {
    gin.flush(ncclCoopThread());  // the host rewrites the send buffer next
    a.book->expected[kSignalPingPong] = expect;
  }
  st->mismatches = mismatches;
  st->t_start_ns = t_start;
  st->t_end_ns = t_end;
}

// One CTA of kAlltoallThreads. Per iteration: thread r puts chunk r to rank r (itself included)
// at this rank's slot, thread 0 waits for nRanks chunks to arrive, all flush, then a barrier so
// no rank overwrites a slot its peer has not consumed.
__global__ void alltoall_kernel(AlltoallArgs a) {
  ncclGin gin{a.dev, 0};
  ncclGinBarrierSession<ncclCoopCta> nccl_barrier{ncclCoopCta(), gin, ncclTeamWorld(a.dev),
                                                  a.dev.railGinBarrier, blockIdx.x};
  __shared__ int failed;
  __shared__ unsigned long long t_start;
  if (threadIdx.x == 0) failed = 0;
  __syncthreads();
  DeviceStatus* st = a.status;
  const ncclTeam world = ncclTeamWorld(a.dev);
  const int n = a.dev.nRanks;
  uint64_t expect = a.book->expected[kSignalAlltoall];  // thread 0's
  bool ok = barrier(gin, a.dev, nccl_barrier, a.nccl_barrier, a.book, a.wait_ns, st, -1, &failed);
  if (threadIdx.x == 0) t_start = now_ns();
  int it = 0;
  for (; ok && it < a.iters; ++it) {
    for (int r = threadIdx.x; r < n; r += blockDim.x) {
      gin.put(world, r, a.recv_win, size_t(a.dev.rank) * a.chunk, a.send_win, size_t(r) * a.chunk,
              a.chunk, ncclGin_SignalInc{kSignalAlltoall});
    }
    if (threadIdx.x == 0) {
      uint64_t seen = 0;
      if (wait_signal(gin, kSignalAlltoall, expect + uint64_t(n), a.wait_ns, &seen)) {
        expect += uint64_t(n);
      } else {
        record(st, kDeviceSignalTimeout, it, expect + uint64_t(n), seen);
        failed = 1;
      }
    }
    __syncthreads();
    if (failed) break;
    gin.flush(ncclCoopCta());
    ok = barrier(gin, a.dev, nccl_barrier, a.nccl_barrier, a.book, a.wait_ns, st, it, &failed);
  }
  if (threadIdx.x == 0) {
    st->t_start_ns = t_start;
    st->t_end_ns = now_ns();
    if (!failed) a.book->expected[kSignalAlltoall] = expect;
  }
}

}  // namespace

cudaError_t launch_read_signals(const ncclDevComm& dev, SignalBook* book, cudaStream_t s) {
  read_signals_kernel<<<1, 1, 0, s>>>(dev, book);
  return cudaGetLastError();
}

cudaError_t launch_pingpong(const PingPongArgs& a, cudaStream_t s) {
  pingpong_kernel<<<1, 1, 0, s>>>(a);
  return cudaGetLastError();
}

cudaError_t launch_alltoall(const AlltoallArgs& a, cudaStream_t s) {
  alltoall_kernel<<<1, kAlltoallThreads, 0, s>>>(a);
  return cudaGetLastError();
}

}  // namespace gin_nccl
