// A channel: the path to one peer over one endpoint of one rail (the rail's shared RDM endpoint
// plus the peer's address, or a connection of its own), refcounted by the communicators and
// windows that use it. A Path is one rail's pair of channels to a peer: data and control (the
// same channel for connected endpoints).
#pragma once

#include <chrono>
#include <compare>
#include <memory>
#include <string>
#include <vector>

#include "pool/comm_table.hpp"
#include "rail/endpoint.hpp"

namespace xport::pool {

// Who opened a connection: this device (out: its send communicators use it) or the peer (in).
enum class Direction : uint8_t { out = 0, in = 1 };
// The group of a channel that is one communicator's alone (XPORT_POOL_GROUPS=0).
inline constexpr uint32_t kOwnGroup = 0xffffffffu;

struct ChannelKey {
  uint8_t local_rail = 0;
  uint64_t peer = 0;  // the peer device's token
  uint8_t remote_rail = 0;
  Direction dir = Direction::out;
  uint32_t group = 0;
  uint32_t slot = 0;
  auto operator<=>(const ChannelKey&) const = default;
};

struct Channel {
  rail::RailEndpoint* ep = nullptr;              // the endpoint the channel posts on
  std::unique_ptr<rail::RailEndpoint> owned;     // connected endpoints: the connection itself
  fi_addr_t peer = FI_ADDR_UNSPEC;               // RDM: the peer's address in ep's AV
  std::vector<uint8_t> address;                  // RDM: ... as the peer gave it
  uint8_t rail = 0;
  int refs = 0;            // communicators and windows using it
  bool connected = false;  // connected endpoints: FI_CONNECTED seen
  std::string label;       // for messages: "rail lo data peer 3"
  std::chrono::steady_clock::time_point retire_since{};  // connections being closed
  bool shutdown_sent = false;  // ... shut down (once their last sends were out)
  bool shutdown_seen = false;  // ... and their FI_SHUTDOWN event was read
  // Pooled connections (pool/pool.hpp).
  ChannelKey key;
  fid_t fid = nullptr;       // the connection's provider handle, for its events
  uint64_t ops = 0;          // operations posted on it
  CommId opener;             // the communicator whose connection request opened it (out)
  uint64_t opener_nonce = 0;
  std::vector<CommId> waiting;  // communicators whose request waits for it to connect (out)

  // A connection: its own endpoint, opened by the communicator `opener` (nonce as requested).
  static std::unique_ptr<Channel> connection(std::unique_ptr<rail::RailEndpoint> endpoint,
                                             CommId opener, uint64_t opener_nonce) {
    auto ch = std::make_unique<Channel>();
    ch->owned = std::move(endpoint);
    ch->ep = ch->owned.get();
    ch->rail = ch->ep->rail();
    ch->label = ch->ep->label();
    ch->opener = opener;
    ch->opener_nonce = opener_nonce;
    return ch;
  }

  // RDM: its peer is a device of this process that closed (Peer::closed): never posted to.
  bool gone = false;
  bool failed() const { return gone || ep->failed; }
  const std::string& failure() const {
    static const std::string kGone = "the peer device in this process closed";
    return gone ? kGone : ep->failure;
  }
};

struct Path {
  Channel* data = nullptr;
  Channel* control = nullptr;
};

}  // namespace xport::pool
