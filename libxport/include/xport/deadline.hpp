// Deadlines: every wait in libxport takes one, so no call blocks forever by accident.
#pragma once

#include <chrono>

namespace xport {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  static Deadline after(std::chrono::nanoseconds d) { return Deadline(Clock::now() + d); }
  static Deadline at(Clock::time_point t) { return Deadline(t); }
  // Already expired: the call makes one non-blocking attempt.
  static Deadline now() { return Deadline(Clock::now()); }
  // No deadline: the wait ends only with its event or an error (a peer that dies is still
  // reported, within XPORT_PEER_TIMEOUT_MS; docs/semantics.md).
  static Deadline never() { return Deadline(Clock::time_point::max()); }
  // The default for library waits: XPORT_TIMEOUT_MS from now.
  static Deadline from_knob();

  bool expired() const { return Clock::now() >= at_; }
  std::chrono::nanoseconds remaining() const {
    auto r = at_ - Clock::now();
    return r.count() > 0 ? std::chrono::duration_cast<std::chrono::nanoseconds>(r)
                         : std::chrono::nanoseconds(0);
  }
  Clock::time_point time_point() const { return at_; }

 private:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  Clock::time_point at_;
};

}  // namespace xport
