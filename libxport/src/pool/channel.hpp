// A channel: the path to one peer over one endpoint of one rail (the rail's shared RDM endpoint
// plus the peer's address, or a connection of its own), refcounted by the communicators and
// windows that use it. A Path is one rail's pair of channels to a peer: data and control (the
// same channel for connected endpoints).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "rail/endpoint.hpp"

namespace xport::pool {

struct Channel {
  rail::RailEndpoint* ep = nullptr;              // the endpoint the channel posts on
  std::unique_ptr<rail::RailEndpoint> owned;     // connected endpoints: the connection itself
  fi_addr_t peer = FI_ADDR_UNSPEC;               // RDM: the peer's address in the rail's AV
  uint8_t rail = 0;
  int refs = 0;            // communicators and windows using it
  bool connected = false;  // connected endpoints: FI_CONNECTED seen
  std::string label;       // for messages: "rail lo data peer 3"
  std::chrono::steady_clock::time_point retire_since{};  // connections being closed
  bool shutdown_sent = false;  // ... shut down (once their last sends were out)
  bool shutdown_seen = false;  // ... and their FI_SHUTDOWN event was read

  bool failed() const { return ep->failed; }
  const std::string& failure() const { return ep->failure; }
};

struct Path {
  Channel* data = nullptr;
  Channel* control = nullptr;
};

}  // namespace xport::pool
