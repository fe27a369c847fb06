// Building a Topology: importers add host bridges, bridges and devices as they read them; finish()
// derives depths, switches, NUMA placement, classifies GPUs and NICs and sorts by PCI address.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "topology/device_class.hpp"
#include "xport/topology.hpp"

namespace xport::topology {

// Bounds that keep hostile input from turning distance tables into hours of work.
inline constexpr size_t kMaxPciNodes = 65536;
inline constexpr size_t kMaxGpus = 512;
inline constexpr size_t kMaxNics = 512;

// Everything an input says about one PCI device.
struct DeviceInfo {
  DeviceFacts facts;
  std::string model;
  std::vector<std::string> rdma_names;  // OpenFabrics devices (mlx5_0, rdmap16s27)
  std::vector<std::string> cxi_names;   // Slingshot CXI devices (cxi0)
  std::vector<std::string> net_names;   // network interfaces (eth0, hsi0, ib0)
  std::vector<NicPort> ports;
  std::string cpus;  // local CPUs when the input gives them per device
};

class InventoryBuilder {
 public:
  // `port_pairs`: the input lists every PCIe port (hwloc, live): root ports, then upstream and
  // downstream ports of each switch. Otherwise (NCCL) each bridge element already is a switch.
  InventoryBuilder(Source source, bool port_pairs);

  int add_host_bridge(std::string label, std::vector<int> numa_nodes, std::string cpus);
  Result<int> add_bridge(int parent, std::optional<PciAddress> pci, const DeviceFacts& facts,
                         const PciLink& link);
  Result<int> add_device(int parent, const PciAddress& pci, DeviceInfo info, const PciLink& link);
  void note(std::string text);
  void set_provider_nics(const std::vector<ProviderNic>& nics) { provider_nics_ = nics; }

  Result<Topology> finish();

 private:
  Status check_parent(int parent) const;
  Status claim_address(const PciAddress& pci);

  Topology topo_;
  bool port_pairs_;
  std::vector<std::string> host_cpus_;           // per node index; set for host bridges
  std::vector<std::optional<DeviceInfo>> info_;  // per node index; devices only
  std::set<PciAddress> addresses_;               // every address seen, for duplicate checks
  std::vector<ProviderNic> provider_nics_;
};

// "0x0000ffff,0xffffffff" (hwloc) or "000000ff,ffff0000" (NCCL) -> "0-47"; "" for an empty mask.
Result<std::string> cpulist_from_mask(std::string_view mask);

}  // namespace xport::topology
