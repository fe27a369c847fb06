// The balanced NIC plan: each GPU's rails come from its nearest NIC set; GPUs that share a set
// share it evenly (counts differ by at most one, every NIC used); all in PCI order so every host
// computes the same plan and rails pair up across peers.
#include "topology/plan.hpp"

#include <algorithm>
#include <numeric>

#include "core/format.hpp"
#include "core/knob.hpp"
#include "topology/distance.hpp"

namespace xport::topology {
namespace {

int find_root(std::vector<size_t>& up, size_t x) {
  while (up[x] != x) {
    up[x] = up[up[x]];
    x = up[x];
  }
  return static_cast<int>(x);
}

bool intersects(const std::vector<size_t>& a, const std::vector<size_t>& b) {
  for (size_t x : a)
    if (std::binary_search(b.begin(), b.end(), x)) return true;
  return false;
}

// GPUs that all have the same nearest set: contiguous blocks in PCI order. K >= G: GPU i gets
// NICs [iK/G, (i+1)K/G) (disjoint, sizes differ by at most one); K < G: GPU i gets NIC iK/G
// (each NIC serves floor or ceil of G/K GPUs).
void share_identical(const std::vector<size_t>& gpus, const std::vector<size_t>& set,
                     std::vector<std::vector<size_t>>& rails) {
  const size_t g_count = gpus.size(), k = set.size();
  for (size_t i = 0; i < g_count; ++i) {
    if (k >= g_count) {
      for (size_t j = i * k / g_count; j < (i + 1) * k / g_count; ++j)
        rails[gpus[i]].push_back(set[j]);
    } else {
      rails[gpus[i]].push_back(set[i * k / g_count]);
    }
  }
}

// GPUs whose nearest sets overlap without being equal (rare: asymmetric trees with hop ties).
// Each GPU takes a share of its set sized by how many GPUs compete for it, least-loaded NIC
// first; then any NIC left unused goes to the GPU of its set with the fewest rails.
void share_overlapping(const std::vector<size_t>& gpus,
                       const std::vector<std::vector<size_t>>& nearest, size_t nic_count,
                       std::vector<std::vector<size_t>>& rails) {
  std::vector<size_t> load(nic_count, 0);
  std::vector<size_t> share(gpus.size(), 1);
  size_t max_share = 1;
  for (size_t i = 0; i < gpus.size(); ++i) {
    size_t competing = 0;
    for (size_t h : gpus) competing += intersects(nearest[gpus[i]], nearest[h]);
    share[i] = std::max<size_t>(1, nearest[gpus[i]].size() / std::max<size_t>(1, competing));
    max_share = std::max(max_share, share[i]);
  }
  for (size_t round = 0; round < max_share; ++round) {
    for (size_t i = 0; i < gpus.size(); ++i) {
      std::vector<size_t>& mine = rails[gpus[i]];
      if (mine.size() >= share[i]) continue;
      size_t best = nic_count;
      for (size_t n : nearest[gpus[i]]) {
        if (std::find(mine.begin(), mine.end(), n) != mine.end()) continue;
        if (best == nic_count || load[n] < load[best]) best = n;
      }
      if (best == nic_count) continue;
      mine.push_back(best);
      ++load[best];
    }
  }
  std::vector<size_t> all;
  for (size_t g : gpus) all.insert(all.end(), nearest[g].begin(), nearest[g].end());
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  for (size_t n : all) {
    if (load[n] > 0) continue;
    size_t pick = gpus.size();
    for (size_t i = 0; i < gpus.size(); ++i) {
      if (!std::binary_search(nearest[gpus[i]].begin(), nearest[gpus[i]].end(), n)) continue;
      if (pick == gpus.size() || rails[gpus[i]].size() < rails[gpus[pick]].size()) pick = i;
    }
    rails[gpus[pick]].push_back(n);
    ++load[n];
  }
}

}  // namespace

std::vector<std::vector<size_t>> balanced_rails(const Topology& topo) {
  const size_t g_count = topo.gpus.size();
  std::vector<std::vector<size_t>> rails(g_count);
  if (topo.nics.empty()) return rails;
  std::vector<std::vector<size_t>> nearest(g_count);
  for (size_t g = 0; g < g_count; ++g) nearest[g] = nearest_nics(topo, g).nics;

  // GPUs whose nearest sets share a NIC compete for it: one component each.
  std::vector<size_t> up(g_count);
  std::iota(up.begin(), up.end(), size_t{0});
  std::vector<size_t> first_user(topo.nics.size(), g_count);
  for (size_t g = 0; g < g_count; ++g) {
    for (size_t n : nearest[g]) {
      if (first_user[n] == g_count)
        first_user[n] = g;
      else
        up[static_cast<size_t>(find_root(up, g))] =
            static_cast<size_t>(find_root(up, first_user[n]));
    }
  }
  std::vector<std::vector<size_t>> components(g_count);
  for (size_t g = 0; g < g_count; ++g)
    components[static_cast<size_t>(find_root(up, g))].push_back(g);

  for (const std::vector<size_t>& gpus : components) {
    if (gpus.empty()) continue;
    bool identical = std::all_of(gpus.begin(), gpus.end(),
                                 [&](size_t g) { return nearest[g] == nearest[gpus.front()]; });
    if (identical)
      share_identical(gpus, nearest[gpus.front()], rails);
    else
      share_overlapping(gpus, nearest, topo.nics.size(), rails);
  }
  for (auto& r : rails) std::sort(r.begin(), r.end());
  return rails;
}

bool Plan::empty() const {
  return std::all_of(gpus.begin(), gpus.end(), [](const GpuRails& g) { return g.rails.empty(); });
}

Result<Plan> plan(const Topology& topo, const PlanOptions& options) {
  const bool from_knob = !options.nics.has_value();
  const std::string text = from_knob ? core::knob_string(core::KnobId::nics) : *options.nics;
  const std::string_view origin = from_knob ? "XPORT_NICS" : "NIC override";
  XPORT_ASSIGN_OR_RETURN(NicsOverride over, parse_nics_override(topo, text, origin));

  Plan p;
  std::vector<std::vector<size_t>> rails = balanced_rails(topo);
  p.gpus.resize(topo.gpus.size());
  for (size_t g = 0; g < topo.gpus.size(); ++g) p.gpus[g].gpu = g;
  if (over.global) {
    for (size_t g = 0; g < topo.gpus.size(); ++g) {
      rails[g] = over.all;
      p.gpus[g].overridden = true;
    }
  }
  for (const auto& [g, nics] : over.per_gpu) {
    rails[g] = nics;
    p.gpus[g].overridden = true;
  }
  for (size_t g = 0; g < topo.gpus.size(); ++g)
    for (size_t n : rails[g])
      p.gpus[g].rails.push_back(Rail{n, path_between(topo, topo.gpus[g], topo.nics[n])});

  if (topo.gpus.empty() && topo.nics.empty())
    p.explanation = "no GPU and no RDMA-capable NIC found: the plan is empty";
  else if (topo.gpus.empty())
    p.explanation = core::str("no GPU found: the plan is empty (", topo.nics.size(),
                              topo.nics.size() == 1 ? " NIC" : " NICs", " found)");
  else if (topo.nics.empty())
    p.explanation = core::str("no RDMA-capable NIC found: the plan is empty (", topo.gpus.size(),
                              topo.gpus.size() == 1 ? " GPU has" : " GPUs have", " no rails)");
  else if (over.global || !over.per_gpu.empty())
    p.explanation =
        core::str("rails set by ", origin, "='", text, "'",
                  over.global ? "" : " for the GPUs it names; the others are automatic");
  return p;
}

}  // namespace xport::topology
