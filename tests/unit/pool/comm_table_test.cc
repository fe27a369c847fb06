// The comm-id table: ids from 1 with generations, FIFO reuse, refusal when full.
#include <gtest/gtest.h>

#include <memory>
#include <set>

#include "pool/comm_table.hpp"

namespace xport::pool {
namespace {

TEST(CommTable, IssuesUniqueNonZeroIdsAndRefusesWhenFull) {
  CommTable<int> t(3);
  std::set<uint16_t> ids;
  for (int i = 0; i < 3; ++i) {
    CommId id = t.insert(std::make_unique<int>(i));
    EXPECT_NE(id.index, 0);
    ids.insert(id.index);
  }
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_FALSE(t.insert(std::make_unique<int>(9))) << "a full table gives no id";
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(t.find(CommId{0, 0}), nullptr);
  EXPECT_EQ(t.find(CommId{60000, 0}), nullptr);
  EXPECT_EQ(t.find_any(60000), nullptr);
  t.erase(0);
  t.erase(60000);
  int count = 0;
  t.for_each([&](uint16_t, int&) { ++count; });
  EXPECT_EQ(count, 3);
}

// Late traffic for a closed communicator must not reach the next owner of its id: a freed id
// goes to the back of the queue (every other free id is issued first), and when it does come
// back it has the next generation, so the old owner's (id, generation) finds nothing.
TEST(CommTable, FreedIdsComeBackLastAndWithANewGeneration) {
  CommTable<int> t(4);
  CommId a = t.insert(std::make_unique<int>(1));
  t.erase(a.index);
  EXPECT_EQ(t.find(a), nullptr);
  std::set<uint16_t> next;
  for (int i = 0; i < 3; ++i) next.insert(t.insert(std::make_unique<int>(2)).index);
  EXPECT_EQ(next.count(a.index), 0u) << "id " << a.index << " was reissued while others were free";
  CommId again = t.insert(std::make_unique<int>(3));
  ASSERT_EQ(again.index, a.index) << "the freed id comes back once no other is free";
  EXPECT_NE(again.gen, a.gen);
  EXPECT_EQ(t.find(a), nullptr) << "the old generation reaches nobody";
  ASSERT_NE(t.find(again), nullptr);
  EXPECT_EQ(*t.find(again), 3);
  EXPECT_EQ(t.find_any(a.index), t.find(again));
}

TEST(CommTable, GenerationsWrapWithinTheirBits) {
  CommTable<int> t(1);
  CommId first = t.insert(std::make_unique<int>(0));
  CommId id = first;
  for (unsigned i = 0; i < (1u << kCommGenBits); ++i) {
    t.erase(id.index);
    id = t.insert(std::make_unique<int>(0));
    EXPECT_LE(id.gen, kCommGenMask);
  }
  EXPECT_EQ(id.gen, first.gen) << "after 2^bits reuses the generation wraps";
}

}  // namespace
}  // namespace xport::pool
