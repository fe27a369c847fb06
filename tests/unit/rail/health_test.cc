// Rail health reads the link through topology::rail_link: every RDMA port (not port 1 only),
// EFA domain names ("<device>-rdm"), cxi devices (their Ethernet interface), interfaces; a name
// with nothing readable (shm) counts as up. Reading happens in refresh_link(), which the engine
// calls with no lock held.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "rail/health.hpp"

namespace xport::rail {
namespace {

namespace fs = std::filesystem;

void put(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

class HealthSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("xport-health-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    // Port 1 down, port 2 active: a rail that reads port 1 only would call it down.
    put(root_ / "class/infiniband/mlx5_0/ports/1/state", "1: DOWN\n");
    put(root_ / "class/infiniband/mlx5_0/ports/2/state", "4: ACTIVE\n");
    put(root_ / "class/infiniband/rdmap16s27/ports/1/state", "4: ACTIVE\n");
    put(root_ / "class/infiniband/rdmap79s27/ports/1/state", "1: DOWN\n");
    put(root_ / "class/cxi/cxi0/device/net/hsn0/ifindex", "3\n");
    put(root_ / "class/net/hsn0/operstate", "down\n");
    put(root_ / "class/net/veth0/operstate", "up\n");
  }
  void TearDown() override { fs::remove_all(root_); }
  bool up(const std::string& rail) {
    Health h(rail, root_.string());
    h.refresh_link();
    return h.link_up();
  }
  fs::path root_;
};

TEST_F(HealthSysfs, EveryPortEfaAndCxiNames) {
  EXPECT_TRUE(up("mlx5_0")) << "an active second port keeps the rail up";
  EXPECT_TRUE(up("rdmap16s27-rdm")) << "EFA's domain name is the device's plus -rdm";
  EXPECT_FALSE(up("rdmap79s27-rdm"));
  EXPECT_FALSE(up("cxi0")) << "cxi: the link of its interface (hsn0 is down)";
  EXPECT_TRUE(up("veth0"));
  EXPECT_TRUE(up("shm")) << "nothing readable: no link to lose";
}

TEST(Health, QuarantineAndRestore) {
  Health h("lo");
  EXPECT_EQ(h.state(), Health::State::up);
  h.quarantine("link down", Health::Clock::now());
  h.quarantine("link down", Health::Clock::now());
  EXPECT_EQ(h.state(), Health::State::quarantined);
  EXPECT_EQ(h.quarantines().get(), 1u) << "one event per entry into quarantine";
  h.consecutive_failures() = 2;
  h.restore();
  EXPECT_EQ(h.state(), Health::State::up);
  EXPECT_EQ(h.consecutive_failures(), 0u);
}

}  // namespace
}  // namespace xport::rail
