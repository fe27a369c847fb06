// The per-operation context handed to libfabric: completions come back with it, and it routes
// each one to its owner (buffer, request slot of a communicator, window operation).
#pragma once

#include <rdma/fabric.h>

#include <cstdint>

namespace xport::fabric {

// eager_send: a headerless eager message sent from the caller's buffer (its SendSlot's context).
enum class OpType : uint8_t { rx_buffer = 1, tx_buffer, eager_send, rndv_write, put, get, flush };

struct OpContext {
  fi_context2 fi;  // must stay first: libfabric hands back &fi
  OpType type{};
  uint16_t comm = 0;   // communicator id, when the op belongs to one
  uint16_t slot = 0;   // request slot within the communicator
  uint32_t index = 0;  // buffer index within its pool
  uint64_t seq = 0;    // message sequence number
  void* owner = nullptr;  // pool, channel or window that owns the context
};

inline OpContext* op_context_of(void* p) { return static_cast<OpContext*>(p); }

}  // namespace xport::fabric
