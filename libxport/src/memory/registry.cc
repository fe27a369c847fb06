// Registering caller memory on every rail, through the MR cache.
#include "memory/registry.hpp"

#include "core/format.hpp"

namespace xport::memory {

Registry::Registry(std::vector<Rail> rails, uint64_t device_token)
    : rails_(std::move(rails)), device_token_(device_token) {}

Result<RegionRef> Registry::acquire(void* buf, size_t len,
                                    const std::shared_ptr<RegionOwner>& owner,
                                    std::vector<RegionRef>& graveyard, int cuda_device) {
  if (auto cached = cache_.find(buf, len, graveyard)) {
    if (cached->cuda_device == cuda_device) return cached;
    graveyard.push_back(std::move(cached));  // the same addresses named as other memory
  }
  auto state = std::make_shared<RegionState>();
  state->base = static_cast<uint8_t*>(buf);
  state->length = len;
  state->virt_addr = (rails_[0].domain->mr_mode() & FI_MR_VIRT_ADDR) != 0;
  state->device_token = device_token_;
  state->cuda_device = cuda_device;
  const uint64_t access =
      FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  for (const Rail& r : rails_) {
    auto mr = fabric::MemoryRegistration::create(*r.domain, buf, len, access, r.bind, cuda_device);
    if (!mr) return mr.status().with_context(core::str("register_memory on rail ", r.domain->name()));
    state->mrs.push_back(std::move(mr).value());
  }
  state->owner = owner;
  registrations_ += 1;
  registered_bytes_ += len;
  cache_.insert(buf, state);
  if (!state->mrs.empty()) by_key_[state->mrs[0]->key()] = state.get();
  return state;
}

RegionState* Registry::find_by_key(uint64_t key) const {
  auto it = by_key_.find(key);
  return it != by_key_.end() ? it->second : nullptr;
}

void Registry::release(RegionState& r) {
  cache_.erase(r.base, &r);
  if (!r.mrs.empty()) {
    auto it = by_key_.find(r.mrs[0]->key());
    if (it != by_key_.end() && it->second == &r) by_key_.erase(it);
  }
  r.mrs.clear();
  registrations_ -= 1;
  registered_bytes_ -= r.length;
}

}  // namespace xport::memory
