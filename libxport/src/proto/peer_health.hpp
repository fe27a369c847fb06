// Peer health and housekeeping on the clock: keepalives to peers this device waits on, peers
// declared lost after XPORT_PEER_TIMEOUT_MS of silence heard while this device made progress
// (their requests fail even when nobody set a deadline), idle peers retired, closed
// communicators whose linger ended erased.
#pragma once

#include "proto/dispatch.hpp"
#include "proto/device_state.hpp"

namespace xport::proto {

class PeerHealth {
 public:
  explicit PeerHealth(DeviceState& state) : state_(state) {}
  // What window streams wait on and their stall checks (the Engine wires it).
  void wire(OneSided& one_sided) { one_sided_ = &one_sided; }
  // ping, pong, rail_state.
  void register_handlers(Dispatch& d);
  // A bounded sweep, from progress at most every kInterval.
  void check(Clock::time_point now);
  void on_ping(const Message& m);
  void on_pong(const Message& m);
  // A peer's rail went out of or back into service: traffic towards it follows.
  void on_rail_state(const Message& m);
  static constexpr std::chrono::milliseconds kInterval{50};
  // The most of one gap between two sweeps that counts as a peer's silence (half the timeout
  // if that is less): a longer gap is this device away (no progress call: a GPU kernel, the
  // application computing), and a peer cannot answer a device that does not listen, nor be
  // asked by it. Sweeps of a device that waits come every kInterval or so (a sleeping wait
  // wakes at least every 50 ms), so this counts them whole.
  static constexpr std::chrono::milliseconds kLongestCountedGap{100};
  static constexpr std::chrono::seconds kPeerLinger{2};

 private:
  void ping(pool::Peer& p, Clock::time_point now);
  DeviceState& state_;
  OneSided* one_sided_ = nullptr;
  uint64_t next_nonce_ = 1;
  Clock::time_point last_sweep_{};  // (none yet: the first sweep counts no gap)
};

}  // namespace xport::proto
