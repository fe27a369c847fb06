// Region and RemoteRegion (xport/region.hpp): a registration on every rail of a device, and a
// peer's, imported from its key.
#include "api/access.hpp"

namespace xport {

using api::Access;

std::vector<uint8_t> Region::export_key() const {
  if (!state_) return {};
  auto* engine = static_cast<proto::Engine*>(state_->owner.get());
  return engine->memory().export_key(Access::local(*this));
}

bool Region::contains(const void* p, size_t len) const {
  if (!state_) return false;
  auto a = reinterpret_cast<uintptr_t>(p);
  auto b = reinterpret_cast<uintptr_t>(view_base_);
  return a >= b && a - b <= view_length_ && len <= view_length_ - (a - b);
}

uint64_t RemoteRegion::length() const { return key_ ? key_->length : 0; }

}  // namespace xport
