// rail_link(): a rail's link state and rate from a fabricated /sys tree (RDMA ports, EFA domain
// suffixes, network interfaces, nothing) and from this machine's loopback interface.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "topology/live.hpp"
#include "xport/topology.hpp"

namespace xport::topology {
namespace {

namespace fs = std::filesystem;

void put(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

class RailLinkSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("xport-raillink-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    // Port 1 down, port 10 active: the active port speaks for the rail whatever the order.
    put(root_ / "class/infiniband/mlx5_0/ports/1/state", "1: DOWN\n");
    put(root_ / "class/infiniband/mlx5_0/ports/1/rate", "10 Gb/sec (4X SDR)\n");
    put(root_ / "class/infiniband/mlx5_0/ports/10/state", "4: ACTIVE\n");
    put(root_ / "class/infiniband/mlx5_0/ports/10/rate", "400 Gb/sec (4X NDR)\n");
    put(root_ / "class/infiniband/rdmap16s27/ports/1/state", "1: DOWN\n");
    put(root_ / "class/infiniband/rdmap16s27/ports/1/rate", "100 Gb/sec\n");
    put(root_ / "class/net/eth0/operstate", "up\n");
    put(root_ / "class/net/eth0/speed", "25000\n");
    put(root_ / "class/net/veth1/operstate", "down\n");
    put(root_ / "class/net/veth1/speed", "-1\n");
    put(root_ / "class/net/lo/operstate", "unknown\n");
    // Slingshot: the cxi device's link is the interface of its PCI function.
    put(root_ / "class/cxi/cxi0/device/net/hsn0/ifindex", "3\n");
    put(root_ / "class/net/hsn0/operstate", "up\n");
    put(root_ / "class/net/hsn0/speed", "200000\n");
    put(root_ / "class/cxi/cxi1/device/net/hsn1/ifindex", "4\n");
    put(root_ / "class/net/hsn1/operstate", "down\n");
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(RailLinkSysfs, RdmaDeviceReportsItsBestPort) {
  RailLink l = rail_link_in(root_.string(), "mlx5_0");
  EXPECT_EQ(l.kind, "rdma");
  EXPECT_EQ(l.state, "ACTIVE");
  EXPECT_DOUBLE_EQ(l.rate_gbps, 400);
  ASSERT_EQ(l.ports.size(), 2u);
  EXPECT_EQ(l.ports[0].number, 1);
  EXPECT_EQ(l.ports[1].number, 10);
  EXPECT_TRUE(l.up());
}

TEST_F(RailLinkSysfs, EfaDomainSuffixIsStrippedAndDownIsDown) {
  RailLink l = rail_link_in(root_.string(), "rdmap16s27-rdm");
  EXPECT_EQ(l.name, "rdmap16s27-rdm");
  EXPECT_EQ(l.device, "rdmap16s27");
  EXPECT_EQ(l.state, "DOWN");
  EXPECT_FALSE(l.up());
}

TEST_F(RailLinkSysfs, CxiDomainReadsItsInterface) {
  RailLink up = rail_link_in(root_.string(), "cxi0");
  EXPECT_EQ(up.kind, "netdev");
  EXPECT_EQ(up.device, "hsn0");
  EXPECT_TRUE(up.up());
  EXPECT_DOUBLE_EQ(up.rate_gbps, 200);
  RailLink down = rail_link_in(root_.string(), "cxi1");
  EXPECT_EQ(down.device, "hsn1");
  EXPECT_FALSE(down.up());
}

TEST_F(RailLinkSysfs, NetworkInterfaces) {
  RailLink eth = rail_link_in(root_.string(), "eth0");
  EXPECT_EQ(eth.kind, "netdev");
  EXPECT_TRUE(eth.up());
  EXPECT_DOUBLE_EQ(eth.rate_gbps, 25);
  RailLink veth = rail_link_in(root_.string(), "veth1");
  EXPECT_FALSE(veth.up());
  EXPECT_EQ(veth.rate_gbps, 0);  // "-1": unknown
  RailLink lo = rail_link_in(root_.string(), "lo");
  EXPECT_TRUE(lo.up());  // loopback reports "unknown", as rails read it
  EXPECT_EQ(lo.rate_gbps, 0);
}

TEST_F(RailLinkSysfs, NoDeviceAndHostileNamesReadNothing) {
  for (const char* name : {"shm", "", "..", "../net/eth0", "eth0/../../net/eth0"}) {
    RailLink l = rail_link_in(root_.string(), name);
    EXPECT_EQ(l.kind, "") << name;
    EXPECT_EQ(l.state, "") << name;
  }
}

TEST(RailLinkLive, LoopbackInterfaceOfThisMachine) {
  if (!fs::exists("/sys/class/net/lo")) GTEST_SKIP() << "no /sys/class/net/lo here";
  RailLink l = rail_link("lo");
  EXPECT_EQ(l.kind, "netdev");
  EXPECT_FALSE(l.state.empty());
}

}  // namespace
}  // namespace xport::topology
