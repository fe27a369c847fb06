// Registered memory: a Region is a buffer registered on every rail of a device; its remote key
// can be exported as bytes and imported by a peer as a RemoteRegion for one-sided operations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "xport/status.hpp"

namespace xport {

namespace memory {
struct RegionState;
}  // namespace memory
namespace proto {
struct RemoteKey;
}  // namespace proto
namespace api {
struct Access;
}  // namespace api
namespace gpu {
class StagedMemory;
}  // namespace gpu

// Where a Region's memory lives.
enum class MemoryType : uint8_t {
  host,  // host memory (pageable or pinned)
  cuda,  // a GPU's memory (cudaMalloc, cuMemAlloc, cuMemCreate); managed memory is refused
};

class Region {
 public:
  Region() = default;
  // The range this Region was registered for (a cached registration may cover more).
  void* base() const { return view_base_; }
  size_t length() const { return view_length_; }
  bool valid() const { return state_ != nullptr; }
  // Versioned, checksummed bytes a peer passes to Device::import_key. Empty for an invalid
  // Region, and once the device that registered it has closed (a Region may outlive its
  // Device; its key would name a device nobody can reach): import_key refuses empty bytes by
  // name.
  std::vector<uint8_t> export_key() const;
  // true when [p, p+len) lies inside this region
  bool contains(const void* p, size_t len) const;
  MemoryType memory_type() const { return type_; }
  // GPU memory the provider cannot register (or XPORT_GPU_MEMORY=staged), reached through a
  // registered host shadow (shared by the Regions of ranges inside it): arrivals are copied
  // from the shadow to the GPU, sources into staging bytes of their own in the call. False for
  // host memory and for GPU memory the provider registered itself (FI_HMEM), which the NIC
  // reaches directly (docs/semantics.md, "GPU memory").
  bool staged() const { return staged_ != nullptr; }

 private:
  friend struct api::Access;
  std::shared_ptr<memory::RegionState> state_;
  std::shared_ptr<gpu::StagedMemory> staged_;  // GPU memory through a host shadow, or null
  uint8_t* view_base_ = nullptr;
  size_t view_length_ = 0;
  MemoryType type_ = MemoryType::host;
};

// A peer's registered memory, imported from the bytes it exported: usable on windows to the
// device that registered it (and only there: keys name their device).
class RemoteRegion {
 public:
  RemoteRegion() = default;
  uint64_t length() const;

 private:
  friend struct api::Access;
  std::shared_ptr<const proto::RemoteKey> key_;
};

}  // namespace xport
