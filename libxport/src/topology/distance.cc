// Distance classes as nvidia-smi reports them. Switches, not bridge objects, are counted: hwloc
// lists every PCIe port (a switch is an upstream port plus its downstream ports) while NCCL keeps
// one node per switch; InventoryBuilder maps both to PciNode::switch_node.
#include "topology/distance.hpp"

#include <algorithm>

namespace xport::topology {

std::string_view to_string(Distance d) {
  switch (d) {
    case Distance::pix:
      return "PIX";
    case Distance::pxb:
      return "PXB";
    case Distance::phb:
      return "PHB";
    case Distance::node:
      return "NODE";
    case Distance::sys:
      return "SYS";
  }
  return "?";
}

namespace {

bool disjoint(const std::vector<int>& a, const std::vector<int>& b) {
  // Both sorted; an unknown (empty) set is taken as local to everything: no SYS without proof.
  if (a.empty() || b.empty()) return false;
  for (int x : a)
    if (std::binary_search(b.begin(), b.end(), x)) return false;
  return true;
}

}  // namespace

Path path_between(const Topology& topo, int node_a, int node_b) {
  const auto& pci = topo.pci;
  if (node_a < 0 || node_b < 0 || static_cast<size_t>(node_a) >= pci.size() ||
      static_cast<size_t>(node_b) >= pci.size())
    return Path{Distance::sys, 1 << 20};
  if (node_a == node_b) return Path{Distance::pix, 0};
  const PciNode& a = pci[static_cast<size_t>(node_a)];
  const PciNode& b = pci[static_cast<size_t>(node_b)];
  if (a.host_bridge != b.host_bridge) {
    const PciNode& ha = pci[static_cast<size_t>(a.host_bridge)];
    const PciNode& hb = pci[static_cast<size_t>(b.host_bridge)];
    // One CPU-side link between host bridges of a NUMA node; two across the SMP interconnect.
    if (disjoint(ha.numa_nodes, hb.numa_nodes)) return Path{Distance::sys, a.depth + b.depth + 2};
    return Path{Distance::node, a.depth + b.depth + 1};
  }
  // Lowest common ancestor.
  int x = node_a, y = node_b;
  while (pci[static_cast<size_t>(x)].depth > pci[static_cast<size_t>(y)].depth)
    x = pci[static_cast<size_t>(x)].parent;
  while (pci[static_cast<size_t>(y)].depth > pci[static_cast<size_t>(x)].depth)
    y = pci[static_cast<size_t>(y)].parent;
  while (x != y) {
    x = pci[static_cast<size_t>(x)].parent;
    y = pci[static_cast<size_t>(y)].parent;
  }
  const int lca = x;
  const PciNode& top = pci[static_cast<size_t>(lca)];
  int hops = a.depth + b.depth - 2 * top.depth;
  // Meeting at the host bridge or a root port means going through the root complex.
  if (top.kind != PciNode::Kind::bridge || top.switch_node < 0) return Path{Distance::phb, hops};
  int switches[2] = {-1, -1};  // two distinct switches already make it PXB
  int count = 0;
  auto add = [&](int n) {
    const PciNode& p = pci[static_cast<size_t>(n)];
    if (p.kind != PciNode::Kind::bridge || p.switch_node < 0) return;
    for (int i = 0; i < count; ++i)
      if (switches[i] == p.switch_node) return;
    if (count < 2) switches[count++] = p.switch_node;
  };
  for (int n = node_a; n != lca;) {
    n = pci[static_cast<size_t>(n)].parent;
    add(n);
  }
  if (node_b != lca) {
    for (int n = b.parent; n != lca; n = pci[static_cast<size_t>(n)].parent) add(n);
  }
  return Path{count <= 1 ? Distance::pix : Distance::pxb, hops};
}

Path path_between(const Topology& topo, const Gpu& gpu, const Nic& nic) {
  return path_between(topo, gpu.node, nic.node);
}

Nearest nearest_nics(const Topology& topo, size_t gpu) {
  Nearest best;
  for (size_t n = 0; n < topo.nics.size(); ++n) {
    Path p = path_between(topo, topo.gpus[gpu], topo.nics[n]);
    if (best.nics.empty() || p < best.path) {
      best.path = p;
      best.nics.assign(1, n);
    } else if (p == best.path) {
      best.nics.push_back(n);
    }
  }
  return best;
}

}  // namespace xport::topology
