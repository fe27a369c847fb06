// Where registered GPU memory goes: registered by the provider itself (FI_HMEM), or through a
// host shadow (gpu::StagedMemory) shared by every registration inside its range.
#pragma once

#include <cstddef>
#include <memory>

#include "gpu/staged_memory.hpp"
#include "xport/status.hpp"

namespace xport::gpu {

// Where [buf, buf+len) is registered: host memory as it is; GPU memory by the provider itself
// (cuda_device >= 0) when `provider_registers_gpu` (the rails have FI_HMEM), else through a
// host shadow (`staged`). An error for managed memory or a range past its GPU allocation.
// A shadow is shared by every registration of a range inside its GPU range while one lives; a
// range overlapping a live shadow's without lying inside it is refused (invalid_argument).
struct Placement {
  std::shared_ptr<gpu::StagedMemory> staged;  // GPU memory through this host shadow, or null
  int cuda_device = -1;                       // GPU memory the provider registers (FI_HMEM_CUDA)
};
Result<Placement> place(void* buf, size_t len, bool provider_registers_gpu);

}  // namespace xport::gpu
