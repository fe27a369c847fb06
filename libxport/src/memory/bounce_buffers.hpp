// Registered bounce buffers of one endpoint (control messages and eager payloads, or the flush
// target): one allocation, one registration bound to that endpoint, fixed-size slots, a free
// list. Bounce buffers are registered for local access only: no peer can read or write them.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "fabric/objects.hpp"
#include "fabric/op_context.hpp"

namespace xport::memory {

struct Buffer {
  fabric::OpContext ctx;
  uint8_t* data = nullptr;
  uint32_t index = 0;
  bool in_use = false;
};

class BounceBuffers {
 public:
  // `type` tags every buffer's context (rx_buffer, tx_buffer or flush); `owner` and `rail` are
  // stored in it. `access`: FI_SEND | FI_RECV for messages, FI_READ for a flush target.
  static Result<std::unique_ptr<BounceBuffers>> create(fabric::Domain& domain,
                                                       fabric::Endpoint* endpoint, size_t count,
                                                       size_t size, uint64_t access,
                                                       fabric::OpType type, void* owner,
                                                       uint8_t rail);
  ~BounceBuffers();

  // Bytes `count` bounce buffers of `size` register, in whole pages as a provider that pins
  // memory locks them (create() rounds each buffer up to 64 bytes and aligns to a page).
  static size_t footprint(size_t count, size_t size);

  Buffer* take();  // nullptr when all are in use
  void give_back(Buffer* b);
  Buffer& at(uint32_t i) { return bufs_[i]; }
  size_t count() const { return bufs_.size(); }
  size_t size() const { return size_; }
  size_t available() const { return free_.size(); }
  void* desc() const { return mr_ ? mr_->desc() : nullptr; }
  // Closes the registration now (the memory stays until these buffers are destroyed).
  void close_registration() { mr_.reset(); }

 private:
  BounceBuffers() = default;
  uint8_t* mem_ = nullptr;
  size_t size_ = 0;
  std::vector<Buffer> bufs_;
  std::vector<uint32_t> free_;
  std::unique_ptr<fabric::MemoryRegistration> mr_;
};

}  // namespace xport::memory
