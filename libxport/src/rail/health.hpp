// Rail health: the link state as sysfs shows it (topology::rail_link: every RDMA port, EFA and
// cxi domain names, network interfaces), read without any engine lock held, and the quarantine
// state the engine drives from it and from fatal errors.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "fabric/counters.hpp"

namespace xport::rail {

class Health {
 public:
  using Clock = std::chrono::steady_clock;
  enum class State { up, quarantined };

  Health(std::string rail, std::string sysfs_root = "/sys");

  // Reads the link state from sysfs (file I/O: call it with no lock held). Safe to call from any
  // thread; the result is read by link_up().
  void refresh_link();
  bool link_up() const { return link_up_.load(std::memory_order_acquire); }

  // Below: under the engine lock.
  State state() const { return state_; }
  const char* state_name() const { return state_ == State::up ? "up" : "quarantined"; }
  void quarantine(const std::string& why, Clock::time_point retry_at);
  void restore();
  Clock::time_point retry_at() const { return retry_at_; }
  const std::string& reason() const { return reason_; }
  // Fatal error completions in a row (reset by any successful completion on the rail).
  uint32_t& consecutive_failures() { return consecutive_failures_; }
  const fabric::Counter& quarantines() const { return quarantines_; }

 private:
  std::string rail_;
  std::string sysfs_root_;
  std::atomic<bool> link_up_{true};
  State state_ = State::up;
  uint32_t consecutive_failures_ = 0;
  std::string reason_;
  Clock::time_point retry_at_{};
  fabric::Counter quarantines_;
};

}  // namespace xport::rail
