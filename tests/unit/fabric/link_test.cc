// Link rate of rails: the provider's NIC attributes (fabric/link.cc) and Device::rail_info(),
// which falls back to sysfs (topology::rail_link) and reports 0 when nobody knows.
#include <gtest/gtest.h>
#include <rdma/fabric.h>

#include <cstring>

#include "fabric/link.hpp"
#include "xport/xport.hpp"

namespace xport::fabric {
namespace {

TEST(NicLinkSpeed, ReadsTheProvidersLinkAttributes) {
  fi_info* info = fi_allocinfo();
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(nic_link_speed(info), 0u) << "no NIC attributes: unknown";
  fi_link_attr link{};
  fid_nic nic{};
  info->nic = &nic;
  EXPECT_EQ(nic_link_speed(info), 0u) << "a NIC without link attributes: unknown";
  nic.link_attr = &link;
  link.speed = 200000000000ull;
  EXPECT_EQ(nic_link_speed(info), 200000000000ull);
  info->nic = nullptr;  // ours, not libfabric's: fi_freeinfo must not close it
  fi_freeinfo(info);
  EXPECT_EQ(nic_link_speed(nullptr), 0u);
}

TEST(RailInfo, LoopbackRailHasNoLinkRate) {
  // (Designated initializers: GCC 12 at -O3 takes assigning a short literal to the default
  // constructed string for a read of uninitialized bytes, -Wmaybe-uninitialized.)
  ContextOptions o{.provider = "tcp;ofi_rxm", .domain = "lo"};  // loopback in this sandbox
  auto ctx = Context::open(o);
  if (!ctx.ok()) GTEST_SKIP() << ctx.status().to_string();
  auto dev = (*ctx)->open_device();
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  const auto& rails = (*dev)->rail_info();
  ASSERT_EQ(rails.size(), (*dev)->rails().size());
  EXPECT_EQ(rails[0].name, (*dev)->rails()[0]);
  // lo has no speed in sysfs (EINVAL) and tcp reports no NIC: unknown, never a made-up figure.
  EXPECT_EQ(rails[0].link_bits_per_s, 0u);
  EXPECT_EQ(rails[0].link_source, "");
}

}  // namespace
}  // namespace xport::fabric
