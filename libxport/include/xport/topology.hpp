// Which NICs serve which GPU: the node's PCI inventory keyed by PCI address, distance classes in
// the `nvidia-smi topo -m` sense, and a balanced NIC plan over every GPU. No libfabric in here.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "xport/status.hpp"

namespace xport::topology {

// domain:bus:device.function, the only key of a GPU or NIC (never a CUDA index).
struct PciAddress {
  uint32_t domain = 0;  // 32 bits: Intel VMD domains start at 0x10000
  uint8_t bus = 0;
  uint8_t device = 0;    // 0..31
  uint8_t function = 0;  // 0..7

  // Accepts "0000:4f:00.0", "4f:00.0" (domain 0) and "10000:01:00.0"; hex is case-insensitive.
  static Result<PciAddress> parse(std::string_view text);
  std::string to_string() const;  // "0000:4f:00.0" (domain printed with at least 4 digits)
  auto operator<=>(const PciAddress&) const = default;
};

// What is known of a PCIe link; zero means unknown.
struct PciLink {
  double gts = 0;                 // transfer rate per lane, GT/s (sysfs, NCCL XML)
  int width = 0;                  // lanes (sysfs, NCCL XML)
  double gbytes_per_s = 0;        // total bandwidth as hwloc records it, GB/s
  std::string to_string() const;  // "16 GT/s x16", "31.5 GB/s" or "" when unknown
};

// nvidia-smi's classes, best first. PIX: at most one PCIe switch between the two devices.
// PXB: several switches, no host bridge. PHB: through the host bridge (CPU root complex).
// NODE: between host bridges of one NUMA node. SYS: across NUMA nodes (SMP interconnect).
enum class Distance : uint8_t { pix, pxb, phb, node, sys };
std::string_view to_string(Distance d);  // "PIX", "PXB", "PHB", "NODE", "SYS"

// One node of the PCI tree. Host bridges are roots; NCCL's <cpu> element is read as a host bridge.
struct PciNode {
  enum class Kind : uint8_t { host_bridge, bridge, device };
  Kind kind = Kind::device;
  std::optional<PciAddress> pci;  // host bridges have none
  std::string label;              // host bridges: "0000:[10-1f]" (hwloc) or "cpu numa 0" (NCCL)
  uint32_t pci_class = 0;         // 24-bit class code (0x030200), 0 when unknown
  uint16_t vendor = 0;
  uint16_t device_id = 0;
  int parent = -1;       // index into Topology::pci; -1 for host bridges
  int host_bridge = -1;  // index of the host bridge above (itself for host bridges)
  int depth = 0;         // links below the host bridge
  // Bridges: index of the bridge standing for the PCIe switch this port belongs to (its upstream
  // port); -1 for root ports, which are part of the host bridge.
  int switch_node = -1;
  std::vector<int> numa_nodes;  // host bridges: NUMA nodes they are local to; empty: unknown
  PciLink link;
};

struct Gpu {
  PciAddress pci;
  std::string vendor;  // "nvidia", "amd", or the 4-digit vendor id
  std::string model;   // e.g. "GA100 [A100 SXM4 40GB]" when the input names it
  int numa = -1;       // -1: unknown or not a single node
  std::string cpus;    // local CPUs as a list ("0-23,48-71"), "" when unknown
  PciLink link;
  int node = -1;  // index into Topology::pci
};

struct NicPort {
  int number = 0;
  std::string state;     // "ACTIVE", "DOWN", ... ("" unknown)
  double rate_gbps = 0;  // 0 unknown
};

struct Nic {
  PciAddress pci;
  // Rail name: the libfabric domain when the caller passed one, else the RDMA device name
  // (mlx5_0, rdmap16s27), else a network interface (hsi0), else the PCI address.
  std::string name;
  std::vector<std::string> aliases;  // other OS names of the device (netdevs, ports)
  std::string kind;                  // "infiniband", "efa", "cxi", "rdma" (RoCE/iWARP), "ethernet"
  std::string provider;              // libfabric provider that reported it, "" when not given
  std::string model;
  int numa = -1;
  std::string cpus;
  PciLink link;
  std::vector<NicPort> ports;
  int node = -1;
};

// The link of one rail as the OS reports it now, for xport-probe: an RDMA device's ports
// (/sys/class/infiniband/<name>, EFA's "-rdm"/"-dgrm" domain suffixes stripped) or a network
// interface (/sys/class/net/<name>: operstate, speed). Neither: kind "" (shm, or no sysfs).
struct RailLink {
  std::string name;             // the rail (libfabric domain) name asked about
  std::string kind;             // "rdma", "netdev" or "" (nothing readable)
  std::string device;           // the sysfs name read (mlx5_0, eth0)
  std::string state;            // "ACTIVE", "DOWN"... (rdma: best port) or operstate (netdev)
  double rate_gbps = 0;         // 0: unknown (loopback and virtual interfaces report none)
  std::vector<NicPort> ports;   // rdma: every port
  bool up() const;              // ACTIVE port, or operstate "up"/"unknown" (as rails read it)
};
RailLink rail_link(std::string_view rail);

enum class Source : uint8_t { live, hwloc_xml, nccl_xml };
std::string_view to_string(Source s);  // "live", "hwloc-xml", "nccl-xml"

struct Topology {
  Source source = Source::live;
  std::vector<PciNode> pci;        // the tree, parents before children
  std::vector<Gpu> gpus;           // sorted by PCI address
  std::vector<Nic> nics;           // sorted by PCI address
  std::vector<std::string> notes;  // what the input lacked or what was skipped, for people
};

// A NIC as libfabric reports it (fi_info->domain_attr->name, fi_info->nic->bus_attr as
// "0000:4f:00.0", fi_info->fabric_attr->prov_name). The fabric layer fills these; topology never
// sees a libfabric object.
struct ProviderNic {
  std::string domain;
  std::string pci;
  std::string provider;
};

enum class Format : uint8_t { automatic, hwloc_xml, nccl_xml };

// Largest topology file accepted (bytes); larger inputs are refused before parsing.
inline constexpr size_t kMaxInputBytes = size_t{64} << 20;

// The live node: hwloc (I/O objects kept) + sysfs (link, NUMA, RDMA port state). Provider NICs
// name NICs by their libfabric domain and admit Ethernet NICs that a provider uses. An empty
// machine (no GPU, no NIC) is a success with notes saying so.
Result<Topology> discover(const std::vector<ProviderNic>& provider_nics = {});
// An hwloc XML file (`lstopo --of xml`) or an NCCL topology XML (dump or NCCL_TOPO_FILE).
Result<Topology> load_file(const std::string& path, Format format = Format::automatic);
Result<Topology> parse(std::string_view bytes, Format format = Format::automatic);

struct Path {
  Distance distance = Distance::sys;
  int hops = 0;  // PCI links on the way; breaks ties within a class
  auto operator<=>(const Path&) const = default;
};
// Between any two devices of the tree (indexes into Topology::pci).
Path path_between(const Topology& topo, int node_a, int node_b);
Path path_between(const Topology& topo, const Gpu& gpu, const Nic& nic);

struct Rail {
  size_t nic = 0;  // index into Topology::nics
  Path path;
};
struct GpuRails {
  size_t gpu = 0;           // index into Topology::gpus
  std::vector<Rail> rails;  // sorted by NIC PCI address
  bool overridden = false;  // set by XPORT_NICS
};
struct Plan {
  std::vector<GpuRails> gpus;  // one per GPU of the topology, same order
  std::string explanation;     // why the plan is empty or overridden; "" otherwise
  bool empty() const;          // no GPU has a rail
};

struct PlanOptions {
  // XPORT_NICS syntax (docs/topology.md): "mlx5_0,mlx5_1" gives every GPU these NICs;
  // "0000:53:00.0=mlx5_0+mlx5_1;0000:64:00.0=mlx5_2" sets named GPUs, others stay automatic.
  // Unset: the XPORT_NICS knob. Empty: the automatic plan.
  std::optional<std::string> nics;
};

// Every GPU's rails: the NICs of its nearest (class, hops), tied NICs shared out evenly.
// Deterministic: depends only on the topology, never on process or CUDA ordering.
Result<Plan> plan(const Topology& topo, const PlanOptions& options = {});

// Renderings for xport-topology (docs/tools.md documents the JSON shape).
std::string to_json(const Topology& topo, const Plan& plan);
std::string to_text(const Topology& topo, const Plan& plan);  // tables for people
std::string to_dot(const Topology& topo, const Plan& plan);   // Graphviz

}  // namespace xport::topology
