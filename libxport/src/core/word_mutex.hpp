// A mutex in one atomic word, for the engine lock that every call of the public API and every
// pass of a spinning wait takes. Uncontended, lock and unlock are one atomic instruction each
// (glibc's pthread_mutex_lock/unlock pair ran about 160 instructions per wait pass, a quarter
// of an idle pass on shm). Contended, a waiter spins briefly, then parks on the word (C++20
// atomic wait: a futex on Linux) and is woken by the unlock that finds it parked.
#pragma once

#include <atomic>

namespace xport::core {

class WordMutex {
 public:
  WordMutex() = default;
  WordMutex(const WordMutex&) = delete;
  WordMutex& operator=(const WordMutex&) = delete;

  void lock() {
    int expected = kFree;
    if (word_.compare_exchange_strong(expected, kHeld, std::memory_order_acquire,
                                      std::memory_order_relaxed)) {
      return;
    }
    lock_contended();
  }
  bool try_lock() {
    int expected = kFree;
    return word_.compare_exchange_strong(expected, kHeld, std::memory_order_acquire,
                                         std::memory_order_relaxed);
  }
  void unlock() {
    if (word_.exchange(kFree, std::memory_order_release) == kParked) word_.notify_one();
  }

 private:
  static constexpr int kFree = 0;
  static constexpr int kHeld = 1;    // held, nobody parked
  static constexpr int kParked = 2;  // held, and a thread may be parked on the word
  void lock_contended();
  std::atomic<int> word_{kFree};
};

}  // namespace xport::core
