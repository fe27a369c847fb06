// A peer: one remote device (identified by the token its handles and connection requests
// carry), the channels to it on every rail it shares with this device, and what this device
// knows of its health (when it was last heard from, an outstanding keepalive, its death).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pool/channel.hpp"

namespace xport::pool {

struct Peer {
  using Clock = std::chrono::steady_clock;
  uint64_t token = 0;        // the remote device's token
  std::vector<Path> paths;   // RDM: rail i pairs with the peer's rail i (shared by its comms)
  std::vector<std::unique_ptr<Channel>> channels;  // RDM: the channels of `paths` (and earlier
                                                   // ones, kept until it retires)
  // RDM: the shard of each rail it lives on (rail::Shard; kUnplaced: none yet).
  std::vector<uint16_t> shards;
  static constexpr uint16_t kUnplaced = 0xffff;
  // ... and the address-table entries promised it there (DeviceState::place).
  std::vector<uint8_t> promised;
  int refs = 0;              // communicators, windows and queued messages that name this peer
  Clock::time_point idle_since{};  // when refs last fell to 0 (retired after a linger)
  Clock::time_point last_heard{};
  // Something arrived from it since the last health sweep (which turns this into last_heard):
  // the receive paths set a flag instead of reading the clock per message.
  bool heard = false;
  // How long it has been silent while requests waited on it, counted over this device's health
  // sweeps only (a gap in this device's progress counts little: PeerHealth::kLongestCountedGap).
  Clock::duration quiet{};
  Clock::time_point ping_sent{};
  bool ping_outstanding = false;
  uint64_t ping_nonce = 0;
  uint32_t rails_down = 0;  // the peer's rails it reported out of service (bit per rail index)
  bool dead = false;
  std::string death;  // why it was declared dead
  // Refused for want of address-table room, answered on a channel made in the room kept for
  // refusals (DeviceState::refusal_channel): retired as soon as nothing names it, no linger.
  bool refused = false;
  // A device of this process that closed: nothing is posted to it again, whatever it sends or
  // a caller asks (on shm its endpoints' memory is unmapped, and libfabric 1.17 keeps a pointer
  // to it for every endpoint of the process: a post there is a SIGSEGV inside the provider).
  // Never cleared: a device token is not reused.
  bool closed = false;
};

}  // namespace xport::pool
