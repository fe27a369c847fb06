// The live node's inputs beyond hwloc: sysfs attributes of PCI devices and RDMA ports. Split out
// so tests can point it at a fabricated sysfs tree.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "xport/topology.hpp"

namespace xport::topology {

// Link speed/width, NUMA node and local CPUs of every GPU and NIC, and the state and rate of each
// RDMA port, from `sysfs_root` (normally "/sys"). Missing files leave fields as they were.
void enrich_from_sysfs(Topology& topo, const std::string& sysfs_root);

// rail_link() reading under `sysfs_root` (normally "/sys").
RailLink rail_link_in(const std::string& sysfs_root, std::string_view rail);

// discover() after hwloc: `hwloc_xml` is hwloc's export of the live node.
Result<Topology> discover_from(std::string_view hwloc_xml, const std::vector<ProviderNic>& nics,
                               const std::string& sysfs_root);

}  // namespace xport::topology
