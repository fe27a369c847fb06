// Connections: a communicator's end (a channel lost, a connect cancelled, a close sent and
// received).
#include "proto/connections/connections.hpp"

#include <rdma/fi_cm.h>

#include <algorithm>

#include "core/log.hpp"
#include "core/random.hpp"
#include "fabric/address.hpp"
#include "proto/connections/shared.hpp"
#include "proto/control.hpp"

namespace xport::proto {
using namespace conn;

void Connections::fail_channel(pool::Channel& ch, const Status& why) {
  ch.ep->failed = true;
  ch.ep->failure = why.message();
  if (ch.key.dir == pool::Direction::out || ch.key.group != pool::kOwnGroup) {
    state_.pool->orphan(ch.key);
  }
  ch.refs += 1;  // kept while its users fail (their erasure lets go of it)
  std::vector<CommId> users;
  state_.comms->for_each([&](uint16_t, CommState& c) {
    if (c.connection == &ch) users.push_back(c.id);
  });
  for (CommId id : users) {
    CommState* c = state_.comm(id);
    if (c == nullptr) continue;
    // In the backlog (accepted by the transport, never taken) or still being accepted: never
    // handed out, so nobody will close it.
    const bool unclaimed = remove_from_backlog(*c);
    if (!c->is_send && c->phase == Phase::connecting) {
      auto lit = state_.listeners.find(c->listener_token);
      if (lit != state_.listeners.end() && lit->second.pending > 0) lit->second.pending -= 1;
      c->user_closed = true;
    }
    if (unclaimed) c->user_closed = true;
    state_.fail_comm(*c, why);
  }
  // Nobody uses it any more (or never did: an accepted connection idle between
  // communicators): closed now.
  if (--ch.refs <= 0) state_.control->retire(state_.pool->release(ch));
}

void Connections::cancel(CommId id) {
  CommState* c = state_.comm(id);
  if (c == nullptr || c->user_closed) return;
  pool::Channel* request_path = nullptr;
  if (c->phase == Phase::connecting && !state_.connected_endpoints() && c->peer != nullptr &&
      !c->peer->paths.empty() && c->peer->paths[0].control != nullptr) {
    request_path = c->peer->paths[0].control;
  }
  if (c->phase == Phase::connecting && c->connection != nullptr && c->connection->connected &&
      !c->connection->failed() && c->connection->opener != c->id) {
    request_path = c->connection;  // a secondary's request went over the shared connection
  }
  if (c->connection != nullptr) std::erase(c->connection->waiting, c->id);
  if (request_path != nullptr) {
    // The listener may have made (or be about to make) the receiving side: it is told to drop
    // it. The message goes on the channel the request took, so it arrives after it.
    MsgHeader m = bare(MsgType::conn_cancel);
    m.src_comm = c->id.index;
    m.src_gen = c->id.gen;
    m.aux2 = c->nonce;
    (void)state_.control->send(request_path, m, nullptr, nullptr, Dependent{},
                               state_.connected_endpoints() ? nullptr : c->peer);
  }
  if (c->phase == Phase::connecting) {
    state_.fail_comm(*c, Status(Code::closed, "connect: given up"));
  }
  c = state_.comm(id);
  if (c != nullptr) close(id);
}

void Connections::close(CommId id) {
  CommState* c = state_.comm(id);
  if (c == nullptr || c->user_closed) return;
  if (c->phase == Phase::ready && !c->paths.empty() && !c->paths[0].control->failed()) {
    MsgHeader h = comm_header(MsgType::close, *c);
    if (c->is_send) {
      // CLOSE travels on a control endpoint and may overtake eager data still on its way on a
      // data endpoint, so it says how many messages were sent: the receiver fails only the
      // receives beyond them. Sends not yet on the wire (waiting for credit or a CTS) are
      // cancelled here and not counted.
      uint64_t sent = c->next_seq;
      for (auto& s : c->sends) {
        if (!s.active || s.finished) continue;
        // Not wholly on the wire: waiting for credit, queued for the provider, or waiting for
        // its clear-to-send. Such sends are never posted once closed.
        const bool unsent = s.waiting_credit || s.queued || (!s.eager && !s.cts_consumed);
        if (!unsent) continue;
        sent = std::min(sent, s.seq);
        state_.fail_send(*c, s, core::error(Code::closed, "the communicator was closed before "
                                                           "message ", s.seq, " was sent"));
      }
      c->credit_wait.clear();
      h.seq = sent;
    } else {
      // A receiver's CLOSE says how many messages it took, in order: the sender fails only its
      // sends beyond them (the others were received, even if their local completion is late).
      uint64_t taken = c->next_seq;
      for (const auto& r : c->recvs) {
        if (r.active && !r.finished) taken = std::min(taken, r.seq);
      }
      h.seq = taken;
      c->linger_until = Clock::now() + state_.config.close_linger;
      for (auto& r : c->recvs) {
        if (r.active && !r.finished) {
          // Its registration stays with the communicator until late writes cannot come.
          r.error = core::error(Code::closed, "the communicator was closed");
        }
      }
    }
    // Nothing waits on it locally; a CLOSE that cannot go leaves the peer to find out by
    // keepalive.
    (void)state_.control->send(state_.control_path(*c), h, nullptr, c, Dependent{});
  }
  c = state_.comm(id);
  if (c == nullptr) return;
  c->user_closed = true;
  state_.maybe_erase(*c);
}

void Connections::on_close(const Message& m) {
  const MsgHeader& h = m.h;
  CommState* c = state_.route(h, DeviceState::Side::either);
  if (c == nullptr) return;
  if (c->is_send) {
    // The receiver went away after taking h.seq messages: nothing more can be delivered. Sends
    // it took complete as they were (their local completions may still be on their way).
    c->peer_closed = true;
    const Status why =
        core::error(Code::closed, "the peer closed communicator ", c->id.index, " after taking ",
                    h.seq, " messages");
    c->phase = Phase::failed;
    c->error = why;
    for (auto& s : c->sends) {
      if (s.active && !s.finished && s.seq >= h.seq) state_.fail_send(*c, s, why);
    }
    state_.maybe_erase(*c);
    return;
  }
  // The sender sent h.seq messages: receives of those still complete when their data lands
  // (it may still be on another endpoint); receives beyond them fail now, later ones at once.
  c->peer_sent = h.seq;
  c->peer_closed = true;
  for (auto& r : c->recvs) {
    if (r.active && !r.finished && r.seq >= h.seq) {
      state_.fail_recv(*c, r, core::error(Code::closed, "the peer closed communicator ",
                                          c->id.index, " after ", h.seq, " messages"));
    }
  }
  state_.maybe_erase(*c);
}

}  // namespace xport::proto
