// Fuzzes the hwloc topology importer (and the XML reader below it) with bytes from outside; on
// success also the plan and every rendering, which must cope with whatever the importer accepted.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "xport/topology.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace xport::topology;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto topo = parse(bytes, Format::hwloc_xml);
  if (!topo.ok()) return 0;
  auto p = plan(*topo, PlanOptions{std::string()});
  if (!p.ok()) __builtin_trap();  // the automatic plan of an accepted topology cannot fail
  (void)to_json(*topo, *p);
  (void)to_text(*topo, *p);
  (void)to_dot(*topo, *p);
  // An override naming the first NIC exercises the override path on fuzzed names too.
  if (!topo->nics.empty()) {
    auto q = plan(*topo, PlanOptions{topo->nics.front().pci.to_string()});
    if (!q.ok()) __builtin_trap();
  }
  return 0;
}
