// libxport: a GPU-aware, multi-rail RDMA transport over libfabric. Include this one header.
#pragma once

#include "xport/deadline.hpp"
#include "xport/knobs.hpp"
#include "xport/log.hpp"
#include "xport/status.hpp"

namespace xport {

// The library version, "major.minor.patch".
const char* version();

}  // namespace xport
