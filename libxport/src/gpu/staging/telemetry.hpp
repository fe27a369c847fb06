// GPU staging -> telemetry: the process's staging counters, one gpu_staging block per CUDA
// device that ever had a shadow (docs/metrics.md, "GPU").
#pragma once

#include <vector>

#include "telemetry/segment_format.hpp"

namespace xport::gpu {

// Registers the staging source with the process publisher, once per process (later calls do
// nothing); called when the first shadow is made.
void publish_staging();

// The blocks themselves (tests build them directly).
void append_staging_blocks(std::vector<telemetry::BlockRecord>& out);

}  // namespace xport::gpu
