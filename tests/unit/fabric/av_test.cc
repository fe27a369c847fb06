// AddressVector::insert on shm: an address libfabric 1.17's shm would take and then crash on at
// the first send (a name with no region behind it: fuzz-engine's forged connection request) is
// refused by name; a real endpoint's address goes in. On tcp;ofi_rxm: socket addresses not of
// the domain's format are refused before rxm's AV sees them (one of no known family left it
// refusing every later address), and a real one still goes in after them.
#include <gtest/gtest.h>

#include <netinet/in.h>

#include <cstring>
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

TEST(SocketAddresses, ForgedOnesAreRefusedAndLeaveTheAddressVectorUsable) {
  ProviderRequest req;
  req.provider = "tcp;ofi_rxm";
  req.peers_on_host = true;
  auto sel = select_provider(req);
  if (!sel.ok()) GTEST_SKIP() << "no tcp;ofi_rxm here: " << sel.status().to_string();
  rail::RailConfig rc;
  rc.rx_buffers = 4;
  rc.tx_buffers = 4;
  auto rail = rail::Rail::open(sel->info.get(), rc, 0);
  ASSERT_TRUE(rail.ok()) << rail.status().to_string();
  AddressVector& av = *(*rail)->av();
  auto own = (*rail)->data()->endpoint().address();
  ASSERT_TRUE(own.ok()) << own.status().to_string();
  ASSERT_EQ(own->size(), sizeof(sockaddr_in)) << "the test expects an IPv4 domain (lo)";
  sockaddr_in real;
  std::memcpy(&real, own->data(), sizeof(real));
  auto as_bytes = [](const sockaddr_in& a) {
    std::vector<uint8_t> b(sizeof(a));
    std::memcpy(b.data(), &a, sizeof(a));
    return b;
  };
  std::vector<std::vector<uint8_t>> forged;
  std::vector<uint8_t> no_family = as_bytes(real);
  no_family[0] = 0xfe;
  no_family[1] = 0xca;
  forged.push_back(no_family);
  sockaddr_in a = real;
  a.sin_family = AF_INET6;  // the right size, another family
  forged.push_back(as_bytes(a));
  a = real;
  a.sin_port = 0;
  forged.push_back(as_bytes(a));
  a = real;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  forged.push_back(as_bytes(a));
  a = real;
  a.sin_zero[3] = 1;
  forged.push_back(as_bytes(a));
  forged.push_back(std::vector<uint8_t>(own->begin(), own->end() - 1));  // short
  forged.push_back({});
  for (size_t i = 0; i < forged.size(); ++i) {
    auto r = av.insert(forged[i]);
    ASSERT_FALSE(r.ok()) << "forged address " << i << " was taken";
    EXPECT_EQ(r.status().code(), Code::invalid_argument) << r.status().to_string();
  }
  auto in = av.insert(*own);
  EXPECT_TRUE(in.ok()) << "after forged addresses: " << in.status().to_string();
}

}  // namespace
}  // namespace xport::fabric
