// DeviceState's methods, what every part of the engine shares: the lock, routing of headers,
// request and communicator outcomes with their accounting (peers and their channels:
// connections/peers.cc).
#include "core/log.hpp"
#include "proto/control.hpp"
#include "proto/one_sided/one_sided.hpp"
#include "proto/device_state.hpp"

namespace xport::proto {

void DeviceState::note_failure(uint32_t rail, const Status& status, bool from_post) {
  if (status.code() != Code::closed || rail >= rails.size()) return;
  rail::Health& h = rails[rail]->health();
  if (!from_post && ++h.consecutive_failures() < kFatalInARow) return;
  const bool was_up = h.state() == rail::Health::State::up;
  if (was_up) {
    XPORT_LOG(warn, "rail ", rails[rail]->name(), " quarantined after a fatal error: ",
              status.message());
  }
  h.quarantine(core::str("fatal error: ", status.message()), Clock::now() + config.rail_retry);
  if (was_up) {
    announce_rail_state(rail, false);
    resend_after_rail_loss(nullptr);
  }
}

void DeviceState::resend_after_rail_loss(const pool::Peer* peer) {
  std::vector<CommId> ids;
  comms->for_each([&](uint16_t, CommState& c) {
    if (c.phase == Phase::ready && !c.user_closed && !c.connection &&
        (peer == nullptr || c.peer == peer)) {
      ids.push_back(c.id);
    }
  });
  for (CommId id : ids) {
    CommState* c = comm(id);
    if (c == nullptr) continue;
    MsgHeader h{};
    h.version = kWireVersion;
    h.dst_comm = c->peer_comm.index;
    h.dst_gen = c->peer_comm.gen;
    h.src_comm = c->id.index;
    h.src_gen = c->id.gen;
    if (c->is_send) {
      for (const SendSlot& s : c->sends) {
        if (!s.active || s.finished || s.eager || !s.rts_sent || s.cts_consumed) continue;
        h.type = static_cast<uint8_t>(MsgType::rts);
        h.slot = c->slot_of(s.seq);
        h.seq = s.seq;
        h.length = s.len;
        h.aux2 = s.tag;
        (void)control->send(control_path(*c), h, nullptr, c, Dependent{});
      }
      continue;
    }
    for (const RecvSlot& r : c->recvs) {
      if (!r.active || r.finished || !r.cts_sent) continue;
      h.type = static_cast<uint8_t>(MsgType::cts);
      h.slot = c->slot_of(r.seq);
      h.seq = r.seq;
      h.length = r.cap;
      h.aux = r.region->remote_address(r.buf);
      h.aux2 = r.want_tag;
      std::vector<uint8_t> keys(8 * c->paths.size());
      for (size_t i = 0; i < c->paths.size(); ++i) {
        const uint64_t k = r.region->key(c->paths[i].data->rail);
        std::memcpy(keys.data() + 8 * i, &k, 8);
      }
      (void)control->send(control_path(*c), h, &keys, c, Dependent{});
    }
    if (c->reported_next > 0) {
      h.type = static_cast<uint8_t>(MsgType::credit);
      h.slot = 0;
      h.seq = c->reported_next - 1;
      h.length = 0;
      h.aux = 0;
      h.aux2 = 0;
      (void)control->send(control_path(*c), h, nullptr, c, Dependent{});
    }
  }
  windows_rails_lost(peer);  // window streams' messages, the same way
}

void DeviceState::announce_rail_state(uint32_t rail, bool in_service) {
  MsgHeader h{};
  h.type = static_cast<uint8_t>(MsgType::rail_state);
  h.version = kWireVersion;
  h.seq = rail;
  h.aux = device_token;
  h.aux2 = in_service ? 1 : 0;
  for (auto& [token, p] : peers) {
    if (p->dead || p->refs <= 0) continue;
    // On a rail both ends still use (any other, if none is).
    pool::Channel* ch = nullptr;
    for (size_t i = 0; i < p->paths.size() && ch == nullptr; ++i) {
      if (i != rail && usable(i, p.get()) && p->paths[i].control != nullptr) {
        ch = p->paths[i].control;
      }
    }
    if (ch == nullptr && rail < p->paths.size() && in_service) ch = p->paths[rail].control;
    if (ch == nullptr) continue;
    (void)control->send(ch, h, nullptr, nullptr, Dependent{}, p.get());
  }
}

void DeviceState::log_miss(bool late, const char* file, int line) {
  XPORT_LOG(debug, late ? "late arrival" : "routing miss", " dropped at ", file, ":", line);
}

CommState* DeviceState::ready_accepted(CommState& c) {
  if (c.is_send || c.phase != Phase::connecting || c.connection == nullptr) return &c;
  c.connection->connected = true;
  auto lit = listeners.find(c.listener_token);
  if (lit == listeners.end()) {
    const CommId id = c.id;
    c.user_closed = true;
    fail_comm(c, Status(Code::closed, "the listener closed"));
    return comms->find(id);
  }
  lit->second.pending -= 1;
  c.phase = Phase::ready;
  lit->second.ready.push_back(c.id);
  return &c;
}

CommState* DeviceState::route(const MsgHeader& h, Side side) {
  CommState* c = comms->find({h.dst_comm, h.dst_gen});
  if (c == nullptr) {
    // A communicator that is gone (or an older generation of its id): traffic that was still on
    // its way when it closed, or a forgery; either way it reaches nobody.
    miss(comms->find_any(h.dst_comm) != nullptr || h.dst_comm != 0);
    return nullptr;
  }
  if (!c->is_send && side != Side::send) c = ready_accepted(*c);
  if (c == nullptr) {
    miss();
    return nullptr;
  }
  const bool side_ok = side == Side::either || c->is_send == (side == Side::send);
  if (!side_ok || c->depth == 0 || c->phase == Phase::connecting ||
      c->peer_comm.index != h.src_comm || c->peer_comm.gen != (h.src_gen & pool::kCommGenMask)) {
    miss();
    return nullptr;
  }
  if (c->peer != nullptr) c->peer->heard = true;
  return c;
}

void DeviceState::fail_send(CommState& c, SendSlot& s, Status why, bool tell_receiver) {
  if (!s.active || s.finished) return;
  if (s.error.ok()) s.error = std::move(why);
  s.finished = true;
  // A receiver told of this message (RTS), or whose clear-to-send it used, waits for it: it
  // hears of the failure once nothing of the message is in flight any more.
  if (!s.eager && (s.rts_sent || s.cts_consumed) && tell_receiver) s.abort_owed = true;
  if (s.waiting_credit) s.waiting_credit = false;
  settle(c, s);
}

void DeviceState::fail_recv(CommState& c, RecvSlot& r, Status why) {
  if (!r.active || r.finished) return;
  r.error = std::move(why);
  r.finished = true;
  release_cts_room(c, r);
}

void DeviceState::fail_comm(CommState& c, Status why) {
  if (c.phase == Phase::failed) return;
  c.phase = Phase::failed;
  c.error = why;
  for (auto& s : c.sends) fail_send(c, s, why);
  for (auto& r : c.recvs) fail_recv(c, r, why);
  XPORT_LOG(info, "communicator ", c.id.index, " failed: ", why.to_string());
  const CommId id = c.id;
  windows_comm_failed(id, why);  // window streams over its connection
  if (CommState* again = comm(id)) maybe_erase(*again);
}

void DeviceState::fail_peer(pool::Peer& p, Status why) {
  if (!p.dead) {
    p.dead = true;
    p.death = why.message();
    if (why.code() == Code::closed) {  // it said goodbye (a device of this process closed)
      XPORT_LOG(info, "peer ", std::hex, p.token, std::dec, " closed: ", why.to_string());
    } else {
      ++counters.peers_lost;
      XPORT_LOG(warn, "peer ", std::hex, p.token, std::dec, " lost: ", why.to_string());
    }
  }
  std::vector<CommId> victims;
  comms->for_each([&](uint16_t, CommState& c) {
    if (c.peer == &p) victims.push_back(c.id);
  });
  for (CommId id : victims) {
    if (CommState* c = comms->find(id)) fail_comm(*c, why);
  }
  windows_peer_failed(p, why);
}

void DeviceState::release(CommState& c, SendSlot& s) {
  if (s.outstanding > 0) --s.outstanding;
  settle(c, s);  // first: releasing the communicator may erase it (and the slot with it)
  release(c);
}

void DeviceState::release(CommState& c) {
  if (c.outstanding > 0) --c.outstanding;
  maybe_erase(c);
}

ConnBody DeviceState::conn_body(uint64_t nonce) const {
  ConnBody b{};
  b.nonce = nonce;
  b.device_token = device_token;
  b.stripe_threshold = config.stripe.threshold;
  b.stripe_min = config.stripe.min;
  b.stripe_align = config.stripe.align;
  b.stripe_rails = config.stripe.max_rails;
  b.eager_max = static_cast<uint32_t>(config.eager_max);
  b.max_requests = config.max_requests;
  return b;
}

void DeviceState::settle(CommState& c, SendSlot& s) {
  if (!s.done() || !s.abort_owed) return;
  s.abort_owed = false;
  if (c.phase == Phase::connecting || c.paths.empty()) return;
  MsgHeader a = comm_header(MsgType::abort, c, c.slot_of(s.seq), s.seq);
  a.length = s.len;
  // too large / failed at the sender / another tag than the receive buffer's
  a.aux = s.error.code() == Code::truncated          ? 1
          : s.error.code() == Code::invalid_argument ? 3
                                                     : 2;
  (void)control->send(control_path(c), a, nullptr, &c, Dependent{});
}

void DeviceState::release_cts_room(CommState& c, RecvSlot& r) {
  if (r.cq_reserved == 0) return;
  for (const pool::Path& p : c.paths) rails[p.data->rail]->cq_give(r.cq_reserved);
  r.cq_reserved = 0;
}

void DeviceState::maybe_erase(CommState& c) {
  if (!c.user_closed || c.outstanding > 0) return;
  if (c.is_send && c.connection && c.phase == Phase::ready && !c.peer_closed) {
    // A connection is the path of its data: closing it while the receiver has not taken every
    // message would lose them (its end sees the shutdown first). The sender's end goes when the
    // receiver closes (its CLOSE, or the connection's shutdown).
    return;
  }
  if (!c.is_send && c.phase != Phase::failed && !c.peer_closed && Clock::now() < c.linger_until) {
    // A peer cleared to write into a receive may still be writing: the id (and the receive's
    // registration) stay until those writes land, the sender closes, or the linger ends.
    for (const RecvSlot& r : c.recvs) {
      if (r.active && r.cts_sent && !r.finished) return;
    }
  }
  erase_comm(c);
}

void DeviceState::erase_comm(CommState& c) {
  for (Unexpected& u : c.unexpected) {
    if (u.valid && u.buffer != nullptr) {
      u.owner->held -= 1;
      control->repost(u.owner, u.buffer);
    }
    u = Unexpected{};
  }
  for (RecvSlot& r : c.recvs) release_cts_room(c, r);
  for (pool::Path& p : c.paths) {
    if (c.connection) break;
    if (!c.owns(p.data)) p.data->refs -= 1;
    if (p.control != p.data && !c.owns(p.control)) p.control->refs -= 1;
  }
  for (pool::Channel* ch : c.own) drop_own(ch);
  c.own.clear();
  if (pool::Channel* ch = c.connection) {
    c.connection = nullptr;
    std::erase(ch->waiting, c.id);
    // The last user closes it: the connector's side always; the accepting side only when no
    // later communicator of its group can come over it (else the connector's shutdown does).
    if (pool->detach(*ch) &&
        (ch->key.dir == pool::Direction::out || ch->key.group == pool::kOwnGroup ||
         ch->failed())) {
      control->retire(pool->release(*ch));
    }
  }
  pool::Peer* peer = c.peer;
  const uint16_t index = c.id.index;
  comms->erase(index);  // destroys c (its slots let their registrations go: held_by_me)
  unref(peer);
}

}  // namespace xport::proto
