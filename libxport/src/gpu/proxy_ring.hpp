// Both ends of the GPU proxy ring (xport/gpu_ring.hpp) on the host: the consumer the proxy
// thread drains it with, and a CPU producer that follows the kernels' protocol (xport/
// device.cuh) for host-side producers and the ring's tests. The ring's memory belongs to the
// caller: page-locked and mapped into the GPU for kernels, any host memory otherwise.
#pragma once

#include <cstddef>
#include <cstdint>

#include "xport/deadline.hpp"
#include "xport/gpu_ring.hpp"
#include "xport/status.hpp"

namespace xport::gpu {

// Initialises the ring in [mem, mem + gpu_ring::ring_bytes(capacity)) (capacity: a power of
// two, at least 2); `mem` 64-byte aligned.
Status init_ring(void* mem, uint32_t capacity);

class RingConsumer {
 public:
  // Over a ring init_ring() set up; one consumer per ring.
  static Result<RingConsumer> attach(void* mem);

  // Up to `max` descriptors filled at the tail, copied out in order; their slots are free again
  // when it returns. Never blocks. A descriptor whose op is none (a producer gave up) is skipped.
  size_t poll(gpu_ring::Descriptor* out, size_t max);
  // The first `n` more descriptors (in ring order) are complete: kernels waiting on them go on.
  void complete(uint64_t n);
  // Stops every producer and waiter (they read `why`).
  void abort(gpu_ring::Abort why);
  gpu_ring::Abort aborted() const;

  uint64_t taken() const { return next_; }  // descriptors taken off the ring (the thread's)
  // Slots filled but not yet taken: a snapshot any thread may take (telemetry).
  uint64_t queued() const;
  uint64_t completed() const;
  uint32_t capacity() const { return header_->capacity; }

 private:
  RingConsumer(gpu_ring::Header* h, gpu_ring::Descriptor* slots) : header_(h), slots_(slots) {}
  gpu_ring::Header* header_;
  gpu_ring::Descriptor* slots_;
  uint64_t next_ = 0;
};

class RingProducer {
 public:
  static Result<RingProducer> attach(void* mem);
  // Takes a slot and fills it; its position (the ticket kernels wait on). When the ring stays
  // full past the deadline the ring is aborted with Abort::timeout (a reserved slot can never
  // be handed back) and Code::timeout returned; an aborted ring gives Code::closed.
  Result<uint64_t> push(const gpu_ring::Descriptor& d, Deadline deadline);
  // Until the descriptor at `position` is complete, the deadline passes (Code::timeout) or the
  // ring is aborted (Code::closed).
  Status wait_completed(uint64_t position, Deadline deadline);

 private:
  RingProducer(gpu_ring::Header* h, gpu_ring::Descriptor* slots) : header_(h), slots_(slots) {}
  Status stopped() const;
  gpu_ring::Header* header_;
  gpu_ring::Descriptor* slots_;
};

}  // namespace xport::gpu
