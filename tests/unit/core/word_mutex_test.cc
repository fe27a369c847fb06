// WordMutex: mutual exclusion under contention (threads parked and woken), try_lock.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "core/word_mutex.hpp"

namespace xport::core {
namespace {

TEST(WordMutex, TryLockFailsWhileHeldAndSucceedsOnceFree) {
  WordMutex m;
  ASSERT_TRUE(m.try_lock());
  EXPECT_FALSE(m.try_lock()) << "try_lock took a held mutex";
  std::thread other([&] { EXPECT_FALSE(m.try_lock()) << "another thread took a held mutex"; });
  other.join();
  m.unlock();
  EXPECT_TRUE(m.try_lock()) << "try_lock failed on a free mutex";
  m.unlock();
}

// More threads than this machine's cores, each holding the lock across a yield: waiters run out
// of their spin and park, and every unlock that finds one parked must wake it.
TEST(WordMutex, ContendedThreadsExcludeEachOtherAndAllFinish) {
  WordMutex m;
  constexpr int kThreads = 8;
  constexpr int kRounds = 3000;
  uint64_t counter = 0;  // plain: only the lock protects it
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::vector<std::future<void>> done;
  for (int t = 0; t < kThreads; ++t) {
    done.push_back(std::async(std::launch::async, [&] {
      for (int i = 0; i < kRounds; ++i) {
        std::lock_guard<WordMutex> g(m);
        if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
        counter += 1;
        if (i % 64 == 0) std::this_thread::yield();  // held across a reschedule now and then
        inside.fetch_sub(1);
      }
    }));
  }
  for (auto& f : done) {
    ASSERT_EQ(f.wait_for(std::chrono::seconds(60)), std::future_status::ready)
        << "a thread did not get the lock within 60 s: a parked waiter was not woken";
  }
  EXPECT_EQ(overlaps.load(), 0) << "two threads held the lock at once";
  EXPECT_EQ(counter, uint64_t{kThreads} * kRounds) << "increments under the lock were lost";
}

}  // namespace
}  // namespace xport::core
