// Publishes a Device's counters through the process's telemetry publisher: Device keeps the
// returned handle; dropping it unregisters (after a snapshot in progress finishes).
#pragma once

#include <memory>

#include "xport/provider.hpp"

namespace xport::proto {
class Engine;
}

namespace xport::api {

// nullptr when publication is off (XPORT_TELEMETRY=0, or the segment could not be created) or
// when the engine was opened without locks (thread_safe = false): the publisher thread reads
// stats() concurrently with the caller, which needs the engine's mutex.
// The source holds the engine weakly; the Device must drop the handle before its engine.
std::shared_ptr<void> attach_device_telemetry(const std::shared_ptr<proto::Engine>& engine,
                                              const Capabilities& caps, bool thread_safe);

}  // namespace xport::api
