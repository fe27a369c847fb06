// The comm-id table: ids from 1, reuse after erase, refusal when full.
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
    uint16_t id = t.insert(std::make_unique<int>(i));
    EXPECT_NE(id, 0);
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_EQ(t.insert(std::make_unique<int>(9)), 0) << "full table gives id 0";
  EXPECT_EQ(t.size(), 3u);
  uint16_t victim = *ids.begin();
  t.erase(victim);
  EXPECT_EQ(t.find(victim), nullptr);
  EXPECT_EQ(t.insert(std::make_unique<int>(5)), victim) << "a freed id is reused";
  EXPECT_EQ(*t.find(victim), 5);
  EXPECT_EQ(t.find(0), nullptr);
  EXPECT_EQ(t.find(60000), nullptr);
  t.erase(0);
  t.erase(60000);
  int count = 0;
  t.for_each([&](uint16_t, int&) { ++count; });
  EXPECT_EQ(count, 3);
}

}  // namespace
}  // namespace xport::pool
