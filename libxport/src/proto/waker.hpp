// What a blocking wait sleeps on (XPORT_WAIT=block, Deadline::blocking()): an epoll set of the
// rails' CQ wait objects (FI_WAIT_FD), the connection EQ's where it has one, and an eventfd
// that a thread whose progress pass handled completions rings for the threads asleep.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "xport/status.hpp"

namespace xport::proto {

class Waker {
 public:
  Waker() = default;
  ~Waker();
  Waker(const Waker&) = delete;
  Waker& operator=(const Waker&) = delete;

  // Opens the epoll set and the eventfd (once; false when the system refused them).
  Status open();
  bool is_open() const { return epoll_fd_ >= 0; }
  // Adds a wait object's file descriptor to the set.
  Status watch(int fd);
  // Sleeps until a watched descriptor is readable, the bell rings, or `limit` passes.
  void sleep(std::chrono::microseconds limit);
  // Wakes the sleepers: one count of the eventfd (a semaphore) for each thread asleep.
  void ring();
  std::atomic<uint32_t>& sleepers() { return sleepers_; }

 private:
  int epoll_fd_ = -1;
  int event_fd_ = -1;
  std::atomic<uint32_t> sleepers_{0};
};

}  // namespace xport::proto
