// GpuProxy -> telemetry: one gpu_proxy block per running GpuProxy (docs/metrics.md, "GPU").
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "telemetry/segment_format.hpp"
#include "xport/gpu_proxy.hpp"

namespace xport::gpu {

// The block itself (tests build it directly).
void append_proxy_block(const GpuProxyStats& stats, int proxy, int gpu,
                        std::vector<telemetry::BlockRecord>& out);

// Publishes a proxy's stats while the returned handle lives (nullptr: telemetry is off). The
// proxy label is the lowest ordinal free in the process. `read` runs on the publisher thread.
std::shared_ptr<void> attach_proxy_telemetry(std::function<GpuProxyStats()> read, int gpu);

}  // namespace xport::gpu
