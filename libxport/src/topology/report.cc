// xport-topology's tables for people: GPUs and NICs, the distance matrix in the style of
// `nvidia-smi topo -m`, and the plan per GPU. Labels G<n>/N<n> are positions in PCI order, never
// CUDA indexes (which CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER change).
#include <string>
#include <vector>

#include "core/format.hpp"
#include "xport/topology.hpp"

namespace xport::topology {
namespace {

using Row = std::vector<std::string>;

void table(std::string& out, const std::vector<Row>& rows, const std::string& indent) {
  std::vector<size_t> width;
  for (const Row& r : rows)
    for (size_t c = 0; c < r.size(); ++c) {
      if (width.size() <= c) width.push_back(0);
      width[c] = std::max(width[c], r[c].size());
    }
  for (const Row& r : rows) {
    std::string line = indent;
    for (size_t c = 0; c < r.size(); ++c) {
      line += r[c];
      if (c + 1 < r.size()) line += std::string(width[c] - r[c].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
}

std::string or_dash(const std::string& s) { return s.empty() ? "-" : s; }
std::string numa_text(int n) { return n < 0 ? "-" : std::to_string(n); }

std::string ports_text(const Nic& n) {
  std::string s;
  for (const NicPort& p : n.ports) {
    if (!s.empty()) s += ' ';
    s += core::str(p.number, ":", p.state.empty() ? "?" : p.state);
    if (p.rate_gbps > 0) s += core::str("@", p.rate_gbps, "G");
  }
  return or_dash(s);
}

}  // namespace

std::string to_text(const Topology& topo, const Plan& plan) {
  std::string out = core::str("Topology (", to_string(topo.source), "): ", topo.gpus.size(),
                              topo.gpus.size() == 1 ? " GPU, " : " GPUs, ", topo.nics.size(),
                              topo.nics.size() == 1 ? " NIC\n" : " NICs\n");
  if (!topo.gpus.empty()) {
    out += "\nGPUs (G<n>: position in PCI order, not a CUDA index)\n";
    std::vector<Row> rows{{"", "PCI", "vendor", "NUMA", "CPUs", "link", "model"}};
    for (size_t i = 0; i < topo.gpus.size(); ++i) {
      const Gpu& g = topo.gpus[i];
      rows.push_back({core::str("G", i), g.pci.to_string(), or_dash(g.vendor), numa_text(g.numa),
                      or_dash(g.cpus), or_dash(g.link.to_string()), or_dash(g.model)});
    }
    table(out, rows, "  ");
  }
  if (!topo.nics.empty()) {
    out += "\nNICs\n";
    std::vector<Row> rows{{"", "name", "PCI", "kind", "NUMA", "CPUs", "link", "ports", "also"}};
    for (size_t i = 0; i < topo.nics.size(); ++i) {
      const Nic& n = topo.nics[i];
      std::string also;
      for (const std::string& a : n.aliases) also += (also.empty() ? "" : ",") + a;
      if (!n.provider.empty()) also += (also.empty() ? "" : " ") + ("[" + n.provider + "]");
      rows.push_back({core::str("N", i), n.name, n.pci.to_string(), n.kind, numa_text(n.numa),
                      or_dash(n.cpus), or_dash(n.link.to_string()), ports_text(n), or_dash(also)});
    }
    table(out, rows, "  ");
  }
  if (!topo.gpus.empty() || !topo.nics.empty()) {
    std::vector<int> nodes;
    std::vector<std::string> labels;
    for (size_t i = 0; i < topo.gpus.size(); ++i) {
      nodes.push_back(topo.gpus[i].node);
      labels.push_back(core::str("G", i));
    }
    for (size_t i = 0; i < topo.nics.size(); ++i) {
      nodes.push_back(topo.nics[i].node);
      labels.push_back(core::str("N", i));
    }
    out += "\nDistances (classes of nvidia-smi topo -m)\n";
    Row head{""};
    head.insert(head.end(), labels.begin(), labels.end());
    std::vector<Row> rows{head};
    for (size_t a = 0; a < nodes.size(); ++a) {
      Row r{labels[a]};
      for (size_t b = 0; b < nodes.size(); ++b)
        r.push_back(
            a == b ? "X" : std::string(to_string(path_between(topo, nodes[a], nodes[b]).distance)));
      rows.push_back(std::move(r));
    }
    table(out, rows, "  ");
    out +=
        "\n  X    = self\n"
        "  PIX  = through at most one PCIe switch\n"
        "  PXB  = through several PCIe switches, not the host bridge\n"
        "  PHB  = through a PCIe host bridge (the CPU's root complex)\n"
        "  NODE = between PCIe host bridges of one NUMA node\n"
        "  SYS  = across NUMA nodes (SMP interconnect)\n";
  }
  if (!topo.gpus.empty()) {
    out += "\nPlan (rails per GPU)\n";
    std::vector<Row> rows;
    for (size_t i = 0; i < plan.gpus.size() && i < topo.gpus.size(); ++i) {
      std::string rails;
      for (const Rail& r : plan.gpus[i].rails) {
        if (r.nic >= topo.nics.size()) continue;
        if (!rails.empty()) rails += ", ";
        rails += core::str(topo.nics[r.nic].name, " (", to_string(r.path.distance), ")");
      }
      if (rails.empty()) rails = "none";
      if (plan.gpus[i].overridden) rails += "  [override]";
      rows.push_back({core::str("G", i), topo.gpus[i].pci.to_string(), "->", rails});
    }
    table(out, rows, "  ");
  }
  if (!plan.explanation.empty()) out += "\n" + plan.explanation + "\n";
  if (!topo.notes.empty()) {
    out += "\nNotes\n";
    for (const std::string& n : topo.notes) out += "  - " + n + "\n";
  }
  return out;
}

}  // namespace xport::topology
