// Device (xport/context.hpp): one engine over a group of rails; registers memory (GPU memory
// placed by gpu staging or the provider), opens listeners and communicators, reports stats.
#include "api/access.hpp"
#include "core/log.hpp"
#include "gpu/staging/placement.hpp"

namespace xport {

using api::Access;

Device::~Device() = default;

const Capabilities& Device::capabilities() const { return engine_->caps(); }

std::vector<std::string> Device::rails() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < engine_->rail_count(); ++i) out.push_back(engine_->rail_name(i));
  return out;
}

Result<Region> Device::register_memory(void* buf, size_t len) {
  if (buf == nullptr || len == 0) {
    return core::error(Code::invalid_argument, "register_memory: empty buffer (", buf, ", ", len,
                       " bytes)");
  }
  // GPU memory: registered by the provider where the rails have FI_HMEM (XPORT_GPU_MEMORY
  // allowing), else a host shadow is registered in its place.
  XPORT_ASSIGN_OR_RETURN(auto placed, gpu::place(buf, len, engine_->caps().hmem_enabled));
  auto& staged = placed.staged;
  // (a range inside a larger staged range is a view into its shadow)
  void* registered = staged ? staged->shadow_of(buf) : buf;
  XPORT_ASSIGN_OR_RETURN(auto state,
                         engine_->memory().register_memory(registered, len, placed.cuda_device));
  if (staged && !state->keepalive) {
    state->keepalive = staged;  // the shadow outlives its MRs
    state->staged = staged.get();
  }
  if (staged) {
    // The device's staging pool for this GPU's sources grows its page-locked part now (to this
    // Region's length, within limits), while a page-locked allocation cannot wait for a running
    // kernel that waits on this device (gpu/staging/staging_pool.hpp). Without it the pool
    // still grows, in ordinary host memory.
    auto pool = gpu::staging_pool(*engine_, staged->gpu());
    if (Status w = pool ? pool->warm(len) : Status::success(); !w.ok()) {
      XPORT_LOG(warn, "register_memory: no page-locked staging slab for GPU ", staged->gpu(),
                "'s sources (", w.to_string(), "): sources are staged through host memory");
    }
  }
  const MemoryType type =
      staged || placed.cuda_device >= 0 ? MemoryType::cuda : MemoryType::host;
  return Access::region(std::move(state), buf, len, std::move(staged), type);
}

Result<RemoteRegion> Device::import_key(std::span<const uint8_t> bytes) {
  XPORT_ASSIGN_OR_RETURN(auto key, engine_->memory().import_key(bytes));
  return Access::remote(std::move(key));
}

Result<std::unique_ptr<Listener>> Device::listen() {
  XPORT_ASSIGN_OR_RETURN(auto l, engine_->connections().listen());
  return Access::listener(engine_, l.token, std::move(l.handle));
}

Result<std::unique_ptr<SendComm>> Device::connect(const ConnectionHandle& handle,
                                                  Deadline deadline) {
  XPORT_ASSIGN_OR_RETURN(auto id, engine_->connections().connect(handle, deadline));
  return Access::comm<SendComm>(engine_, id);
}

Result<std::unique_ptr<PendingConnect>> Device::start_connect(std::span<const uint8_t> handle,
                                                              Deadline deadline) {
  XPORT_ASSIGN_OR_RETURN(auto id, engine_->connections().connect_start(handle));
  return Access::pending(engine_, id, deadline);
}

Status Device::progress() { return engine_->progress(); }

Result<size_t> Device::progress_counted() { return engine_->progress_counted(); }

Stats Device::stats() const { return engine_->stats(); }

}  // namespace xport
