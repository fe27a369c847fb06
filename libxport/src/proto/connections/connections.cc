// Connection set-up: listeners and their handles, connect/accept over the control path (RDM) or
// connection-manager events (FI_EP_MSG), refusal with reasons, cancellation, and close.
#include "proto/connections/connections.hpp"

#include <rdma/fi_cm.h>

#include <algorithm>

#include "core/log.hpp"
#include "core/random.hpp"
#include "fabric/address.hpp"
#include "proto/control.hpp"

namespace xport::proto {
namespace {

enum RejectReason : uint64_t {
  kUnknownListener = 1,
  kBacklogFull = 2,
  kTableFull = 3,
  kBadRequest = 4,
};

const char* reject_text(uint64_t r) {
  switch (r) {
    case kUnknownListener: return "the listener is closed or unknown";
    case kBacklogFull: return "the listener's backlog is full (XPORT_LISTEN_BACKLOG)";
    case kTableFull: return "the peer's communicator table is full (XPORT_MAX_COMMS)";
    case kBadRequest: return "the request's addresses are unusable there";
  }
  return "unknown reason";
}

MsgHeader bare(MsgType t) {
  MsgHeader h{};
  h.type = static_cast<uint8_t>(t);
  h.version = kWireVersion;
  return h;
}

}  // namespace

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
  CommState* c = core_.comm({m.h.dst_comm, m.h.dst_gen});
  if (c == nullptr || !c->is_send || c->phase != Phase::connecting || c->connection) {
    return false;
  }
  if (c->stash.size() < 2u * c->depth + 4) {
    c->stash.push_back({m.h, std::vector<uint8_t>(m.body, m.body + m.len)});
  } else {
    core_.miss();
  }
  return true;
}

MsgHeader Connections::header(MsgType t, const CommState& c) const {
  MsgHeader h = bare(t);
  h.dst_comm = c.peer_comm.index;
  h.dst_gen = c.peer_comm.gen;
  h.src_comm = c.id.index;
  h.src_gen = c.id.gen;
  return h;
}

std::vector<RailAddresses> Connections::local_addresses(const CommState* comm) const {
  std::vector<RailAddresses> out;
  for (const auto& r : core_.rails) {
    RailAddresses a;
    auto d = r->data()->endpoint().address();
    auto c = r->control()->endpoint().address();
    if (d) a.data = std::move(d).value();
    if (c) a.control = std::move(c).value();
    out.push_back(std::move(a));
  }
  if (comm != nullptr && comm->own.size() == out.size()) {
    for (size_t i = 0; i < out.size(); ++i) {
      pool::Channel* ch = comm->own[i];
      if (ch == nullptr || !ch->owned || !ch->owned->has_endpoint()) continue;
      auto o = ch->owned->endpoint().address();
      if (o) out[i].own = std::move(o).value();
    }
  }
  return out;
}

Status Connections::open_own(CommState& c, pool::Direction dir) {
  pool::Pool& pl = *core_.pool;
  for (size_t i = 0; i < core_.rails.size(); ++i) {
    rail::Rail& r = *core_.rails[i];
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
    XPORT_RETURN_IF_ERROR(core_.control->post_receives(ch->ep));
  }
  return Status::success();
}

Status Connections::comm_paths(CommState& c, const std::vector<RailAddresses>& remote) {
  pool::Peer& peer = *c.peer;
  const size_t common = peer.paths.size();
  const bool remote_own = !remote.empty() && !remote[0].own.empty();
  std::vector<pool::Path> paths(peer.paths.begin(), peer.paths.end());
  pool::Pool& pl = *core_.pool;
  bool counted = std::any_of(c.own.begin(), c.own.end(), [](pool::Channel* o) { return o; });
  for (size_t i = 0; i < common; ++i) {
    pool::Channel* own = i < c.own.size() ? c.own[i] : nullptr;
    if (own == nullptr && !remote_own) continue;  // the peer's shared data channel
    rail::Rail& r = *core_.rails[i];
    if (own == nullptr) {
      // Only the peer has endpoints of the communicator's own: the rail's towards them.
      auto ch = std::make_unique<pool::Channel>();
      ch->ep = r.data();
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
        own->owned && own->owned->own_av() != nullptr ? own->owned->own_av() : r.av();
    XPORT_ASSIGN_OR_RETURN(own->peer, av->insert(remote_own ? remote[i].own : remote[i].data));
    own->connected = true;
    own->label = core::str("rail ", r.name(), own->owned ? " own data" : " data", " peer ",
                           own->peer, " (communicator ", c.id.index, ")");
    paths[i].data = own;
  }
  // Own endpoints on rails the peer lacks carry nothing.
  for (size_t i = common; i < c.own.size(); ++i) {
    core_.drop_own(c.own[i]);
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
  h.endpoint_type = core_.connected_endpoints() ? 1 : 0;
  h.provider_hash = provider_hash(core_.caps.provider);
  h.device_token = core_.device_token;
  do {
    h.listener_token = core::random64();
  } while (core_.listeners.count(h.listener_token) != 0);
  if (core_.connected_endpoints()) {
    XPORT_ASSIGN_OR_RETURN(fabric::PassiveEndpoint * pep, core_.rails[0]->passive());
    XPORT_ASSIGN_OR_RETURN(h.address, pep->address());
  } else {
    XPORT_ASSIGN_OR_RETURN(h.address, core_.rails[0]->control()->endpoint().address());
  }
  XPORT_ASSIGN_OR_RETURN(auto bytes, encode_handle(h));
  core_.listeners[h.listener_token].token = h.listener_token;
  return Listening{h.listener_token, std::move(bytes)};
}

Result<CommId> Connections::take_accepted(uint64_t token) {
  auto it = core_.listeners.find(token);
  if (it == core_.listeners.end()) {
    return core::error(Code::invalid_argument, "accept: the listener is closed");
  }
  while (!it->second.ready.empty()) {
    const CommId id = it->second.ready.front();
    it->second.ready.pop_front();
    if (core_.comm(id) != nullptr) return id;  // (one cancelled meanwhile is skipped)
  }
  return CommId{};
}

void Connections::close_listener(uint64_t token) {
  auto it = core_.listeners.find(token);
  if (it == core_.listeners.end()) return;
  std::deque<CommId> ready = std::move(it->second.ready);
  core_.listeners.erase(it);
  // Accepted by the transport but never taken: closed, so their connectors hear of it.
  for (CommId id : ready) close(id);
}

Result<CommState*> Connections::make_comm(bool is_send, pool::Peer* peer, uint16_t depth) {
  auto owned = std::make_unique<CommState>();
  CommState* c = owned.get();
  const CommId id = core_.comms->insert(std::move(owned));
  if (!id) {
    return core::error(Code::resource, "the communicator table is full (",
                       core_.comms->capacity(), " comms, XPORT_MAX_COMMS)");
  }
  c->id = id;
  c->is_send = is_send;
  c->set_depth(depth);
  c->eager_max = core_.config.eager_max;
  c->plan = core_.config.stripe;
  c->peer = peer;
  core_.ref(peer);
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
  ConnBody b{};
  b.nonce = c.nonce;
  b.device_token = core_.device_token;
  b.listener_token = c.listener_token;
  b.stripe_threshold = core_.config.stripe.threshold;
  b.stripe_min = core_.config.stripe.min;
  b.stripe_align = core_.config.stripe.align;
  b.stripe_rails = core_.config.stripe.max_rails;
  b.eager_max = static_cast<uint32_t>(core_.config.eager_max);
  b.max_requests = core_.config.max_requests;
  return b;
}

Result<CommId> Connections::start(std::span<const uint8_t> bytes) {
  auto decoded = decode_handle(bytes);
  if (!decoded) return decoded.status().with_context("connect");
  const Handle& h = *decoded;
  if (h.provider_hash != provider_hash(core_.caps.provider)) {
    return core::error(Code::invalid_argument, "connect: the handle is for another provider ",
                       "(this device uses '", core_.caps.provider, "')");
  }
  if ((h.endpoint_type == 1) != core_.connected_endpoints()) {
    return core::error(Code::invalid_argument, "connect: the handle is for ",
                       h.endpoint_type == 1 ? "connected" : "RDM", " endpoints, this device uses ",
                       core_.connected_endpoints() ? "connected" : "RDM", " endpoints");
  }
  // The address reaches the provider only if it is one of the domain's own format (a forged
  // one may leave an rxm AV unusable: fabric/address.hpp).
  Status usable = fabric::check_peer_address(core_.rails[0]->domain().info()->addr_format,
                                             h.address);
  if (!usable.ok()) return usable.with_context("connect: the handle's address");
  pool::Peer* peer = core_.peer_for(h.device_token);
  XPORT_RETURN_IF_ERROR(Core::check_open(*peer, "connect"));
  core_.ref(peer);  // held across set-up; the communicator takes its own
  if (peer->dead) {
    // A device declared dead earlier answers again under the same token only if it was never
    // dead: start afresh.
    peer->dead = false;
    peer->death.clear();
    peer->last_heard = Clock::now();
  }
  auto made = make_comm(true, peer, core_.config.max_requests);
  core_.unref(peer);
  if (!made) return made.status().with_context("connect");
  CommState& c = **made;
  c.nonce = core::random64();
  c.listener_token = h.listener_token;
  c.connect_started = Clock::now();
  Status s;
  if (core_.connected_endpoints()) {
    s = connect_msg(c, h.address);
  } else {
    if (peer->paths.empty() || peer->paths[0].control == nullptr) {
      if (peer->paths.empty()) peer->paths.resize(1);
      auto ch = core_.channel_to(*peer, 0, true, h.address);
      if (!ch) s = ch.status();
      else peer->paths[0].control = *ch;
      c.made_channels = s.ok();
    }
    if (s.ok() && core_.own_data_endpoints) s = open_own(c, pool::Direction::out);
    if (s.ok()) {
      ConnRequest r;
      r.body = request_body(c);
      r.rails = local_addresses(&c);
      std::vector<uint8_t> body = encode_conn_request(r);
      if (body.size() > sizeof(ConnBody) + kMaxConnAddressBytes) {
        s = core::error(Code::unsupported, "connect: ", r.rails.size(), " rails of addresses (",
                        body.size(), " bytes) exceed a connection request");
      } else {
        MsgHeader req = bare(MsgType::conn_req);
        req.src_comm = c.id.index;
        req.src_gen = c.id.gen;
        s = core_.control->send(peer->paths[0].control, req, &body, &c,
                                Dependent{Dependent::Kind::comm, c.id, 0, 0});
      }
    }
  }
  if (!s.ok()) {
    c.user_closed = true;
    core_.maybe_erase(c);
    return s.with_context("connect");
  }
  return c.id;
}

Status Connections::connect_msg(CommState& c, const std::vector<uint8_t>& address) {
  pool::Pool& pl = *core_.pool;
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
  const uint32_t mul = key.group == pool::kOwnGroup ? 1 : core_.config.pool_depth_multiplier;
  rail::Rail& r = *core_.rails[0];
  XPORT_ASSIGN_OR_RETURN(auto ep, r.open_connection(r.domain().info(), (2 * c.depth + 8) * mul,
                                                    (c.depth + 8) * mul));
  pool::Channel* conn = pl.add(key, pool::Channel::connection(std::move(ep), c.id, c.nonce));
  pl.attach(*conn, true);
  c.connection = conn;
  c.paths = {pool::Path{conn, conn}};
  XPORT_RETURN_IF_ERROR(core_.control->post_receives(conn->ep));
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
  return core_.control->send(&ch, req, &body, &c, Dependent{Dependent::Kind::comm, c.id, 0, 0});
}

void Connections::fail_channel(pool::Channel& ch, const Status& why) {
  ch.ep->failed = true;
  ch.ep->failure = why.message();
  if (ch.key.dir == pool::Direction::out || ch.key.group != pool::kOwnGroup) {
    core_.pool->orphan(ch.key);
  }
  ch.refs += 1;  // kept while its users fail (their erasure lets go of it)
  std::vector<CommId> users;
  core_.comms->for_each([&](uint16_t, CommState& c) {
    if (c.connection == &ch) users.push_back(c.id);
  });
  for (CommId id : users) {
    CommState* c = core_.comm(id);
    if (c == nullptr) continue;
    // In the backlog (accepted by the transport, never taken) or still being accepted: never
    // handed out, so nobody will close it.
    const bool unclaimed = remove_from_backlog(*c);
    if (!c->is_send && c->phase == Phase::connecting) {
      auto lit = core_.listeners.find(c->listener_token);
      if (lit != core_.listeners.end() && lit->second.pending > 0) lit->second.pending -= 1;
      c->user_closed = true;
    }
    if (unclaimed) c->user_closed = true;
    core_.fail_comm(*c, why);
  }
  // Nobody uses it any more (or never did: an accepted connection idle between
  // communicators): closed now.
  if (--ch.refs <= 0) core_.control->retire(core_.pool->release(ch));
}

void Connections::cancel(CommId id) {
  CommState* c = core_.comm(id);
  if (c == nullptr || c->user_closed) return;
  pool::Channel* request_path = nullptr;
  if (c->phase == Phase::connecting && !core_.connected_endpoints() && c->peer != nullptr &&
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
    (void)core_.control->send(request_path, m, nullptr, nullptr, Dependent{},
                              core_.connected_endpoints() ? nullptr : c->peer);
  }
  if (c->phase == Phase::connecting) {
    core_.fail_comm(*c, Status(Code::closed, "connect: given up"));
  }
  c = core_.comm(id);
  if (c != nullptr) close(id);
}

void Connections::close(CommId id) {
  CommState* c = core_.comm(id);
  if (c == nullptr || c->user_closed) return;
  if (c->phase == Phase::ready && !c->paths.empty() && !c->paths[0].control->failed()) {
    MsgHeader h = header(MsgType::close, *c);
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
        core_.fail_send(*c, s, core::error(Code::closed, "the communicator was closed before "
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
      c->linger_until = Clock::now() + core_.config.close_linger;
      for (auto& r : c->recvs) {
        if (r.active && !r.finished) {
          // Its registration stays with the communicator until late writes cannot come.
          r.error = core::error(Code::closed, "the communicator was closed");
        }
      }
    }
    // Nothing waits on it locally; a CLOSE that cannot go leaves the peer to find out by
    // keepalive.
    (void)core_.control->send(core_.control_path(*c), h, nullptr, c, Dependent{});
  }
  c = core_.comm(id);
  if (c == nullptr) return;
  c->user_closed = true;
  core_.maybe_erase(*c);
}

void Connections::on_close(const Message& m) {
  const MsgHeader& h = m.h;
  CommState* c = core_.route(h, Core::Side::either);
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
      if (s.active && !s.finished && s.seq >= h.seq) core_.fail_send(*c, s, why);
    }
    core_.maybe_erase(*c);
    return;
  }
  // The sender sent h.seq messages: receives of those still complete when their data lands
  // (it may still be on another endpoint); receives beyond them fail now, later ones at once.
  c->peer_sent = h.seq;
  c->peer_closed = true;
  for (auto& r : c->recvs) {
    if (r.active && !r.finished && r.seq >= h.seq) {
      core_.fail_recv(*c, r, core::error(Code::closed, "the peer closed communicator ",
                                         c->id.index, " after ", h.seq, " messages"));
    }
  }
  core_.maybe_erase(*c);
}

CommState* Connections::admit(const MsgHeader& h, const ConnRequest& req, pool::Peer* peer,
                              uint64_t* reject_reason) {
  auto it = core_.listeners.find(req.body.listener_token);
  if (it == core_.listeners.end()) {
    *reject_reason = kUnknownListener;
    return nullptr;
  }
  if (it->second.ready.size() + it->second.pending >= core_.config.listen_backlog) {
    *reject_reason = kBacklogFull;
    return nullptr;
  }
  const uint16_t depth = static_cast<uint16_t>(
      std::min<uint64_t>(core_.config.max_requests, std::max<uint64_t>(req.body.max_requests, 1)));
  auto made = make_comm(false, peer, depth);
  if (!made) {
    *reject_reason = kTableFull;
    return nullptr;
  }
  CommState* c = *made;
  c->peer_comm = {h.src_comm, static_cast<uint8_t>(h.src_gen & pool::kCommGenMask)};
  c->nonce = req.body.nonce;
  c->eager_max = std::min<uint64_t>(core_.config.eager_max, req.body.eager_max);
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
  if (core_.connected_endpoints()) {
    via = ep != nullptr && ep->has_endpoint() ? core_.pool->by_fid(&ep->endpoint().get()->fid)
                                              : nullptr;
    if (via == nullptr || via->failed() || via->key.dir != pool::Direction::in ||
        via->key.group == pool::kOwnGroup || (req && via->key.peer != req->body.device_token)) {
      core_.miss();
      XPORT_LOG(warn, "dropping a connection request on a connection it cannot share");
      return;
    }
  }
  if (!req || (via == nullptr && req->rails.empty())) {
    core_.miss();
    XPORT_LOG(warn, "dropping connection request: ",
              req ? "no rail addresses" : req.status().to_string());
    return;
  }
  pool::Peer* peer = core_.peer_for(req->body.device_token);
  if (peer->closed) {
    core_.miss();  // a device of this process that closed sends nothing: a forgery
    return;
  }
  core_.ref(peer);
  if (peer->dead) {  // a device we gave up on connects again: it is alive
    peer->dead = false;
    peer->death.clear();
  }
  peer->last_heard = Clock::now();
  // A request repeated (same nonce from the same device and comm) is answered once.
  bool repeated = false;
  core_.comms->for_each([&](uint16_t, CommState& c) {
    repeated = repeated || (!c.is_send && c.peer == peer && c.nonce == req->body.nonce);
  });
  const size_t channels_before = peer->channels.size();
  Status paths = repeated || via != nullptr ? Status() : core_.set_paths(*peer, req->rails);
  uint64_t reason = 0;
  CommState* c = nullptr;
  if (!repeated) {
    if (!paths.ok()) {
      XPORT_LOG(warn, "connection request with unusable addresses: ", paths.to_string());
      reason = kBadRequest;
    } else {
      c = admit(h, *req, peer, &reason);
    }
  }
  if (c != nullptr && via == nullptr) {
    Status own = core_.own_data_endpoints ? open_own(*c, pool::Direction::in) : Status();
    if (own.ok()) own = comm_paths(*c, req->rails);
    if (!own.ok()) {
      XPORT_LOG(warn, "cannot accept a connection: ", own.to_string());
      c->user_closed = true;  // never handed out
      core_.fail_comm(*c, own);
      c = nullptr;
      reason = kBadRequest;
    } else if (c->own.empty()) {
      core_.pool->count_rdm(peer->channels.size() > channels_before);
    }
  }
  pool::Channel* reply = via != nullptr ? via
                         : !peer->paths.empty() && peer->paths[0].control != nullptr
                             ? peer->paths[0].control
                             : nullptr;
  if (c == nullptr && !repeated && reply != nullptr) {
    MsgHeader r = bare(MsgType::conn_reject);
    r.dst_comm = h.src_comm;
    r.dst_gen = h.src_gen;
    r.aux = reason;
    r.aux2 = req->body.nonce;
    (void)core_.control->send(reply, r, nullptr, nullptr, Dependent{}, peer);
  }
  if (c != nullptr) {
    if (via != nullptr) {
      core_.pool->attach(*via, false);
      c->connection = via;
      c->paths = {pool::Path{via, via}};
    }
    c->phase = Phase::ready;
    ConnAck ack;
    ack.body.nonce = c->nonce;
    ack.body.device_token = core_.device_token;
    ack.body.eager_max = static_cast<uint32_t>(core_.config.eager_max);
    ack.body.depth = c->depth;
    if (via == nullptr) ack.rails = local_addresses(c);
    std::vector<uint8_t> bytes = encode_conn_ack(ack);
    MsgHeader a = header(MsgType::conn_ack, *c);
    Status s = core_.control->send(reply, a, &bytes, c, Dependent{Dependent::Kind::comm, c->id});
    if (!s.ok()) {
      c->user_closed = true;
      core_.fail_comm(*c, s);
    } else {
      core_.listeners[c->listener_token].ready.push_back(c->id);
    }
  }
  core_.unref(peer);
}

void Connections::accept_answer(CommState& c, const MsgHeader& h, const ConnAck& ack) {
  if (ack.body.device_token != c.peer->token) {
    core_.fail_comm(c, core::error(Code::protocol, "connect: the listener answered as device ",
                                   std::hex, ack.body.device_token, ", its handle named ",
                                   c.peer->token));
    return;
  }
  c.peer_comm = {h.src_comm, static_cast<uint8_t>(h.src_gen & pool::kCommGenMask)};
  c.set_depth(std::min<uint16_t>(c.depth, ack.body.depth));
  c.sends.resize(c.depth);
  c.early_cts.resize(c.depth);
  c.credit_limit = c.depth;
  c.eager_max = std::min<uint64_t>(core_.config.eager_max, ack.body.eager_max);
  if (!c.connection) {
    const size_t channels_before = c.peer->channels.size();
    Status s = core_.set_paths(*c.peer, ack.rails);
    if (s.ok()) s = comm_paths(c, ack.rails);
    if (s.ok() && c.own.empty()) {
      core_.pool->count_rdm(c.made_channels || c.peer->channels.size() > channels_before);
    }
    if (!s.ok()) {
      core_.fail_comm(c, std::move(s).with_context("connect"));
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
    core_.miss();
    XPORT_LOG(warn, "dropping connection acknowledgement: ", ack.status().to_string());
    return;
  }
  CommState* c = core_.comm({h.dst_comm, h.dst_gen});
  if (c == nullptr || !c->is_send || c->phase != Phase::connecting ||
      ack->body.nonce != c->nonce) {
    // A late answer to a connection given up (its CONN_CANCEL tells the listener), or a forgery.
    core_.miss(true);
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
  CommState* c = core_.comm({h.dst_comm, h.dst_gen});
  if (c == nullptr || !c->is_send || c->phase != Phase::connecting || h.aux2 != c->nonce) {
    core_.miss(true);
    return;
  }
  core_.fail_comm(*c, core::error(Code::peer_lost, "the listener refused the connection: ",
                                  reject_text(h.aux)));
}

bool Connections::remove_from_backlog(CommState& c) {
  auto it = core_.listeners.find(c.listener_token);
  if (it == core_.listeners.end()) return false;
  auto& q = it->second.ready;
  const auto end = std::remove(q.begin(), q.end(), c.id);
  const bool found = end != q.end();
  q.erase(end, q.end());
  return found;
}

void Connections::on_conn_cancel(const Message& m) {
  const MsgHeader& h = m.h;
  CommState* found = nullptr;
  core_.comms->for_each([&](uint16_t, CommState& c) {
    if (!c.is_send && c.nonce == h.aux2 && c.peer_comm.index == h.src_comm &&
        c.peer_comm.gen == (h.src_gen & pool::kCommGenMask)) {
      found = &c;
    }
  });
  if (found == nullptr) return;  // the request never arrived, or was refused
  auto it = core_.listeners.find(found->listener_token);
  const bool in_backlog =
      it != core_.listeners.end() &&
      std::find(it->second.ready.begin(), it->second.ready.end(), found->id) !=
          it->second.ready.end();
  if (in_backlog) {
    remove_from_backlog(*found);
    found->user_closed = true;
    core_.fail_comm(*found, Status(Code::closed, "the connector gave up"));
    return;
  }
  // Already accepted: the caller's communicator fails as a closed one.
  found->peer_closed = true;
  core_.fail_comm(*found, Status(Code::closed, "the connector gave up the connection"));
}

// ---- connected endpoints (FI_EP_MSG) ----

void Connections::on_msg_connreq(fi_info* raw, const uint8_t* data, size_t len) {
  fabric::InfoPtr info(raw);
  auto pep = core_.rails[0]->passive();
  if (!pep) return;
  struct Param {
    MsgHeader h;
    ConnBody b;
  };
  MsgHeader rej = bare(MsgType::conn_reject);
  if (len < sizeof(Param)) {
    core_.miss();
    rej.aux = kBadRequest;
    fi_reject((*pep)->get(), info->handle, &rej, sizeof(rej));
    return;
  }
  Param p;
  std::memcpy(&p, data, sizeof(p));
  auto h = decode_header(reinterpret_cast<const uint8_t*>(&p), sizeof(p));
  auto req = decode_conn_request(reinterpret_cast<const uint8_t*>(&p.b), sizeof(p.b));
  if (!h || !req || h->type != static_cast<uint8_t>(MsgType::conn_req)) {
    core_.miss();
    rej.aux = kBadRequest;
    fi_reject((*pep)->get(), info->handle, &rej, sizeof(rej));
    return;
  }
  rej.dst_comm = h->src_comm;
  rej.dst_gen = h->src_gen;
  rej.aux2 = req->body.nonce;
  pool::Peer* peer = core_.peer_for(req->body.device_token);
  core_.ref(peer);
  uint64_t reason = 0;
  CommState* c = admit(*h, *req, peer, &reason);
  core_.unref(peer);
  if (c == nullptr) {
    rej.aux = reason;
    fi_reject((*pep)->get(), info->handle, &rej, sizeof(rej));
    return;
  }
  rail::Rail& r = *core_.rails[0];
  const uint32_t group = static_cast<uint32_t>(h->aux);
  const uint32_t mul = group == pool::kOwnGroup ? 1 : core_.config.pool_depth_multiplier;
  auto ep = r.open_connection(info.get(), (2 * c->depth + 8) * mul, (c->depth + 8) * mul);
  Status s = ep.ok() ? Status() : ep.status();
  if (s.ok()) {
    pool::Channel* ch =
        core_.pool->add(core_.pool->accepted(0, peer->token, group),
                        pool::Channel::connection(std::move(ep).value(), c->id, c->nonce));
    core_.pool->attach(*ch, true);
    c->connection = ch;
    c->paths = {pool::Path{ch, ch}};
    s = core_.control->post_receives(ch->ep);
  }
  if (s.ok()) {
    struct {
      MsgHeader h;
      AckBody b;
    } ack{};
    ack.h = header(MsgType::conn_ack, *c);
    ack.b.nonce = c->nonce;
    ack.b.device_token = core_.device_token;
    ack.b.eager_max = static_cast<uint32_t>(core_.config.eager_max);
    ack.b.depth = c->depth;
    const int ret = fi_accept(c->connection->ep->endpoint().get(), &ack, sizeof(ack));
    if (ret != 0) s = fabric::fi_status(ret, "fi_accept");
  }
  if (!s.ok()) {
    XPORT_LOG(warn, "cannot accept a connection: ", s.to_string());
    if (!c->connection) fi_reject((*pep)->get(), info->handle, nullptr, 0);
    c->user_closed = true;
    core_.fail_comm(*c, s);
    return;
  }
  core_.pool->bind(&c->connection->ep->endpoint().get()->fid, *c->connection);
  core_.listeners[c->listener_token].pending += 1;
}

void Connections::on_msg_connected(pool::Channel& ch, const uint8_t* data, size_t len) {
  ch.connected = true;
  CommState* opener = core_.comm(ch.opener);
  if (opener != nullptr && opener->connection == &ch) {
    on_opener_connected(*opener, data, len);
  } else if (ch.key.dir == pool::Direction::out && !ch.failed()) {
    // Its opener gave up meanwhile but others wait on the connection: the listener's side of
    // the opener is dropped, as a cancelled request's.
    MsgHeader m = bare(MsgType::conn_cancel);
    m.src_comm = ch.opener.index;
    m.src_gen = ch.opener.gen;
    m.aux2 = ch.opener_nonce;
    (void)core_.control->send(&ch, m, nullptr, nullptr, Dependent{});
  }
  if (ch.key.dir != pool::Direction::out) return;
  // The secondaries that waited for it send their requests over it.
  std::vector<CommId> waiting;
  waiting.swap(ch.waiting);
  for (CommId id : waiting) {
    CommState* c = core_.comm(id);
    if (c == nullptr || c->connection != &ch || c->phase != Phase::connecting) continue;
    Status s = ch.failed() ? Status(Code::peer_lost, ch.failure()) : request_on(*c, ch);
    if (!s.ok()) core_.fail_comm(*c, std::move(s).with_context("connect"));
  }
}

void Connections::on_opener_connected(CommState& c, const uint8_t* data, size_t len) {
  if (c.is_send) {
    struct {
      MsgHeader h;
      AckBody b;
    } p{};
    if (len < sizeof(p)) {
      core_.fail_comm(c, core::error(Code::protocol, "connection accepted without a valid "
                                                     "acknowledgement"));
      return;
    }
    std::memcpy(&p, data, sizeof(p));
    auto h = decode_header(reinterpret_cast<const uint8_t*>(&p), sizeof(p));
    auto ack = decode_conn_ack(reinterpret_cast<const uint8_t*>(&p.b), sizeof(p.b));
    if (!h || !ack || h->type != static_cast<uint8_t>(MsgType::conn_ack) ||
        ack->body.nonce != c.nonce) {
      core_.fail_comm(c, core::error(Code::protocol, "connection accepted without a valid "
                                                     "acknowledgement"));
      return;
    }
    accept_answer(c, *h, *ack);
    return;
  }
  auto lit = core_.listeners.find(c.listener_token);
  if (lit == core_.listeners.end()) {
    c.user_closed = true;
    core_.fail_comm(c, Status(Code::closed, "the listener closed"));
    return;
  }
  lit->second.pending -= 1;
  c.phase = Phase::ready;
  lit->second.ready.push_back(c.id);
}

Status Connections::progress_events() {
  fid_eq* eq = core_.rails[0]->domain().eq();
  alignas(fi_eq_cm_entry) uint8_t buf[sizeof(fi_eq_cm_entry) + 512];
  for (size_t n = 0; n < core_.config.cq_batch; ++n) {
    uint32_t event = 0;
    ssize_t ret = fi_eq_read(eq, &event, buf, sizeof(buf), 0);
    if (ret == -FI_EAGAIN) break;
    if (ret == -FI_EAVAIL) {
      fi_eq_err_entry err{};
      if (fi_eq_readerr(eq, &err, 0) < 0) break;
      std::string why = core::str("connection failed: ", fi_strerror(err.err));
      if (err.err_data != nullptr && err.err_data_size >= sizeof(MsgHeader)) {
        MsgHeader r;
        std::memcpy(&r, err.err_data, sizeof(r));
        if (r.type == static_cast<uint8_t>(MsgType::conn_reject)) {
          why = core::str("the listener refused the connection: ", reject_text(r.aux));
        }
      }
      if (core_.control->is_retiring(err.fid)) {
        core_.control->on_shutdown(err.fid);
        continue;
      }
      if (pool::Channel* ch = core_.pool->by_fid(err.fid)) {
        if (!ch->failed()) fail_channel(*ch, Status(Code::peer_lost, why));
      }
      continue;
    }
    if (ret < 0) return fabric::fi_status(static_cast<int>(ret), "fi_eq_read");
    auto* entry = reinterpret_cast<fi_eq_cm_entry*>(buf);
    const uint8_t* data = buf + sizeof(fi_eq_cm_entry);
    const size_t data_len = static_cast<size_t>(ret) > sizeof(fi_eq_cm_entry)
                                ? static_cast<size_t>(ret) - sizeof(fi_eq_cm_entry)
                                : 0;
    if (event == FI_CONNREQ) {
      on_msg_connreq(entry->info, data, data_len);
      continue;
    }
    if (event != FI_CONNECTED && event != FI_SHUTDOWN) continue;
    if (event == FI_SHUTDOWN && core_.control->is_retiring(entry->fid)) {
      core_.control->on_shutdown(entry->fid);
      continue;
    }
    pool::Channel* ch = core_.pool->by_fid(entry->fid);
    if (ch == nullptr) continue;
    if (event == FI_SHUTDOWN) {
      shutdowns_.push_back(entry->fid);  // applied once the CQs were read again
      continue;
    }
    on_msg_connected(*ch, data, data_len);
  }
  return Status::success();
}

void Connections::apply_shutdowns() {
  std::vector<fid_t> fids;
  fids.swap(shutdowns_);
  for (fid_t fid : fids) {
    pool::Channel* ch = core_.pool->by_fid(fid);
    if (ch == nullptr || ch->failed()) continue;
    fail_channel(*ch, Status(Code::peer_lost, "the peer closed the connection"));
  }
}

}  // namespace xport::proto
