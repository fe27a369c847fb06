// Connection set-up: listeners and their handles, connect/accept over the control path (RDM)
// or connection-manager events (FI_EP_MSG), refusal with reasons, and close.
#include <rdma/fi_cm.h>

#include <random>

#include "core/log.hpp"
#include "proto/engine.hpp"

namespace xport::proto {
namespace {

enum RejectReason : uint64_t { kUnknownListener = 1, kBacklogFull = 2, kTableFull = 3 };

const char* reject_text(uint64_t r) {
  switch (r) {
    case kUnknownListener: return "the listener is closed or unknown";
    case kBacklogFull: return "the listener's backlog is full (XPORT_LISTEN_BACKLOG)";
    case kTableFull: return "the peer's communicator table is full (XPORT_MAX_COMMS)";
  }
  return "unknown reason";
}

MsgHeader header(MsgType t, uint16_t dst, uint16_t src) {
  MsgHeader h{};
  h.type = static_cast<uint8_t>(t);
  h.version = kWireVersion;
  h.dst_comm = dst;
  h.src_comm = src;
  return h;
}

}  // namespace

Result<std::unique_ptr<CommState>> Engine::make_comm(bool is_send, std::vector<Path> paths,
                                                     uint16_t depth) {
  auto c = std::make_unique<CommState>();
  c->is_send = is_send;
  c->paths = std::move(paths);
  c->depth = depth;
  c->eager_max = config_.eager_max;
  c->plan = config_.stripe;
  if (is_send) {
    c->sends.resize(depth);
    c->early_cts.resize(depth);
    c->credit_limit = depth;
    for (auto& s : c->sends) s.stripe_ctx.resize(c->paths.size());
  } else {
    c->recvs.resize(depth);
    c->early_eager.resize(depth);
    c->early_rts.resize(depth);
  }
  for (Path& p : c->paths) {
    p.data->refs += 1;
    if (p.control != p.data) p.control->refs += 1;
  }
  return c;
}

Result<pool::Channel*> Engine::peer_channel(size_t rail, bool control,
                                            const std::vector<uint8_t>& address) {
  auto key = std::make_tuple(rail, control, address);
  auto it = peers_.find(key);
  if (it != peers_.end()) return it->second;
  rail::Rail& r = *rails_[rail];
  XPORT_ASSIGN_OR_RETURN(fi_addr_t a, r.av()->insert(address));
  pool::Channel* shared = control ? r.control_channel() : r.data_channel();
  auto ch = std::make_unique<pool::Channel>();
  ch->endpoint = shared->endpoint;
  ch->rx = shared->rx;
  ch->tx = shared->tx;
  ch->peer = a;
  ch->connected = true;
  ch->rail = static_cast<uint32_t>(rail);
  ch->label = core::str("rail ", r.name(), control ? " control" : " data", " peer ", a);
  pool::Channel* p = ch.get();
  channels_.push_back(std::move(ch));
  peers_[key] = p;
  return p;
}

Result<std::vector<Path>> Engine::peer_paths(const std::vector<RailAddresses>& remote) {
  // Rail i pairs with the peer's rail i over the rails both sides have.
  const size_t common = std::min(rails_.size(), remote.size());
  std::vector<Path> paths;
  for (size_t i = 0; i < common; ++i) {
    Path p;
    XPORT_ASSIGN_OR_RETURN(p.data, peer_channel(i, false, remote[i].data));
    XPORT_ASSIGN_OR_RETURN(p.control, peer_channel(i, true, remote[i].control));
    paths.push_back(p);
  }
  if (common < std::max(rails_.size(), remote.size())) {
    XPORT_LOG(info, "pairing over ", common, " common rails (this device has ", rails_.size(),
              ", the peer ", remote.size(), ")");
  }
  return paths;
}

std::vector<RailAddresses> Engine::local_addresses() {
  std::vector<RailAddresses> out;
  for (auto& r : rails_) {
    RailAddresses a;
    auto d = r->data_channel()->endpoint->address();
    auto c = r->control_channel()->endpoint->address();
    if (d.ok()) a.data = std::move(d).value();
    if (c.ok()) a.control = std::move(c).value();
    out.push_back(std::move(a));
  }
  return out;
}

Result<std::unique_ptr<Listener>> Engine::listen() {
  auto l = lock();
  Handle h;
  h.endpoint_type = connected_endpoints() ? 1 : 0;
  h.provider = caps_.provider;
  std::mt19937_64 rng(std::random_device{}());
  do {
    h.listener_token = rng();
  } while (h.listener_token == 0 || listeners_.count(h.listener_token) != 0);
  if (connected_endpoints()) {
    XPORT_ASSIGN_OR_RETURN(fabric::PassiveEndpoint * pep, rails_[0]->passive());
    RailAddresses a;
    XPORT_ASSIGN_OR_RETURN(a.data, pep->address());
    h.rails.push_back(std::move(a));
  } else {
    for (auto& r : rails_) {
      RailAddresses a;
      XPORT_ASSIGN_OR_RETURN(a.data, r->data_channel()->endpoint->address());
      XPORT_ASSIGN_OR_RETURN(a.control, r->control_channel()->endpoint->address());
      h.rails.push_back(std::move(a));
    }
  }
  listeners_[h.listener_token].token = h.listener_token;
  auto out = std::unique_ptr<Listener>(new Listener());
  out->engine_ = shared_from_this();
  out->token_ = h.listener_token;
  out->handle_ = encode_handle(h);
  return out;
}

Result<std::unique_ptr<RecvComm>> Engine::accept(uint64_t token, Deadline deadline) {
  uint16_t id = 0;
  Status s = wait_until(
      deadline,
      [&] {
        auto it = listeners_.find(token);
        if (it == listeners_.end() || it->second.ready.empty()) return false;
        id = it->second.ready.front();
        it->second.ready.pop_front();
        return true;
      },
      "accept: no connection arrived before the deadline");
  if (!s.ok()) return s;
  auto out = std::unique_ptr<RecvComm>(new RecvComm());
  out->engine_ = shared_from_this();
  out->id_ = id;
  return out;
}

void Engine::close_listener(uint64_t token) {
  auto l = lock();
  auto it = listeners_.find(token);
  if (it == listeners_.end()) return;
  std::deque<uint16_t> ready = std::move(it->second.ready);
  listeners_.erase(it);
  l.unlock();
  for (uint16_t id : ready) close_comm(id);
}

Result<std::unique_ptr<SendComm>> Engine::connect(const ConnectionHandle& bytes,
                                                  Deadline deadline) {
  auto decoded = decode_handle(bytes);
  if (!decoded.ok()) return decoded.status().with_context("connect");
  const Handle& h = *decoded;
  if (h.provider != caps_.provider) {
    return core::error(Code::invalid_argument, "connect: the handle is for provider '",
                       h.provider, "', this device uses '", caps_.provider, "'");
  }
  if ((h.endpoint_type == 1) != connected_endpoints()) {
    return core::error(Code::invalid_argument, "connect: the handle is for ",
                       h.endpoint_type == 1 ? "connected" : "RDM", " endpoints, this device uses ",
                       connected_endpoints() ? "connected" : "RDM", " endpoints");
  }
  uint16_t id = 0;
  {
    auto l = lock();
    std::vector<Path> paths;
    if (connected_endpoints()) {
      XPORT_ASSIGN_OR_RETURN(auto owned,
                             rails_[0]->open_connected_channel(rails_[0]->domain().info(),
                                                               2 * config_.max_requests + 8,
                                                               config_.max_requests + 8));
      pool::Channel* ch = owned.get();
      channels_.push_back(std::move(owned));
      ch->endpoint->set_retry(&Engine::retry_hook, this, config_.eagain_timeout);
      XPORT_RETURN_IF_ERROR(post_all_rx(ch));
      paths.push_back(Path{ch, ch});
    } else {
      XPORT_ASSIGN_OR_RETURN(paths, peer_paths(h.rails));
    }
    XPORT_ASSIGN_OR_RETURN(auto comm, make_comm(true, std::move(paths), config_.max_requests));
    id = comms_->insert(std::move(comm));
    if (id == 0) {
      return core::error(Code::resource, "connect: the communicator table is full (",
                         comms_->capacity(), " comms, XPORT_MAX_COMMS)");
    }
    CommState* c = comms_->find(id);
    c->id = id;
    MsgHeader req = header(MsgType::conn_req, 0, id);
    req.length = config_.max_requests;
    req.aux = config_.eager_max;
    req.aux2 = h.listener_token;
    Status s;
    pool::Channel* first = c->paths[0].control;
    if (connected_endpoints()) {
      int ret = fi_connect(first->endpoint->get(), h.rails[0].data.data(), &req, sizeof(req));
      if (ret != 0) s = fabric::fi_status(ret, "fi_connect");
      connecting_[&first->endpoint->get()->fid] = first;
    } else {
      ConnRequest r{};
      r.body.max_requests = config_.max_requests;
      r.body.stripe_threshold = config_.stripe.threshold;
      r.body.stripe_min = config_.stripe.min;
      r.body.stripe_align = config_.stripe.align;
      r.body.stripe_rails = config_.stripe.max_rails;
      r.rails = local_addresses();
      std::vector<uint8_t> body = encode_conn_body(r);
      if (body.size() > sizeof(ConnBody) + kMaxConnAddressBytes) {
        s = core::error(Code::unsupported, "connect: ", r.rails.size(), " rails of addresses (",
                        body.size(), " bytes) exceed a connection request");
      } else {
        s = send_control(first, req, &body, false, true);
      }
    }
    if (!s.ok()) {
      c->user_closed = true;
      maybe_erase(*c);
      return s.with_context("connect");
    }
  }
  Status s = wait_until(
      deadline, [&] { return comms_->find(id)->phase != CommPhase::connecting; },
      "connect: the listener did not answer before the deadline (is the peer alive and "
      "progressing?)");
  auto l = lock();
  CommState* c = comms_->find(id);
  if (s.ok() && c->phase == CommPhase::failed) s = c->error;
  if (!s.ok()) {
    c->user_closed = true;
    maybe_erase(*c);
    return s;
  }
  auto out = std::unique_ptr<SendComm>(new SendComm());
  out->engine_ = shared_from_this();
  out->id_ = id;
  return out;
}

void Engine::close_comm(uint16_t id) {
  auto l = lock();
  CommState* c = comms_->find(id);
  if (c == nullptr || c->user_closed) return;
  if (c->phase == CommPhase::ready && !c->paths.empty() && !c->paths[0].control->failed) {
    MsgHeader h = header(MsgType::close, c->peer_id, c->id);
    if (c->is_send) {
      // CLOSE travels on a control endpoint and may overtake eager data still on its way on a
      // data endpoint, so it says how many messages were sent: the receiver fails only the
      // receives beyond them. Sends not yet wholly on the wire (waiting for credit or a CTS)
      // are cancelled here and not counted.
      uint64_t sent = c->next_seq;
      for (auto& sl : c->sends) {
        if (sl.active && !sl.done) {
          sent = std::min(sent, sl.seq);
          sl.error = core::error(Code::closed, "the communicator was closed before message ",
                                 sl.seq, " was sent");
          sl.done = true;
        }
      }
      h.seq = sent;
    }
    Status s = send_control(control_path(*c), h, nullptr, false, true);
    if (!s.ok()) XPORT_LOG(debug, "close of comm ", id, ": ", s.to_string());
  }
  c->user_closed = true;
  maybe_erase(*c);
}

void Engine::on_conn_req(pool::Channel* ch, const MsgHeader& h, const uint8_t* body, size_t len) {
  (void)ch;
  auto req = decode_conn_body(body, len);
  if (!req.ok()) {
    ++routing_misses_;
    XPORT_LOG(warn, "dropping connection request: ", req.status().to_string());
    return;
  }
  auto paths = peer_paths(req->rails);
  if (!paths.ok()) {
    ++routing_misses_;
    XPORT_LOG(warn, "connection request with unusable addresses: ", paths.status().to_string());
    return;
  }
  pool::Channel* reply = (*paths)[0].control;
  auto reject = [&](uint64_t why) {
    MsgHeader r = header(MsgType::conn_reject, h.src_comm, 0);
    r.aux = why;
    (void)send_control(reply, r, nullptr, false, true);
  };
  auto it = listeners_.find(h.aux2);
  if (it == listeners_.end()) return reject(kUnknownListener);
  if (it->second.ready.size() + it->second.pending >= config_.listen_backlog)
    return reject(kBacklogFull);
  const uint16_t depth = static_cast<uint16_t>(
      std::min<uint64_t>(config_.max_requests, std::max<uint64_t>(h.length, 1)));
  auto comm = make_comm(false, std::move(paths).value(), depth);
  uint16_t id = comms_->insert(std::move(comm).value());
  if (id == 0) return reject(kTableFull);
  CommState* c = comms_->find(id);
  c->id = id;
  c->peer_id = h.src_comm;
  c->eager_max = std::min<uint64_t>(config_.eager_max, h.aux);
  c->plan.threshold = req->body.stripe_threshold;  // stripes are counted by the sender's plan
  c->plan.min = req->body.stripe_min;
  c->plan.align = req->body.stripe_align;
  c->plan.max_rails = req->body.stripe_rails;
  c->phase = CommPhase::ready;
  c->listener_token = h.aux2;
  MsgHeader ack = header(MsgType::conn_ack, h.src_comm, id);
  ack.length = depth;
  ack.aux = config_.eager_max;
  ack.aux2 = h.aux2;
  ack.slot = static_cast<uint16_t>(rails_.size());  // this side's rail count
  (void)send_control(reply, ack, nullptr, false, true);
  it->second.ready.push_back(id);
}

void Engine::on_conn_ack(const MsgHeader& h) {
  CommState* c = comms_->find(h.dst_comm);
  if (c == nullptr || !c->is_send || c->phase != CommPhase::connecting) {
    ++routing_misses_;
    return;
  }
  c->peer_id = h.src_comm;
  c->depth = static_cast<uint16_t>(std::min<uint64_t>(c->depth, std::max<uint64_t>(h.length, 1)));
  c->sends.resize(c->depth);
  c->early_cts.resize(c->depth);
  c->credit_limit = c->depth;
  if (!connected_endpoints() && h.slot != 0 && h.slot < c->paths.size()) {
    // The listener has fewer rails than its handle advertised: never the case today, but the
    // pairing must stay symmetric if it ever happens.
    c->paths.resize(h.slot);
  }
  c->eager_max = std::min<uint64_t>(config_.eager_max, h.aux);
  c->phase = CommPhase::ready;
}

void Engine::on_conn_reject(const MsgHeader& h) {
  CommState* c = comms_->find(h.dst_comm);
  if (c == nullptr || !c->is_send || c->phase != CommPhase::connecting) {
    ++routing_misses_;
    return;
  }
  fail_comm(*c, core::error(Code::peer_lost, "the listener refused the connection: ",
                            reject_text(h.aux)));
}

Status Engine::progress_events() {
  fid_eq* eq = rails_[0]->domain().eq();
  alignas(fi_eq_cm_entry) uint8_t buf[sizeof(fi_eq_cm_entry) + 512];
  for (size_t n = 0; n < config_.cq_batch; ++n) {
    uint32_t event = 0;
    ssize_t ret = fi_eq_read(eq, &event, buf, sizeof(buf), 0);
    if (ret == -FI_EAGAIN) break;
    if (ret == -FI_EAVAIL) {
      fi_eq_err_entry err{};
      if (fi_eq_readerr(eq, &err, 0) < 0) break;
      auto it = connecting_.find(err.fid);
      std::string why = core::str("connection failed: ", fi_strerror(err.err));
      if (err.err_data != nullptr && err.err_data_size >= sizeof(MsgHeader)) {
        MsgHeader r;
        std::memcpy(&r, err.err_data, sizeof(r));
        if (r.type == static_cast<uint8_t>(MsgType::conn_reject)) {
          why = core::str("the listener refused the connection: ", reject_text(r.aux));
        }
      }
      if (it != connecting_.end()) fail_channel(it->second, Status(Code::peer_lost, why));
      continue;
    }
    if (ret < 0) return fabric::fi_status(static_cast<int>(ret), "fi_eq_read");
    auto* entry = reinterpret_cast<fi_eq_cm_entry*>(buf);
    const uint8_t* data = buf + sizeof(fi_eq_cm_entry);
    const size_t data_len = static_cast<size_t>(ret) > sizeof(fi_eq_cm_entry)
                                ? static_cast<size_t>(ret) - sizeof(fi_eq_cm_entry)
                                : 0;
    if (event == FI_CONNREQ) {
      fabric::InfoPtr info(entry->info);
      auto h = decode_header(data, std::min(data_len, sizeof(MsgHeader)));
      MsgHeader rej = header(MsgType::conn_reject, h.ok() ? h->src_comm : 0, 0);
      auto pep = rails_[0]->passive();
      if (!h.ok() || h->type != static_cast<uint8_t>(MsgType::conn_req)) {
        ++routing_misses_;
        rej.aux = kUnknownListener;
        fi_reject((*pep)->get(), info->handle, &rej, sizeof(rej));
        continue;
      }
      auto it = listeners_.find(h->aux2);
      if (it == listeners_.end() ||
          it->second.ready.size() + it->second.pending >= config_.listen_backlog) {
        rej.aux = it == listeners_.end() ? kUnknownListener : kBacklogFull;
        fi_reject((*pep)->get(), info->handle, &rej, sizeof(rej));
        continue;
      }
      auto owned = rails_[0]->open_connected_channel(info.get(), 2 * config_.max_requests + 8,
                                                     config_.max_requests + 8);
      if (!owned.ok()) {
        XPORT_LOG(warn, "cannot accept a connection: ", owned.status().to_string());
        fi_reject((*pep)->get(), info->handle, nullptr, 0);
        continue;
      }
      pool::Channel* ch = owned->get();
      channels_.push_back(std::move(owned).value());
      ch->endpoint->set_retry(&Engine::retry_hook, this, config_.eagain_timeout);
      if (Status s = post_all_rx(ch); !s.ok()) {
        XPORT_LOG(warn, "cannot accept a connection: ", s.to_string());
        continue;
      }
      const uint16_t depth = static_cast<uint16_t>(
          std::min<uint64_t>(config_.max_requests, std::max<uint64_t>(h->length, 1)));
      uint16_t id = comms_->insert(std::move(make_comm(false, {Path{ch, ch}}, depth)).value());
      if (id == 0) {
        rej.aux = kTableFull;
        fi_reject((*pep)->get(), info->handle, &rej, sizeof(rej));
        continue;
      }
      CommState* c = comms_->find(id);
      c->id = id;
      c->peer_id = h->src_comm;
      c->eager_max = std::min<uint64_t>(config_.eager_max, h->aux);
      c->phase = CommPhase::ready;
      c->listener_token = h->aux2;
      MsgHeader ack = header(MsgType::conn_ack, h->src_comm, id);
      ack.length = depth;
      ack.aux = config_.eager_max;
      ack.aux2 = h->aux2;
      int r = fi_accept(ch->endpoint->get(), &ack, sizeof(ack));
      if (r != 0) {
        fail_comm(*c, fabric::fi_status(r, "fi_accept"));
        c->user_closed = true;
        maybe_erase(*c);
        continue;
      }
      connecting_[&ch->endpoint->get()->fid] = ch;
      it->second.pending += 1;
    } else if (event == FI_CONNECTED || event == FI_SHUTDOWN) {
      auto it = connecting_.find(entry->fid);
      if (it == connecting_.end()) continue;
      pool::Channel* ch = it->second;
      CommState* comm = nullptr;
      comms_->for_each([&](uint16_t, CommState& c) {
        if (uses(c.paths, ch)) comm = &c;
      });
      if (event == FI_SHUTDOWN) {
        fail_channel(ch, Status(Code::peer_lost, "the peer closed the connection"));
        continue;
      }
      ch->connected = true;
      if (comm == nullptr) continue;
      if (comm->is_send) {
        auto h = decode_header(data, std::min(data_len, sizeof(MsgHeader)));
        if (!h.ok() || h->type != static_cast<uint8_t>(MsgType::conn_ack)) {
          fail_comm(*comm, core::error(Code::protocol, "connection accepted without a valid "
                                                       "acknowledgement"));
          continue;
        }
        on_conn_ack(*h);
      } else {
        auto lit = listeners_.find(comm->listener_token);
        if (lit == listeners_.end()) {
          comm->user_closed = true;
          maybe_erase(*comm);
          continue;
        }
        lit->second.pending -= 1;
        lit->second.ready.push_back(comm->id);
      }
    }
  }
  return Status::success();
}

}  // namespace xport::proto
