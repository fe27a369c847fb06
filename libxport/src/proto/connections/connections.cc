// Connection set-up: listeners and their handles, connect/accept over the control path (RDM),
// refusal with reasons (a communicator's end: close.cc; FI_EP_MSG events: connected.cc).
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

void Connections::register_handlers(Dispatch& d) {
  dispatch_ = &d;
  d.message<&Connections::on_conn_req>(MsgType::conn_req, this);
  d.message<&Connections::on_conn_ack>(MsgType::conn_ack, this);
  d.message<&Connections::on_conn_reject>(MsgType::conn_reject, this);
  d.message<&Connections::on_conn_cancel>(MsgType::conn_cancel, this);
  d.message<&Connections::on_close>(MsgType::close, this, /*gated=*/true);
  d.gate<&Connections::stash>(this);
}

bool Connections::stash(const Message& m) {
  CommState* c = state_.comm({m.h.dst_comm, m.h.dst_gen});
  if (c == nullptr || !c->is_send || c->phase != Phase::connecting || c->connection) {
    return false;
  }
  if (c->stash.size() < 2u * c->depth + 4) {
    c->stash.push_back({m.h, std::vector<uint8_t>(m.body, m.body + m.len)});
  } else {
    state_.miss();
  }
  return true;
}

Result<std::vector<RailAddresses>> Connections::local_addresses(CommState& c) {
  XPORT_ASSIGN_OR_RETURN(std::vector<RailAddresses> out, state_.local_addresses(*c.peer));
  if (c.own.size() == out.size()) {
    for (size_t i = 0; i < out.size(); ++i) {
      pool::Channel* ch = c.own[i];
      if (ch == nullptr || !ch->owned || !ch->owned->has_endpoint()) continue;
      auto o = ch->owned->endpoint().address();
      if (o) out[i].own = std::move(o).value();
    }
  }
  return out;
}

Status Connections::open_own(CommState& c, pool::Direction dir) {
  pool::Pool& pl = *state_.pool;
  for (size_t i = 0; i < state_.rails.size(); ++i) {
    rail::Rail& r = *state_.rails[i];
    const uint8_t rail = static_cast<uint8_t>(i);
    // Its eager messages (credit bounds those held to the depth; beyond a few held, a message
    // is copied out and its buffer reposted, and the provider queues what finds none posted):
    // each posted buffer takes room in the rail's CQ, which every endpoint shares.
    const size_t rx = std::min<size_t>(c.depth, 16) + 8;
    XPORT_ASSIGN_OR_RETURN(auto ep, r.open_own_data(rx, size_t{c.depth} + 8));
    const pool::ChannelKey key = dir == pool::Direction::out
                                     ? pl.place(rail, c.peer->token)
                                     : pl.accepted(rail, c.peer->token, pool::kOwnGroup);
    pool::Channel* ch = pl.add(key, pool::Channel::connection(std::move(ep), c.id, c.nonce));
    pl.attach(*ch, true, i == 0);  // a primary once, whatever its rails
    c.own.push_back(ch);
    XPORT_RETURN_IF_ERROR(state_.control->post_receives(ch->ep));
  }
  return Status::success();
}

Status Connections::comm_paths(CommState& c, const std::vector<RailAddresses>& remote) {
  pool::Peer& peer = *c.peer;
  const size_t common = peer.paths.size();
  const bool remote_own = !remote.empty() && !remote[0].own.empty();
  std::vector<pool::Path> paths(peer.paths.begin(), peer.paths.end());
  pool::Pool& pl = *state_.pool;
  bool counted = std::any_of(c.own.begin(), c.own.end(), [](pool::Channel* o) { return o; });
  for (size_t i = 0; i < common; ++i) {
    pool::Channel* own = i < c.own.size() ? c.own[i] : nullptr;
    if (own == nullptr && !remote_own) continue;  // the peer's shared data channel
    rail::Rail& r = *state_.rails[i];
    XPORT_ASSIGN_OR_RETURN(rail::Shard * shard, state_.place(peer, i));
    if (own == nullptr) {
      // Only the peer has endpoints of the communicator's own: the peer's shard's towards them.
      auto ch = std::make_unique<pool::Channel>();
      ch->ep = shard->data.get();
      ch->rail = static_cast<uint8_t>(i);
      const pool::ChannelKey key =
          c.is_send ? pl.place(ch->rail, peer.token)
                    : pl.accepted(ch->rail, peer.token, pool::kOwnGroup);
      own = pl.add(key, std::move(ch));
      pl.attach(*own, true, !counted);  // a primary once, whatever its rails
      counted = true;
      if (c.own.size() <= i) c.own.resize(i + 1, nullptr);
      c.own[i] = own;
    }
    fabric::AddressVector* av =
        own->owned && own->owned->own_av() != nullptr ? own->owned->own_av() : shard->av.get();
    XPORT_ASSIGN_OR_RETURN(own->peer, av->insert(remote_own ? remote[i].own : remote[i].data));
    own->connected = true;
    own->label = core::str("rail ", r.name(), own->owned ? " own data" : " data", " peer ",
                           own->peer, " (communicator ", c.id.index, ")");
    paths[i].data = own;
  }
  // Own endpoints on rails the peer lacks carry nothing.
  for (size_t i = common; i < c.own.size(); ++i) {
    state_.drop_own(c.own[i]);
    c.own[i] = nullptr;
  }
  c.paths = std::move(paths);
  for (pool::Path& p : c.paths) {
    if (!c.owns(p.data)) p.data->refs += 1;
    if (!c.owns(p.control)) p.control->refs += 1;
  }
  return Status::success();
}

Result<Connections::Listening> Connections::listen() {
  Handle h;
  h.endpoint_type = state_.connected_endpoints() ? 1 : 0;
  h.provider_hash = provider_hash(state_.caps.provider);
  h.device_token = state_.device_token;
  do {
    h.listener_token = core::random64();
  } while (state_.listeners.count(h.listener_token) != 0);
  if (state_.connected_endpoints()) {
    XPORT_ASSIGN_OR_RETURN(fabric::PassiveEndpoint * pep, state_.rails[0]->passive());
    XPORT_ASSIGN_OR_RETURN(h.address, pep->address());
  } else {
    XPORT_ASSIGN_OR_RETURN(h.address, state_.rails[0]->control()->endpoint().address());
  }
  XPORT_ASSIGN_OR_RETURN(auto bytes, encode_handle(h));
  state_.listeners[h.listener_token].token = h.listener_token;
  return Listening{h.listener_token, std::move(bytes)};
}

Result<CommId> Connections::take_accepted(uint64_t token) {
  auto it = state_.listeners.find(token);
  if (it == state_.listeners.end()) {
    return core::error(Code::invalid_argument, "accept: the listener is closed");
  }
  while (!it->second.ready.empty()) {
    const CommId id = it->second.ready.front();
    it->second.ready.pop_front();
    if (state_.comm(id) != nullptr) return id;  // (one cancelled meanwhile is skipped)
  }
  return CommId{};
}

void Connections::close_listener(uint64_t token) {
  auto it = state_.listeners.find(token);
  if (it == state_.listeners.end()) return;
  std::deque<CommId> ready = std::move(it->second.ready);
  state_.listeners.erase(it);
  // Accepted by the transport but never taken: closed, so their connectors hear of it.
  for (CommId id : ready) close(id);
}

Result<CommState*> Connections::make_comm(bool is_send, pool::Peer* peer, uint16_t depth) {
  auto owned = std::make_unique<CommState>();
  CommState* c = owned.get();
  const CommId id = state_.comms->insert(std::move(owned));
  if (!id) {
    return core::error(Code::resource, "the communicator table is full (",
                       state_.comms->capacity(), " comms, XPORT_MAX_COMMS)");
  }
  c->id = id;
  c->is_send = is_send;
  c->set_depth(depth);
  c->eager_max = state_.config.eager_max;
  c->plan = state_.config.stripe;
  c->peer = peer;
  state_.ref(peer);
  if (is_send) {
    c->sends.resize(depth);
    c->early_cts.resize(depth);
    c->credit_limit = depth;
    c->make_tickets(depth);
  } else {
    c->recvs.resize(depth);
    c->unexpected.resize(depth);
    c->early_rts.resize(depth);
  }
  return c;
}

ConnBody Connections::request_body(const CommState& c) const {
  ConnBody b = state_.conn_body(c.nonce);
  b.listener_token = c.listener_token;
  return b;
}

Result<CommId> Connections::start(std::span<const uint8_t> bytes) {
  auto decoded = decode_handle(bytes);
  if (!decoded) return decoded.status().with_context("connect");
  const Handle& h = *decoded;
  if (h.provider_hash != provider_hash(state_.caps.provider)) {
    return core::error(Code::invalid_argument, "connect: the handle is for another provider ",
                       "(this device uses '", state_.caps.provider, "')");
  }
  if ((h.endpoint_type == 1) != state_.connected_endpoints()) {
    return core::error(Code::invalid_argument, "connect: the handle is for ",
                       h.endpoint_type == 1 ? "connected" : "RDM", " endpoints, this device uses ",
                       state_.connected_endpoints() ? "connected" : "RDM", " endpoints");
  }
  // The address reaches the provider only if it is one of the domain's own format (a forged
  // one may leave an rxm AV unusable: fabric/address.hpp).
  Status usable = fabric::check_peer_address(state_.rails[0]->domain().info()->addr_format,
                                             h.address);
  if (!usable.ok()) return usable.with_context("connect: the handle's address");
  pool::Peer* peer = state_.peer_for(h.device_token);
  XPORT_RETURN_IF_ERROR(DeviceState::check_open(*peer, "connect"));
  state_.ref(peer);  // held across set-up; the communicator takes its own
  if (peer->dead) {
    // A device declared dead earlier answers again under the same token only if it was never
    // dead: start afresh.
    peer->dead = false;
    peer->death.clear();
    peer->last_heard = Clock::now();
  }
  auto made = make_comm(true, peer, state_.config.max_requests);
  state_.unref(peer);
  if (!made) return made.status().with_context("connect");
  CommState& c = **made;
  c.nonce = core::random64();
  c.listener_token = h.listener_token;
  c.connect_started = Clock::now();
  Status s;
  if (state_.connected_endpoints()) {
    s = connect_msg(c, h.address);
  } else {
    if (peer->paths.empty() || peer->paths[0].control == nullptr) {
      if (peer->paths.empty()) peer->paths.resize(1);
      auto ch = state_.door_channel(*peer, h.address);
      if (!ch) s = ch.status();
      else peer->paths[0].control = *ch;
      c.made_channels = s.ok();
    }
    if (s.ok() && state_.own_data_endpoints) s = open_own(c, pool::Direction::out);
    ConnRequest r;
    if (s.ok()) {
      auto local = local_addresses(c);
      if (local) r.rails = std::move(local).value();
      else s = local.status();
    }
    if (s.ok()) {
      r.body = request_body(c);
      std::vector<uint8_t> body = encode_conn_request(r);
      if (body.size() > sizeof(ConnBody) + kMaxConnAddressBytes) {
        s = core::error(Code::unsupported, "connect: ", r.rails.size(), " rails of addresses (",
                        body.size(), " bytes) exceed a connection request");
      } else {
        MsgHeader req = bare(MsgType::conn_req);
        req.src_comm = c.id.index;
        req.src_gen = c.id.gen;
        s = state_.control->send(peer->paths[0].control, req, &body, &c,
                                 Dependent{Dependent::Kind::comm, c.id, 0, 0});
      }
    }
  }
  if (!s.ok()) {
    c.user_closed = true;
    state_.maybe_erase(c);
    return s.with_context("connect");
  }
  return c.id;
}

Status Connections::connect_msg(CommState& c, const std::vector<uint8_t>& address) {
  pool::Pool& pl = *state_.pool;
  const pool::ChannelKey key = pl.place(0, c.peer->token);
  if (pool::Channel* ch = pl.find(key); ch != nullptr) {
    if (!ch->failed()) {
      // A secondary: the group's channel is open (or opening); its request goes over it.
      pl.attach(*ch, false);
      c.connection = ch;
      c.paths = {pool::Path{ch, ch}};
      if (!ch->connected) {
        ch->waiting.push_back(c.id);
        return Status::success();
      }
      return request_on(c, *ch);
    }
    pl.orphan(key);  // failed: its users keep it until they go; a new one takes the slot
  }
  // A primary: opens the slot's connection, sized for the communicators it will carry.
  const uint32_t mul = key.group == pool::kOwnGroup ? 1 : state_.config.pool_depth_multiplier;
  rail::Rail& r = *state_.rails[0];
  XPORT_ASSIGN_OR_RETURN(auto ep, r.open_connection(r.domain().info(), (2 * c.depth + 8) * mul,
                                                    (c.depth + 8) * mul));
  pool::Channel* conn = pl.add(key, pool::Channel::connection(std::move(ep), c.id, c.nonce));
  pl.attach(*conn, true);
  c.connection = conn;
  c.paths = {pool::Path{conn, conn}};
  XPORT_RETURN_IF_ERROR(state_.control->post_receives(conn->ep));
  struct {
    MsgHeader h;
    ConnBody b;
  } param{};
  param.h = bare(MsgType::conn_req);
  param.h.src_comm = c.id.index;
  param.h.src_gen = c.id.gen;
  param.h.aux = key.group;  // the listener keeps its end in the same group
  param.b = request_body(c);
  pl.bind(&conn->ep->endpoint().get()->fid, *conn);
  const int ret = fi_connect(conn->ep->endpoint().get(), address.data(), &param, sizeof(param));
  if (ret != 0) return fabric::fi_status(ret, "fi_connect");
  return Status::success();
}

Status Connections::request_on(CommState& c, pool::Channel& ch) {
  ConnRequest r;
  r.body = request_body(c);  // no rail addresses: the connection is the path
  std::vector<uint8_t> body = encode_conn_request(r);
  MsgHeader req = bare(MsgType::conn_req);
  req.src_comm = c.id.index;
  req.src_gen = c.id.gen;
  return state_.control->send(&ch, req, &body, &c, Dependent{Dependent::Kind::comm, c.id, 0, 0});
}

CommState* Connections::admit(const MsgHeader& h, const ConnRequest& req, pool::Peer* peer,
                              uint64_t* reject_reason) {
  auto it = state_.listeners.find(req.body.listener_token);
  if (it == state_.listeners.end()) {
    *reject_reason = kUnknownListener;
    return nullptr;
  }
  if (it->second.ready.size() + it->second.pending >= state_.config.listen_backlog) {
    *reject_reason = kBacklogFull;
    return nullptr;
  }
  const uint16_t depth = static_cast<uint16_t>(
      std::min<uint64_t>(state_.config.max_requests, std::max<uint64_t>(req.body.max_requests, 1)));
  auto made = make_comm(false, peer, depth);
  if (!made) {
    *reject_reason = kTableFull;
    return nullptr;
  }
  CommState* c = *made;
  c->peer_comm = {h.src_comm, static_cast<uint8_t>(h.src_gen & pool::kCommGenMask)};
  c->nonce = req.body.nonce;
  c->eager_max = std::min<uint64_t>(state_.config.eager_max, req.body.eager_max);
  c->plan.threshold = req.body.stripe_threshold;  // stripes are counted by the sender's plan
  c->plan.min = req.body.stripe_min;
  c->plan.align = req.body.stripe_align;
  c->plan.max_rails = req.body.stripe_rails;
  c->listener_token = req.body.listener_token;
  return c;
}

void Connections::on_conn_req(const Message& m) {
  const MsgHeader& h = m.h;
  rail::RailEndpoint* ep = m.ep;
  auto req = decode_conn_request(m.body, m.len);
  // Connected endpoints: a request on a pooled connection (a secondary joining it).
  pool::Channel* via = nullptr;
  if (state_.connected_endpoints()) {
    via = ep != nullptr && ep->has_endpoint() ? state_.pool->by_fid(&ep->endpoint().get()->fid)
                                              : nullptr;
    if (via == nullptr || via->failed() || via->key.dir != pool::Direction::in ||
        via->key.group == pool::kOwnGroup || (req && via->key.peer != req->body.device_token)) {
      state_.miss();
      XPORT_LOG(warn, "dropping a connection request on a connection it cannot share");
      return;
    }
  }
  if (!req || (via == nullptr && req->rails.empty())) {
    state_.miss();
    XPORT_LOG(warn, "dropping connection request: ",
              req ? "no rail addresses" : req.status().to_string());
    return;
  }
  pool::Peer* peer = state_.peer_for(req->body.device_token);
  if (peer->closed) {
    state_.miss();  // a device of this process that closed sends nothing: a forgery
    return;
  }
  state_.ref(peer);
  if (peer->dead) {  // a device we gave up on connects again: it is alive
    peer->dead = false;
    peer->death.clear();
  }
  peer->last_heard = Clock::now();
  // A request repeated (same nonce from the same device and comm) is answered once.
  bool repeated = false;
  state_.comms->for_each([&](uint16_t, CommState& c) {
    repeated = repeated || (!c.is_send && c.peer == peer && c.nonce == req->body.nonce);
  });
  const size_t channels_before = peer->channels.size();
  Status paths = repeated || via != nullptr ? Status() : state_.set_paths(*peer, req->rails);
  if (paths.ok() && via == nullptr) state_.release_knock(*peer, ep, req->rails);
  uint64_t reason = 0;
  CommState* c = nullptr;
  if (!repeated) {
    if (!paths.ok()) {
      XPORT_LOG(warn, "refusing a connection request: ", paths.to_string());
      reason = paths.code() == Code::resource ? kNoRoom : kBadRequest;
    } else {
      c = admit(h, *req, peer, &reason);
    }
  }
  if (c != nullptr && via == nullptr) {
    Status own = state_.own_data_endpoints ? open_own(*c, pool::Direction::in) : Status();
    if (own.ok()) own = comm_paths(*c, req->rails);
    if (!own.ok()) {
      XPORT_LOG(warn, "cannot accept a connection: ", own.to_string());
      c->user_closed = true;  // never handed out
      state_.fail_comm(*c, own);
      c = nullptr;
      reason = kBadRequest;
    } else if (c->own.empty()) {
      state_.pool->count_rdm(peer->channels.size() > channels_before);
    }
  }
  pool::Channel* reply = via != nullptr ? via
                         : !peer->paths.empty() && peer->paths[0].control != nullptr
                             ? peer->paths[0].control
                             : nullptr;
  if (reply == nullptr && c == nullptr && !repeated) {
    reply = state_.refusal_channel(*peer, req->rails);
  }
  if (c == nullptr && !repeated && reply != nullptr) {
    MsgHeader r = bare(MsgType::conn_reject);
    r.dst_comm = h.src_comm;
    r.dst_gen = h.src_gen;
    r.aux = reason;
    r.aux2 = req->body.nonce;
    (void)state_.control->send(reply, r, nullptr, nullptr, Dependent{}, peer);
  }
  if (c != nullptr) {
    if (via != nullptr) {
      state_.pool->attach(*via, false);
      c->connection = via;
      c->paths = {pool::Path{via, via}};
    }
    c->phase = Phase::ready;
    ConnAck ack;
    ack.body.nonce = c->nonce;
    ack.body.device_token = state_.device_token;
    ack.body.eager_max = static_cast<uint32_t>(state_.config.eager_max);
    ack.body.depth = c->depth;
    Status s;
    if (via == nullptr) {
      auto local = local_addresses(*c);
      if (local) ack.rails = std::move(local).value();
      else s = local.status();
    }
    std::vector<uint8_t> bytes = encode_conn_ack(ack);
    MsgHeader a = comm_header(MsgType::conn_ack, *c);
    if (s.ok()) {
      s = state_.control->send(reply, a, &bytes, c, Dependent{Dependent::Kind::comm, c->id});
    }
    if (!s.ok()) {
      c->user_closed = true;
      state_.fail_comm(*c, s);
    } else {
      state_.listeners[c->listener_token].ready.push_back(c->id);
    }
  }
  state_.unref(peer);
}

void Connections::accept_answer(CommState& c, const MsgHeader& h, const ConnAck& ack) {
  if (ack.body.device_token != c.peer->token) {
    state_.fail_comm(c, core::error(Code::protocol, "connect: the listener answered as device ",
                                    std::hex, ack.body.device_token, ", its handle named ",
                                    c.peer->token));
    return;
  }
  c.peer_comm = {h.src_comm, static_cast<uint8_t>(h.src_gen & pool::kCommGenMask)};
  c.set_depth(std::min<uint16_t>(c.depth, ack.body.depth));
  c.sends.resize(c.depth);
  c.early_cts.resize(c.depth);
  c.credit_limit = c.depth;
  c.eager_max = std::min<uint64_t>(state_.config.eager_max, ack.body.eager_max);
  if (!c.connection) {
    const size_t channels_before = c.peer->channels.size();
    Status s = state_.set_paths(*c.peer, ack.rails);
    if (s.ok()) s = comm_paths(c, ack.rails);
    if (s.ok() && c.own.empty()) {
      state_.pool->count_rdm(c.made_channels || c.peer->channels.size() > channels_before);
    }
    if (!s.ok()) {
      state_.fail_comm(c, std::move(s).with_context("connect"));
      return;
    }
  }
  for (auto& s : c.sends) s.ctx.resize(c.paths.size());
  c.phase = Phase::ready;
  c.peer->last_heard = Clock::now();
}

void Connections::on_conn_ack(const Message& m) {
  const MsgHeader& h = m.h;
  auto ack = decode_conn_ack(m.body, m.len);
  if (!ack) {
    state_.miss();
    XPORT_LOG(warn, "dropping connection acknowledgement: ", ack.status().to_string());
    return;
  }
  CommState* c = state_.comm({h.dst_comm, h.dst_gen});
  if (c == nullptr || !c->is_send || c->phase != Phase::connecting ||
      ack->body.nonce != c->nonce) {
    // A late answer to a connection given up (its CONN_CANCEL tells the listener), or a forgery.
    state_.miss(true);
    return;
  }
  accept_answer(*c, h, *ack);
  if (c->phase != Phase::ready) return;
  // Control messages that overtook the acknowledgement on other rails.
  std::deque<Stashed> stash = std::move(c->stash);
  for (Stashed& s : stash) dispatch_->replay(s);
}

void Connections::on_conn_reject(const Message& m) {
  const MsgHeader& h = m.h;
  CommState* c = state_.comm({h.dst_comm, h.dst_gen});
  if (c == nullptr || !c->is_send || c->phase != Phase::connecting || h.aux2 != c->nonce) {
    state_.miss(true);
    return;
  }
  state_.fail_comm(*c, core::error(Code::peer_lost, "the listener refused the connection: ",
                                   reject_text(h.aux)));
}

bool Connections::remove_from_backlog(CommState& c) {
  auto it = state_.listeners.find(c.listener_token);
  if (it == state_.listeners.end()) return false;
  auto& q = it->second.ready;
  const auto end = std::remove(q.begin(), q.end(), c.id);
  const bool found = end != q.end();
  q.erase(end, q.end());
  return found;
}

void Connections::on_conn_cancel(const Message& m) {
  const MsgHeader& h = m.h;
  CommState* found = nullptr;
  state_.comms->for_each([&](uint16_t, CommState& c) {
    if (!c.is_send && c.nonce == h.aux2 && c.peer_comm.index == h.src_comm &&
        c.peer_comm.gen == (h.src_gen & pool::kCommGenMask)) {
      found = &c;
    }
  });
  if (found == nullptr) return;  // the request never arrived, or was refused
  auto it = state_.listeners.find(found->listener_token);
  const bool in_backlog =
      it != state_.listeners.end() &&
      std::find(it->second.ready.begin(), it->second.ready.end(), found->id) !=
          it->second.ready.end();
  if (in_backlog) {
    remove_from_backlog(*found);
    found->user_closed = true;
    state_.fail_comm(*found, Status(Code::closed, "the connector gave up"));
    return;
  }
  // Already accepted: the caller's communicator fails as a closed one.
  found->peer_closed = true;
  state_.fail_comm(*found, Status(Code::closed, "the connector gave up the connection"));
}

}  // namespace xport::proto
