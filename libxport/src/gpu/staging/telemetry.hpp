// GPU layer -> telemetry: the process's staging counters (one gpu_staging block per CUDA device
// that ever had a shadow) and one gpu_proxy block per running GpuProxy (docs/metrics.md, "GPU").
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "telemetry/segment_format.hpp"
#include "xport/gpu_proxy.hpp"

namespace xport::gpu {

// Registers the staging source with the process publisher, once per process (later calls do
// nothing); called when the first shadow is made.
void publish_staging();

// The blocks themselves (tests build them directly).
void append_staging_blocks(std::vector<telemetry::BlockRecord>& out);
void append_proxy_block(const GpuProxyStats& stats, int proxy, int gpu,
                        std::vector<telemetry::BlockRecord>& out);

// Publishes a proxy's stats while the returned handle lives (nullptr: telemetry is off). The
// proxy label is the lowest ordinal free in the process. `read` runs on the publisher thread.
std::shared_ptr<void> attach_proxy_telemetry(std::function<GpuProxyStats()> read, int gpu);

}  // namespace xport::gpu
