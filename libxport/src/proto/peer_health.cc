// Keepalives, peer loss, and the clock-driven clean-up of peers and closed communicators.
#include "proto/peer_health.hpp"

#include <algorithm>
#include <unordered_set>

#include "core/log.hpp"
#include "proto/control.hpp"
#include "proto/one_sided/one_sided.hpp"

namespace xport::proto {
namespace {

MsgHeader keepalive(MsgType t, uint64_t token, uint64_t nonce) {
  MsgHeader h{};
  h.type = static_cast<uint8_t>(t);
  h.version = kWireVersion;
  h.aux = token;
  h.aux2 = nonce;
  return h;
}

// The first path of a peer whose rail both ends use (or any).
pool::Channel* control_channel(const DeviceState& state, pool::Peer& p) {
  pool::Channel* any = nullptr;
  for (const pool::Path& path : p.paths) {
    if (path.control == nullptr) continue;
    if (state.usable(path.control->rail, &p)) return path.control;
    if (any == nullptr) any = path.control;
  }
  return any;
}

}  // namespace

void PeerHealth::register_handlers(Dispatch& d) {
  d.message<&PeerHealth::on_ping>(MsgType::ping, this);
  d.message<&PeerHealth::on_pong>(MsgType::pong, this);
  d.message<&PeerHealth::on_rail_state>(MsgType::rail_state, this);
}

void PeerHealth::check(Clock::time_point now) {
  // Which peers this device waits on: a connection in progress, a request not yet finished,
  // window operations in flight.
  std::unordered_set<const pool::Peer*> waiting;
  std::vector<CommId> lingering;
  state_.comms->for_each([&](uint16_t, CommState& c) {
    if (c.peer == nullptr || c.phase == Phase::failed) {
      if (c.user_closed) lingering.push_back(c.id);
      return;
    }
    bool waits = c.phase == Phase::connecting;
    for (const SendSlot& s : c.sends) waits = waits || (s.active && !s.done());
    for (const RecvSlot& r : c.recvs) waits = waits || (r.active && !r.finished);
    if (waits) waiting.insert(c.peer);
    if (c.user_closed) lingering.push_back(c.id);
  });
  // ... and window streams or waits on it (one_sided.hpp).
  one_sided_->add_waited_peers(waiting);
  // The time since the last sweep counts as silence only while this device was listening
  // (making passes): a longer gap, this device away, counts as kLongestCountedGap at most. A
  // peer idle meanwhile too answers once it progresses; one that died stays silent once this
  // device listens again, and is declared lost about a timeout later.
  const Clock::time_point prev = last_sweep_;
  const Clock::duration gap = prev == Clock::time_point{} ? Clock::duration{} : now - prev;
  last_sweep_ = now;
  const Clock::duration counted =
      std::min<Clock::duration>({gap, kLongestCountedGap, state_.config.peer_timeout / 2});
  std::vector<pool::Peer*> idle;
  for (auto& [token, owned] : state_.peers) {
    pool::Peer& p = *owned;
    if (p.refs <= 0) {
      if (p.refused || now - p.idle_since > kPeerLinger) idle.push_back(&p);
      continue;
    }
    if (p.dead || state_.connected_endpoints()) continue;  // connections report their own loss
    if (waiting.count(&p) == 0) {
      p.last_heard = now;  // silence while nothing is asked of a peer means nothing
      p.heard = false;
      p.quiet = Clock::duration{};
      p.ping_outstanding = false;
      continue;
    }
    // Something arrived since the last sweep: a receive path's flag, or a keepalive (or
    // connection) message that set last_heard itself.
    if (p.heard || p.last_heard > prev) {
      p.heard = false;
      p.last_heard = now;
      p.quiet = Clock::duration{};
    } else {
      p.quiet += counted;
    }
    if (p.quiet > state_.config.peer_timeout) {
      state_.fail_peer(p, core::error(Code::peer_lost, "the peer (device ", std::hex, p.token,
                                      std::dec, ") answered nothing for ",
                                      std::chrono::duration_cast<std::chrono::milliseconds>(p.quiet)
                                          .count(),
                                      " ms of this device's progress while requests waited on it "
                                      "(XPORT_PEER_TIMEOUT_MS)"));
      continue;
    }
    if (p.quiet > state_.config.keepalive &&
        (!p.ping_outstanding || now - p.ping_sent > state_.config.keepalive)) {
      ping(p, now);
    }
  }
  // Window streams whose target stopped counting while it answers (stream.hpp).
  one_sided_->streams().check_stalls(now);
  for (pool::Peer* p : idle) state_.retire_peer(*p);
  for (CommId id : lingering) {
    if (CommState* c = state_.comm(id)) state_.maybe_erase(*c);
  }
}

void PeerHealth::ping(pool::Peer& p, Clock::time_point now) {
  pool::Channel* ch = control_channel(state_, p);
  if (ch == nullptr) return;
  p.ping_nonce = next_nonce_++;
  p.ping_sent = now;
  p.ping_outstanding = true;
  ++state_.counters.keepalives_sent;
  (void)state_.control->send(ch, keepalive(MsgType::ping, state_.device_token, p.ping_nonce),
                             nullptr, nullptr, Dependent{}, &p);
}

void PeerHealth::on_ping(const Message& m) {
  const MsgHeader& h = m.h;
  auto it = state_.peers.find(h.aux);
  // A device this one knows nothing of (all its communicators closed) gets no answer: whatever
  // it waits on here is gone.
  if (it == state_.peers.end() || it->second->dead) return;
  pool::Peer& p = *it->second;
  p.last_heard = Clock::now();
  pool::Channel* ch = control_channel(state_, p);
  if (ch == nullptr) return;
  (void)state_.control->send(ch, keepalive(MsgType::pong, state_.device_token, h.aux2), nullptr,
                             nullptr, Dependent{}, &p);
}

void PeerHealth::on_rail_state(const Message& m) {
  const MsgHeader& h = m.h;
  auto it = state_.peers.find(h.aux);
  if (it == state_.peers.end() || h.seq >= kMaxRails) return;
  pool::Peer& p = *it->second;
  p.last_heard = Clock::now();
  const uint32_t bit = 1u << h.seq;
  if (h.aux2 != 0) {
    p.rails_down &= ~bit;
  } else if ((p.rails_down & bit) == 0) {
    p.rails_down |= bit;
    XPORT_LOG(info, "peer ", std::hex, p.token, std::dec, " took its rail ", h.seq,
              " out of service: traffic to it avoids that rail");
    state_.resend_after_rail_loss(&p);
  }
}

void PeerHealth::on_pong(const Message& m) {
  const MsgHeader& h = m.h;
  auto it = state_.peers.find(h.aux);
  if (it == state_.peers.end()) return;
  pool::Peer& p = *it->second;
  p.last_heard = Clock::now();
  if (h.aux2 == p.ping_nonce) p.ping_outstanding = false;
}

}  // namespace xport::proto
