// Deadlines: every wait in libxport takes one, so no call blocks forever by accident.
#pragma once

#include <chrono>

namespace xport {

// How a wait passes the time until its event (docs/semantics.md, "Waiting"): by the knob
// XPORT_WAIT (spin unless set), spinning on progress passes, or sleeping on the CQs' wait
// objects after XPORT_WAIT_SPIN_US of spinning.
enum class WaitMode : unsigned char { by_knob, spin, block };

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

  // The same deadline, for a wait that spins, or that sleeps once its spin budget is spent,
  // whatever XPORT_WAIT says: Deadline::after(5s).blocking().
  Deadline spinning() const { return Deadline(at_, WaitMode::spin); }
  Deadline blocking() const { return Deadline(at_, WaitMode::block); }
  WaitMode wait_mode() const { return mode_; }

 private:
  explicit Deadline(Clock::time_point at, WaitMode mode = WaitMode::by_knob)
      : at_(at), mode_(mode) {}
  Clock::time_point at_;
  WaitMode mode_;
};

}  // namespace xport
