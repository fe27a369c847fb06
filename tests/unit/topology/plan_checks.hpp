// The properties every automatic plan must have, shared by the fixture and property tests:
// rails come from the nearest set, every NIC of a set is used, sharing is even, and the plan is
// independent of anything but the topology.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "topology/distance.hpp"
#include "xport/topology.hpp"

namespace xport::topology::test {

// GPU PCI -> NIC PCIs: the plan in terms that survive reordering of the input.
inline std::map<std::string, std::vector<std::string>> by_address(const Topology& topo,
                                                                  const Plan& plan) {
  std::map<std::string, std::vector<std::string>> out;
  for (const GpuRails& g : plan.gpus) {
    auto& v = out[topo.gpus[g.gpu].pci.to_string()];
    for (const Rail& r : g.rails) v.push_back(topo.nics[r.nic].pci.to_string());
  }
  return out;
}

// Adds a gtest failure (with `where` in the message) for each property the plan breaks.
inline void check_balanced(const Topology& topo, const Plan& plan, const std::string& where) {
  ASSERT_EQ(plan.gpus.size(), topo.gpus.size()) << where;
  std::vector<std::vector<size_t>> nearest(topo.gpus.size());
  for (size_t g = 0; g < topo.gpus.size(); ++g) nearest[g] = nearest_nics(topo, g).nics;
  bool overlapping = false;  // distinct sets that share NICs: evenness is only approximate
  for (size_t a = 0; a < nearest.size(); ++a)
    for (size_t b = 0; b < nearest.size(); ++b)
      if (nearest[a] != nearest[b])
        for (size_t n : nearest[a])
          if (std::count(nearest[b].begin(), nearest[b].end(), n)) overlapping = true;

  std::map<std::vector<size_t>, std::vector<size_t>> groups;  // nearest set -> GPUs
  std::map<size_t, size_t> used;  // NIC -> GPUs using it, over the whole plan
  for (const GpuRails& r : plan.gpus)
    for (const Rail& rail : r.rails) ++used[rail.nic];
  for (size_t g = 0; g < topo.gpus.size(); ++g) {
    const GpuRails& r = plan.gpus[g];
    EXPECT_EQ(r.gpu, g) << where;
    const std::string gpu = topo.gpus[g].pci.to_string();
    if (!nearest[g].empty()) {
      EXPECT_FALSE(r.rails.empty()) << where << ": GPU " << gpu << " has no rail";
    }
    for (const Rail& rail : r.rails) {
      EXPECT_TRUE(std::count(nearest[g].begin(), nearest[g].end(), rail.nic))
          << where << ": GPU " << gpu << " uses " << topo.nics[rail.nic].name
          << ", not one of its nearest NICs";
      EXPECT_EQ(rail.path, path_between(topo, topo.gpus[g], topo.nics[rail.nic])) << where;
    }
    for (size_t i = 1; i < r.rails.size(); ++i)
      EXPECT_LT(topo.nics[r.rails[i - 1].nic].pci, topo.nics[r.rails[i].nic].pci)
          << where << ": rails of " << gpu << " not sorted or repeated";
    groups[nearest[g]].push_back(g);
  }
  for (const auto& [set, gpus] : groups) {
    if (set.empty()) continue;
    std::map<size_t, size_t> load;
    size_t min_rails = SIZE_MAX, max_rails = 0;
    for (size_t g : gpus) {
      min_rails = std::min(min_rails, plan.gpus[g].rails.size());
      max_rails = std::max(max_rails, plan.gpus[g].rails.size());
      for (const Rail& r : plan.gpus[g].rails) ++load[r.nic];
    }
    // Every NIC of a tied set carries traffic. Where distinct sets overlap, a NIC may serve only
    // the GPUs that have it at a better class, so coverage is checked over the whole plan.
    for (size_t n : set)
      EXPECT_GT(overlapping ? used[n] : load[n], 0u)
          << where << ": NIC " << topo.nics[n].name << " of a tied set is unused";
    if (overlapping) continue;
    EXPECT_LE(max_rails - min_rails, 1u) << where << ": GPUs sharing a set get uneven rail counts";
    size_t lo = SIZE_MAX, hi = 0;
    for (size_t n : set) {
      lo = std::min(lo, load[n]);
      hi = std::max(hi, load[n]);
    }
    EXPECT_LE(hi - lo, 1u) << where << ": NICs of a set carry uneven GPU counts";
    if (set.size() >= gpus.size()) {
      EXPECT_EQ(hi, 1u) << where << ": with more NICs than GPUs, each NIC serves one GPU";
    }
  }
}

}  // namespace xport::topology::test
