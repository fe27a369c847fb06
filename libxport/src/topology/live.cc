// The live node: hwloc (I/O objects kept, GPU-runtime backends off so nothing initializes CUDA or
// ROCm here) exported to XML and read by the same importer as hwloc files, then completed from
// sysfs: PCIe link speed/width, NUMA node, and rdma-core's port state and rate.
#include <hwloc.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/format.hpp"
#include "core/log.hpp"
#include "topology/importers.hpp"
#include "topology/live.hpp"

namespace xport::topology {
namespace {

namespace fs = std::filesystem;

// First line of a small sysfs file, or "" when it cannot be read.
std::string read_line(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  if (line.size() > 4096) line.resize(4096);
  return line;
}

std::vector<fs::path> list_dir(const fs::path& p) {
  std::vector<fs::path> out;
  std::error_code ec;
  fs::directory_iterator it(p, ec), end;
  for (; !ec && it != end; it.increment(ec)) out.push_back(it->path());
  std::sort(out.begin(), out.end());
  return out;
}

void read_pci_attributes(const fs::path& dev, PciLink& link, int& numa, std::string& cpus) {
  std::string speed = read_line(dev / "current_link_speed");  // "16.0 GT/s PCIe" or "Unknown"
  std::string width = read_line(dev / "current_link_width");
  if (double gts = parse_number_prefix(speed, 1e4); gts > 0) link.gts = gts;
  if (auto w = parse_uint(width, 64); w && *w > 0) link.width = *w;
  if (numa < 0) {
    std::string n = read_line(dev / "numa_node");
    if (auto v = parse_uint(n, 1 << 20)) numa = *v;
  }
  if (cpus.empty()) cpus = read_line(dev / "local_cpulist");
}

// rdma-core's sysfs: infiniband/<dev>/ports/<n>/state = "4: ACTIVE", rate = "100 Gb/sec (4X EDR)".
void read_ports(const fs::path& dev, Nic& nic) {
  std::vector<NicPort> ports;
  for (const fs::path& ibdev : list_dir(dev / "infiniband")) {
    for (const fs::path& port : list_dir(ibdev / "ports")) {
      auto number = parse_uint(port.filename().string(), 255);
      if (!number) continue;
      NicPort p;
      p.number = *number;
      std::string state = read_line(port / "state");
      size_t colon = state.find(':');
      p.state = colon == std::string::npos ? state : state.substr(colon + 1);
      while (!p.state.empty() && p.state.front() == ' ') p.state.erase(0, 1);
      p.rate_gbps = parse_number_prefix(read_line(port / "rate"), 1e6);
      ports.push_back(p);
    }
  }
  if (!ports.empty()) nic.ports = std::move(ports);
}

}  // namespace

void enrich_from_sysfs(Topology& topo, const std::string& sysfs_root) {
  const fs::path devices = fs::path(sysfs_root) / "bus" / "pci" / "devices";
  for (Gpu& g : topo.gpus) read_pci_attributes(devices / g.pci.to_string(), g.link, g.numa, g.cpus);
  for (Nic& n : topo.nics) {
    read_pci_attributes(devices / n.pci.to_string(), n.link, n.numa, n.cpus);
    read_ports(devices / n.pci.to_string(), n);
  }
  // RDMA devices hwloc did not place (e.g. hwloc built without its Linux I/O support).
  for (const fs::path& ib : list_dir(fs::path(sysfs_root) / "class" / "infiniband")) {
    std::error_code ec;
    fs::path target = fs::canonical(ib / "device", ec);
    if (ec) continue;
    auto pci = PciAddress::parse(target.filename().string());
    if (!pci.ok()) continue;
    bool known = false;
    for (const Nic& n : topo.nics) known |= n.pci == *pci;
    if (!known)
      topo.notes.push_back(core::str("RDMA device ", ib.filename().string(), " (PCI ",
                                     pci->to_string(),
                                     ") is not in hwloc's PCI tree: not planned"));
  }
}

Result<Topology> discover_from(std::string_view hwloc_xml, const std::vector<ProviderNic>& nics,
                               const std::string& sysfs_root) {
  auto doc = xml::parse(hwloc_xml);
  if (!doc.ok()) return doc.status().with_context("reading hwloc's export of this node");
  XPORT_ASSIGN_OR_RETURN(Topology topo, import_hwloc(*doc, Source::live, nics));
  enrich_from_sysfs(topo, sysfs_root);
  if (topo.gpus.empty() || topo.nics.empty()) {
    size_t devices = 0;
    for (const PciNode& n : topo.pci) devices += n.kind == PciNode::Kind::device;
    std::string missing;
    if (topo.gpus.empty()) missing = "a GPU (an NVIDIA or AMD 3D, display or accelerator function)";
    if (topo.nics.empty())
      missing += std::string(missing.empty() ? "" : " or ") +
                 "an RDMA-capable NIC (InfiniBand, EFA, Slingshot, or an Ethernet function with an "
                 "rdma-core device, or one libfabric names)";
    topo.notes.push_back(
        core::str("hwloc lists ", devices, " PCI devices on this node; none is ", missing));
  }
  return topo;
}

Result<Topology> discover(const std::vector<ProviderNic>& provider_nics) {
  hwloc_topology_t t = nullptr;
  if (hwloc_topology_init(&t) != 0)
    return core::error(Code::resource, "hwloc_topology_init failed");
  struct Closer {
    hwloc_topology_t t;
    ~Closer() { hwloc_topology_destroy(t); }
  } closer{t};
  // PCI devices and OS devices are all kept (a GPU or NIC class hwloc deems unimportant must not
  // vanish); bridges only where they lead somewhere.
  hwloc_topology_set_type_filter(t, HWLOC_OBJ_PCI_DEVICE, HWLOC_TYPE_FILTER_KEEP_ALL);
  hwloc_topology_set_type_filter(t, HWLOC_OBJ_OS_DEVICE, HWLOC_TYPE_FILTER_KEEP_ALL);
  hwloc_topology_set_type_filter(t, HWLOC_OBJ_BRIDGE, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
#if HWLOC_API_VERSION >= 0x00020100
  // GPU classes come from PCI ids; these backends would initialize CUDA/ROCm in the caller.
  // "pci" is libpciaccess, which leaks on every load; Linux's own sysfs discovery reads the same
  // PCI tree without it.
  for (const char* backend : {"cuda", "nvml", "opencl", "rsmi", "levelzero", "gl", "pci"})
    (void)hwloc_topology_set_components(t, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, backend);
#endif
  if (hwloc_topology_load(t) != 0)
    return core::error(Code::internal,
                       "hwloc could not read this node's topology: ", std::strerror(errno));
  char* buffer = nullptr;
  int length = 0;
  if (hwloc_topology_export_xmlbuffer(t, &buffer, &length, 0) != 0 || buffer == nullptr)
    return core::error(Code::internal, "hwloc could not export this node's topology as XML");
  std::string xml_text(buffer, length > 0 ? static_cast<size_t>(length) : 0);
  hwloc_free_xmlbuffer(t, buffer);
  while (!xml_text.empty() && xml_text.back() == '\0') xml_text.pop_back();
  auto topo = discover_from(xml_text, provider_nics, "/sys");
  if (topo.ok())
    XPORT_LOG(debug, "topology: live node has ", topo->gpus.size(), " GPUs and ", topo->nics.size(),
              " NICs");
  return topo;
}

}  // namespace xport::topology
