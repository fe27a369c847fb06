// PCI addresses: the forms accepted, the canonical form, ordering, and clear refusals.
#include <gtest/gtest.h>

#include "xport/topology.hpp"

namespace xport::topology {
namespace {

TEST(TopologyPciAddress, ParsesAndFormatsCanonically) {
  auto a = PciAddress::parse("0000:4F:00.0");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->to_string(), "0000:4f:00.0");
  auto short_form = PciAddress::parse("4f:00.0");
  ASSERT_TRUE(short_form.ok());
  EXPECT_EQ(*short_form, *a);
  auto vmd = PciAddress::parse("10000:e1:1f.7");
  ASSERT_TRUE(vmd.ok());
  EXPECT_EQ(vmd->domain, 0x10000u);
  EXPECT_EQ(vmd->to_string(), "10000:e1:1f.7");
  EXPECT_EQ(PciAddress::parse("1:2:3.4")->to_string(), "0001:02:03.4");
}

TEST(TopologyPciAddress, OrdersByDomainBusDeviceFunction) {
  EXPECT_LT(*PciAddress::parse("0000:10:1c.0"), *PciAddress::parse("0000:10:1d.0"));
  EXPECT_LT(*PciAddress::parse("0000:ff:1f.7"), *PciAddress::parse("0001:00:00.0"));
  EXPECT_LT(*PciAddress::parse("0000:20:00.0"), *PciAddress::parse("0000:20:00.1"));
}

TEST(TopologyPciAddress, RefusesMalformedWithTheReason) {
  const char* bad[] = {"",
                       "0000:4f:00",
                       "0000:4f:00.8",
                       "0000:4f:20.0",
                       "000000000:00:00.0",
                       "0000:100:00.0",
                       "0000:4g:00.0",
                       "0000:4f:00.0 ",
                       "0000-4f-00.0",
                       "0:0:0:0.0",
                       "0000:4f:00.00",
                       ":4f:00.0",
                       "4f:.0"};
  for (const char* text : bad) {
    auto a = PciAddress::parse(text);
    EXPECT_FALSE(a.ok()) << "'" << text << "' parsed";
    if (!a.ok()) {
      EXPECT_EQ(a.status().code(), Code::invalid_argument);
      EXPECT_NE(a.status().message().find("bad PCI address"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace xport::topology
