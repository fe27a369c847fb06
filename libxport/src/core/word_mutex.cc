// WordMutex's contended path (the uncontended one is inline in the header).
#include "core/word_mutex.hpp"

#include "core/cpu_relax.hpp"

namespace xport::core {

void WordMutex::lock_contended() {
  // A holder's critical section is short (one progress pass, one post): a brief spin takes the
  // lock without a system call most of the time.
  for (int i = 0; i < 128; ++i) {
    cpu_relax();
    int expected = kFree;
    if (word_.load(std::memory_order_relaxed) == kFree &&
        word_.compare_exchange_weak(expected, kHeld, std::memory_order_acquire,
                                    std::memory_order_relaxed)) {
      return;
    }
  }
  // Parked: the word says so (kParked), so the holder's unlock wakes a waiter. Whoever takes
  // the lock from here leaves it kParked, since other waiters may still be parked.
  while (word_.exchange(kParked, std::memory_order_acquire) != kFree) {
    word_.wait(kParked, std::memory_order_relaxed);
  }
}

}  // namespace xport::core
