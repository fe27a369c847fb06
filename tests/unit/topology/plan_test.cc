// The balanced plan on random machines (coverage, evenness, determinism) and hand-made corner
// cases, and the XPORT_NICS override with its errors.
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/knob.hpp"
#include "plan_checks.hpp"
#include "synthetic.hpp"
#include "topology/distance.hpp"
#include "topology/plan.hpp"

namespace xport::topology {
namespace {

PlanOptions automatic() { return PlanOptions{std::string()}; }

TEST(TopologyPlanProperties, RandomMachinesAreCoveredEvenAndDeterministic) {
  int planned = 0, tied_sets = 0;
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    test::SpecGenerator gen(seed);
    auto spec = gen.machine();
    auto topo = test::build(spec, 0);
    ASSERT_TRUE(topo.ok()) << "seed " << seed << ": " << topo.status().to_string();
    auto p = plan(*topo, automatic());
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    test::check_balanced(*topo, *p, "seed " + std::to_string(seed));
    if (!p->empty()) ++planned;
    for (size_t g = 0; g < topo->gpus.size(); ++g)
      tied_sets += nearest_nics(*topo, g).nics.size() > 1;
    // The same machine discovered in another order (another host, another process) plans alike.
    auto shuffled = test::build(spec, seed * 7919u);
    ASSERT_TRUE(shuffled.ok());
    auto q = plan(*shuffled, automatic());
    ASSERT_TRUE(q.ok());
    EXPECT_EQ(test::by_address(*topo, *p), test::by_address(*shuffled, *q)) << "seed " << seed;
  }
  // The generator must exercise what it claims to, or the test proves nothing.
  EXPECT_GT(planned, 200);
  EXPECT_GT(tied_sets, 50);
}

// One host bridge, one switch, `gpus` GPUs and `nics` NICs all on its downstream ports.
Topology one_switch(int gpus, int nics) {
  InventoryBuilder b(Source::hwloc_xml, true);
  int hb = b.add_host_bridge("hb", {0}, "");
  DeviceFacts bridge;
  bridge.pci_class = 0x060400;
  uint8_t bus = 1;
  int root = *b.add_bridge(hb, PciAddress{0, bus++, 0, 0}, bridge, {});
  int up = *b.add_bridge(root, PciAddress{0, bus++, 0, 0}, bridge, {});
  auto leaf = [&](bool gpu, int i) {
    int down = *b.add_bridge(up, PciAddress{0, bus++, static_cast<uint8_t>(i % 32), 0}, bridge, {});
    DeviceInfo info;
    info.facts.pci_class = gpu ? 0x030200 : 0x020700;
    info.facts.vendor = gpu ? kVendorNvidia : kVendorMellanox;
    if (!gpu) info.rdma_names.push_back("mlx5_" + std::to_string(i));
    EXPECT_TRUE(b.add_device(down, PciAddress{0, bus++, 0, 0}, std::move(info), {}).ok());
  };
  for (int i = 0; i < gpus; ++i) leaf(true, i);
  for (int i = 0; i < nics; ++i) leaf(false, i);
  auto t = b.finish();
  EXPECT_TRUE(t.ok());
  return std::move(t).value();
}

TEST(TopologyPlanShares, MoreNicsThanGpusGivesDisjointEqualShares) {
  for (auto [g, n] : {std::pair{2, 8}, {3, 8}, {4, 4}, {1, 3}, {8, 8}}) {
    Topology t = one_switch(g, n);
    auto p = plan(t, automatic());
    ASSERT_TRUE(p.ok());
    test::check_balanced(t, *p, std::to_string(g) + " GPUs, " + std::to_string(n) + " NICs");
    size_t total = 0;
    for (const GpuRails& r : p->gpus) {
      total += r.rails.size();
      EXPECT_GE(r.rails.size(), static_cast<size_t>(n / g));
      EXPECT_LE(r.rails.size(), static_cast<size_t>((n + g - 1) / g));
      for (const Rail& rail : r.rails) EXPECT_EQ(rail.path.distance, Distance::pix);
    }
    EXPECT_EQ(total, static_cast<size_t>(n)) << "each NIC exactly once";
  }
}

TEST(TopologyPlanShares, MoreGpusThanNicsLoadsDifferByAtMostOne) {
  Topology t = one_switch(7, 3);
  auto p = plan(t, automatic());
  ASSERT_TRUE(p.ok());
  std::vector<int> load(3);
  for (const GpuRails& r : p->gpus) {
    ASSERT_EQ(r.rails.size(), 1u);
    ++load[r.rails[0].nic];
  }
  EXPECT_EQ(*std::max_element(load.begin(), load.end()), 3);
  EXPECT_EQ(*std::min_element(load.begin(), load.end()), 2);
}

TEST(TopologyPlanShares, EmptyInputsGiveEmptyPlansWithReasons) {
  for (auto [g, n] : {std::pair{0, 0}, {0, 2}, {3, 0}}) {
    Topology t = one_switch(g, n);
    auto p = plan(t, automatic());
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(p->empty());
    EXPECT_EQ(p->gpus.size(), static_cast<size_t>(g));
    EXPECT_NE(p->explanation.find("the plan is empty"), std::string::npos) << p->explanation;
  }
}

TEST(TopologyPlanShares, OverlappingNearestSetsStillUseEveryNic) {
  // GPU A (NUMA 0) is NODE-near n0 and n1; GPU B (NUMA 1) is NODE-near n1 and n2, because n1's
  // host bridge is local to both NUMA nodes. Distinct sets that overlap take the greedy path.
  InventoryBuilder b(Source::hwloc_xml, true);
  auto device = [&](int hb, uint8_t bus, bool gpu, const char* name) {
    DeviceInfo info;
    info.facts.pci_class = gpu ? 0x030200 : 0x020700;
    info.facts.vendor = gpu ? kVendorNvidia : kVendorMellanox;
    if (!gpu) info.rdma_names.push_back(name);
    ASSERT_TRUE(b.add_device(hb, PciAddress{0, bus, 0, 0}, std::move(info), {}).ok());
  };
  device(b.add_host_bridge("a", {0}, ""), 0x10, true, "");
  device(b.add_host_bridge("b", {1}, ""), 0x20, true, "");
  device(b.add_host_bridge("x", {0}, ""), 0x30, false, "n0");
  device(b.add_host_bridge("y", {0, 1}, ""), 0x40, false, "n1");
  device(b.add_host_bridge("z", {1}, ""), 0x50, false, "n2");
  auto t = b.finish();
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(nearest_nics(*t, 0).nics, (std::vector<size_t>{0, 1}));
  ASSERT_EQ(nearest_nics(*t, 1).nics, (std::vector<size_t>{1, 2}));
  auto p = plan(*t, automatic());
  ASSERT_TRUE(p.ok());
  test::check_balanced(*t, *p, "overlap");
  std::vector<int> load(3);
  for (const GpuRails& r : p->gpus) {
    EXPECT_FALSE(r.rails.empty());
    for (const Rail& rail : r.rails) ++load[rail.nic];
  }
  EXPECT_EQ(load, (std::vector<int>{1, 1, 1})) << "each NIC used once, none twice";
}

class TopologyOverride : public ::testing::Test {
 protected:
  Topology t_ = one_switch(2, 3);  // GPUs 0000:04:00.0, 0000:06:00.0; NICs mlx5_0..2
  std::string gpu0_ = t_.gpus[0].pci.to_string();
  std::string gpu1_ = t_.gpus[1].pci.to_string();

  Status error_of(const std::string& text) {
    auto p = plan(t_, PlanOptions{text});
    return p.ok() ? Status::success() : p.status();
  }
};

TEST_F(TopologyOverride, GlobalListGivesEveryGpuTheseNics) {
  auto p = plan(t_, PlanOptions{" mlx5_2 , mlx5_0 "});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  for (const GpuRails& r : p->gpus) {
    EXPECT_TRUE(r.overridden);
    ASSERT_EQ(r.rails.size(), 2u);
    EXPECT_EQ(t_.nics[r.rails[0].nic].name, "mlx5_2");  // the order written
    EXPECT_EQ(t_.nics[r.rails[1].nic].name, "mlx5_0");
  }
  EXPECT_NE(p->explanation.find("rails set by"), std::string::npos);
}

TEST_F(TopologyOverride, PerGpuFormSetsNamedGpusOthersStayAutomatic) {
  std::string nic1_pci = t_.nics[1].pci.to_string();
  auto p = plan(t_, PlanOptions{gpu1_ + "=mlx5_0+" + nic1_pci + ";"});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_FALSE(p->gpus[0].overridden);
  EXPECT_TRUE(p->gpus[1].overridden);
  ASSERT_EQ(p->gpus[1].rails.size(), 2u);
  EXPECT_EQ(p->gpus[1].rails[1].nic, 1u) << "a NIC may be named by its PCI address";
  auto automatic_plan = plan(t_, automatic());
  ASSERT_TRUE(automatic_plan.ok());
  EXPECT_EQ(p->gpus[0].rails.size(), automatic_plan->gpus[0].rails.size());
}

TEST_F(TopologyOverride, ErrorsNameTheBadToken) {
  struct Case {
    std::string text, needle;
  } cases[] = {
      {"mlx5_9", "unknown NIC 'mlx5_9'"},
      {"mlx5_0,,mlx5_1", "empty NIC name"},
      {"mlx5_0,mlx5_0", "'mlx5_0' listed twice"},
      {"mlx5_0+mlx5_1", "'+' separates NICs only in the per-GPU form"},
      {"0000:99:00.0=mlx5_0", "unknown GPU '0000:99:00.0'"},
      {"gpu0=mlx5_0", "GPU 'gpu0' is not a PCI address"},
      {gpu0_ + "=mlx5_0;" + gpu0_ + "=mlx5_1", "is given twice"},
      {gpu0_ + "=mlx5_0,mlx5_1", "separate a GPU's NICs with '+'"},
      {gpu0_ + "=mlx5_0;;" + gpu1_ + "=mlx5_1", "empty entry"},
      {gpu0_ + "=mlx5_0;mlx5_1", "'mlx5_1' has no '='"},
      {gpu0_ + "=", "empty NIC name"},
      {gpu0_ + "=bogus", "unknown NIC 'bogus' (NICs: mlx5_0, mlx5_1, mlx5_2)"},
  };
  for (const Case& c : cases) {
    Status s = error_of(c.text);
    EXPECT_EQ(s.code(), Code::invalid_argument) << c.text;
    EXPECT_NE(s.message().find(c.needle), std::string::npos)
        << "'" << c.text << "' gave: " << s.message();
  }
}

TEST_F(TopologyOverride, ReadFromTheKnobWhenNotGiven) {
  setenv("XPORT_NICS", "mlx5_1", 1);
  core::reload_knobs();
  auto p = plan(t_);
  unsetenv("XPORT_NICS");
  core::reload_knobs();
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  for (const GpuRails& r : p->gpus) {
    ASSERT_EQ(r.rails.size(), 1u);
    EXPECT_EQ(t_.nics[r.rails[0].nic].name, "mlx5_1");
  }
  setenv("XPORT_NICS", "nope", 1);
  core::reload_knobs();
  auto bad = plan(t_);
  unsetenv("XPORT_NICS");
  core::reload_knobs();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("XPORT_NICS: unknown NIC 'nope'"), std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace xport::topology
