// MemoryCalls: the memory calls of the public API (registering a buffer, exporting and
// importing keys, checking a local buffer against its registration); and the engine's release
// of a registration.
#include "proto/regions.hpp"

#include <algorithm>
#include <mutex>
#include <thread>

#include "core/knob.hpp"
#include "core/log.hpp"
#include "proto/engine.hpp"

namespace xport::proto {

Result<RegionRef> MemoryCalls::register_memory(void* buf, size_t len, int cuda_device) {
  if (buf == nullptr || len == 0) {
    return core::error(Code::invalid_argument, "register_memory: empty buffer (", buf, ", ", len,
                       " bytes)");
  }
  Lock l(state_);
  std::vector<RegionRef> dropped;  // released under the lock, after the cache walk
  return state_.registry->acquire(buf, len, self_.lock(), dropped, cuda_device);
}

void Engine::release_region(memory::RegionState& r) {
  if (state_.held_by_me()) {
    // The last holder was one of the engine's own operations, under the lock already.
    state_.registry->release(r);
    return;
  }
  Lock l(state_);
  state_.registry->release(r);
}

std::vector<uint8_t> MemoryCalls::export_key(const LocalBuffer& region) const {
  Lock l(state_);
  // The device closed (its Regions outlive it): a key would name a device nobody can reach, and
  // its endpoints, whose address a key carries, are gone.
  if (state_.shut_down) return {};
  const memory::RegionState& r = **region.region;
  RemoteKey k;
  k.virt_addr = r.virt_addr;
  k.base = reinterpret_cast<uint64_t>(region.view_base);
  k.length = region.view_length;
  k.mr_offset = static_cast<uint64_t>(region.view_base - r.base);
  k.device_token = r.device_token;
  k.staged = r.staged != nullptr;
  k.device = r.cuda_device >= 0;
  for (const auto& mr : r.mrs) k.keys.push_back(mr->key());
  // How to reach this device, so that a window can be opened from the key alone (RDM).
  if (!state_.connected_endpoints()) {
    if (auto a = state_.rails[0]->control()->endpoint().address();
        a.ok() && !a->empty() && a->size() <= kMaxHandleAddressBytes) {
      k.reach = std::move(a).value();
      k.provider_hash = provider_hash(state_.caps.provider);
    }
  }
  return encode_key(k);
}

Result<RemoteKey> MemoryCalls::import_key(std::span<const uint8_t> bytes) const {
  auto k = decode_key(bytes);
  if (!k) return k.status().with_context("import_key");
  if (k->keys.size() > kMaxRails) {
    return core::error(Code::invalid_argument, "import_key: the key describes ", k->keys.size(),
                       " rails, at most ", kMaxRails, " are supported");
  }
  if (k->virt_addr != ((state_.rails[0]->domain().mr_mode() & FI_MR_VIRT_ADDR) != 0)) {
    return core::error(Code::invalid_argument,
                       "import_key: the key's addressing (virtual or offset) does not match this "
                       "provider's FI_MR_VIRT_ADDR mode: was it exported by another provider?");
  }
  return std::move(k).value();
}

Status MemoryCalls::check_local(const LocalBuffer& region, const void* buf, size_t len,
                                const char* what) const {
  if (region.region == nullptr || !*region.region) {
    return core::error(Code::invalid_argument, what, ": empty Region");
  }
  if (!owns(**region.region)) {
    return core::error(Code::invalid_argument, what,
                       ": the Region was registered on another device");
  }
  const auto a = reinterpret_cast<uintptr_t>(buf);
  const auto b = reinterpret_cast<uintptr_t>(region.view_base);
  if (a < b || a - b > region.view_length || len > region.view_length - (a - b)) {
    return core::error(Code::invalid_argument, what, ": buffer [", buf, ", +", len,
                       ") is not inside the registered region [",
                       static_cast<const void*>(region.view_base), ", +", region.view_length,
                       ")");
  }
  return Status::success();
}

}  // namespace xport::proto
