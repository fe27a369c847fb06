// Control messages, receive buffers and connection retirement.
#include "proto/control.hpp"

#include <rdma/fi_cm.h>

#include <algorithm>

#include "core/log.hpp"

namespace xport::proto {

void Control::register_handlers(Dispatch& d) {
  dispatch_ = &d;
  d.completion<&Control::received, &Control::receive_failed>(fabric::OpType::rx_buffer, this);
  d.completion<&Control::sent, &Control::send_failed>(fabric::OpType::tx_buffer, this);
  d.consumed<&Control::consumed>(this);
}

void Control::received(fabric::OpContext* ctx, const fi_cq_data_entry& e) {
  auto* ep = static_cast<rail::RailEndpoint*>(ctx->owner);
  memory::Buffer* b = &ep->rx().at(ctx->index);
  ep->posted_rx -= 1;
  if (ep->failed) return;  // a connection being retired: its buffers are not reposted
  ep->endpoint().counters().ops[static_cast<int>(fabric::OpKind::recv)].add();
  ep->endpoint().counters().bytes[static_cast<int>(fabric::OpKind::recv)].add(e.len);
  bool hold = false;
  // (remote CQ data here is a headerless eager message: the dispatch table routed writes)
  if (carries_remote_data(e)) {
    dispatch_->eager_arrived(ep, b, e.data, e.len, &hold);
  } else {
    dispatch_->message_arrived(ep, b, e.len, &hold);
  }
  // The buffer goes back to the provider at the next pass (the bare loops repost after they
  // answered, too): the completion's caller sees it one provider call sooner.
  if (!hold) repost_later(ep, b);
}

void Control::receive_failed(fabric::OpContext* ctx, const Status& status, int err) {
  auto* ep = static_cast<rail::RailEndpoint*>(ctx->owner);
  ep->posted_rx -= 1;
  if (err == FI_ECANCELED || ep->failed) return;
  ep->endpoint().counters().error_completions.add();
  XPORT_LOG(debug, "receive buffer error on ", ep->label(), ": ", status.to_string());
  // A connection serves one peer: its loss fails that communicator. The shared RDM
  // endpoints serve every peer: one peer's failure must not stop receives for the others.
  pool::Channel* ch =
      ep->has_endpoint() ? state_.pool->by_fid(&ep->endpoint().get()->fid) : nullptr;
  if (ch != nullptr && status.code() == Code::peer_lost) {
    connection_lost(*ch, status);
    return;
  }
  repost(ep, &ep->rx().at(ctx->index));
}

void Control::consumed(fabric::OpContext* ctx) {
  auto* ep = static_cast<rail::RailEndpoint*>(ctx->owner);
  ep->posted_rx -= 1;
  repost(ep, &ep->rx().at(ctx->index));
}

void Control::sent(fabric::OpContext* ctx, const fi_cq_data_entry&) {
  auto* ep = static_cast<rail::RailEndpoint*>(ctx->owner);
  ep->endpoint().count_completion(false);
  on_sent(&ep->tx().at(ctx->index), Status());
}

void Control::send_failed(fabric::OpContext* ctx, const Status& st, int) {
  auto* ep = static_cast<rail::RailEndpoint*>(ctx->owner);
  ep->endpoint().count_completion(true);
  on_sent(&ep->tx().at(ctx->index), st);
}

Status Control::send(pool::Channel* ch, const MsgHeader& h, const std::vector<uint8_t>* body,
                     CommState* owner, Dependent dep, pool::Peer* peer) {
  if (ch == nullptr) return core::error(Code::internal, "control message without a channel");
  if (ch->failed()) return core::error(Code::peer_lost, ch->label, ": ", ch->failure());
  const size_t len = sizeof(MsgHeader) + (body != nullptr ? body->size() : 0);
  if (len > ch->ep->tx().size()) {
    return core::error(Code::internal, "control message of ", len, " bytes exceeds the ",
                       ch->ep->tx().size(), "-byte buffers of ", ch->label);
  }
  pool::Peer* whose = owner != nullptr ? owner->peer : peer;
  // Messages queued on the same channel go first (a CLOSE must not overtake its communicator's
  // earlier CTS, for one).
  const bool behind = queued_.any_of(
      [&](const PendingQueue<PendingControl>::Entry& q) { return q.post.ch == ch; });
  Status s = behind ? Status(Code::again, "queued")
                    : attempt(ch, h, body != nullptr ? body->data() : nullptr,
                              body != nullptr ? body->size() : 0, whose);
  if (s.code() != Code::again) return s;
  // Copied only now: a message that goes at once (most) is sent from the caller's bytes.
  PendingControl p;
  p.ch = ch;
  p.hdr = h;
  if (body != nullptr) p.body = *body;
  p.dep = dep;
  if (owner != nullptr) p.owner = owner->id;
  p.peer = whose;
  if (owner != nullptr) state_.hold(*owner);
  state_.ref(p.peer);
  queued_.push(std::move(p), Clock::now());
  return Status::success();
}

Status Control::attempt(pool::Channel* ch, const MsgHeader& h, const uint8_t* body,
                        size_t body_len, const pool::Peer* peer) {
  if (ch->failed()) return core::error(Code::peer_lost, ch->label, ": ", ch->failure());
  rail::RailEndpoint& ep = *ch->ep;
  const size_t len = sizeof(MsgHeader) + body_len;
  const bool inject = len <= state_.inject_size;
  rail::Rail& rail = *state_.rails[ch->rail];
  if (!inject && !rail.cq_take()) return Status(Code::again, "CQ full");
  memory::Buffer* b = ep.tx().take();
  if (b == nullptr) {
    if (!inject) rail.cq_give();
    return Status(Code::again, core::str("no free send buffer on ", ch->label));
  }
  std::memcpy(b->data, &h, sizeof(MsgHeader));
  if (body_len > 0) std::memcpy(b->data + sizeof(MsgHeader), body, body_len);
  // A control message: no request waits for its completion; the peer's token names whom an
  // error completion concerns.
  b->ctx.type = fabric::OpType::tx_buffer;
  b->ctx.comm = 0;
  b->ctx.seq = peer != nullptr ? peer->token : 0;
  Status s;
  if (inject) {
    s = ep.endpoint().inject(b->data, len, ch->peer);
    ep.tx().give_back(b);
  } else {
    s = ep.endpoint().send(b->data, len, ep.tx().desc(), ch->peer, &b->ctx);
    if (!s.ok()) {
      ep.tx().give_back(b);
      rail.cq_give();
    }
  }
  if (s.ok()) ++ch->ops;
  if (!s.ok() && s.code() != Code::again) state_.note_failure(ch->rail, s);
  return s;
}

void Control::done_with(PendingControl& p) {
  if (CommState* c = state_.comm(p.owner)) state_.release(*c);
  state_.unref(p.peer);
}

void Control::give_up(PendingControl& p, Status why) {
  why = std::move(why).with_context(core::str("control message type ", int(p.hdr.type), " on ",
                                              p.ch->label));
  CommState* c = state_.comm(p.dep.comm);
  switch (p.dep.kind) {
    case Dependent::Kind::send:
      if (c != nullptr && c->sends[p.dep.slot].seq == p.dep.seq) {
        state_.fail_send(*c, c->sends[p.dep.slot], why);
      }
      break;
    case Dependent::Kind::recv:
      if (c != nullptr && c->recvs[p.dep.slot].seq == p.dep.seq) {
        state_.fail_recv(*c, c->recvs[p.dep.slot], why);
      }
      break;
    case Dependent::Kind::comm:
      if (c != nullptr) state_.fail_comm(*c, why);
      break;
    case Dependent::Kind::none:
      // Nothing local waits for it, but the peer does (a CLOSE, a CONN_ACK...): a peer that
      // cannot be reached for XPORT_EAGAIN_TIMEOUT_MS is treated as lost.
      if (p.peer != nullptr) {
        state_.fail_peer(*p.peer, Status(Code::peer_lost, core::str("unreachable: ", why.message())));
      } else {
        XPORT_LOG(info, "dropping ", why.to_string());
      }
      break;
  }
}

void Control::retry() {
  // Order is kept per channel: once one message of a channel stays queued this pass, the ones
  // behind it wait too; other channels go on (one busy peer stalls nobody else).
  blocked_.clear();
  queued_.retry([&](PendingQueue<PendingControl>::Entry& e) {
    PendingControl& p = e.post;
    const bool behind = std::find(blocked_.begin(), blocked_.end(), p.ch) != blocked_.end();
    Status s = behind ? Status(Code::again, "queued")
                      : attempt(p.ch, p.hdr, p.body.data(), p.body.size(), p.peer);
    if (s.code() == Code::again && (behind || !state_.expired(e.since))) {
      if (!behind) blocked_.push_back(p.ch);
      return true;
    }
    if (!s.ok()) give_up(p, std::move(s));
    done_with(p);
    return false;
  });
}

void Control::fail_rail(uint32_t rail) {
  queued_.drop_if([&](PendingQueue<PendingControl>::Entry& e) {
    if (e.post.ch->rail != rail || e.post.ch->owned) return false;
    if (CommState* c = state_.comm(e.post.owner)) state_.release(*c);
    state_.unref(e.post.peer);
    return true;
  });
}

void Control::clear() {
  queued_.clear();
  rx_waiting_.clear();
}

void Control::on_sent(memory::Buffer* b, const Status& st) {
  const uint64_t token = b->ctx.seq;
  auto* ep = static_cast<rail::RailEndpoint*>(b->ctx.owner);
  ep->tx().give_back(b);
  if (st.ok()) return;
  XPORT_LOG(info, "control message failed on ", ep->label(), ": ", st.to_string());
  // The provider could not deliver to that peer (connection refused, reset...): it is lost.
  // (A connection's failure is its communicator's: it reports itself by FI_SHUTDOWN.)
  if (st.code() == Code::peer_lost && token != 0 && !state_.connected_endpoints()) {
    auto it = state_.peers.find(token);
    if (it != state_.peers.end()) state_.fail_peer(*it->second, st);
  }
}

void Control::repost(rail::RailEndpoint* ep, memory::Buffer* b) {
  if (ep->failed) return;
  rail::Rail& rail = *state_.rails[ep->rail()];
  if (!rail.cq_take()) {
    rx_waiting_.push({ep, b});
    return;
  }
  Status s = ep->endpoint().recv(b->data, ep->rx().size(), ep->rx().desc(), FI_ADDR_UNSPEC,
                                 &b->ctx);
  if (s.ok()) {
    ep->posted_rx += 1;
    return;
  }
  rail.cq_give();
  if (s.code() == Code::again) {
    rx_waiting_.push({ep, b});
  } else {
    XPORT_LOG(warn, "cannot repost a receive buffer on ", ep->label(), ": ", s.to_string());
  }
}

void Control::repost_later(rail::RailEndpoint* ep, memory::Buffer* b) {
  if (ep->failed) return;
  if (ep->posted_rx * 2 < ep->rx().count()) {
    repost(ep, b);
    return;
  }
  rx_waiting_.push({ep, b});
}

Status Control::post_receives(rail::RailEndpoint* ep) {
  for (size_t i = 0; i < ep->rx().count(); ++i) {
    memory::Buffer* b = ep->rx().take();
    if (!state_.rails[ep->rail()]->cq_take()) {
      return core::error(Code::resource, "posting receive buffers on ", ep->label(),
                         ": the CQ has no room (raise XPORT_CQ_ENTRIES)");
    }
    Status s = ep->endpoint().recv(b->data, ep->rx().size(), ep->rx().desc(), FI_ADDR_UNSPEC,
                                   &b->ctx);
    if (s.code() == Code::again) {
      state_.rails[ep->rail()]->cq_give();
      rx_waiting_.push({ep, b});
      continue;
    }
    if (!s.ok()) return s.with_context(core::str("posting receive buffers on ", ep->label()));
    ep->posted_rx += 1;
  }
  return Status::success();
}

void Control::retry_receives() {
  // (repost queues a buffer it cannot post again, behind the others)
  rx_waiting_.retry([&](PendingQueue<PendingRx>::Entry& e) {
    repost(e.post.ep, e.post.buffer);
    return false;
  });
}

void Control::forget_receives(const rail::RailEndpoint* ep) {
  rx_waiting_.drop_if([&](PendingQueue<PendingRx>::Entry& e) { return e.post.ep == ep; });
}

void Control::retire(std::unique_ptr<pool::Channel> connection) {
  if (!connection || !connection->owned) return;
  rail::RailEndpoint* ep = connection->owned.get();
  const bool was_failed = ep->failed;
  ep->failed = true;
  ep->failure = "closed";
  // Receives queued for reposting must not be posted any more, nor messages queued on it (only
  // ones nobody waits on can be left: a user's communicator is gone only once its are out).
  forget_receives(ep);
  queued_.drop_if([&](PendingQueue<PendingControl>::Entry& e) {
    if (e.post.ch != connection.get()) return false;
    XPORT_LOG(info, "dropping control message type ", int(e.post.hdr.type), " queued on ",
              connection->label, ": the connection closes");
    done_with(e.post);
    return true;
  });
  ep->cancel_receives();
  if (state_.connected_endpoints() && connection->key.dir == pool::Direction::out &&
      !connection->connected && ep->has_endpoint()) {
    // Never connected: its connect was given up before the listener's answer, and nothing but
    // the request went on it. The listener may have accepted it already; it learns now, from
    // the shutdown, whether or not this device makes progress again (closing the endpoint
    // waits for its cancellations to be read).
    (void)fi_shutdown(ep->endpoint().get(), 0);
  }
  // Once its last sends are out (a CLOSE may be among them) the connection is shut down, and
  // the endpoint stays allocated until its own FI_SHUTDOWN is read, so no queued event can
  // name an address a new connection reuses.
  connection->shutdown_seen = was_failed;
  connection->shutdown_sent = was_failed;
  connection->retire_since = Clock::now();
  state_.retiring.push_back(std::move(connection));
  reap_retired(false);
}

void Control::on_shutdown(fid_t fid) {
  for (auto& ch : state_.retiring) {
    if (ch->owned && ch->owned->has_endpoint() && &ch->owned->endpoint().get()->fid == fid) {
      ch->shutdown_seen = true;
    }
  }
}

bool Control::is_retiring(fid_t fid) const {
  for (const auto& ch : state_.retiring) {
    if (ch->owned && ch->owned->has_endpoint() && &ch->owned->endpoint().get()->fid == fid) {
      return true;
    }
  }
  return false;
}

void Control::reap_retired(bool force) {
  const auto now = Clock::now();
  std::erase_if(state_.retiring, [&](std::unique_ptr<pool::Channel>& ch) {
    rail::RailEndpoint* ep = ch->owned.get();
    const bool drained = ep->posted_rx == 0 && ep->tx().available() == ep->tx().count();
    const bool waited = now - ch->retire_since >= kRetireWait;
    if (drained) {
      return true;  // nothing names it any more: endpoint and memory go
    }
    if (!force && !waited) return false;
    if (!ep->has_endpoint()) return false;  // closed already; its memory waits for the engine
    // A provider that reports no cancellation or shutdown would keep it for ever: after a
    // bounded wait the endpoint (its file descriptors) closes, and its buffers' memory stays
    // with the engine, so a completion that still names them reads valid memory.
    state_.rails[ep->rail()]->cq_give(ep->posted_rx);
    ep->posted_rx = 0;
    ep->close_endpoint();
    state_.stale_endpoints.push_back(std::move(ch->owned));
    return true;
  });
}

}  // namespace xport::proto
