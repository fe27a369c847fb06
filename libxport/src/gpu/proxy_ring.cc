// The proxy ring's host ends (gpu/proxy_ring.hpp). Memory order: a producer writes a slot's
// fields, then its lap flag with release (kernels: __threadfence_system, then a volatile
// store); the consumer reads the lap flag with acquire, then the fields, then publishes the
// tail with release so the slot can be refilled.
#include "gpu/proxy_ring.hpp"

#include <atomic>
#include <cstring>
#include <thread>

#include "core/format.hpp"

namespace xport::gpu {

using gpu_ring::Abort;
using gpu_ring::Descriptor;
using gpu_ring::Header;

namespace {

template <typename T>
std::atomic_ref<T> at(T& v) {
  return std::atomic_ref<T>(v);
}

Result<Header*> check(void* mem) {
  if (mem == nullptr || reinterpret_cast<uintptr_t>(mem) % 64 != 0) {
    return core::error(Code::invalid_argument, "proxy ring: memory ", mem,
                       " is not 64-byte aligned");
  }
  auto* h = static_cast<Header*>(mem);
  if (h->magic != gpu_ring::kMagic || h->version != gpu_ring::kVersion) {
    return core::error(Code::protocol, "proxy ring: not a ring of version ", gpu_ring::kVersion,
                       " (magic ", h->magic, ", version ", h->version, ")");
  }
  if (h->capacity < 2 || (h->capacity & (h->capacity - 1)) != 0) {
    return core::error(Code::protocol, "proxy ring: capacity ", h->capacity,
                       " is not a power of two >= 2");
  }
  return h;
}

Descriptor* slots_of(Header* h) { return reinterpret_cast<Descriptor*>(h + 1); }

}  // namespace

Status init_ring(void* mem, uint32_t capacity) {
  if (mem == nullptr || reinterpret_cast<uintptr_t>(mem) % 64 != 0) {
    return core::error(Code::invalid_argument, "proxy ring: memory ", mem,
                       " is not 64-byte aligned");
  }
  if (capacity < 2 || (capacity & (capacity - 1)) != 0) {
    return core::error(Code::invalid_argument, "proxy ring: capacity ", capacity,
                       " is not a power of two >= 2");
  }
  std::memset(mem, 0, gpu_ring::ring_bytes(capacity));
  auto* h = static_cast<Header*>(mem);
  h->magic = gpu_ring::kMagic;
  h->version = gpu_ring::kVersion;
  h->capacity = capacity;
  std::atomic_thread_fence(std::memory_order_release);
  return Status::success();
}

Result<RingConsumer> RingConsumer::attach(void* mem) {
  XPORT_ASSIGN_OR_RETURN(Header * h, check(mem));
  RingConsumer c(h, slots_of(h));
  c.next_ = at(h->tail).load(std::memory_order_acquire);
  return c;
}

size_t RingConsumer::poll(Descriptor* out, size_t max) {
  const uint32_t cap = header_->capacity;
  size_t n = 0;
  uint64_t pos = next_;
  while (n < max) {
    Descriptor& slot = slots_[pos & (cap - 1)];
    if (at(slot.lap).load(std::memory_order_acquire) != gpu_ring::lap_of(pos, cap)) break;
    std::memcpy(&out[n], &slot, sizeof(Descriptor));
    ++pos;
    if (out[n].op != static_cast<uint8_t>(gpu_ring::Op::none)) ++n;
  }
  if (pos != next_) {
    next_ = pos;
    at(header_->tail).store(pos, std::memory_order_release);
  }
  return n;
}

uint64_t RingConsumer::queued() const {
  const uint32_t cap = header_->capacity;
  const uint64_t tail = at(header_->tail).load(std::memory_order_acquire);
  uint64_t n = 0;
  while (n < cap && at(slots_[(tail + n) & (cap - 1)].lap).load(std::memory_order_acquire) ==
                        gpu_ring::lap_of(tail + n, cap)) {
    ++n;
  }
  return n;
}

void RingConsumer::complete(uint64_t n) {
  at(header_->completed).fetch_add(n, std::memory_order_release);
}

uint64_t RingConsumer::completed() const {
  return at(header_->completed).load(std::memory_order_acquire);
}

void RingConsumer::abort(Abort why) {
  uint32_t none = 0;
  at(header_->abort).compare_exchange_strong(none, static_cast<uint32_t>(why),
                                             std::memory_order_acq_rel);
}

Abort RingConsumer::aborted() const {
  return static_cast<Abort>(at(header_->abort).load(std::memory_order_acquire));
}

Result<RingProducer> RingProducer::attach(void* mem) {
  XPORT_ASSIGN_OR_RETURN(Header * h, check(mem));
  return RingProducer(h, slots_of(h));
}

Status RingProducer::stopped() const {
  return core::error(Code::closed, "proxy ring aborted (",
                     at(header_->abort).load(std::memory_order_acquire), ")");
}

Result<uint64_t> RingProducer::push(const Descriptor& d, Deadline deadline) {
  if (at(header_->abort).load(std::memory_order_acquire) != 0) return stopped();
  const uint32_t cap = header_->capacity;
  const uint64_t pos = at(header_->head).fetch_add(1, std::memory_order_acq_rel);
  for (uint32_t spin = 0; pos - at(header_->tail).load(std::memory_order_acquire) >= cap; ++spin) {
    if (at(header_->abort).load(std::memory_order_acquire) != 0) return stopped();
    if (deadline.expired()) {
      uint32_t none = 0;
      at(header_->abort).compare_exchange_strong(none, static_cast<uint32_t>(Abort::timeout));
      return core::error(Code::timeout, "proxy ring: full (", cap, " slots) until the deadline; "
                         "the ring is aborted (a reserved slot cannot be handed back)");
    }
    if (spin > 64) std::this_thread::yield();
  }
  Descriptor& slot = slots_[pos & (cap - 1)];
  std::memcpy(reinterpret_cast<uint8_t*>(&slot) + sizeof(slot.lap),
              reinterpret_cast<const uint8_t*>(&d) + sizeof(d.lap), sizeof(Descriptor) - sizeof(d.lap));
  at(slot.lap).store(gpu_ring::lap_of(pos, cap), std::memory_order_release);
  return pos;
}

Status RingProducer::wait_completed(uint64_t position, Deadline deadline) {
  for (uint32_t spin = 0; at(header_->completed).load(std::memory_order_acquire) <= position;
       ++spin) {
    if (at(header_->abort).load(std::memory_order_acquire) != 0) return stopped();
    if (deadline.expired()) {
      return core::error(Code::timeout, "proxy ring: descriptor ", position,
                         " not complete before the deadline (",
                         at(header_->completed).load(std::memory_order_acquire), " are)");
    }
    if (spin > 64) std::this_thread::yield();
  }
  return Status::success();
}

}  // namespace xport::gpu
