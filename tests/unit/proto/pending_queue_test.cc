// The queue every part keeps of posts the provider refused (proto/pending_queue.hpp): offered in
// the order queued, a kept post behind the others, each post queued before a pass offered once
// in it, drops that leave the rest in order, the deferred count, and no growth once warm.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "proto/pending_queue.hpp"

namespace xport::proto {
namespace {

using Queue = PendingQueue<int>;

std::vector<int> contents(Queue& q) {
  std::vector<int> out;
  q.retry([&](Queue::Entry& e) {
    out.push_back(e.post);
    return true;
  });
  return out;
}

TEST(PendingQueue, OffersInOrderAndKeepsTheKeptBehindInOrder) {
  uint64_t deferred = 0;
  Queue q(&deferred);
  for (int i = 0; i < 6; ++i) q.push(i);
  EXPECT_EQ(deferred, 6u);
  std::vector<int> offered;
  q.retry([&](Queue::Entry& e) {
    offered.push_back(e.post);
    return e.post % 2 == 0;  // even ones stay queued
  });
  EXPECT_EQ(offered, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(contents(q), (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(deferred, 6u) << "a post kept by a retry is not counted again";
}

TEST(PendingQueue, APassOffersOnlyWhatWasQueuedBeforeIt) {
  Queue q;
  q.push(1);
  q.push(2);
  std::vector<int> offered;
  q.retry([&](Queue::Entry& e) {
    offered.push_back(e.post);
    q.push(e.post + 10);  // queued during the pass (a failure sends a message...)
    return false;
  });
  EXPECT_EQ(offered, (std::vector<int>{1, 2}));
  EXPECT_EQ(contents(q), (std::vector<int>{11, 12}));
}

TEST(PendingQueue, DropIfLeavesTheOthersInOrder) {
  Queue q;
  for (int i = 0; i < 10; ++i) q.push(i);
  std::vector<int> dropped;
  q.drop_if([&](Queue::Entry& e) {
    if (e.post % 3 != 0) return false;
    dropped.push_back(e.post);
    return true;
  });
  EXPECT_EQ(dropped, (std::vector<int>{0, 3, 6, 9}));
  EXPECT_EQ(contents(q), (std::vector<int>{1, 2, 4, 5, 7, 8}));
  EXPECT_TRUE(q.any_of([](const Queue::Entry& e) { return e.post == 5; }));
  EXPECT_FALSE(q.any_of([](const Queue::Entry& e) { return e.post == 6; }));
}

TEST(PendingQueue, SinceAndCountAsPushed) {
  uint64_t deferred = 0;
  Queue q(&deferred);
  const auto t = Queue::Clock::now();
  q.push(1, t);
  q.push(2, {}, /*count=*/false);  // (a handoff's stripe, queued before any try)
  EXPECT_EQ(deferred, 1u);
  std::vector<bool> timed;
  q.retry([&](Queue::Entry& e) {
    timed.push_back(e.since == t);
    return false;
  });
  EXPECT_EQ(timed, (std::vector<bool>{true, false}));
  EXPECT_TRUE(q.empty());
}

TEST(PendingQueue, StopsGrowingOnceWarm) {
  PendingQueue<std::string> q;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 100; ++i) q.push("post");
    q.retry([](auto&) { return false; });
  }
  const size_t warm = q.capacity();
  EXPECT_GE(warm, 100u);
  for (int round = 0; round < 1000; ++round) {
    for (int i = 0; i < 100; ++i) q.push("post");
    q.retry([&](auto& e) { return e.post.size() > 100; });  // (none kept)
    q.drop_if([](auto&) { return true; });
    ASSERT_EQ(q.capacity(), warm) << "round " << round;
  }
  EXPECT_TRUE(q.empty());
}

}  // namespace
}  // namespace xport::proto
