// GpuHost's team hellos (gpu/host/team_hello.hpp): round trips, anything but a whole hello of this
// version refused, and nonces every rank derives alike that differ between teams.
#include <gtest/gtest.h>

#include <vector>

#include "gpu/host/team_hello.hpp"

namespace xport::gpu {
namespace {

TEST(TeamHello, RoundTripsAndRefusesAnythingElse) {
  const TeamHello h{0x0123456789abcdefull, 3, 8};
  std::vector<uint8_t> bytes(kTeamHelloBytes);
  encode_team_hello(h, bytes.data());
  TeamHello back;
  ASSERT_TRUE(decode_team_hello(bytes, &back));
  EXPECT_EQ(back.nonce, h.nonce);
  EXPECT_EQ(back.rank, h.rank);
  EXPECT_EQ(back.size, h.size);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(decode_team_hello(std::span<const uint8_t>(bytes.data(), n), &back)) << n;
  }
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  EXPECT_FALSE(decode_team_hello(longer, &back));
  // The rank a stranger once sent (4 bytes) is no hello.
  const uint8_t rank_only[4] = {1, 0, 0, 0};
  EXPECT_FALSE(decode_team_hello(rank_only, &back));
  // Magic, version and reserved: every bit flip is refused.
  for (size_t i = 0; i < 8; ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> bad = bytes;
      bad[i] ^= static_cast<uint8_t>(1u << bit);
      EXPECT_FALSE(decode_team_hello(bad, &back)) << "byte " << i << " bit " << bit;
    }
  }
}

TEST(TeamHello, NoncesAreAlikeForOneTeamAndDifferBetweenTeams) {
  const std::vector<ConnectionHandle> ab{{1, 2, 3}, {4, 5}};
  const std::vector<ConnectionHandle> ab_again{{1, 2, 3}, {4, 5}};
  const std::vector<ConnectionHandle> ba{{4, 5}, {1, 2, 3}};
  const std::vector<ConnectionHandle> split{{1, 2}, {3, 4, 5}};  // same bytes, other handles
  EXPECT_EQ(team_digest(ab), team_digest(ab_again));
  EXPECT_NE(team_digest(ab), team_digest(ba));
  EXPECT_NE(team_digest(ab), team_digest(split));
  const uint64_t d = team_digest(ab);
  EXPECT_EQ(team_nonce(d, 0), team_nonce(team_digest(ab_again), 0));
  EXPECT_NE(team_nonce(d, 0), team_nonce(d, 1)) << "the next team with the same handles";
  EXPECT_NE(team_nonce(d, 0), 0u);
}

}  // namespace
}  // namespace xport::gpu
