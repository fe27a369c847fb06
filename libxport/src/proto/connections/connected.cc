// Connections over connected endpoints (FI_EP_MSG): connection-manager requests and events,
// and shutdowns applied.
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

void Connections::on_msg_connreq(fi_info* raw, const uint8_t* data, size_t len) {
  fabric::InfoPtr info(raw);
  auto pep = state_.rails[0]->passive();
  if (!pep) return;
  struct Param {
    MsgHeader h;
    ConnBody b;
  };
  MsgHeader rej = bare(MsgType::conn_reject);
  if (len < sizeof(Param)) {
    state_.miss();
    rej.aux = kBadRequest;
    fi_reject((*pep)->get(), info->handle, &rej, sizeof(rej));
    return;
  }
  Param p;
  std::memcpy(&p, data, sizeof(p));
  auto h = decode_header(reinterpret_cast<const uint8_t*>(&p), sizeof(p));
  auto req = decode_conn_request(reinterpret_cast<const uint8_t*>(&p.b), sizeof(p.b));
  if (!h || !req || h->type != static_cast<uint8_t>(MsgType::conn_req)) {
    state_.miss();
    rej.aux = kBadRequest;
    fi_reject((*pep)->get(), info->handle, &rej, sizeof(rej));
    return;
  }
  rej.dst_comm = h->src_comm;
  rej.dst_gen = h->src_gen;
  rej.aux2 = req->body.nonce;
  pool::Peer* peer = state_.peer_for(req->body.device_token);
  state_.ref(peer);
  uint64_t reason = 0;
  CommState* c = admit(*h, *req, peer, &reason);
  state_.unref(peer);
  if (c == nullptr) {
    rej.aux = reason;
    fi_reject((*pep)->get(), info->handle, &rej, sizeof(rej));
    return;
  }
  rail::Rail& r = *state_.rails[0];
  const uint32_t group = static_cast<uint32_t>(h->aux);
  const uint32_t mul = group == pool::kOwnGroup ? 1 : state_.config.pool_depth_multiplier;
  size_t rx = (2 * c->depth + 8) * mul;
  if (info->rx_attr != nullptr && info->rx_attr->size > 0) rx = std::min(rx, info->rx_attr->size);
  if (r.cq_free() < rx) {
    // Its receive buffers would not all fit in the rail's CQ: refused now, naming why (an
    // endpoint opened and then failed left the connector waiting out its deadline).
    XPORT_LOG(warn, "refusing a connection: its ", rx, " receive buffers find ", r.cq_free(),
              " free entries in the rail's CQ (XPORT_CQ_ENTRIES)");
    rej.aux = kNoCqRoom;
    fi_reject((*pep)->get(), info->handle, &rej, sizeof(rej));
    c->user_closed = true;
    state_.fail_comm(*c, Status(Code::resource, "no CQ room for the connection"));
    return;
  }
  auto ep = r.open_connection(info.get(), (2 * c->depth + 8) * mul, (c->depth + 8) * mul);
  Status s = ep.ok() ? Status() : ep.status();
  if (s.ok()) {
    pool::Channel* ch =
        state_.pool->add(state_.pool->accepted(0, peer->token, group),
                         pool::Channel::connection(std::move(ep).value(), c->id, c->nonce));
    state_.pool->attach(*ch, true);
    c->connection = ch;
    c->paths = {pool::Path{ch, ch}};
    s = state_.control->post_receives(ch->ep);
  }
  if (s.ok()) {
    struct {
      MsgHeader h;
      AckBody b;
    } ack{};
    ack.h = comm_header(MsgType::conn_ack, *c);
    ack.b.nonce = c->nonce;
    ack.b.device_token = state_.device_token;
    ack.b.eager_max = static_cast<uint32_t>(state_.config.eager_max);
    ack.b.depth = c->depth;
    const int ret = fi_accept(c->connection->ep->endpoint().get(), &ack, sizeof(ack));
    if (ret != 0) s = fabric::fi_status(ret, "fi_accept");
  }
  if (!s.ok()) {
    XPORT_LOG(warn, "cannot accept a connection: ", s.to_string());
    if (!c->connection) fi_reject((*pep)->get(), info->handle, nullptr, 0);
    c->user_closed = true;
    state_.fail_comm(*c, s);
    return;
  }
  state_.pool->bind(&c->connection->ep->endpoint().get()->fid, *c->connection);
  state_.listeners[c->listener_token].pending += 1;
}

void Connections::on_msg_connected(pool::Channel& ch, const uint8_t* data, size_t len) {
  ch.connected = true;
  CommState* opener = state_.comm(ch.opener);
  if (opener != nullptr && opener->connection == &ch) {
    on_opener_connected(*opener, data, len);
  } else if (ch.key.dir == pool::Direction::out && !ch.failed()) {
    // Its opener gave up meanwhile but others wait on the connection: the listener's side of
    // the opener is dropped, as a cancelled request's.
    MsgHeader m = bare(MsgType::conn_cancel);
    m.src_comm = ch.opener.index;
    m.src_gen = ch.opener.gen;
    m.aux2 = ch.opener_nonce;
    (void)state_.control->send(&ch, m, nullptr, nullptr, Dependent{});
  }
  if (ch.key.dir != pool::Direction::out) return;
  // The secondaries that waited for it send their requests over it.
  std::vector<CommId> waiting;
  waiting.swap(ch.waiting);
  for (CommId id : waiting) {
    CommState* c = state_.comm(id);
    if (c == nullptr || c->connection != &ch || c->phase != Phase::connecting) continue;
    Status s = ch.failed() ? Status(Code::peer_lost, ch.failure()) : request_on(*c, ch);
    if (!s.ok()) state_.fail_comm(*c, std::move(s).with_context("connect"));
  }
}

void Connections::on_opener_connected(CommState& c, const uint8_t* data, size_t len) {
  if (c.is_send) {
    struct {
      MsgHeader h;
      AckBody b;
    } p{};
    if (len < sizeof(p)) {
      state_.fail_comm(c, core::error(Code::protocol, "connection accepted without a valid "
                                                      "acknowledgement"));
      return;
    }
    std::memcpy(&p, data, sizeof(p));
    auto h = decode_header(reinterpret_cast<const uint8_t*>(&p), sizeof(p));
    auto ack = decode_conn_ack(reinterpret_cast<const uint8_t*>(&p.b), sizeof(p.b));
    if (!h || !ack || h->type != static_cast<uint8_t>(MsgType::conn_ack) ||
        ack->body.nonce != c.nonce) {
      state_.fail_comm(c, core::error(Code::protocol, "connection accepted without a valid "
                                                      "acknowledgement"));
      return;
    }
    accept_answer(c, *h, *ack);
    return;
  }
  (void)state_.ready_accepted(c);  // (ready already where a message on it came first)
}

Status Connections::progress_events() {
  fid_eq* eq = state_.rails[0]->domain().eq();
  alignas(fi_eq_cm_entry) uint8_t buf[sizeof(fi_eq_cm_entry) + 512];
  for (size_t n = 0; n < state_.config.cq_batch; ++n) {
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
      if (state_.control->is_retiring(err.fid)) {
        state_.control->on_shutdown(err.fid);
        continue;
      }
      if (pool::Channel* ch = state_.pool->by_fid(err.fid)) {
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
    if (event == FI_SHUTDOWN && state_.control->is_retiring(entry->fid)) {
      state_.control->on_shutdown(entry->fid);
      continue;
    }
    pool::Channel* ch = state_.pool->by_fid(entry->fid);
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
    pool::Channel* ch = state_.pool->by_fid(fid);
    if (ch == nullptr || ch->failed()) continue;
    fail_channel(*ch, Status(Code::peer_lost, "the peer closed the connection"));
  }
}

}  // namespace xport::proto
