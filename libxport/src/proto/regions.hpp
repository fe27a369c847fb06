// MemoryCalls: the memory calls of the public API (registering a buffer, exporting and
// importing keys) and the check of a caller's buffer against its registration that the other
// facades make; over the registry (memory/registry.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "proto/device_state.hpp"

namespace xport::proto {

// A caller's buffer as the public API names it: inside the range of a Region.
struct LocalBuffer {
  const RegionRef* region = nullptr;
  const uint8_t* view_base = nullptr;  // the Region's range (a cached registration may cover more)
  size_t view_length = 0;
};

class MemoryCalls {
 public:
  // `owner`: the engine, which each registration holds (and which closes it).
  MemoryCalls(DeviceState& state, memory::RegionOwner& owner) : state_(state), owner_(owner) {}
  // The owner's own handle, which registrations hold: set once it exists (Engine::open).
  void bind(std::weak_ptr<memory::RegionOwner> self) { self_ = std::move(self); }

  // cuda_device >= 0: GPU memory the provider registers itself (FI_HMEM_CUDA).
  Result<RegionRef> register_memory(void* buf, size_t len, int cuda_device = -1);
  Result<RemoteKey> import_key(std::span<const uint8_t> bytes) const;
  std::vector<uint8_t> export_key(const LocalBuffer& region) const;

  // `buf`..+len inside `region`, a Region of this device; else an error naming `what`.
  Status check_local(const LocalBuffer& region, const void* buf, size_t len,
                     const char* what) const;
  // A registration made through this device.
  bool owns(const memory::RegionState& r) const { return r.owner.get() == &owner_; }

 private:
  DeviceState& state_;  // (the lock is taken in const calls too)
  memory::RegionOwner& owner_;
  std::weak_ptr<memory::RegionOwner> self_;
};

}  // namespace xport::proto
