// The engine's one dispatch table: where every completion read from a CQ, every message that
// arrived, and every peer's write that landed goes. Each operation kind registers its handlers
// beside its own code (register_handlers of its part): a completion kind (fabric::OpType) its
// done and failed handlers, a message type its handler, and the three arrivals without a header
// (a headerless eager message, a window write, a rendezvous write) theirs. Adding a kind is one
// registration; nothing here names a part.
#pragma once

#include <rdma/fi_eq.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "fabric/op_context.hpp"
#include "proto/hook.hpp"
#include "proto/wire.hpp"
#include "xport/status.hpp"

namespace xport::memory {
struct Buffer;
}
namespace xport::rail {
class RailEndpoint;
}

namespace xport::proto {

class DeviceState;
struct Stashed;

// A message as its handler sees it.
struct Message {
  const MsgHeader& h;
  const uint8_t* body;     // after the header
  size_t len;              // of the body
  rail::RailEndpoint* ep;  // the endpoint it came on (nullptr: replayed or injected)
  memory::Buffer* buffer;  // its receive buffer (nullptr: replayed)
  bool* hold;              // set by a handler that keeps the buffer (an early arrival)
};

// The target side of a write with remote CQ data, or a headerless eager message (sockets also
// flags the initiator's own write completion with FI_REMOTE_CQ_DATA, so initiator flags exclude
// it).
inline bool carries_remote_data(const fi_cq_data_entry& e) {
  return (e.flags & FI_REMOTE_CQ_DATA) && !(e.flags & (FI_WRITE | FI_READ | FI_SEND));
}

class Dispatch {
 public:
  explicit Dispatch(DeviceState& state) : state_(state) {}

  // ---- registration ----
  // A completion kind: Done(fabric::OpContext*, const fi_cq_data_entry&) on success,
  // Failed(fabric::OpContext*, const Status&, int err) on an error entry (err: the provider's
  // errno, FI_ECANCELED for a cancelled operation).
  template <auto Done, auto Failed, typename Part>
  void completion(fabric::OpType type, Part* part) {
    Row& r = rows_[static_cast<size_t>(type)];
    r.done.template bind<Done>(part);
    r.failed.template bind<Failed>(part);
  }
  // A message type: Handler(const Message&). `gated`: a control message a listener may send
  // before its CONN_ACK arrives on another rail, offered to the gate first.
  template <auto Handler, typename Part>
  void message(MsgType type, Part* part, bool gated = false) {
    Route& r = routes_[static_cast<uint8_t>(type)];
    r.handler.template bind<Handler>(part);
    r.gated = gated;
  }
  // The gate of gated messages: Gate(const Message&) -> true when it kept the message (for a
  // communicator still connecting), to be replayed once its CONN_ACK is in.
  template <auto Gate, typename Part>
  void gate(Part* part) {
    gate_.template bind<Gate>(part);
  }
  // Headerless eager messages: Handler(ep, buffer, cq data, len, hold).
  template <auto Handler, typename Part>
  void eager_data(Part* part) {
    eager_data_.template bind<Handler>(part);
  }
  // A peer's write that landed with remote CQ data: Handler(data, len, rail); a window's
  // (comm id 0) or a rendezvous message's.
  template <auto Handler, typename Part>
  void window_write(Part* part) {
    window_write_.template bind<Handler>(part);
  }
  template <auto Handler, typename Part>
  void rendezvous_write(Part* part) {
    rendezvous_write_.template bind<Handler>(part);
  }
  // FI_RX_CQ_DATA providers: a posted receive buffer the provider consumed for a write's CQ
  // data, Handler(fabric::OpContext*) (its CQ room already given back).
  template <auto Handler, typename Part>
  void consumed(Part* part) {
    consumed_.template bind<Handler>(part);
  }

  // ---- dispatch (under the engine lock) ----
  // The rail whose CQ is being read.
  void polling(size_t rail) { rail_ = rail; }
  void done(const fi_cq_data_entry& e);
  void failed(void* context, const Status& st, int err);
  // What arrived in a receive buffer: a headerless eager message, or a message with its header.
  void eager_arrived(rail::RailEndpoint* ep, memory::Buffer* b, uint64_t data, size_t len,
                     bool* hold) {
    eager_data_(ep, b, data, len, hold);
  }
  void message_arrived(rail::RailEndpoint* ep, memory::Buffer* b, size_t len, bool* hold);
  void route(const Message& m);
  // A peer's write with remote CQ data, routed by the data.
  void write_landed(uint64_t data, size_t len, uint32_t rail);
  // A message a gate kept, now that its communicator is connected.
  void replay(Stashed& m);

 private:
  struct Row {
    Hook<void(fabric::OpContext*, const fi_cq_data_entry&)> done;
    Hook<void(fabric::OpContext*, const Status&, int)> failed;
  };
  struct Route {
    Hook<void(const Message&)> handler;
    bool gated = false;
  };
  DeviceState& state_;
  size_t rail_ = 0;
  std::array<Row, 16> rows_{};      // by fabric::OpType
  std::array<Route, 64> routes_{};  // by MsgType
  Hook<bool(const Message&)> gate_;
  Hook<void(rail::RailEndpoint*, memory::Buffer*, uint64_t, size_t, bool*)> eager_data_;
  Hook<void(uint64_t, size_t, uint32_t)> window_write_;
  Hook<void(uint64_t, size_t, uint32_t)> rendezvous_write_;
  Hook<void(fabric::OpContext*)> consumed_;
};

}  // namespace xport::proto
