// The process's staging counters (gpu/staging_counters.hpp): static storage, never freed, so a
// telemetry source may read them at any time.
#include "gpu/staging_counters.hpp"

#include <algorithm>

namespace xport::gpu {

StagingCounters& staging_counters(int gpu) {
  static StagingCounters counters[kCountedGpus];
  return counters[std::clamp(gpu, 0, kCountedGpus - 1)];
}

}  // namespace xport::gpu
