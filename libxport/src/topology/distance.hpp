// Distances between devices of the PCI tree, and each GPU's nearest NIC set (the candidates the
// plan shares out).
#pragma once

#include <cstddef>
#include <vector>

#include "xport/topology.hpp"

namespace xport::topology {

struct Nearest {
  Path path;                 // class and hops of the nearest NICs
  std::vector<size_t> nics;  // indexes into Topology::nics, ascending (so by PCI address)
};

// Empty `nics` when the topology has no NIC.
Nearest nearest_nics(const Topology& topo, size_t gpu);

}  // namespace xport::topology
