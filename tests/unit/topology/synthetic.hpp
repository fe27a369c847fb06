// Random but reproducible machines for property tests: NUMA nodes, host bridges, root ports,
// nested PCIe switches, GPUs, NICs and bystanders, built through InventoryBuilder in any order.
#pragma once

#include <algorithm>
#include <random>
#include <vector>

#include "topology/inventory.hpp"

namespace xport::topology::test {

struct SpecNode {
  enum Kind { host_bridge, bridge, gpu, nic, other } kind = other;
  int numa = 0;
  PciAddress pci;
  std::vector<SpecNode> children;
};

class SpecGenerator {
 public:
  explicit SpecGenerator(uint32_t seed) : rng_(seed) {}

  std::vector<SpecNode> machine() {
    std::vector<SpecNode> roots;
    int numa_nodes = pick(1, 4);
    int bridges = pick(1, 6);
    for (int h = 0; h < bridges; ++h) {
      SpecNode hb;
      hb.kind = SpecNode::host_bridge;
      hb.numa = pick(0, numa_nodes - 1);
      int ports = pick(1, 4);
      for (int p = 0; p < ports; ++p) {
        SpecNode root_port = port();
        root_port.children.push_back(subtree(0));
        hb.children.push_back(std::move(root_port));
      }
      if (pick(0, 3) == 0) hb.children.push_back(leaf());  // integrated device on the root bus
      roots.push_back(std::move(hb));
    }
    return roots;
  }

  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

 private:
  PciAddress next_address() {
    PciAddress a;
    a.domain = static_cast<uint32_t>(serial_ / 256);
    a.bus = static_cast<uint8_t>(serial_ % 256);
    ++serial_;
    return a;
  }
  SpecNode port() {
    SpecNode b;
    b.kind = SpecNode::bridge;
    b.pci = next_address();
    return b;
  }
  SpecNode leaf() {
    SpecNode d;
    int r = pick(0, 9);
    d.kind = r < 4 ? SpecNode::gpu : r < 8 ? SpecNode::nic : SpecNode::other;
    d.pci = next_address();
    return d;
  }
  // Below a port: a device, or a switch (upstream port with 2-4 downstream ports).
  SpecNode subtree(int level) {
    if (level >= 2 || pick(0, 2) == 0) return leaf();
    SpecNode up = port();
    int downs = pick(2, 4);
    for (int i = 0; i < downs; ++i) {
      SpecNode down = port();
      down.children.push_back(subtree(level + 1));
      up.children.push_back(std::move(down));
    }
    return up;
  }

  std::mt19937 rng_;
  int serial_ = 1;
};

// Builds `spec` into a Topology, visiting children in an order shuffled by `order_seed` (0: as is).
inline Result<Topology> build(const std::vector<SpecNode>& spec, uint32_t order_seed) {
  InventoryBuilder b(Source::hwloc_xml, /*port_pairs=*/true);
  std::mt19937 rng(order_seed);
  auto shuffled = [&](size_t n) {
    std::vector<size_t> idx(n);
    for (size_t i = 0; i < n; ++i) idx[i] = i;
    if (order_seed != 0) std::shuffle(idx.begin(), idx.end(), rng);
    return idx;
  };
  struct Walk {
    InventoryBuilder& b;
    decltype(shuffled)& order;
    Status add(const SpecNode& n, int parent) {
      int index = parent;
      if (n.kind == SpecNode::bridge) {
        DeviceFacts f;
        f.pci_class = 0x060400;
        auto r = b.add_bridge(parent, n.pci, f, PciLink{});
        if (!r.ok()) return r.status();
        index = *r;
      } else if (n.kind != SpecNode::host_bridge) {
        DeviceInfo info;
        info.facts.pci_class = n.kind == SpecNode::gpu   ? 0x030200
                               : n.kind == SpecNode::nic ? 0x020700
                                                         : 0x010802;
        info.facts.vendor = n.kind == SpecNode::gpu ? kVendorNvidia : kVendorMellanox;
        if (n.kind == SpecNode::nic) info.rdma_names.push_back("mlx5_" + n.pci.to_string());
        auto r = b.add_device(parent, n.pci, std::move(info), PciLink{});
        return r.ok() ? Status::success() : r.status();
      }
      for (size_t i : order(n.children.size())) XPORT_RETURN_IF_ERROR(add(n.children[i], index));
      return Status::success();
    }
  } walk{b, shuffled};
  for (size_t i : shuffled(spec.size())) {
    const SpecNode& hb = spec[i];
    int index = b.add_host_bridge("hb", {hb.numa}, "");
    for (size_t c : shuffled(hb.children.size()))
      XPORT_RETURN_IF_ERROR(walk.add(hb.children[c], index));
  }
  return b.finish();
}

}  // namespace xport::topology::test
