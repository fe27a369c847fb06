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

namespace proto {
class Engine;
struct RegionState;
}  // namespace proto

class Region {
 public:
  Region() = default;
  // The range this Region was registered for (a cached registration may cover more).
  void* base() const { return view_base_; }
  size_t length() const { return view_length_; }
  bool valid() const { return state_ != nullptr; }
  // Versioned, checksummed bytes a peer passes to Device::import_key.
  std::vector<uint8_t> export_key() const;
  // true when [p, p+len) lies inside this region
  bool contains(const void* p, size_t len) const;

 private:
  friend class proto::Engine;
  std::shared_ptr<proto::RegionState> state_;
  uint8_t* view_base_ = nullptr;
  size_t view_length_ = 0;
};

class RemoteRegion {
 public:
  RemoteRegion() = default;
  uint64_t length() const { return length_; }

 private:
  friend class proto::Engine;
  bool virt_addr_ = false;
  uint64_t base_ = 0;
  uint64_t length_ = 0;
  uint64_t mr_offset_ = 0;  // offset of base_ in its registration (offset-addressed providers)
  std::vector<uint64_t> keys_;
};

}  // namespace xport
