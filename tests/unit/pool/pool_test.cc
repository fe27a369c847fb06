// The pool's keys, placement, refcounts and teardown, without a fabric: channels here are bare
// records (no endpoint), as the pool itself never touches one.
#include "pool/pool.hpp"

#include <gtest/gtest.h>

#include <set>

namespace xport::pool {
namespace {

std::unique_ptr<Channel> bare() { return std::make_unique<Channel>(); }

// Places `n` communicators towards `peer` the way the engine does: each placed one attaches
// (opening the slot's channel when it has none).
std::vector<Channel*> place_many(Pool& pool, uint64_t peer, int n) {
  std::vector<Channel*> out;
  for (int i = 0; i < n; ++i) {
    const ChannelKey key = pool.place(0, peer);
    Channel* ch = pool.find(key);
    const bool primary = ch == nullptr;
    if (primary) ch = pool.add(key, bare());
    pool.attach(*ch, primary);
    out.push_back(ch);
  }
  return out;
}

TEST(Pool, CommunicatorsSpreadOverGroupsAndSlotsInTurn) {
  Pool pool(2, 3);  // 2 groups of 3 channels: 6 channels for any number of communicators
  auto chans = place_many(pool, 42, 20);
  EXPECT_EQ(pool.size(), 6u);
  EXPECT_EQ(pool.primaries(), 6u);
  EXPECT_EQ(pool.secondaries(), 14u);
  std::set<std::pair<uint32_t, uint32_t>> seen;
  for (int i = 0; i < 6; ++i) seen.insert({chans[i]->key.group, chans[i]->key.slot});
  EXPECT_EQ(seen.size(), 6u) << "the first six communicators open six distinct channels";
  for (Channel* ch : chans) {
    EXPECT_EQ(ch->key.peer, 42u);
    EXPECT_EQ(ch->key.dir, Direction::out);
    EXPECT_LT(ch->key.group, 2u);
    EXPECT_LT(ch->key.slot, 3u);
  }
  // Another peer has channels of its own.
  place_many(pool, 43, 1);
  EXPECT_EQ(pool.size(), 7u);
}

TEST(Pool, NoSharingGivesEveryCommunicatorItsOwnChannel) {
  Pool pool(0, 4);
  auto chans = place_many(pool, 42, 10);
  EXPECT_EQ(pool.size(), 10u);
  EXPECT_EQ(pool.secondaries(), 0u);
  for (Channel* ch : chans) EXPECT_EQ(ch->key.group, kOwnGroup);
}

TEST(Pool, TheLastUserReleasesByKeyAndAFailedChannelGivesUpItsKey) {
  Pool pool(1, 1);
  auto chans = place_many(pool, 7, 3);
  Channel* ch = chans[0];
  ASSERT_EQ(chans[1], ch);
  ch->ops = 5;
  int fid_storage = 0;
  fid_t fid = reinterpret_cast<fid_t>(&fid_storage);
  pool.bind(fid, *ch);
  EXPECT_EQ(pool.by_fid(fid), ch);
  EXPECT_FALSE(pool.detach(*ch));
  EXPECT_FALSE(pool.detach(*ch));
  // Failed: a new communicator gets a new channel on the same key; the old one stays until its
  // last user goes.
  const ChannelKey key = ch->key;
  pool.orphan(key);
  EXPECT_EQ(pool.find(key), nullptr);
  auto fresh = place_many(pool, 7, 1);
  EXPECT_NE(fresh[0], ch);
  EXPECT_EQ(fresh[0]->key, key);
  EXPECT_EQ(pool.size(), 2u);
  EXPECT_TRUE(pool.detach(*ch));
  std::unique_ptr<Channel> gone = pool.release(*ch);
  ASSERT_NE(gone, nullptr);
  EXPECT_EQ(pool.by_fid(fid), nullptr) << "a released channel's fid leads nowhere";
  EXPECT_EQ(pool.find(key), fresh[0]) << "releasing the orphan left the new channel alone";
  EXPECT_EQ(pool.ops_gone(), 5u);
  EXPECT_EQ(pool.release(*ch), nullptr) << "released twice";
}

TEST(Pool, AcceptedConnectionsTakeSlotsOfTheirOwn) {
  Pool pool(1, 4);
  const ChannelKey a = pool.accepted(0, 9, 0);
  const ChannelKey b = pool.accepted(0, 9, 0);
  EXPECT_EQ(a.dir, Direction::in);
  EXPECT_NE(a, b) << "a connector's reused slot never collides with a connection still open here";
}

}  // namespace
}  // namespace xport::pool
