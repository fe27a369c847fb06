// The inventory model's construction: tree bookkeeping, GPU/NIC classification, NUMA and CPU
// placement, and the checks that make a hostile file an error instead of a nonsense plan.
#include "topology/inventory.hpp"

#include <algorithm>
#include <cmath>

#include "core/format.hpp"

namespace xport::topology {

InventoryBuilder::InventoryBuilder(Source source, bool port_pairs) : port_pairs_(port_pairs) {
  topo_.source = source;
}

int InventoryBuilder::add_host_bridge(std::string label, std::vector<int> numa_nodes,
                                      std::string cpus) {
  PciNode n;
  n.kind = PciNode::Kind::host_bridge;
  n.label = std::move(label);
  std::sort(numa_nodes.begin(), numa_nodes.end());
  numa_nodes.erase(std::unique(numa_nodes.begin(), numa_nodes.end()), numa_nodes.end());
  n.numa_nodes = std::move(numa_nodes);
  int index = static_cast<int>(topo_.pci.size());
  n.host_bridge = index;
  topo_.pci.push_back(std::move(n));
  host_cpus_.push_back(std::move(cpus));
  info_.emplace_back();
  return index;
}

Status InventoryBuilder::check_parent(int parent) const {
  if (parent < 0 || static_cast<size_t>(parent) >= topo_.pci.size())
    return core::error(Code::internal, "topology: parent index ", parent, " out of range");
  if (topo_.pci[static_cast<size_t>(parent)].kind == PciNode::Kind::device)
    return core::error(Code::invalid_argument, "PCI device ",
                       topo_.pci[static_cast<size_t>(parent)].pci->to_string(),
                       " has PCI children but is not a bridge");
  if (topo_.pci.size() >= kMaxPciNodes)
    return core::error(Code::invalid_argument, "more than ", kMaxPciNodes,
                       " PCI objects: not a real machine");
  return Status::success();
}

Status InventoryBuilder::claim_address(const PciAddress& pci) {
  if (!addresses_.insert(pci).second)
    return core::error(Code::invalid_argument, "PCI address ", pci.to_string(), " appears twice");
  return Status::success();
}

Result<int> InventoryBuilder::add_bridge(int parent, std::optional<PciAddress> pci,
                                         const DeviceFacts& facts, const PciLink& link) {
  XPORT_RETURN_IF_ERROR(check_parent(parent));
  if (pci) XPORT_RETURN_IF_ERROR(claim_address(*pci));
  const PciNode& up = topo_.pci[static_cast<size_t>(parent)];
  PciNode n;
  n.kind = PciNode::Kind::bridge;
  n.pci = pci;
  n.pci_class = facts.pci_class;
  n.vendor = facts.vendor;
  n.device_id = facts.device;
  n.parent = parent;
  n.host_bridge = up.host_bridge;
  n.depth = up.depth + 1;
  n.link = link;
  int index = static_cast<int>(topo_.pci.size());
  if (!port_pairs_) {
    n.switch_node = index;
  } else {
    // Level = bridges above this one. Level 0 is a root port (part of the root complex); odd
    // levels are switch upstream ports; even levels are downstream ports of the switch above.
    int level = 0;
    for (int p = parent; topo_.pci[static_cast<size_t>(p)].kind == PciNode::Kind::bridge;
         p = topo_.pci[static_cast<size_t>(p)].parent)
      ++level;
    if (level == 0)
      n.switch_node = -1;
    else if (level % 2 == 1)
      n.switch_node = index;
    else
      n.switch_node = up.switch_node;
  }
  topo_.pci.push_back(std::move(n));
  info_.emplace_back();
  host_cpus_.emplace_back();
  return index;
}

Result<int> InventoryBuilder::add_device(int parent, const PciAddress& pci, DeviceInfo info,
                                         const PciLink& link) {
  XPORT_RETURN_IF_ERROR(check_parent(parent));
  XPORT_RETURN_IF_ERROR(claim_address(pci));
  const PciNode& up = topo_.pci[static_cast<size_t>(parent)];
  PciNode n;
  n.kind = PciNode::Kind::device;
  n.pci = pci;
  n.pci_class = info.facts.pci_class;
  n.vendor = info.facts.vendor;
  n.device_id = info.facts.device;
  n.parent = parent;
  n.host_bridge = up.host_bridge;
  n.depth = up.depth + 1;
  n.link = link;
  int index = static_cast<int>(topo_.pci.size());
  topo_.pci.push_back(std::move(n));
  info_.emplace_back(std::move(info));
  host_cpus_.emplace_back();
  return index;
}

void InventoryBuilder::note(std::string text) { topo_.notes.push_back(std::move(text)); }

namespace {

// Among the libfabric domains of one NIC, the rail name: the RDMA device's own name when a
// provider uses it as is (verbs: mlx5_0), else the shortest (efa: rdmap16s27-rdm over -dgrm).
std::string pick_domain(const std::vector<const ProviderNic*>& entries,
                        const std::vector<std::string>& rdma_names) {
  for (const ProviderNic* e : entries)
    for (const std::string& r : rdma_names)
      if (e->domain == r) return r;
  std::string best;
  for (const ProviderNic* e : entries) {
    if (e->domain.empty()) continue;
    if (best.empty() || e->domain.size() < best.size() ||
        (e->domain.size() == best.size() && e->domain < best))
      best = e->domain;
  }
  return best;
}

void add_alias(std::vector<std::string>& aliases, const std::string& name, const std::string& own) {
  if (name.empty() || name == own) return;
  if (std::find(aliases.begin(), aliases.end(), name) == aliases.end()) aliases.push_back(name);
}

}  // namespace

Result<Topology> InventoryBuilder::finish() {
  // Provider NICs, matched by PCI address.
  std::vector<std::vector<const ProviderNic*>> by_node(topo_.pci.size());
  for (const ProviderNic& p : provider_nics_) {
    auto addr = PciAddress::parse(p.pci);
    if (!addr.ok()) {
      topo_.notes.push_back(core::str("libfabric domain '", p.domain, "' (", p.provider,
                                      ") has no usable PCI address: ", addr.status().message()));
      continue;
    }
    bool found = false;
    for (size_t i = 0; i < topo_.pci.size(); ++i) {
      if (topo_.pci[i].kind == PciNode::Kind::device && topo_.pci[i].pci == *addr) {
        by_node[i].push_back(&p);
        found = true;
      }
    }
    if (!found)
      topo_.notes.push_back(core::str("libfabric domain '", p.domain, "' (", p.provider,
                                      ") names PCI device ", addr->to_string(),
                                      ", which the PCI inventory does not have"));
  }

  for (size_t i = 0; i < topo_.pci.size(); ++i) {
    const PciNode& node = topo_.pci[i];
    if (node.kind != PciNode::Kind::device || !info_[i]) continue;
    DeviceInfo& info = *info_[i];
    if (!by_node[i].empty()) info.facts.provider_nic = true;
    const PciNode& hb = topo_.pci[static_cast<size_t>(node.host_bridge)];
    int numa = hb.numa_nodes.size() == 1 ? hb.numa_nodes.front() : -1;
    std::string cpus =
        !info.cpus.empty() ? info.cpus : host_cpus_[static_cast<size_t>(node.host_bridge)];

    if (is_gpu(info.facts)) {
      Gpu g;
      g.pci = *node.pci;
      g.vendor = vendor_name(info.facts.vendor);
      g.model = info.model;
      g.numa = numa;
      g.cpus = cpus;
      g.link = node.link;
      g.node = static_cast<int>(i);
      topo_.gpus.push_back(std::move(g));
      continue;
    }
    std::string kind = nic_kind(info.facts);
    if (kind.empty()) continue;
    Nic n;
    n.pci = *node.pci;
    n.kind = kind;
    n.model = info.model;
    n.numa = numa;
    n.cpus = cpus;
    n.link = node.link;
    n.ports = info.ports;
    n.node = static_cast<int>(i);
    std::string domain = pick_domain(by_node[i], info.rdma_names);
    if (!domain.empty())
      n.name = domain;
    else if (!info.rdma_names.empty())
      n.name = info.rdma_names.front();
    else if (!info.cxi_names.empty())
      n.name = info.cxi_names.front();
    else if (!info.net_names.empty())
      n.name = info.net_names.front();
    else
      n.name = n.pci.to_string();
    for (const auto* names : {&info.rdma_names, &info.cxi_names, &info.net_names})
      for (const std::string& a : *names) add_alias(n.aliases, a, n.name);
    for (const ProviderNic* p : by_node[i]) {
      add_alias(n.aliases, p->domain, n.name);
      if (!p->provider.empty() && n.provider.find(p->provider) == std::string::npos)
        n.provider += (n.provider.empty() ? "" : ",") + p->provider;
    }
    topo_.nics.push_back(std::move(n));
  }

  if (topo_.gpus.size() > kMaxGpus)
    return core::error(Code::invalid_argument, topo_.gpus.size(), " GPUs (more than ", kMaxGpus,
                       "): not a real machine");
  if (topo_.nics.size() > kMaxNics)
    return core::error(Code::invalid_argument, topo_.nics.size(), " NICs (more than ", kMaxNics,
                       "): not a real machine");
  std::sort(topo_.gpus.begin(), topo_.gpus.end(),
            [](const Gpu& a, const Gpu& b) { return a.pci < b.pci; });
  std::sort(topo_.nics.begin(), topo_.nics.end(),
            [](const Nic& a, const Nic& b) { return a.pci < b.pci; });
  // Rails are named in XPORT_NICS and in peers' plans: a name must mean one NIC.
  for (size_t a = 0; a < topo_.nics.size(); ++a)
    for (size_t b = a + 1; b < topo_.nics.size(); ++b)
      if (topo_.nics[a].name == topo_.nics[b].name)
        return core::error(Code::invalid_argument, "two NICs are named '", topo_.nics[a].name,
                           "' (", topo_.nics[a].pci.to_string(), " and ",
                           topo_.nics[b].pci.to_string(), ")");
  return std::move(topo_);
}

Result<std::string> cpulist_from_mask(std::string_view mask) {
  // Words of 32 bits, most significant first; hwloc writes "0x" prefixes and empty words for 0.
  std::vector<uint32_t> words;
  size_t start = 0;
  while (true) {
    size_t comma = mask.find(',', start);
    std::string_view w =
        mask.substr(start, comma == std::string_view::npos ? mask.npos : comma - start);
    if (w.size() >= 2 && w[0] == '0' && (w[1] == 'x' || w[1] == 'X')) w.remove_prefix(2);
    if (w.size() > 8) return core::error(Code::invalid_argument, "bad CPU mask '", mask, "'");
    uint32_t v = 0;
    for (char c : w) {
      int d = (c >= '0' && c <= '9')   ? c - '0'
              : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                       : -1;
      if (d < 0) return core::error(Code::invalid_argument, "bad CPU mask '", mask, "'");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    words.push_back(v);
    if (words.size() > 1024)
      return core::error(Code::invalid_argument, "CPU mask '", mask.substr(0, 40),
                         "...' covers more than 32768 CPUs");
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  std::string out;
  int run_start = -1;
  int total = static_cast<int>(words.size()) * 32;
  for (int cpu = 0; cpu <= total; ++cpu) {
    bool set = false;
    if (cpu < total) {
      uint32_t word = words[words.size() - 1 - static_cast<size_t>(cpu / 32)];
      set = (word >> (cpu % 32)) & 1u;
    }
    if (set && run_start < 0) run_start = cpu;
    if (!set && run_start >= 0) {
      if (!out.empty()) out += ',';
      out += std::to_string(run_start);
      if (cpu - 1 > run_start) out += "-" + std::to_string(cpu - 1);
      run_start = -1;
    }
  }
  return out;
}

}  // namespace xport::topology

namespace xport::topology {

std::string PciLink::to_string() const {
  auto fmt = [](double v) {
    std::string s = core::str(static_cast<long long>(std::llround(v * 10)) / 10.0);
    return s;
  };
  if (gts > 0 && width > 0) return core::str(fmt(gts), " GT/s x", width);
  if (gts > 0) return core::str(fmt(gts), " GT/s");
  if (gbytes_per_s > 0) return core::str(fmt(gbytes_per_s), " GB/s");
  if (width > 0) return core::str("x", width);
  return "";
}

}  // namespace xport::topology
