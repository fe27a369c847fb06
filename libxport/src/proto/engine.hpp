// The protocol engine of one device: it composes the parts, owns lifecycle (opening rails,
// teardown) and the progress loop that reads every rail's CQ in bounded batches and dispatches
// each completion by its op context and remote CQ data. The public classes (api/) call its
// facades, which reach the engine only through its Driver (driver.hpp: a pass, a wait):
//   regions.hpp            MemoryCalls: registering, keys, a caller's buffer checked
//   connections/calls.hpp  ConnectionCalls: listen, accept, connect, close
//   two_sided/calls.hpp    TwoSidedCalls: isend, irecv, test, wait, flush
//   one_sided/calls.hpp    OneSidedCalls: windows and their operations and waits
// The work itself is done by its parts, one per concern, over the shared DeviceState
// (device_state.hpp):
//   control.hpp            control messages, receive buffers, connection retirement
//   connections/           listen/connect/accept, CONN_* messages, close
//   two_sided/eager        eager messages and credits
//   two_sided/rendezvous   RTS/CTS and striped writes
//   two_sided/matching     grouped receives, messages placed by tag
//   one_sided/             windows: puts, gets, signals, atomics, transfers over per-peer streams
//                          (its own parts: window, stream, signal, atomic, transfer)
//   flush.hpp              flush reads on every rail
//   peer_health.hpp        keepalive, peer loss, clock-driven clean-up
// Registration lives in memory/registry.hpp, rail health in rail/health.hpp, channels, peers and
// comm ids in pool/.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "core/cpu_relax.hpp"
#include "proto/connections/calls.hpp"
#include "proto/connections/connections.hpp"
#include "proto/control.hpp"
#include "proto/dispatch.hpp"
#include "proto/driver.hpp"
#include "proto/flush.hpp"
#include "proto/one_sided/calls.hpp"
#include "proto/one_sided/one_sided.hpp"
#include "proto/peer_health.hpp"
#include "proto/regions.hpp"
#include "proto/device_state.hpp"
#include "proto/two_sided/calls.hpp"
#include "proto/two_sided/eager.hpp"
#include "proto/two_sided/matching.hpp"
#include "proto/two_sided/rendezvous.hpp"
#include "proto/waker.hpp"
#include "xport/stats.hpp"

namespace xport::proto {

class Engine final : public memory::RegionOwner, public Driver {
 public:
  // One rail per fi_info (its domain); connected-endpoint providers take exactly one. The
  // pointer returned is the handle the public classes hold: when its last copy goes, the engine
  // shuts down (closes its communicators, drains, lets its registrations go); the engine itself
  // lives on while Regions registered through it do.
  static Result<std::shared_ptr<Engine>> open(const std::vector<const fi_info*>& rails,
                                              const Capabilities& caps,
                                              const EngineConfig& config);
  ~Engine();

  const Capabilities& caps() const { return state_.caps; }
  // What the device was opened with (eager_max as limited by the provider).
  const EngineConfig& config() const { return state_.config; }
  size_t rail_count() const { return state_.rails.size(); }
  const std::string& rail_name(size_t i) const { return state_.rails[i]->name(); }

  // The public calls, by family.
  MemoryCalls& memory() { return memory_; }
  ConnectionCalls& connections() { return connection_calls_; }
  TwoSidedCalls& two_sided() { return two_sided_calls_; }
  OneSidedCalls& one_sided() { return one_sided_calls_; }

  void release_region(memory::RegionState& r) override;

  Status progress();
  // The same pass; how many completions it read from the CQs.
  Result<size_t> progress_counted();
  Stats stats() const;

  // What the public layer keeps per device beside the engine and registers through it (the
  // staging pools of GPU sources, api/staging_pool.hpp): made by `make` on first use, dropped by
  // shutdown, since its registrations hold the engine (nullptr once shut down).
  std::shared_ptr<void> attachment(const std::function<std::shared_ptr<void>()>& make);

  // For engine-level tests and the fuzz target: what progress does with `len` bytes that arrived
  // as a message on rail `rail` (control endpoint), or with a remote-CQ-data completion on it
  // (`eager`: a headerless eager message of `len` payload bytes, else a peer's write). Nothing
  // is held: an early eager message is copied.
  void inject_message(size_t rail, const uint8_t* bytes, size_t len);
  void inject_cq_data(size_t rail, uint64_t data, const uint8_t* payload, size_t len, bool eager);
  // For engine-level tests: true while the clear-to-send for message `seq` of send communicator
  // `comm` waits for its isend; and the engine's lock, held until the returned object goes.
  bool early_cts_for_test(CommId comm, uint64_t seq);
  std::unique_ptr<Lock> lock_for_test() { return std::make_unique<Lock>(state_); }
  // The device's token (exported keys and connection messages carry it).
  uint64_t device_token() const { return state_.device_token; }

  // (Driver: the pause between two passes of a wait; comm.cc's waits make it too)
  bool between_passes(uint32_t spin, const Deadline& d, WaitState& w) override;

 private:
  Engine();
  void shutdown();
  // Another device of this process (its token) is closing: everything towards it fails now,
  // what it sent last is read while its endpoints are still open, and nothing is posted to it
  // again (DeviceState::close_peer).
  void peer_closed(uint64_t token);
  void drain_cqs();
  // (Driver: a progress pass under the lock; the links read with no lock held)
  void progress_locked() override;
  void refresh_links() override;
  void housekeeping();
  // One sleep of a blocking wait: unless a completion was handled since it last looked, or a
  // CQ still holds entries (fi_trywait), until a wait object fires, another thread's progress
  // rings, or a tick passes (10 ms doubling to 50 ms while nothing is handled; 100 µs doubling
  // to 8 ms where a CQ has no wait object).
  void sleep_once(const Deadline& d, WaitState& w);
  void open_waker_locked();
  size_t poll_cqs();  // a bounded batch from every rail's CQ; the entries handled
  void apply_link_states(Clock::time_point now);
  // The rail's CQ failed: out of service for good, its CQ read no more, and everything that was
  // in flight on it (whose completions will never come) failed or moved to another rail.
  void fail_rail(uint32_t rail, const Status& why);

  mutable DeviceState state_;  // (the lock is taken in const calls too)
  Dispatch dispatch_{state_};
  Control control_{state_};
  Connections connections_{state_};
  Eager eager_{state_};
  Rendezvous rendezvous_{state_};
  Matching matching_{state_};
  OneSided one_sided_{state_};
  Flusher flusher_{state_};
  PeerHealth health_{state_};
  // The facades of the public calls.
  MemoryCalls memory_{state_, *this};
  ConnectionCalls connection_calls_{state_, *this, connections_, flusher_};
  TwoSidedCalls two_sided_calls_{state_, *this, memory_, eager_, rendezvous_, matching_, flusher_};
  OneSidedCalls one_sided_calls_{state_, *this, memory_, one_sided_};
  uint32_t passes_ = 0;
  size_t pass_handled_ = 0;  // completions the last pass read (guarded by the engine lock)
  // Set by a thread that slept: the next pass runs housekeeping (its timers are due by the
  // clock; a sleeping wait makes one pass per wake-up).
  std::atomic<bool> due_check_{false};
  Clock::time_point next_rail_check_{};
  Clock::time_point next_health_check_{};
  // Set by housekeeping when the links are due to be read again; taken by refresh_links, which
  // reads them outside the lock (no clock read per call).
  std::atomic<bool> links_due_{true};
  std::atomic<bool> links_fresh_{false};  // read since housekeeping last applied them
  Clock::time_point next_link_read_{};
  // Blocking waits: completions handled so far (a wait sleeps only when none came since its
  // last look), and what they sleep on.
  // (written under the lock; between_passes reads it without)
  std::atomic<uint64_t> handled_gen_{0};
  Waker waker_;
  bool waker_failed_ = false;
  bool eq_watched_ = false;
  std::mutex attach_mu_;  // guards attachment_ and attach_closed_ (never taken with the lock held)
  std::shared_ptr<void> attachment_;
  bool attach_closed_ = false;
};

}  // namespace xport::proto
