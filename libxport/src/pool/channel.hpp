// A channel: the path to one peer on one rail (a connected FI_EP_MSG endpoint, or the rail's
// RDM endpoint plus the peer's address), refcounted by the communicators that use it.
#pragma once

#include <memory>
#include <string>

#include "fabric/objects.hpp"
#include "memory/buffer_pool.hpp"

namespace xport::pool {

struct Channel {
  Channel() = default;
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;
  // Teardown order: cancel posted receives; under FI_MR_ENDPOINT close the pools' MRs (bound to
  // the endpoint) before it, else after it; free the buffers' memory only when both are gone.
  ~Channel();

  // Owned by the rail's shared channel and by connected channels; peer channels borrow.
  std::unique_ptr<fabric::Endpoint> owned_endpoint;
  std::unique_ptr<memory::BufferPool> owned_rx;
  std::unique_ptr<memory::BufferPool> owned_tx;
  // Data endpoints: the flush buffer (one registered slot) that flush() reads into.
  std::unique_ptr<memory::BufferPool> owned_flush;
  fi_addr_t self = FI_ADDR_UNSPEC;  // this endpoint's own address, for flush reads

  fabric::Endpoint* endpoint = nullptr;
  memory::BufferPool* rx = nullptr;
  memory::BufferPool* tx = nullptr;
  fi_addr_t peer = FI_ADDR_UNSPEC;
  int refs = 0;
  bool mr_endpoint = false;  // the provider binds MRs to endpoints (FI_MR_ENDPOINT)
  uint32_t rail = 0;         // index of the rail the endpoint belongs to
  bool connected = false;  // connected endpoints: FI_CONNECTED seen
  bool failed = false;     // shutdown or fatal error: every comm on it fails
  std::string failure;
  std::string label;       // for messages: "rail lo -> peer 3"
};

}  // namespace xport::pool
