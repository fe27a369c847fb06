// Registration of caller memory on every rail of a device: RegionState (one MR per rail, bound to
// the rail's data endpoint under FI_MR_ENDPOINT), the MR cache in front of it, and the device
// token that names this device in exported keys. Not thread-safe: the engine serialises calls.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "fabric/objects.hpp"
#include "memory/mr_cache.hpp"
#include "xport/status.hpp"

namespace xport::gpu {
class StagedMemory;
}  // namespace xport::gpu

namespace xport::memory {

struct RegionState;

// Who closes a region's registrations when its last holder lets go: the engine, which must
// serialise that against its other libfabric calls (and must not take its lock twice when the
// last holder was one of its own operations).
class RegionOwner {
 public:
  virtual void release_region(RegionState& r) = 0;

 protected:
  ~RegionOwner() = default;
};

struct RegionState {
  std::shared_ptr<RegionOwner> owner;  // keeps the domains open while the registration lives
  uint8_t* base = nullptr;
  size_t length = 0;
  bool virt_addr = false;       // remote addresses are virtual (FI_MR_VIRT_ADDR) or offsets
  uint64_t device_token = 0;    // the device that registered it (exported keys carry it)
  // What the registered memory belongs to, when it must outlive the registrations (a GPU
  // region's host shadow): declared before mrs, so it is dropped after them.
  std::shared_ptr<void> keepalive;
  // GPU memory staged through this registration (its shadow), kept alive by `keepalive`: a
  // peer's writes and signals into it are copied on to the GPU (proto/one_sided/signal.cc).
  gpu::StagedMemory* staged = nullptr;
  // >= 0: GPU memory of this CUDA device, registered with the provider itself (FI_HMEM_CUDA):
  // no shadow, and nothing of libxport may touch its bytes with the CPU (no inject from it).
  int cuda_device = -1;
  std::vector<std::unique_ptr<fabric::MemoryRegistration>> mrs;  // one per rail
  RegionState() = default;
  RegionState(const RegionState&) = delete;
  RegionState& operator=(const RegionState&) = delete;
  ~RegionState() {
    if (owner) owner->release_region(*this);
  }
  // The address a peer names `p` by in RMA operations (virtual address or offset).
  uint64_t remote_address(const void* p) const {
    return virt_addr ? reinterpret_cast<uint64_t>(p)
                     : static_cast<uint64_t>(static_cast<const uint8_t*>(p) - base);
  }
  // The bytes a peer names by `address` (remote_address's inverse), where [address, +len) lies
  // inside the registration; nullptr otherwise.
  uint8_t* local_bytes(uint64_t address, uint64_t len) const {
    const auto b = reinterpret_cast<uint64_t>(base);
    if (virt_addr && address < b) return nullptr;
    const uint64_t offset = virt_addr ? address - b : address;
    if (offset > length || length - offset < len) return nullptr;
    return base + offset;
  }
  void* desc(size_t rail) const { return mrs[rail]->desc(); }
  uint64_t key(size_t rail) const { return mrs[rail]->key(); }
};
using RegionRef = std::shared_ptr<RegionState>;

class Registry {
 public:
  struct Rail {
    fabric::Domain* domain = nullptr;
    fabric::Endpoint* bind = nullptr;  // the data endpoint (FI_MR_ENDPOINT binds to it)
  };
  Registry(std::vector<Rail> rails, uint64_t device_token);

  // A registration covering [buf, buf+len): a live cached one, or a new one on every rail owned
  // by `owner`. References dropped while probing the cache are moved to `graveyard`, which the
  // caller releases once it may deregister. cuda_device >= 0: the range is memory of that GPU,
  // registered as such (FI_HMEM_CUDA) on every rail.
  Result<RegionRef> acquire(void* buf, size_t len, const std::shared_ptr<RegionOwner>& owner,
                            std::vector<RegionRef>& graveyard, int cuda_device = -1);
  // Closes r's registrations and forgets it (its owner calls this, serialised).
  void release(RegionState& r);
  // The live registration whose key on rail 0 is `key` (a peer names the target of a signal or
  // an emulated atomic by it), or nullptr.
  RegionState* find_by_key(uint64_t key) const;

  uint64_t device_token() const { return device_token_; }
  uint64_t registrations() const { return registrations_; }
  uint64_t registered_bytes() const { return registered_bytes_; }
  uint64_t cache_hits() const { return cache_.hits(); }
  uint64_t cache_misses() const { return cache_.misses(); }

 private:
  std::vector<Rail> rails_;
  uint64_t device_token_;
  MrCache<RegionState> cache_;
  std::map<uint64_t, RegionState*> by_key_;
  uint64_t registrations_ = 0;
  uint64_t registered_bytes_ = 0;
};

}  // namespace xport::memory
