// libxport: a GPU-aware, multi-rail RDMA transport over libfabric. Include this one header.
#pragma once

#include "xport/comm.hpp"
#include "xport/context.hpp"
#include "xport/deadline.hpp"
#include "xport/gpu_host.hpp"
#include "xport/gpu_proxy.hpp"
#include "xport/knobs.hpp"
#include "xport/log.hpp"
#include "xport/provider.hpp"
#include "xport/region.hpp"
#include "xport/stats.hpp"
#include "xport/status.hpp"
#include "xport/topology.hpp"
#include "xport/window.hpp"

namespace xport {

// The library version, "major.minor.patch".
const char* version();
// `git describe --always --dirty` of the tree the library was built from ("unknown" when it was
// not built from a git checkout).
const char* build_id();

}  // namespace xport
