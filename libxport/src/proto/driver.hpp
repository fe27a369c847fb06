// The narrow handle the public-call facades (memory, connections, two-sided, one-sided) have on
// their engine: a progress pass, the rails' links read, the pause between two passes of a wait.
// The Engine implements it; the facades know nothing else of it.
#pragma once

#include <chrono>
#include <cstdint>

#include "proto/device_state.hpp"

namespace xport::proto {

// Waits spin on progress passes; only every kSpinsPerYield-th pass reads the clock for the
// deadline, and yields the CPU once the wait has lasted kYieldAfter (a yield is a system call:
// on shm one per pass cost more than the message itself). Rail health and peer housekeeping are
// looked at every kPassesPerCheck passes.
inline constexpr uint32_t kSpinsPerYield = 64;
inline constexpr std::chrono::microseconds kYieldAfter{20};
inline constexpr uint32_t kPassesPerCheck = 16;

class Driver {
 public:
  // Between two unsuccessful passes of a wait (the spin-th since it began): every
  // kSpinsPerYield passes the deadline is read and the core yielded, or, for a wait that
  // blocks (Deadline::blocking(), XPORT_WAIT=block) once XPORT_WAIT_SPIN_US has passed, the
  // thread sleeps on the CQs' wait objects (docs/semantics.md, "Waiting"). False once the
  // deadline has passed.
  struct WaitState {
    Clock::time_point began{};  // first read of the clock (kSpinsPerYield passes in)
    Clock::time_point sleep_after{};
    bool sleeping = false;  // past the spin: sleeps between single passes
    uint64_t seen_gen = UINT64_MAX;
    uint64_t paused_gen = UINT64_MAX;  // XPORT_SPIN_GATHER_NS: handled_gen_ at the last pass
    // Sleeps since something was last handled: each sleep's limit doubles with them (sleep_once).
    uint32_t idle_sleeps = 0;
  };
  virtual bool between_passes(uint32_t spin, const Deadline& d, WaitState& w) = 0;
  // Progress, under the lock; bounded work per call.
  virtual void progress_locked() = 0;
  // Reads link states (file I/O) with no lock held, at most every XPORT_RAIL_CHECK_MS.
  virtual void refresh_links() = 0;

 protected:
  ~Driver() = default;
};

// What each facade holds: the shared state and the handle on its engine, and the wait they all
// make (progress passes under the lock until done() holds or the deadline passes).
class Calls {
 protected:
  Calls(DeviceState& state, Driver& driver) : state_(state), driver_(driver) {}
  template <typename Pred>
  Status wait_until(Deadline deadline, Pred&& done, const char* what);

  DeviceState& state_;  // (the lock is taken in const calls too)
  Driver& driver_;
};

template <typename Pred>
Status Calls::wait_until(Deadline deadline, Pred&& done, const char* what) {
  Driver::WaitState w;
  for (uint32_t spin = 0;; ++spin) {
    if (spin % kSpinsPerYield == 0) driver_.refresh_links();
    {
      Lock l(state_);
      driver_.progress_locked();
      if (done()) return Status::success();
    }
    if (!driver_.between_passes(spin, deadline, w)) return Status(Code::timeout, what);
  }
}

}  // namespace xport::proto
