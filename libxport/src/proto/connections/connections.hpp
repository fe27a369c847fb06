// Connection set-up and tear-down: listeners and their handles, the connect/accept exchange over
// the control path (RDM: CONN_REQ / CONN_ACK / CONN_REJECT / CONN_CANCEL) or the connection
// manager (FI_EP_MSG: the same bodies as connect/accept parameter data), and closing.
#pragma once

#include <span>
#include <vector>

#include "proto/dispatch.hpp"
#include "proto/device_state.hpp"

namespace xport::proto {

class Connections {
 public:
  explicit Connections(DeviceState& state) : state_(state) {}
  // CONN_* and CLOSE messages, and the gate that keeps what overtook a CONN_ACK.
  void register_handlers(Dispatch& d);

  struct Listening {
    uint64_t token = 0;
    std::vector<uint8_t> handle;
  };
  Result<Listening> listen();
  void close_listener(uint64_t token);
  // The next accepted communicator of a listener, or {} when none is ready yet.
  Result<CommId> take_accepted(uint64_t token);

  // Starts connecting to a listener's handle: the communicator is `connecting` until the
  // listener's answer arrives (phase ready or failed).
  Result<CommId> start(std::span<const uint8_t> handle);
  // Gives up a connection still in progress (the listener is told, so no half-open
  // communicator stays in its backlog) and forgets it.
  void cancel(CommId id);
  // The user closes a communicator (docs/semantics.md, "Closing").
  void close(CommId id);

  // Messages.
  void on_conn_req(const Message& m);
  void on_conn_ack(const Message& m);
  void on_conn_reject(const Message& m);
  void on_conn_cancel(const Message& m);
  void on_close(const Message& m);
  // Connection-manager events of connected endpoints. A peer's shutdown is only noted here:
  // what it sent before it (a CLOSE with the count it took, completions of sends it received)
  // may reach the CQ in the same provider call, so the engine reads the CQs again and then
  // calls apply_shutdowns().
  Status progress_events();
  bool shutdowns_pending() const { return !shutdowns_.empty(); }
  void apply_shutdowns();
  // A connection failed or was shut down by the peer: every communicator on it fails (and an
  // idle accepted one is closed).
  void fail_channel(pool::Channel& ch, const Status& why);

 private:
  // A clear-to-send, a credit or a close for a communicator still waiting for its CONN_ACK
  // (it took another rail and overtook the ACK): kept, replayed after the ACK (true).
  bool stash(const Message& m);
  ConnBody request_body(const CommState& c) const;
  // The addresses of the shards its peer lives on, with the communicator's own data endpoints
  // when it has them.
  Result<std::vector<RailAddresses>> local_addresses(CommState& c);
  // RDM, XPORT_POOL_GROUPS=0 (docs/pool.md): opens the communicator's own data endpoint on
  // every rail (into c.own), receive buffers posted.
  Status open_own(CommState& c, pool::Direction dir);
  // RDM: the communicator's paths once both ends' addresses are known (the peer's shared
  // channels made first, set_paths): control over the peer's channels, data over the peer's
  // too unless either end has endpoints of the communicator's own, when over a channel of the
  // communicator's (from its receiving endpoint to the peer's).
  Status comm_paths(CommState& c, const std::vector<RailAddresses>& remote);
  // Makes a communicator (slots sized by depth) with a reference on `peer`.
  Result<CommState*> make_comm(bool is_send, pool::Peer* peer, uint16_t depth);
  // The listener's answer (RDM and connected): fills a connecting communicator.
  void accept_answer(CommState& c, const MsgHeader& h, const ConnAck& ack);
  // Listener side: checks a request and makes the receiving communicator (nullptr + reason).
  CommState* admit(const MsgHeader& h, const ConnRequest& req, pool::Peer* peer,
                   uint64_t* reject_reason);
  // Whether it was there: accepted by the transport, never handed to the caller.
  bool remove_from_backlog(CommState& c);
  // Connected endpoints: places a connecting communicator in the pool, on the connection of
  // its group and slot (a secondary, whose request goes over it once connected) or on a new
  // one (a primary, whose request is the connection's parameter data).
  Status connect_msg(CommState& c, const std::vector<uint8_t>& address);
  Status request_on(CommState& c, pool::Channel& ch);
  void on_msg_connreq(fi_info* info, const uint8_t* data, size_t len);
  void on_msg_connected(pool::Channel& ch, const uint8_t* data, size_t len);
  void on_opener_connected(CommState& c, const uint8_t* data, size_t len);
  DeviceState& state_;
  Dispatch* dispatch_ = nullptr;  // (replays what a gate kept)
  std::vector<fid_t> shutdowns_;  // peers' shutdowns read, not yet applied
};

}  // namespace xport::proto
