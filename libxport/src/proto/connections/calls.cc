// ConnectionCalls: the connection calls of the public API (listen, accept, connect in one call
// or in steps, close), carried out by the connections part.
#include "proto/connections/calls.hpp"

#include <algorithm>
#include <mutex>
#include <thread>

#include "core/knob.hpp"
#include "core/log.hpp"

namespace xport::proto {

Result<Connections::Listening> ConnectionCalls::listen() {
  Lock l(state_);
  return connections_.listen();
}

Result<CommId> ConnectionCalls::accept(uint64_t token, Deadline deadline) {
  CommId id;
  Status err;
  Status s = wait_until(
      deadline,
      [&] {
        auto r = connections_.take_accepted(token);
        if (!r) {
          err = r.status();
          return true;
        }
        id = *r;
        return static_cast<bool>(id);
      },
      "accept: no connection arrived before the deadline");
  if (!s) return s;
  if (!err) return err;
  return id;
}

Result<CommId> ConnectionCalls::try_accept(uint64_t token) {
  driver_.refresh_links();
  Lock l(state_);
  // One already accepted by the transport is taken without a pass: a pass admits up to a CQ
  // batch of requests, so one pass per take let a burst of connectors fill the backlog (and be
  // refused) while the caller took them as fast as it could.
  XPORT_ASSIGN_OR_RETURN(CommId ready, connections_.take_accepted(token));
  if (ready) return ready;
  driver_.progress_locked();
  return connections_.take_accepted(token);
}

void ConnectionCalls::close_listener(uint64_t token) {
  Lock l(state_);
  connections_.close_listener(token);
}

Result<CommId> ConnectionCalls::connect(std::span<const uint8_t> handle, Deadline deadline) {
  XPORT_ASSIGN_OR_RETURN(CommId id, connect_start(handle));
  Status s = wait_until(
      deadline,
      [&] {
        CommState* c = state_.comm(id);
        return c == nullptr || c->phase != Phase::connecting;
      },
      "connect: the listener did not answer before the deadline (is the peer alive and "
      "progressing?)");
  Lock l(state_);
  return connect_outcome(id, s);
}

Result<CommId> ConnectionCalls::connect_start(std::span<const uint8_t> handle) {
  Lock l(state_);
  return connections_.start(handle);
}

Result<bool> ConnectionCalls::connect_poll(CommId id, Deadline deadline) {
  driver_.refresh_links();
  Lock l(state_);
  driver_.progress_locked();
  CommState* c = state_.comm(id);
  if (c != nullptr && c->phase == Phase::connecting) {
    if (!deadline.expired()) return false;
    XPORT_RETURN_IF_ERROR(connect_outcome(id, Status(Code::timeout, "connect: the listener did "
                                                     "not answer before the deadline (is the peer "
                                                     "alive and progressing?)"))
                              .status());
  }
  XPORT_RETURN_IF_ERROR(connect_outcome(id, Status()).status());
  return true;
}

Result<CommId> ConnectionCalls::connect_outcome(CommId id, Status s) {
  CommState* c = state_.comm(id);
  if (s.ok() && c == nullptr) s = Status(Code::internal, "connect: the communicator vanished");
  if (s.ok() && c->phase == Phase::failed) s = c->error;
  if (!s.ok()) {
    connections_.cancel(id);
    return s;
  }
  return id;
}

void ConnectionCalls::connect_abandon(CommId id) {
  Lock l(state_);
  connections_.cancel(id);
}

void ConnectionCalls::close_comm(CommId id) {
  Lock l(state_);
  flusher_.abandon_comm(id);
  connections_.close(id);
}

}  // namespace xport::proto
