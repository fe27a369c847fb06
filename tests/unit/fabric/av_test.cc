// AddressVector::insert on shm: an address libfabric 1.17's shm would take and then crash on at
// the first send (a name with no region behind it: fuzz-engine's forged connection request) is
// refused by name; a real endpoint's address goes in.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fabric/objects.hpp"
#include "fabric/provider.hpp"
#include "rail/rail.hpp"

namespace xport::fabric {
namespace {

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

TEST(ShmAddresses, ANameWithNoRegionIsRefusedARealOneTaken) {
  ProviderRequest req;
  req.provider = "shm";
  req.peers_on_host = true;
  auto sel = select_provider(req);
  if (!sel.ok()) GTEST_SKIP() << "no shm here: " << sel.status().to_string();
  rail::RailConfig rc;
  rc.rx_buffers = 4;
  rc.tx_buffers = 4;
  auto rail = rail::Rail::open(sel->info.get(), rc, 0);
  ASSERT_TRUE(rail.ok()) << rail.status().to_string();
  AddressVector& av = *(*rail)->av();
  for (const std::string& bad : {std::string("skkkk"), std::string("fi_shm://"), std::string(""),
                                 std::string("fi_shm://no-such-region:0:0"),
                                 std::string("fi_shm://../etc/passwd"),
                                 std::string("fi_shm://..")}) {
    auto r = av.insert(bytes(bad));
    ASSERT_FALSE(r.ok()) << "'" << bad << "' was taken";
    EXPECT_EQ(r.status().code(), Code::invalid_argument) << r.status().to_string();
  }
  auto none = av.insert(bytes("fi_shm://no-such-region:0:0"));
  EXPECT_NE(none.status().message().find("names no shared-memory region"), std::string::npos)
      << none.status().to_string();
  auto own = (*rail)->data()->endpoint().address();
  ASSERT_TRUE(own.ok()) << own.status().to_string();
  auto in = av.insert(*own);
  EXPECT_TRUE(in.ok()) << in.status().to_string();
}

}  // namespace
}  // namespace xport::fabric
