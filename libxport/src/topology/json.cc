// xport-topology's JSON (shape documented in docs/tools.md), through core::JsonWriter: strings
// escaped strictly, invalid UTF-8 from hostile input replaced so the output always parses.
#include <cmath>
#include <string>

#include "core/json.hpp"
#include "xport/topology.hpp"

namespace xport::topology {
namespace {

using core::JsonWriter;

// NUMA node, null when unknown.
void numa(JsonWriter& w, const char* key, int n) {
  if (n < 0) {
    w.field(key, core::kJsonNull);
  } else {
    w.field(key, n);
  }
}

void gpu(JsonWriter& w, const Topology& topo, const Gpu& g, const GpuRails* rails) {
  w.begin_object().field("pci", g.pci.to_string());
  numa(w, "numa", g.numa);
  w.field("vendor", g.vendor)
      .field("model", g.model)
      .field("cpus", g.cpus)
      .field("link", g.link.to_string())
      .begin_array("rails");
  if (rails != nullptr) {
    for (const Rail& rail : rails->rails) {
      if (rail.nic >= topo.nics.size()) continue;
      const Nic& n = topo.nics[rail.nic];
      w.begin_object()
          .field("nic", n.name)
          .field("pci", n.pci.to_string())
          .field("distance", to_string(rail.path.distance))
          .field("hops", rail.path.hops)
          .end_object();
    }
  }
  w.end_array().field("overridden", rails != nullptr && rails->overridden).end_object();
}

void nic(JsonWriter& w, const Nic& n) {
  w.begin_object().field("name", n.name).field("pci", n.pci.to_string());
  numa(w, "numa", n.numa);
  w.field("kind", n.kind)
      .field("provider", n.provider)
      .field("model", n.model)
      .field("cpus", n.cpus)
      .field("link", n.link.to_string())
      .begin_array("aliases");
  for (const std::string& a : n.aliases) w.value(a);
  w.end_array().begin_array("ports");
  for (const auto& p : n.ports) {
    const double rate = std::isfinite(p.rate_gbps) ? p.rate_gbps : 0;
    w.begin_object()
        .field("port", p.number)
        .field("state", p.state)
        .field("rate_gbps", core::JsonTrimmed{rate, 3})
        .end_object();
  }
  w.end_array().end_object();
}

}  // namespace

std::string to_json(const Topology& topo, const Plan& plan) {
  std::string out;
  // The top object and its arrays one member per line; each GPU and NIC on one line.
  JsonWriter w(out, 2);
  w.begin_object().field("source", to_string(topo.source)).begin_array("gpus");
  for (size_t i = 0; i < topo.gpus.size(); ++i) {
    gpu(w, topo, topo.gpus[i], i < plan.gpus.size() ? &plan.gpus[i] : nullptr);
  }
  w.end_array().begin_array("nics");
  for (const Nic& n : topo.nics) nic(w, n);
  w.end_array().field("explanation", plan.explanation).begin_array("notes");
  for (const std::string& note : topo.notes) w.value(note);
  w.end_array().end_object();
  out += '\n';
  return out;
}

}  // namespace xport::topology
