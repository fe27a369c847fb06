// A window's table of tickets not yet complete (proto/one_sided/state.hpp): a ring indexed by
// ticket number in place of a map. Out-of-order completion, holes, growth past the first ring
// and numbers that were taken but never added must all find, erase and iterate as a map would.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <random>
#include <vector>

#include "proto/one_sided/state.hpp"

namespace xport::proto {
namespace {

TEST(TicketTable, BehavesAsAMapOfTicketsUnderRandomCompletion) {
  TicketTable table;
  std::map<Ticket, uint64_t> model;  // ticket -> its need_seq, as the table should hold it
  std::mt19937 rng(7);
  Ticket next = 1;
  for (int step = 0; step < 20000; ++step) {
    if (model.size() < 300 && rng() % 3 != 0) {
      if (rng() % 17 == 0) ++next;  // a number taken by an operation that was refused
      const Ticket t = next++;
      table.add(t).need_seq = t * 3;
      model[t] = t * 3;
    } else if (!model.empty()) {
      // Completion out of order: any live ticket, the lowest more often.
      auto it = model.begin();
      if (rng() % 2 == 0) std::advance(it, static_cast<long>(rng() % model.size()));
      table.erase(it->first);
      model.erase(it);
    }
    ASSERT_EQ(table.size(), model.size());
    ASSERT_EQ(table.empty(), model.empty());
    if (!model.empty()) {
      ASSERT_EQ(table.lowest(), model.begin()->first) << "step " << step;
    }
  }
  std::vector<Ticket> seen;
  table.for_each([&](Ticket t, const TicketState& ts) {
    EXPECT_EQ(ts.need_seq, t * 3);
    seen.push_back(t);
  });
  std::vector<Ticket> want;
  for (auto& [t, v] : model) want.push_back(t);
  EXPECT_EQ(seen, want) << "every live ticket, lowest first";
  EXPECT_EQ(table.find(next), nullptr) << "a ticket not yet issued";
  EXPECT_EQ(table.find(0), nullptr);
  for (auto& [t, v] : model) {
    ASSERT_NE(table.find(t), nullptr);
    EXPECT_EQ(table.find(t)->need_seq, v);
  }
}

TEST(TicketTable, AnOldTicketStuckWhileThousandsPassKeepsItsState) {
  TicketTable table;
  table.add(1).need_seq = 42;
  for (Ticket t = 2; t < 5000; ++t) {
    table.add(t);
    table.erase(t);
  }
  ASSERT_EQ(table.size(), 1u);
  ASSERT_NE(table.find(1), nullptr);
  EXPECT_EQ(table.find(1)->need_seq, 42u);
  EXPECT_EQ(table.lowest(), 1u);
  table.erase(1);
  EXPECT_TRUE(table.empty());
  table.add(5000).need_seq = 7;  // after emptying: starts again at the next number
  EXPECT_EQ(table.lowest(), 5000u);
  EXPECT_EQ(table.find(5000)->need_seq, 7u);
}

// An erased ticket's entry is reused for a later one (the ring wraps): the later ticket starts
// as a new TicketState, and the erased one's counter region is let go at once.
TEST(TicketTable, AReusedEntryStartsAsANewTicketAndLetsTheOldRegionGo) {
  TicketTable table;
  auto region = std::make_shared<memory::RegionState>();
  uint64_t word = 0, value = 0;
  for (Ticket t = 1; t <= 64; ++t) {
    TicketState& ts = table.add(t);
    ts.local_left = 3;
    ts.need_seq = 99;
    ts.results_left = 2;
    ts.fetch = true;
    ts.transfer = true;
    ts.result = &value;
    ts.counter_region = region;
    ts.counter = &word;
    ts.error = Status(Code::peer_lost, "ticket " + std::to_string(t) + " failed");
  }
  EXPECT_EQ(region.use_count(), 65);
  for (Ticket t = 1; t <= 64; ++t) table.erase(t);
  EXPECT_EQ(region.use_count(), 1) << "erased tickets still hold their counter region";
  for (Ticket t = 65; t <= 200; ++t) {
    const TicketState& ts = table.add(t);
    EXPECT_EQ(ts.local_left, 0u) << t;
    EXPECT_EQ(ts.need_seq, 0u) << t;
    EXPECT_EQ(ts.results_left, 0u) << t;
    EXPECT_FALSE(ts.fetch) << t;
    EXPECT_FALSE(ts.transfer) << t;
    EXPECT_EQ(ts.result, nullptr) << t;
    EXPECT_EQ(ts.counter_region, nullptr) << t;
    EXPECT_EQ(ts.counter, nullptr) << t;
    EXPECT_TRUE(ts.error.ok()) << t << ": " << ts.error.to_string();
    EXPECT_TRUE(ts.error.message().empty()) << t;
    table.erase(t);
  }
}

}  // namespace
}  // namespace xport::proto
