// hwloc XML -> Topology. Reads the PCI tree (host bridges, bridges, devices), the OS devices on
// each PCI device (CUDA/RSMI, OpenFabrics, CXI, network) and the NUMA nodes each host bridge hangs
// from. Everything unrelated (caches, cores, distances, memory attributes) is ignored.
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>

#include "core/format.hpp"
#include "topology/importers.hpp"
#include "topology/inventory.hpp"

namespace xport::topology {

std::optional<uint32_t> parse_hex(std::string_view s, size_t max_digits) {
  if (s.size() >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s.remove_prefix(2);
  if (s.empty() || s.size() > max_digits) return std::nullopt;
  uint32_t v = 0;
  for (char c : s) {
    int d = (c >= '0' && c <= '9')   ? c - '0'
            : (c >= 'a' && c <= 'f') ? c - 'a' + 10
            : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                     : -1;
    if (d < 0) return std::nullopt;
    v = v * 16 + static_cast<uint32_t>(d);
  }
  return v;
}

std::optional<int> parse_uint(std::string_view s, int max) {
  if (s.empty() || s.size() > 10) return std::nullopt;
  long long v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  if (v > max) return std::nullopt;
  return static_cast<int>(v);
}

double parse_number_prefix(std::string_view s, double max) {
  std::string text(s.substr(0, 64));
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(v) || v < 0 || v > max) return 0;
  return v;
}

namespace {

using xml::Document;
using xml::Element;

// OS device types as hwloc 2 numbers them; hwloc 3 writes a bit mask instead.
enum class OsDevKind { other, gpu, network, openfabrics, coproc };

OsDevKind osdev_kind(const std::string* type, int version_major) {
  if (type == nullptr) return OsDevKind::other;
  auto v = parse_uint(*type, 1 << 20);
  if (!v) return OsDevKind::other;
  if (version_major >= 3) {
    if (*v & 32) return OsDevKind::openfabrics;
    if (*v & 16) return OsDevKind::network;
    if (*v & 8) return OsDevKind::coproc;
    if (*v & 4) return OsDevKind::gpu;
    return OsDevKind::other;
  }
  switch (*v) {
    case 1:
      return OsDevKind::gpu;
    case 2:
      return OsDevKind::network;
    case 3:
      return OsDevKind::openfabrics;
    case 5:
      return OsDevKind::coproc;
    default:
      return OsDevKind::other;
  }
}

bool starts_with(const std::string& s, std::string_view p) { return s.rfind(p, 0) == 0; }

// OpenFabrics port states as rdma-core numbers them (hwloc records "Port1State" = "4").
std::string port_state_name(int state) {
  switch (state) {
    case 1:
      return "DOWN";
    case 2:
      return "INIT";
    case 3:
      return "ARMED";
    case 4:
      return "ACTIVE";
    case 5:
      return "ACTIVE_DEFER";
    default:
      return core::str("STATE_", state);
  }
}

class HwlocReader {
 public:
  HwlocReader(const Document& doc, Source source)
      : doc_(doc), builder_(source, /*port_pairs=*/true) {}

  Result<Topology> run(const std::vector<ProviderNic>& provider_nics) {
    const Element& root = doc_.root();
    if (root.name != "topology")
      return core::error(Code::invalid_argument, "not an hwloc XML file: the root element is <",
                         root.name, ">, expected <topology>");
    if (const std::string* v = root.attribute("version")) {
      auto major = parse_uint(v->substr(0, v->find('.')), 1000);
      if (!major) return fail(root, "bad topology version '", *v, "'");
      version_major_ = *major;
    } else {
      version_major_ = 1;  // hwloc 1.x wrote no version
    }
    bool any_object = false;
    for (uint32_t c : root.children) {
      if (doc_.elements[c].name != "object") continue;
      any_object = true;
      XPORT_RETURN_IF_ERROR(visit(c, /*pci_parent=*/-1, /*cpu_side=*/c));
    }
    if (!any_object) return fail(root, "hwloc XML has no <object> (truncated or not hwloc?)");
    if (pci_objects_ == 0)
      builder_.note(
          "the hwloc input has no PCI objects: it was saved without I/O devices (lstopo "
          "--no-io, or an I/O type filter that drops them); save it with `lstopo --of xml` "
          "and I/O kept");
    builder_.set_provider_nics(provider_nics);
    return builder_.finish();
  }

 private:
  template <typename... Args>
  Status fail(const Element& e, Args&&... what) {
    return core::error(Code::invalid_argument, "hwloc XML line ", e.line, ": ",
                       std::forward<Args>(what)...);
  }

  Result<PciAddress> address(const Element& e) {
    const std::string* busid = e.attribute("pci_busid");
    if (busid == nullptr) return fail(e, "PCI object without pci_busid");
    auto a = PciAddress::parse(*busid);
    if (!a.ok()) return fail(e, a.status().message());
    return a;
  }

  // "0302 [10de:20b0] [10de:134f] a1": class+subclass, [vendor:device], [subsystem], revision.
  Status read_pci_type(const Element& e, DeviceFacts& f) {
    const std::string* t = e.attribute("pci_type");
    if (t == nullptr) return fail(e, "PCI object without pci_type");
    const std::string& s = *t;
    auto cls = parse_hex(s.substr(0, 4), 4);
    if (!cls || s.size() < 16 || s[4] != ' ' || s[5] != '[' || s[10] != ':' || s[15] != ']')
      return fail(e, "bad pci_type '", s, "' (expected like \"0302 [10de:20b0] ...\")");
    auto vendor = parse_hex(s.substr(6, 4), 4);
    auto device = parse_hex(s.substr(11, 4), 4);
    if (!vendor || !device) return fail(e, "bad vendor:device in pci_type '", s, "'");
    f.pci_class = *cls << 8;
    f.vendor = static_cast<uint16_t>(*vendor);
    f.device = static_cast<uint16_t>(*device);
    return Status::success();
  }

  PciLink read_link(const Element& e) {
    PciLink link;
    if (const std::string* s = e.attribute("pci_link_speed"))
      link.gbytes_per_s = parse_number_prefix(*s, 1e6);
    return link;
  }

  const std::string* info_value(const Element& e, std::string_view name) {
    for (uint32_t c : e.children) {
      const Element& child = doc_.elements[c];
      if (child.name != "info") continue;
      const std::string* n = child.attribute("name");
      if (n != nullptr && *n == name) return child.attribute("value");
    }
    return nullptr;
  }

  // NUMA nodes local to the CPU-side object `index`: a NUMANode above it (hwloc 1.x), else the
  // NUMANodes in the subtree of the nearest ancestor that has any (hwloc 2.x attaches them as
  // memory children of a Package or Group, and I/O may hang from an L3 cache below that).
  const std::vector<int>& numa_of(uint32_t index) {
    auto cached = numa_cache_.find(index);
    if (cached != numa_cache_.end()) return cached->second;
    std::vector<int> nodes;
    auto os_index = [](const Element& el) {
      const std::string* os = el.attribute("os_index");
      return os != nullptr ? parse_uint(*os, 1 << 20) : std::nullopt;
    };
    for (uint32_t e = index;; e = doc_.elements[e].parent) {
      const Element& el = doc_.elements[e];
      const std::string* type = el.attribute("type");
      if (el.name == "object" && type != nullptr && *type == "NUMANode") {
        if (auto os = os_index(el)) nodes.push_back(*os);
        return numa_cache_.emplace(index, std::move(nodes)).first->second;
      }
      if (el.parent == e) break;
    }
    std::vector<uint32_t> stack{index};
    while (!stack.empty()) {
      const Element& el = doc_.elements[stack.back()];
      stack.pop_back();
      const std::string* type = el.attribute("type");
      if (el.name != "object" || type == nullptr) continue;
      if (*type == "Bridge" || *type == "PCIDev" || *type == "OSDev") continue;
      if (*type == "NUMANode") {
        if (auto os = os_index(el)) nodes.push_back(*os);
      }
      for (uint32_t c : el.children) stack.push_back(c);
    }
    uint32_t parent = doc_.elements[index].parent;
    if (nodes.empty() && parent != index && doc_.elements[parent].name == "object")
      nodes = numa_of(parent);  // recursion bounded by the XML depth limit
    return numa_cache_.emplace(index, std::move(nodes)).first->second;
  }

  Status visit(uint32_t index, int pci_parent, uint32_t cpu_side) {
    const Element& e = doc_.elements[index];
    const std::string* type = e.attribute("type");
    if (type == nullptr) return fail(e, "<object> without a type");
    if (*type == "Bridge") return visit_bridge(e, pci_parent, cpu_side);
    if (*type == "PCIDev") return visit_device(e, pci_parent);
    if (*type == "OSDev" || *type == "Misc")
      return Status::success();  // OSDev: read with its PCI device
    if (pci_parent >= 0) return fail(e, "a ", *type, " object inside the PCI tree");
    for (uint32_t c : e.children)
      if (doc_.elements[c].name == "object") XPORT_RETURN_IF_ERROR(visit(c, -1, index));
    return Status::success();
  }

  Status visit_bridge(const Element& e, int pci_parent, uint32_t cpu_side) {
    ++pci_objects_;
    const std::string* bt = e.attribute("bridge_type");
    if (bt == nullptr || bt->size() != 3 || (*bt)[1] != '-')
      return fail(e, "Bridge without a valid bridge_type (expected \"0-1\" or \"1-1\")");
    int index = -1;
    if ((*bt)[0] == '0') {
      if (pci_parent >= 0) return fail(e, "host bridge inside a PCI tree");
      const std::string* range = e.attribute("bridge_pci");
      std::string cpus;
      if (const std::string* cs = doc_.elements[cpu_side].attribute("cpuset")) {
        auto list = cpulist_from_mask(*cs);
        if (list.ok()) cpus = *list;
      }
      index = builder_.add_host_bridge(range ? *range : std::string("host bridge"),
                                       numa_of(cpu_side), std::move(cpus));
    } else if ((*bt)[0] == '1') {
      if (pci_parent < 0) return fail(e, "PCI bridge outside any host bridge");
      XPORT_ASSIGN_OR_RETURN(PciAddress a, address(e));
      DeviceFacts f;
      XPORT_RETURN_IF_ERROR(read_pci_type(e, f));
      auto added = builder_.add_bridge(pci_parent, a, f, read_link(e));
      if (!added.ok()) return fail(e, added.status().message());
      index = *added;
    } else {
      return fail(e, "unknown bridge_type '", *bt, "'");
    }
    for (uint32_t c : e.children) {
      if (doc_.elements[c].name != "object") continue;
      XPORT_RETURN_IF_ERROR(visit(c, index, cpu_side));
    }
    return Status::success();
  }

  Status visit_device(const Element& e, int pci_parent) {
    ++pci_objects_;
    if (pci_parent < 0) return fail(e, "PCI device outside any host bridge");
    XPORT_ASSIGN_OR_RETURN(PciAddress a, address(e));
    DeviceInfo info;
    XPORT_RETURN_IF_ERROR(read_pci_type(e, info.facts));
    if (const std::string* m = info_value(e, "PCIDevice")) info.model = *m;
    for (uint32_t c : e.children) {
      const Element& child = doc_.elements[c];
      if (child.name != "object") continue;
      const std::string* type = child.attribute("type");
      if (type == nullptr) return fail(child, "<object> without a type");
      if (*type != "OSDev") continue;  // PCI children of a device are refused below
      read_osdev(child, info);
    }
    auto added = builder_.add_device(pci_parent, a, std::move(info), read_link(e));
    if (!added.ok()) return fail(e, added.status().message());
    for (uint32_t c : e.children) {
      const Element& child = doc_.elements[c];
      const std::string* type = child.attribute("type");
      if (child.name == "object" && type != nullptr && *type != "OSDev" && *type != "Misc")
        return fail(child, "a ", *type, " object inside PCI device ", a.to_string());
    }
    return Status::success();
  }

  void read_osdev(const Element& e, DeviceInfo& info) {
    const std::string* name_attr = e.attribute("name");
    std::string name = name_attr ? *name_attr : "";
    std::string subtype = e.attribute("subtype") ? *e.attribute("subtype") : "";
    if (const std::string* b = info_value(e, "Backend"); subtype.empty() && b != nullptr)
      subtype = *b;
    OsDevKind kind = osdev_kind(e.attribute("osdev_type"), version_major_);
    bool runtime_name = starts_with(name, "cuda") || starts_with(name, "nvml") ||
                        starts_with(name, "rsmi") || starts_with(name, "opencl") ||
                        starts_with(name, "ze");
    bool runtime_subtype = subtype == "CUDA" || subtype == "NVML" || subtype == "RSMI" ||
                           subtype == "OpenCL" || subtype == "LevelZero";
    if ((kind == OsDevKind::gpu || kind == OsDevKind::coproc) && (runtime_name || runtime_subtype))
      info.facts.gpu_runtime = true;
    bool cxi = subtype == "Slingshot" || subtype == "CXI" ||
               (starts_with(name, "cxi") && name.size() > 3 && name[3] >= '0' && name[3] <= '9');
    if (name.empty()) return;
    if (cxi) {
      info.facts.cxi = true;
      info.cxi_names.push_back(name);
    } else if (kind == OsDevKind::openfabrics) {
      info.facts.openfabrics = true;
      info.rdma_names.push_back(name);
      for (int port = 1; port <= 8; ++port) {
        const std::string* st = info_value(e, core::str("Port", port, "State"));
        if (st == nullptr) continue;
        NicPort p;
        p.number = port;
        if (auto v = parse_uint(*st, 255)) p.state = port_state_name(*v);
        info.ports.push_back(p);
      }
    } else if (kind == OsDevKind::network) {
      info.net_names.push_back(name);
    }
  }

  const Document& doc_;
  InventoryBuilder builder_;
  int version_major_ = 2;
  size_t pci_objects_ = 0;
  std::map<uint32_t, std::vector<int>> numa_cache_;
};

}  // namespace

Result<Topology> import_hwloc(const xml::Document& doc, Source source,
                              const std::vector<ProviderNic>& provider_nics) {
  HwlocReader reader(doc, source);
  return reader.run(provider_nics);
}

}  // namespace xport::topology
