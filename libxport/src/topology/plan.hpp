// The NIC plan's parts: the balanced automatic assignment and the XPORT_NICS override.
#pragma once

#include <cstddef>
#include <string_view>
#include <utility>
#include <vector>

#include "xport/topology.hpp"

namespace xport::topology {

// Per GPU (same order as Topology::gpus), the NIC indexes of its automatic rails, ascending.
std::vector<std::vector<size_t>> balanced_rails(const Topology& topo);

struct NicsOverride {
  bool global = false;                                          // every GPU uses `all`
  std::vector<size_t> all;                                      // NIC indexes, in the order written
  std::vector<std::pair<size_t, std::vector<size_t>>> per_gpu;  // GPU index -> NIC indexes
};

// Parses the XPORT_NICS syntax against `topo`; `origin` names the source in errors.
Result<NicsOverride> parse_nics_override(const Topology& topo, std::string_view text,
                                         std::string_view origin);

}  // namespace xport::topology
