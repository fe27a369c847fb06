// NCCL topology XML -> Topology. <cpu> elements are NUMA-local root complexes (read as host
// bridges), <pci> elements with <pci> children are PCIe switches (NCCL keeps one node per switch),
// leaves are devices: a <gpu> or <nic> child says what they are, and static NCCL_TOPO_FILEs that
// have neither are read by PCI class (0x0302xx GPU, 0x0207xx / 0x0200xx NIC).
#include <string>

#include "core/format.hpp"
#include "topology/importers.hpp"
#include "topology/inventory.hpp"

namespace xport::topology {
namespace {

using xml::Document;
using xml::Element;

class NcclReader {
 public:
  explicit NcclReader(const Document& doc) : doc_(doc), builder_(Source::nccl_xml, false) {}

  Result<Topology> run() {
    const Element& root = doc_.root();
    if (root.name != "system")
      return core::error(Code::invalid_argument,
                         "not an NCCL topology XML file: the root element is <", root.name,
                         ">, expected <system>");
    size_t cpus = 0;
    for (uint32_t c : root.children) {
      const Element& e = doc_.elements[c];
      if (e.name == "cpu") {
        ++cpus;
        XPORT_RETURN_IF_ERROR(visit_cpu(e));
      } else if (e.name == "pci") {
        return fail(e, "<pci> directly under <system>: NCCL places PCI trees under a <cpu>");
      }
    }
    if (cpus == 0) builder_.note("the NCCL topology has no <cpu> element: no PCI devices read");
    return builder_.finish();
  }

 private:
  template <typename... Args>
  Status fail(const Element& e, Args&&... what) {
    return core::error(Code::invalid_argument, "NCCL XML line ", e.line, ": ",
                       std::forward<Args>(what)...);
  }

  Status visit_cpu(const Element& cpu) {
    std::vector<int> numa;
    std::string label = "cpu";
    if (const std::string* id = cpu.attribute("numaid")) {
      if (*id != "-1") {
        auto n = parse_uint(*id, 1 << 20);
        if (!n) return fail(cpu, "bad numaid '", *id, "' (expected a number)");
        numa.push_back(*n);
        label = core::str("cpu numa ", *n);
      }
    }
    std::string cpus;
    if (const std::string* aff = cpu.attribute("affinity")) {
      auto list = cpulist_from_mask(*aff);
      if (!list.ok()) return fail(cpu, list.status().message());
      cpus = *list;
    }
    int hb = builder_.add_host_bridge(label, std::move(numa), std::move(cpus));
    for (uint32_t c : cpu.children) {
      const Element& e = doc_.elements[c];
      if (e.name == "pci") {
        XPORT_RETURN_IF_ERROR(visit_pci(e, hb));
      } else if (e.name == "nic") {
        builder_.note(
            core::str("NCCL XML line ", e.line,
                      ": a <nic> without a PCI device (virtual or socket NIC) is skipped"));
      }
    }
    return Status::success();
  }

  Status read_facts(const Element& e, DeviceFacts& f) {
    const std::string* cls = e.attribute("class");
    if (cls == nullptr) return fail(e, "<pci> without a class attribute");
    auto c = parse_hex(*cls, 6);
    if (!c) return fail(e, "bad class '", *cls, "' (expected like 0x030200)");
    f.pci_class = *c;
    if (const std::string* v = e.attribute("vendor")) {
      auto n = parse_hex(*v, 4);
      if (!n) return fail(e, "bad vendor '", *v, "' (expected like 0x10de)");
      f.vendor = static_cast<uint16_t>(*n);
    }
    if (const std::string* d = e.attribute("device")) {
      auto n = parse_hex(*d, 4);
      if (!n) return fail(e, "bad device '", *d, "' (expected like 0x20b0)");
      f.device = static_cast<uint16_t>(*n);
    }
    return Status::success();
  }

  Result<PciLink> read_link(const Element& e) {
    PciLink link;
    if (const std::string* s = e.attribute("link_speed")) link.gts = parse_number_prefix(*s, 1e4);
    if (const std::string* w = e.attribute("link_width")) {
      auto n = parse_uint(*w, 64);
      if (!n) return fail(e, "bad link_width '", *w, "' (expected a lane count)");
      link.width = *n;
    }
    return link;
  }

  Status visit_pci(const Element& e, int parent) {
    const std::string* busid = e.attribute("busid");
    if (busid == nullptr) return fail(e, "<pci> without a busid");
    auto addr = PciAddress::parse(*busid);
    if (!addr.ok()) return fail(e, addr.status().message());
    DeviceFacts facts;
    XPORT_RETURN_IF_ERROR(read_facts(e, facts));
    XPORT_ASSIGN_OR_RETURN(PciLink link, read_link(e));

    bool has_pci = false;
    const Element* gpu = nullptr;
    const Element* nic = nullptr;
    for (uint32_t c : e.children) {
      const Element& child = doc_.elements[c];
      if (child.name == "pci")
        has_pci = true;
      else if (child.name == "gpu")
        gpu = &child;
      else if (child.name == "nic")
        nic = &child;
    }
    if (has_pci) {
      if (gpu != nullptr || nic != nullptr)
        return fail(e, "<pci> ", *busid, " has both PCI children and a <gpu>/<nic>");
      auto added = builder_.add_bridge(parent, *addr, facts, link);
      if (!added.ok()) return fail(e, added.status().message());
      for (uint32_t c : e.children)
        if (doc_.elements[c].name == "pci")
          XPORT_RETURN_IF_ERROR(visit_pci(doc_.elements[c], *added));
      return Status::success();
    }

    DeviceInfo info;
    info.facts = facts;
    info.facts.listed_gpu = gpu != nullptr;
    // Dumps list the NICs NCCL uses under <nic>; static files only give the class.
    uint16_t cs = static_cast<uint16_t>(facts.pci_class >> 8);
    info.facts.listed_nic = nic != nullptr || (gpu == nullptr && (cs == 0x0200 || cs == 0x0207));
    if (gpu != nullptr && nic != nullptr)
      return fail(e, "<pci> ", *busid, " is both a GPU and a NIC");
    if (nic != nullptr) {
      for (uint32_t c : nic->children) {
        const Element& net = doc_.elements[c];
        if (net.name != "net") continue;
        const std::string* name = net.attribute("name");
        if (name == nullptr || name->empty()) return fail(net, "<net> without a name");
        bool seen = false;
        for (const std::string& n : info.rdma_names) seen |= n == *name;
        if (!seen) info.rdma_names.push_back(*name);
        // IB-verbs NICs carry a GUID; a socket NIC (eth0) has none.
        if (net.attribute("guid") != nullptr) info.facts.openfabrics = true;
        NicPort port;
        if (const std::string* p = net.attribute("port")) {
          auto n = parse_uint(*p, 255);
          if (!n) return fail(net, "bad port '", *p, "'");
          port.number = *n;
        }
        // NCCL records speed in Mbit/s.
        if (const std::string* s = net.attribute("speed"))
          port.rate_gbps = parse_number_prefix(*s, 1e9) / 1000.0;
        info.ports.push_back(port);
      }
    }
    auto added = builder_.add_device(parent, *addr, std::move(info), link);
    if (!added.ok()) return fail(e, added.status().message());
    return Status::success();
  }

  const Document& doc_;
  InventoryBuilder builder_;
};

}  // namespace

Result<Topology> import_nccl(const xml::Document& doc) {
  NcclReader reader(doc);
  return reader.run();
}

}  // namespace xport::topology
