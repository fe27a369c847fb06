// GPU-initiated one-sided operations (issue 15): kernels put descriptors on the proxy ring
// (xport/gpu_ring.hpp) in page-locked host memory mapped into the GPU; the host proxy takes
// them off in order and executes them through Window (docs/semantics.md, "GPU-initiated
// operations"). Every wait has a deadline in clock cycles and reads the ring's abort word, so
// a kernel never spins for ever: a wait that passes its deadline sets Abort::timeout, which the
// host reads.
//
// Scopes: the plain calls are per thread. Every call also comes at warp and block scope,
// `call<Scope::warp>(...)` / `call<Scope::block>(...)` with the same arguments: made by every lane
// of a warp (or thread of a block), issued once (lane 0, thread 0), its result given to all.
// put_warp/put_block/quiet_warp/quiet_block are the same as put<Scope::warp> ... .
#pragma once

#include <stdint.h>

#include "xport/gpu_ring.hpp"

namespace xport::device {

// The ring as kernels see it (GpuProxy::ring()).
using Ring = gpu_ring::DeviceRing;

// Negative results: a ring error. -1: aborted (read the host's error), -2: this wait timed out.
enum : int64_t { kAborted = -1, kTimedOut = -2 };

__device__ inline uint64_t load_volatile(const uint64_t* p) {
  return *reinterpret_cast<const volatile uint64_t*>(p);
}
__device__ inline uint32_t abort_word(const Ring& r) {
  return *reinterpret_cast<const volatile uint32_t*>(&r.header->abort);
}
__device__ inline void set_timeout(const Ring& r) {
  atomicCAS_system(reinterpret_cast<unsigned int*>(&r.header->abort), 0u,
                   static_cast<unsigned int>(gpu_ring::Abort::timeout));
}

// Takes a slot, waits for its room, fills it, and returns its position (the ticket), or
// kAborted / kTimedOut. `deadline_cycles`: how long to wait for room (clock64 cycles).
__device__ inline int64_t push(const Ring& r, gpu_ring::Descriptor d, uint64_t deadline_cycles) {
  if (abort_word(r) != 0) return kAborted;
  const uint64_t pos = atomicAdd(r.head, 1ull);
  const uint64_t start = clock64();
  while (pos - load_volatile(&r.header->tail) >= r.capacity) {
    if (abort_word(r) != 0) return kAborted;
    if (static_cast<uint64_t>(clock64()) - start > deadline_cycles) {
      set_timeout(r);  // the slot is reserved for good: the ring cannot go on
      return kTimedOut;
    }
  }
  gpu_ring::Descriptor* slot = &r.slots[pos & (r.capacity - 1)];
  // The body, then a system-wide fence, then the lap flag: the host reads the flag first.
  const uint64_t* src = reinterpret_cast<const uint64_t*>(&d);
  volatile uint64_t* dst = reinterpret_cast<volatile uint64_t*>(slot);
  for (int i = 1; i < 8; ++i) dst[i] = src[i];
  volatile uint32_t* words = reinterpret_cast<volatile uint32_t*>(slot);
  words[1] = reinterpret_cast<const uint32_t*>(&d)[1];  // op, signal_op, weak, reserved0
  __threadfence_system();
  words[0] = gpu_ring::lap_of(pos, r.capacity);
  return static_cast<int64_t>(pos);
}

// Until the operation at `ticket` (and every one before it) is complete at the host's level:
// local for puts, delivered/applied for quiet. 0, or kAborted / kTimedOut.
__device__ inline int wait_local(const Ring& r, int64_t ticket, uint64_t deadline_cycles) {
  if (ticket < 0) return static_cast<int>(ticket);
  const uint64_t start = clock64();
  while (load_volatile(&r.header->completed) <= static_cast<uint64_t>(ticket)) {
    if (abort_word(r) != 0) return kAborted;
    if (static_cast<uint64_t>(clock64()) - start > deadline_cycles) {
      set_timeout(r);
      return kTimedOut;
    }
  }
  return 0;
}

__device__ inline gpu_ring::Descriptor describe(gpu_ring::Op op, uint16_t window,
                                                uint16_t local_region, uint64_t local_offset,
                                                uint16_t remote_region, uint64_t remote_offset,
                                                uint64_t length) {
  gpu_ring::Descriptor d{};
  d.op = static_cast<uint8_t>(op);
  d.window = window;
  d.local_region = local_region;
  d.local_offset = local_offset;
  d.remote_region = remote_region;
  d.remote_offset = remote_offset;
  d.length = length;
  return d;
}

__device__ inline gpu_ring::Descriptor with_signal(gpu_ring::Descriptor d, uint16_t signal_region,
                                                   uint64_t signal_offset, uint64_t value,
                                                   gpu_ring::SignalOp op) {
  d.signal_region = signal_region;
  d.signal_offset = signal_offset;
  d.value = value;
  d.signal_op = static_cast<uint8_t>(op);
  return d;
}

__device__ inline gpu_ring::Descriptor with_counter(gpu_ring::Descriptor d, uint16_t counter_region,
                                                    uint32_t counter_word) {
  d.counter_region = counter_region;
  d.counter_word = counter_word;
  return d;
}

__device__ inline int64_t put(const Ring& r, uint16_t window, uint16_t local_region,
                              uint64_t local_offset, uint16_t remote_region,
                              uint64_t remote_offset, uint64_t length, uint64_t deadline_cycles) {
  return push(r, describe(gpu_ring::Op::put, window, local_region, local_offset, remote_region,
                          remote_offset, length),
              deadline_cycles);
}

__device__ inline int64_t put_signal(const Ring& r, uint16_t window, uint16_t local_region,
                                     uint64_t local_offset, uint16_t remote_region,
                                     uint64_t remote_offset, uint64_t length,
                                     uint16_t signal_region, uint64_t signal_offset,
                                     uint64_t value, gpu_ring::SignalOp op,
                                     uint64_t deadline_cycles) {
  return push(r,
              with_signal(describe(gpu_ring::Op::put_signal, window, local_region, local_offset,
                                   remote_region, remote_offset, length),
                          signal_region, signal_offset, value, op),
              deadline_cycles);
}

__device__ inline int64_t signal(const Ring& r, uint16_t window, uint16_t signal_region,
                                 uint64_t signal_offset, uint64_t value, gpu_ring::SignalOp op,
                                 uint64_t deadline_cycles) {
  return push(r,
              with_signal(describe(gpu_ring::Op::signal, window, 0, 0, 0, 0, 0), signal_region,
                          signal_offset, value, op),
              deadline_cycles);
}

__device__ inline int64_t put_signal_counter(const Ring& r, uint16_t window,
                                             uint16_t local_region, uint64_t local_offset,
                                             uint16_t remote_region, uint64_t remote_offset,
                                             uint64_t length, uint16_t signal_region,
                                             uint64_t signal_offset, uint64_t value,
                                             gpu_ring::SignalOp op, uint16_t counter_region,
                                             uint32_t counter_word, uint64_t deadline_cycles) {
  return push(r,
              with_counter(with_signal(describe(gpu_ring::Op::put_signal_counter, window,
                                                local_region, local_offset, remote_region,
                                                remote_offset, length),
                                       signal_region, signal_offset, value, op),
                           counter_region, counter_word),
              deadline_cycles);
}

__device__ inline int64_t signal_counter(const Ring& r, uint16_t window, uint16_t signal_region,
                                         uint64_t signal_offset, uint64_t value,
                                         gpu_ring::SignalOp op, uint16_t counter_region,
                                         uint32_t counter_word, uint64_t deadline_cycles) {
  return push(r,
              with_counter(with_signal(describe(gpu_ring::Op::signal_counter, window, 0, 0, 0, 0, 0),
                                       signal_region, signal_offset, value, op),
                           counter_region, counter_word),
              deadline_cycles);
}

// Every operation this ring carried before it is delivered (or applied): 0, or an error.
__device__ inline int quiet(const Ring& r, uint16_t window, uint64_t deadline_cycles) {
  int64_t t = push(r, describe(gpu_ring::Op::quiet, window, 0, 0, 0, 0, 0), deadline_cycles);
  return wait_local(r, t, deadline_cycles);
}

// A signal or counter word in memory the GPU reads (mapped host memory, or GPU memory the host
// writes): until it is >= value, compared wrap-safe as on the host. 0, or an error.
__device__ inline int wait_signal(const Ring& r, const uint64_t* word, uint64_t value,
                                  uint64_t deadline_cycles) {
  const uint64_t start = clock64();
  while (static_cast<int64_t>(load_volatile(word) - value) < 0) {
    if (abort_word(r) != 0) return kAborted;
    if (static_cast<uint64_t>(clock64()) - start > deadline_cycles) {
      set_timeout(r);
      return kTimedOut;
    }
  }
  return 0;
}
__device__ inline int wait_counter(const Ring& r, const uint64_t* word, uint64_t value,
                                   uint64_t deadline_cycles) {
  return wait_signal(r, word, value, deadline_cycles);
}

// Warp and block scope: every lane (thread) calls; one issues; all get its result.
enum class Scope : uint8_t { thread, warp, block };

// `f` is called by one thread of the scope, and every thread of it returns f's result. Block
// scope: every thread of the block must call (it synchronises the block, twice).
template <Scope S, typename F>
__device__ inline auto once(F f) -> decltype(f()) {
  using T = decltype(f());
  if constexpr (S == Scope::thread) {
    return f();
  } else if constexpr (S == Scope::warp) {
    T v{};
    __syncwarp();
    if ((threadIdx.x & 31) == 0) v = f();
    return __shfl_sync(0xffffffffu, v, 0);
  } else {
    __shared__ T v;
    __syncthreads();  // every thread has read the previous call's result
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) v = f();
    __syncthreads();
    return v;
  }
}

template <Scope S>
__device__ inline int64_t put(const Ring& r, uint16_t window, uint16_t local_region,
                              uint64_t local_offset, uint16_t remote_region,
                              uint64_t remote_offset, uint64_t length, uint64_t deadline_cycles) {
  return once<S>([&] {
    return put(r, window, local_region, local_offset, remote_region, remote_offset, length,
               deadline_cycles);
  });
}
template <Scope S>
__device__ inline int64_t put_signal(const Ring& r, uint16_t window, uint16_t local_region,
                                     uint64_t local_offset, uint16_t remote_region,
                                     uint64_t remote_offset, uint64_t length,
                                     uint16_t signal_region, uint64_t signal_offset,
                                     uint64_t value, gpu_ring::SignalOp op,
                                     uint64_t deadline_cycles) {
  return once<S>([&] {
    return put_signal(r, window, local_region, local_offset, remote_region, remote_offset,
                      length, signal_region, signal_offset, value, op, deadline_cycles);
  });
}
template <Scope S>
__device__ inline int64_t signal(const Ring& r, uint16_t window, uint16_t signal_region,
                                 uint64_t signal_offset, uint64_t value, gpu_ring::SignalOp op,
                                 uint64_t deadline_cycles) {
  return once<S>([&] {
    return signal(r, window, signal_region, signal_offset, value, op, deadline_cycles);
  });
}
template <Scope S>
__device__ inline int64_t put_signal_counter(const Ring& r, uint16_t window,
                                             uint16_t local_region, uint64_t local_offset,
                                             uint16_t remote_region, uint64_t remote_offset,
                                             uint64_t length, uint16_t signal_region,
                                             uint64_t signal_offset, uint64_t value,
                                             gpu_ring::SignalOp op, uint16_t counter_region,
                                             uint32_t counter_word, uint64_t deadline_cycles) {
  return once<S>([&] {
    return put_signal_counter(r, window, local_region, local_offset, remote_region,
                              remote_offset, length, signal_region, signal_offset, value, op,
                              counter_region, counter_word, deadline_cycles);
  });
}
template <Scope S>
__device__ inline int64_t signal_counter(const Ring& r, uint16_t window, uint16_t signal_region,
                                         uint64_t signal_offset, uint64_t value,
                                         gpu_ring::SignalOp op, uint16_t counter_region,
                                         uint32_t counter_word, uint64_t deadline_cycles) {
  return once<S>([&] {
    return signal_counter(r, window, signal_region, signal_offset, value, op, counter_region,
                          counter_word, deadline_cycles);
  });
}
template <Scope S>
__device__ inline int quiet(const Ring& r, uint16_t window, uint64_t deadline_cycles) {
  return once<S>([&] { return quiet(r, window, deadline_cycles); });
}
template <Scope S>
__device__ inline int wait_local(const Ring& r, int64_t ticket, uint64_t deadline_cycles) {
  return once<S>([&] { return wait_local(r, ticket, deadline_cycles); });
}
template <Scope S>
__device__ inline int wait_signal(const Ring& r, const uint64_t* word, uint64_t value,
                                  uint64_t deadline_cycles) {
  return once<S>([&] { return wait_signal(r, word, value, deadline_cycles); });
}
template <Scope S>
__device__ inline int wait_counter(const Ring& r, const uint64_t* word, uint64_t value,
                                   uint64_t deadline_cycles) {
  return once<S>([&] { return wait_counter(r, word, value, deadline_cycles); });
}

// The names of the first warp and block calls.
__device__ inline int64_t put_warp(const Ring& r, uint16_t window, uint16_t local_region,
                                   uint64_t local_offset, uint16_t remote_region,
                                   uint64_t remote_offset, uint64_t length,
                                   uint64_t deadline_cycles) {
  return put<Scope::warp>(r, window, local_region, local_offset, remote_region, remote_offset,
                          length, deadline_cycles);
}
__device__ inline int64_t put_block(const Ring& r, uint16_t window, uint16_t local_region,
                                    uint64_t local_offset, uint16_t remote_region,
                                    uint64_t remote_offset, uint64_t length,
                                    uint64_t deadline_cycles) {
  return put<Scope::block>(r, window, local_region, local_offset, remote_region, remote_offset,
                           length, deadline_cycles);
}
__device__ inline int quiet_warp(const Ring& r, uint16_t window, uint64_t deadline_cycles) {
  return quiet<Scope::warp>(r, window, deadline_cycles);
}
__device__ inline int quiet_block(const Ring& r, uint16_t window, uint64_t deadline_cycles) {
  return quiet<Scope::block>(r, window, deadline_cycles);
}

}  // namespace xport::device
