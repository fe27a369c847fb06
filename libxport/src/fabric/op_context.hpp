// The per-operation context handed to libfabric: completions come back with it, and it routes
// each one to its owner (a bounce buffer of a rail endpoint, a request of a communicator, a
// window operation, a flush). Each field has one meaning.
#pragma once

#include <rdma/fabric.h>

#include <cstdint>

namespace xport::fabric {

enum class OpType : uint8_t {
  rx_buffer = 1,  // a posted receive buffer of a rail endpoint (owner: the endpoint)
  tx_buffer,      // a bounce buffer carrying a control message
  eager_send,     // a headerless eager message sent from the caller's buffer
  rndv_write,     // one stripe of a rendezvous message
  put,            // one stripe of a window put (owner: the window)
  get,            // one stripe of a window get (owner: the window)
  flush,          // one rail's read of a flush (owner: the flush)
  atomic,         // a window's native atomic (owner: the window); also tags atomic scratch slots
  eager_buffer,   // a bounce buffer carrying a headered eager message (comm, slot, seq: its send)
};

struct OpContext {
  fi_context2 fi;  // must stay first: libfabric hands back &fi
  OpType type{};
  uint8_t rail = 0;       // rail whose endpoint the operation was posted on
  uint8_t comm_gen = 0;   // generation of `comm` (comm ids are reissued only with a new one)
  uint16_t comm = 0;      // communicator id (requests of a communicator; 0: none)
  uint16_t slot = 0;      // request slot within the communicator
  uint32_t index = 0;     // position of the context in its owner's array (a buffer in its pool,
                          // an operation in its window, a rail in its flush)
  uint32_t stripe = 0;    // stripe index within its message or window operation
  uint64_t seq = 0;       // message sequence number, or a window operation's ticket
  void* owner = nullptr;  // rail endpoint (buffers), window, or flush that owns the context
};

inline OpContext* op_context_of(void* p) { return static_cast<OpContext*>(p); }

}  // namespace xport::fabric
