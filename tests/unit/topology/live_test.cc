// The live path: sysfs enrichment against a fabricated /sys tree, and discover() on whatever
// machine runs the tests (the CI machine has neither GPU nor RDMA NIC: empty plan, no error).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "topology/live.hpp"
#include "xport/topology.hpp"

namespace xport::topology {
namespace {

namespace fs = std::filesystem;

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

class TopologyFakeSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("xport-sysfs-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::path gpu = root_ / "bus/pci/devices/0000:01:00.0";
    write(gpu / "current_link_speed", "32.0 GT/s PCIe\n");
    write(gpu / "current_link_width", "16\n");
    write(gpu / "numa_node", "1\n");
    write(gpu / "local_cpulist", "8-15\n");
    fs::path nic = root_ / "bus/pci/devices/0000:02:00.0";
    write(nic / "current_link_speed", "Unknown\n");
    write(nic / "current_link_width", "0\n");
    write(nic / "infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
    write(nic / "infiniband/mlx5_0/ports/1/rate", "400 Gb/sec (4X NDR)\n");
    write(nic / "infiniband/mlx5_0/ports/2/state", "1: DOWN\n");
    write(nic / "infiniband/mlx5_0/ports/2/rate", "10 Gb/sec (4X SDR)\n");
    // An RDMA device hwloc did not report.
    fs::path stray = root_ / "devices/pci0000:00/0000:00:09.0";
    fs::create_directories(stray);
    fs::create_directories(root_ / "class/infiniband/mlx5_9");
    fs::create_directory_symlink(stray, root_ / "class/infiniband/mlx5_9/device");
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

const char* kHwloc =
    "<topology version=\"2.0\"><object type=\"Machine\" os_index=\"0\">"
    "<object type=\"Bridge\" bridge_type=\"0-1\" bridge_pci=\"0000:[00-02]\">"
    "<object type=\"PCIDev\" pci_busid=\"0000:01:00.0\" pci_type=\"0302 [10de:2330] [10de:16c1] "
    "a1\"/>"
    "<object type=\"PCIDev\" pci_busid=\"0000:02:00.0\" pci_type=\"0207 [15b3:1021] [15b3:0041] "
    "00\">"
    "<object type=\"OSDev\" name=\"mlx5_0\" osdev_type=\"3\"><info name=\"Port1State\" "
    "value=\"1\"/>"
    "</object></object></object></object></topology>";

TEST_F(TopologyFakeSysfs, LinkNumaCpusAndPortsComeFromSysfs) {
  auto t = discover_from(kHwloc, {}, root_.string());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->source, Source::live);
  ASSERT_EQ(t->gpus.size(), 1u);
  EXPECT_EQ(t->gpus[0].link.to_string(), "32 GT/s x16");
  EXPECT_EQ(t->gpus[0].numa, 1) << "hwloc had no NUMA node for it; sysfs does";
  EXPECT_EQ(t->gpus[0].cpus, "8-15");
  ASSERT_EQ(t->nics.size(), 1u);
  EXPECT_EQ(t->nics[0].link.to_string(), "") << "'Unknown' speed stays unknown";
  ASSERT_EQ(t->nics[0].ports.size(), 2u) << "sysfs replaces hwloc's port list";
  EXPECT_EQ(t->nics[0].ports[0].state, "ACTIVE");
  EXPECT_DOUBLE_EQ(t->nics[0].ports[0].rate_gbps, 400);
  EXPECT_EQ(t->nics[0].ports[1].state, "DOWN");
  bool noted = false;
  for (const std::string& n : t->notes)
    noted |= n.find("mlx5_9 (PCI 0000:00:09.0)") != std::string::npos;
  EXPECT_TRUE(noted) << "an RDMA device outside hwloc's tree must be reported";
}

TEST_F(TopologyFakeSysfs, MissingSysfsLeavesHwlocData) {
  auto t = discover_from(kHwloc, {}, (root_ / "nothing-here").string());
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->nics.size(), 1u);
  ASSERT_EQ(t->nics[0].ports.size(), 1u);
  EXPECT_EQ(t->nics[0].ports[0].state, "DOWN");
  EXPECT_EQ(t->gpus[0].numa, -1);
}

TEST(TopologyLive, ThisMachineGivesAPlanOrAReasonAndNoError) {
  auto t = discover();
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->source, Source::live);
  auto p = plan(*t, PlanOptions{std::string()});
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->gpus.size(), t->gpus.size());
  if (t->gpus.empty() || t->nics.empty()) {
    EXPECT_TRUE(p->empty());
    EXPECT_NE(p->explanation.find("the plan is empty"), std::string::npos) << p->explanation;
    ASSERT_FALSE(t->notes.empty()) << "the live path must say what it saw";
    EXPECT_NE(t->notes.back().find("PCI devices on this node"), std::string::npos)
        << t->notes.back();
  } else {
    EXPECT_FALSE(p->empty());
  }
}

}  // namespace
}  // namespace xport::topology
