// Bounce buffers: allocation, registration and the free list (bounce_buffers.hpp).
#include "memory/bounce_buffers.hpp"

#include <cstdlib>
#include <cstring>

namespace xport::memory {

Result<std::unique_ptr<BounceBuffers>> BounceBuffers::create(fabric::Domain& domain,
                                                             fabric::Endpoint* endpoint,
                                                             size_t count, size_t size,
                                                             uint64_t access, fabric::OpType type,
                                                             void* owner, uint8_t rail) {
  auto buffers = std::unique_ptr<BounceBuffers>(new BounceBuffers());
  buffers->size_ = (size + 63) & ~size_t{63};
  const size_t total = buffers->size_ * count;
  if (posix_memalign(reinterpret_cast<void**>(&buffers->mem_), 4096, total) != 0) {
    return core::error(Code::resource, "cannot allocate ", total, " bytes of bounce buffers");
  }
  std::memset(buffers->mem_, 0, total);
  auto mr = fabric::MemoryRegistration::create(domain, buffers->mem_, total, access, endpoint);
  if (!mr.ok()) return mr.status().with_context("registering bounce buffers");
  buffers->mr_ = std::move(mr).value();
  buffers->bufs_.resize(count);
  buffers->free_.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    Buffer& b = buffers->bufs_[i];
    b.data = buffers->mem_ + i * buffers->size_;
    b.index = static_cast<uint32_t>(i);
    b.ctx.type = type;
    b.ctx.index = static_cast<uint32_t>(i);
    b.ctx.owner = owner;
    b.ctx.rail = rail;
    buffers->free_.push_back(static_cast<uint32_t>(count - 1 - i));
  }
  return buffers;
}

size_t BounceBuffers::footprint(size_t count, size_t size) {
  constexpr size_t kPage = 4096;
  const size_t total = ((size + 63) & ~size_t{63}) * count;
  return (total + kPage - 1) / kPage * kPage;
}

BounceBuffers::~BounceBuffers() {
  mr_.reset();  // the registration closes before the memory goes
  std::free(mem_);
}

Buffer* BounceBuffers::take() {
  if (free_.empty()) return nullptr;
  Buffer* b = &bufs_[free_.back()];
  free_.pop_back();
  b->in_use = true;
  return b;
}

void BounceBuffers::give_back(Buffer* b) {
  if (!b->in_use) return;
  b->in_use = false;
  free_.push_back(b->index);
}

}  // namespace xport::memory
