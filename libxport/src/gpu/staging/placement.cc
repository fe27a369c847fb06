// Where registered GPU memory goes: the provider, or a host shadow shared by the ranges inside it
// (gpu/staging/placement.hpp).
#include "gpu/staging/placement.hpp"

#include <map>
#include <mutex>
#include <utility>

#include "core/format.hpp"
#include "core/log.hpp"
#include "gpu/driver.hpp"
#include "gpu/staging/telemetry.hpp"

namespace xport::gpu {

namespace {
// Live shadows by the start of their GPU range. No two overlap: a range inside one shares it, a
// range overlapping one otherwise is refused.
std::mutex g_shadows_mu;
std::map<uintptr_t, std::weak_ptr<gpu::StagedMemory>> g_shadows;
}  // namespace

Result<Placement> place(void* buf, size_t len, bool provider_registers_gpu) {
  gpu::Driver& d = gpu::driver();
  XPORT_ASSIGN_OR_RETURN(gpu::PointerInfo info, d.classify(buf));
  if (info.kind == gpu::MemoryKind::host) return Placement{};
  if (info.kind == gpu::MemoryKind::managed) {
    return core::error(Code::invalid_argument, "register_memory: ", buf, " is CUDA managed memory "
                       "(cudaMallocManaged), which migrates between host and GPU under the NIC: "
                       "register cudaMalloc'd or host memory instead");
  }
  const auto p = reinterpret_cast<uintptr_t>(buf);
  if (info.alloc_size != 0 &&
      (p < info.alloc_base || len > info.alloc_size || p - info.alloc_base > info.alloc_size - len)) {
    return core::error(Code::invalid_argument, "register_memory: [", buf, ", +", len,
                       ") runs past its GPU allocation [", reinterpret_cast<void*>(info.alloc_base),
                       ", +", info.alloc_size, ")");
  }
  if (provider_registers_gpu) {
    XPORT_LOG(debug, "register_memory: GPU ", info.gpu, " memory [", buf, ", +", len,
              ") registered by the provider (FI_HMEM_CUDA)");
    return Placement{nullptr, info.gpu};
  }
  std::lock_guard<std::mutex> g(g_shadows_mu);  // registration is a cold path
  for (auto it = g_shadows.begin(); it != g_shadows.end();) {
    it = it->second.expired() ? g_shadows.erase(it) : std::next(it);
  }
  // A range inside a live shadow's is a view into it: one shadow, one set of signal words, no
  // page-locked memory twice. The candidates start at or before p: the last such, and (no two
  // overlap) any starting before p + len overlap it.
  for (auto it = g_shadows.upper_bound(p + len - 1);
       it != g_shadows.begin();) {
    --it;
    auto live = it->second.lock();
    if (!live) continue;
    const auto base = reinterpret_cast<uintptr_t>(live->gpu_base());
    if (base + live->length() <= p) break;  // (the ones before end earlier still)
    if (live->contains(buf, len)) return Placement{std::move(live), -1};
    return core::error(Code::invalid_argument, "register_memory: GPU memory [", buf, ", +", len,
                       ") overlaps [", reinterpret_cast<void*>(base), ", +", live->length(),
                       "), which is registered through a host shadow, without lying inside "
                       "it: ranges inside a registered range share its shadow, so register "
                       "the covering range first (or drop every Region of [",
                       reinterpret_cast<void*>(base), ", +", live->length(), ") before)");
  }
  auto made = gpu::StagedMemory::create(d, buf, len, info);
  if (!made.ok()) return made.status().with_context("register_memory (GPU memory, host staging)");
  g_shadows[p] = *made;
  publish_staging();
  XPORT_LOG(debug, "register_memory: GPU ", info.gpu, " memory [", buf, ", +", len,
            ") staged through a host shadow at ", static_cast<void*>((*made)->shadow()));
  return Placement{std::move(made).value(), -1};
}

}  // namespace xport::gpu
