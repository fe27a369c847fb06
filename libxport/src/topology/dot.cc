// xport-topology --dot: the PCI tree as a Graphviz graph, pruned to the paths that lead to GPUs
// and NICs, host bridges grouped by NUMA node, and the plan's GPU-NIC rails as dashed edges.
#include <map>
#include <string>
#include <vector>

#include "core/format.hpp"
#include "xport/topology.hpp"

namespace xport::topology {
namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out;
}

std::string numa_key(const std::vector<int>& numa) {
  if (numa.empty()) return "unknown";
  std::string k;
  for (int n : numa) k += (k.empty() ? "" : ",") + std::to_string(n);
  return k;
}

}  // namespace

std::string to_dot(const Topology& topo, const Plan& plan) {
  const size_t count = topo.pci.size();
  std::vector<bool> keep(count, false);
  std::vector<std::string> label(count), style(count);
  auto mark = [&](int node) {
    for (int n = node; n >= 0 && static_cast<size_t>(n) < count && !keep[static_cast<size_t>(n)];
         n = topo.pci[static_cast<size_t>(n)].parent)
      keep[static_cast<size_t>(n)] = true;
  };
  for (size_t i = 0; i < topo.gpus.size(); ++i) {
    const Gpu& g = topo.gpus[i];
    if (g.node < 0 || static_cast<size_t>(g.node) >= count) continue;
    mark(g.node);
    label[static_cast<size_t>(g.node)] =
        core::str("G", i, "\\n", g.pci.to_string(), g.vendor.empty() ? "" : "\\n" + g.vendor);
    style[static_cast<size_t>(g.node)] = "shape=box, style=filled, fillcolor=\"#b7e1a1\"";
  }
  for (size_t i = 0; i < topo.nics.size(); ++i) {
    const Nic& n = topo.nics[i];
    if (n.node < 0 || static_cast<size_t>(n.node) >= count) continue;
    mark(n.node);
    label[static_cast<size_t>(n.node)] =
        core::str("N", i, " ", escape(n.name), "\\n", n.pci.to_string(), "\\n", n.kind);
    style[static_cast<size_t>(n.node)] = "shape=box, style=filled, fillcolor=\"#a9c8f0\"";
  }

  std::string out =
      "graph topology {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n";
  // Host bridges (with everything kept below them) grouped by the NUMA nodes they are local to.
  std::map<std::string, std::vector<size_t>> by_numa;
  std::map<size_t, std::vector<size_t>> members;  // host bridge -> kept nodes below it
  for (size_t i = 0; i < count; ++i) {
    if (!keep[i]) continue;
    if (topo.pci[i].kind == PciNode::Kind::host_bridge)
      by_numa[numa_key(topo.pci[i].numa_nodes)].push_back(i);
    members[static_cast<size_t>(topo.pci[i].host_bridge)].push_back(i);
  }
  int cluster = 0;
  for (const auto& [numa, bridges] : by_numa) {
    out += core::str("  subgraph cluster_", cluster++, " {\n    label=\"NUMA ", numa,
                     "\";\n    style=rounded;\n");
    for (size_t hb : bridges) {
      for (size_t i : members[hb]) {
        const PciNode& p = topo.pci[i];
        std::string text = label[i];
        std::string shape = style[i];
        if (p.kind == PciNode::Kind::host_bridge) {
          text = "host bridge\\n" + escape(p.label);
          shape = "shape=house";
        } else if (p.kind == PciNode::Kind::bridge) {
          text = p.pci ? p.pci->to_string() : "bridge";
          if (p.switch_node == static_cast<int>(i)) text += "\\nswitch";
          shape = "shape=ellipse, fontsize=8";
        }
        out += core::str("    n", i, " [label=\"", text, "\", ", shape, "];\n");
      }
    }
    out += "  }\n";
  }
  for (size_t i = 0; i < count; ++i)
    if (keep[i] && topo.pci[i].parent >= 0)
      out += core::str("  n", topo.pci[i].parent, " -- n", i, ";\n");
  for (size_t g = 0; g < plan.gpus.size() && g < topo.gpus.size(); ++g) {
    for (const Rail& r : plan.gpus[g].rails) {
      if (r.nic >= topo.nics.size()) continue;
      out += core::str("  n", topo.gpus[g].node, " -- n", topo.nics[r.nic].node,
                       " [style=dashed, color=\"#d62728\", constraint=false, label=\"",
                       to_string(r.path.distance), "\", fontsize=8];\n");
    }
  }
  out += "}\n";
  return out;
}

}  // namespace xport::topology
