// Two-sided messages: eager copies for small ones, rendezvous (clear-to-send, then an RDMA write
// with remote CQ data) for large ones; matching in posting order by sequence number.
#include "core/log.hpp"
#include "proto/engine.hpp"

namespace xport::proto {
namespace {

MsgHeader header(MsgType t, const CommState& c, uint16_t slot, uint64_t seq) {
  MsgHeader h{};
  h.type = static_cast<uint8_t>(t);
  h.version = kWireVersion;
  h.dst_comm = c.peer_id;
  h.src_comm = c.id;
  h.slot = slot;
  h.seq = seq;
  return h;
}

enum AbortReason : uint64_t { kTooLarge = 1, kWriteFailed = 2 };

}  // namespace

Result<Request> Engine::isend(uint16_t comm, const void* buf, size_t len, const Region& region) {
  auto l = lock();
  Status err;
  CommState* c = comm_for(comm, true, "isend", &err);
  if (c == nullptr) return err;
  if (c->phase == CommPhase::failed) return c->error;
  XPORT_RETURN_IF_ERROR(check_local(region, buf, len, "isend"));
  XPORT_RETURN_IF_ERROR(check_usable(c->paths, "isend"));
  if (len >= kLengthUnknown && len > c->eager_max) {
    return core::error(Code::unsupported, "isend: a message of ", len, " bytes: messages of "
                       "4 GiB or more must be split by the caller (the CQ data carries 32 bits "
                       "of length)");
  }
  const uint64_t seq = c->next_seq;
  const uint16_t slot = static_cast<uint16_t>(seq % c->depth);
  SendSlot& s = c->sends[slot];
  if (s.active) {
    return core::error(Code::again, "isend: ", c->depth, " sends are outstanding on communicator ",
                       comm, " (test() them, or raise XPORT_MAX_REQUESTS)");
  }
  std::vector<fabric::OpContext> stripe_ctx = std::move(s.stripe_ctx);  // sized per rail once
  s = SendSlot{};
  s.stripe_ctx = std::move(stripe_ctx);
  s.active = true;
  s.seq = seq;
  s.buf = static_cast<const uint8_t*>(buf);
  s.len = len;
  s.region = region.state_.get();
  s.eager = len <= c->eager_max;
  EarlyCts& e = c->early_cts[slot];
  const bool have_cts = e.valid && e.cts.seq == seq;
  if (s.eager) {
    // No clear-to-send needed: the receiver holds an unexpected message until its receive is
    // posted, and credits bound how many it may have to hold.
    if (have_cts) e.valid = false;
    if (seq < c->credit_limit && c->credit_wait.empty()) {
      Status st = send_eager(*c, s, slot);
      if (!st.ok()) {
        s.active = false;
        return st.with_context("isend");
      }
      if (s.local_done) s.done = true;
    } else {
      s.waiting_credit = true;
      c->credit_wait.push_back(slot);
    }
  } else if (!have_cts) {
    // Ask for the clear-to-send in case the receive was posted with an eager-sized buffer
    // (then none comes unasked); a receiver that sent one already ignores this.
    MsgHeader r = header(MsgType::rts, *c, slot, seq);
    r.length = len;
    Status st = send_control(control_path(*c), r, nullptr, false, true);
    if (!st.ok()) {
      s.active = false;
      return st.with_context("isend: request-to-send");
    }
  }
  c->next_seq += 1;
  if (!s.eager && have_cts) {
    e.valid = false;
    consume_cts(*c, s, slot, e.cts);
  }
  return Request{seq};
}

void Engine::grant_credit(CommState& c, uint64_t posted_through) {
  c.credit_limit = std::max(c.credit_limit, posted_through + 1 + c.depth);
  if (c.user_closed) return;  // its waiting sends were cancelled at close
  while (!c.credit_wait.empty()) {
    SendSlot& s = c.sends[c.credit_wait.front()];
    if (!s.active || s.done || !s.waiting_credit) {  // failed meanwhile
      c.credit_wait.pop_front();
      continue;
    }
    if (s.seq >= c.credit_limit) break;
    c.credit_wait.pop_front();
    s.waiting_credit = false;
    Status st = send_eager(c, s, static_cast<uint16_t>(s.seq % c.depth));
    if (!st.ok()) {
      s.error = std::move(st).with_context(core::str("eager send of message ", s.seq));
      s.done = true;
    } else if (s.local_done) {
      s.done = true;
    }
  }
}

Status Engine::send_eager(CommState& c, SendSlot& s, uint16_t slot) {
  // Small messages go whole to one rail, round-robin.
  pool::Channel* ch = data_path(c);
  if (ch->failed) return core::error(Code::peer_lost, ch->label, ": ", ch->failure);
  PendingEager p;
  p.ch = ch;
  if (headerless_eager_) {
    // Straight from the caller's buffer (registered on every rail), routed by the CQ data.
    p.src = s.buf;
    p.len = s.len;
    p.desc = s.region->mrs[ch->rail]->desc();
    p.with_data = true;
    p.data = encode_eager_data(c.peer_id, slot, s.seq);
    fabric::OpContext& ctx = s.stripe_ctx[0];
    ctx = fabric::OpContext{};
    ctx.type = fabric::OpType::eager_send;
    ctx.index = ch->rail;
    ctx.owner = ch;
    p.ctx = &ctx;
  } else {
    memory::Buffer* b = take_tx(ch, true);
    if (b == nullptr) return core::error(Code::again, "no free send buffer on ", ch->label);
    MsgHeader h = header(MsgType::eager, c, slot, s.seq);
    h.length = s.len;
    std::memcpy(b->data, &h, sizeof(h));
    if (s.len > 0) std::memcpy(b->data + sizeof(h), s.buf, s.len);
    p.buffer = b;
    p.src = b->data;
    p.len = sizeof(h) + s.len;
    p.desc = ch->tx->desc();
    p.ctx = &b->ctx;
  }
  Status st;
  if (p.len <= inject_size_) {
    st = p.with_data ? ch->endpoint->injectdata(p.src, p.len, p.data, ch->peer, false)
                     : ch->endpoint->inject(p.src, p.len, ch->peer, false);
    if (st.ok()) {
      if (p.buffer != nullptr) ch->tx->give_back(p.buffer);
      s.local_done = true;
      return st;
    }
  }
  p.ctx->comm = c.id;  // the request the completion belongs to
  p.ctx->slot = slot;
  p.ctx->seq = s.seq;
  if (st.ok() || st.code() == Code::again) st = post_eager(p);
  if (st.code() == Code::again) {
    // The provider is busy (or still connecting): progress posts it later; the request stays
    // open and its wait() deadline bounds the caller.
    p.since = Deadline::Clock::now();
    pending_eager_.push_back(p);
    st = Status::success();
  } else if (!st.ok()) {
    if (p.buffer != nullptr) ch->tx->give_back(p.buffer);
    note_failure(ch->rail, st);
    return st;
  }
  c.inflight += 1;
  return st;
}

Status Engine::post_eager(const PendingEager& p) {
  return p.with_data
             ? p.ch->endpoint->senddata(p.src, p.len, p.desc, p.data, p.ch->peer, p.ctx, false)
             : p.ch->endpoint->send(p.src, p.len, p.desc, p.ch->peer, p.ctx, false);
}

void Engine::on_eager_sent(fabric::OpContext* ctx, Status status) {
  if (ctx->comm == 0) {
    if (!status.ok()) XPORT_LOG(info, "control message failed: ", status.to_string());
    return;
  }
  CommState* c = comms_->find(ctx->comm);
  ctx->comm = 0;
  if (c == nullptr) return;
  c->inflight -= 1;
  SendSlot& s = c->sends[ctx->slot % c->depth];
  if (s.active && s.seq == ctx->seq && !s.done) {
    if (!status.ok()) {
      s.error = std::move(status).with_context(core::str("eager send of message ", s.seq));
      s.done = true;
    } else {
      s.local_done = true;
      maybe_complete_send(*c, s);
    }
  }
  maybe_erase(*c);
}

void Engine::maybe_complete_send(CommState&, SendSlot& s) {
  if (s.local_done && (s.eager || s.cts_done) && !s.done) s.done = true;
}

void Engine::on_cts(const MsgHeader& h, const Cts& cts) {
  CommState* c = comms_->find(h.dst_comm);
  if (c == nullptr || !c->is_send || c->peer_id != h.src_comm || c->depth == 0 ||
      h.slot != h.seq % c->depth) {
    ++routing_misses_;
    return;
  }
  // A clear-to-send also says every receive up to it is posted: eager credit.
  grant_credit(*c, h.seq);
  SendSlot& s = c->sends[h.slot];
  if (s.active && s.seq == h.seq) {
    if (!s.eager && !s.cts_done) consume_cts(*c, s, h.slot, cts);
  } else if (h.seq >= c->next_seq) {
    c->early_cts[h.slot] = EarlyCts{true, cts};
  }
  // Otherwise the CTS of an eager message that completed without it (the receive was posted
  // with a large buffer): nothing to do.
}

void Engine::on_credit(const MsgHeader& h) {
  CommState* c = comms_->find(h.dst_comm);
  if (c == nullptr || !c->is_send || c->peer_id != h.src_comm || c->depth == 0) {
    ++routing_misses_;
    return;
  }
  grant_credit(*c, h.seq);
}

void Engine::consume_cts(CommState& c, SendSlot& s, uint16_t slot, const Cts& cts) {
  s.cts_done = true;
  if (s.done) return;
  if (s.len > cts.length) {
    MsgHeader a = header(MsgType::abort, c, slot, s.seq);
    a.aux = kTooLarge;
    a.length = s.len;
    (void)send_control(control_path(c), a, nullptr, false, true);
    s.error = core::error(Code::truncated, "isend: message ", s.seq, " of ", s.len,
                          " bytes is larger than the receiver's buffer of ", cts.length, " bytes");
    s.done = true;
    return;
  }
  if (cts.rails < c.paths.size()) {
    s.error = core::error(Code::protocol, "isend: clear-to-send for message ", s.seq, " carries ",
                          cts.rails, " keys for ", c.paths.size(), " rails");
    s.done = true;
    return;
  }
  // Large messages are striped over the rails (the plan both sides compute from the length),
  // the first rail rotating from message to message.
  // The stripe count follows the plan over every shared rail (the receiver counts with it);
  // quarantined rails just carry none: their stripes go to the rails in service.
  s.stripes = stripe_count(c.plan, s.len, static_cast<uint32_t>(c.paths.size()));
  s.stripes_done = 0;
  RailList healthy;
  const uint32_t up = healthy_rails(c.paths.size(), healthy);
  if (up == 0) {
    s.error = no_rail_error(c.paths.size(), "isend");
    s.done = true;
    return;
  }
  s.first_rail = c.next_stripe++ % up;
  for (uint32_t i = 0; i < s.stripes; ++i) {
    s.stripe_ctx[i].index = healthy[(s.first_rail + i) % up];
  }
  const auto now = Deadline::Clock::now();
  for (uint32_t i = 0; i < s.stripes && !s.done; ++i) {
    post_stripe(c, s, slot, i, cts.raddr, cts.keys, now);
  }
}

void Engine::post_stripe(CommState& c, SendSlot& s, uint16_t slot, uint32_t stripe,
                         uint64_t raddr, const std::array<uint64_t, kMaxRails>& keys,
                         Deadline::Clock::time_point since) {
  const uint32_t rail = s.stripe_ctx[stripe].index;
  const uint64_t off = stripe_offset(c.plan, s.len, s.stripes, stripe);
  const uint64_t end = stripe_offset(c.plan, s.len, s.stripes, stripe + 1);
  fabric::OpContext& ctx = s.stripe_ctx[stripe];
  ctx = fabric::OpContext{};
  ctx.type = fabric::OpType::rndv_write;
  ctx.comm = c.id;
  ctx.slot = slot;
  ctx.seq = s.seq;
  ctx.index = rail;
  const uint64_t data = encode_cq_data(c.peer_id, slot, s.len, cq_data_bytes_);
  pool::Channel* ch = c.paths[rail].data;
  Status st = ch->endpoint->write(s.buf + off, end - off, s.region->mrs[rail]->desc(), ch->peer,
                                  raddr + off, keys[rail], &ctx, true, data, false);
  if (st.code() == Code::again) {
    PendingWrite w;
    w.comm = c.id;
    w.slot = slot;
    w.seq = s.seq;
    w.stripe = stripe;
    w.raddr = raddr;
    w.keys = keys;
    w.since = since;
    pending_writes_.push_back(w);
    return;
  }
  if (!st.ok()) {
    note_failure(rail, st);
    MsgHeader a = header(MsgType::abort, c, slot, s.seq);
    a.aux = kWriteFailed;
    (void)send_control(control_path(c), a, nullptr, false, true);
    s.error = std::move(st).with_context(core::str("rendezvous write of message ", s.seq));
    s.done = true;
    return;
  }
  if (s.stripes > 1) rails_[rail]->stripes_out().add();
  c.inflight += 1;
}

void Engine::on_write_done(fabric::OpContext* ctx, Status status) {
  CommState* c = comms_->find(ctx->comm);
  if (c == nullptr) return;
  c->inflight -= 1;
  c->paths[ctx->index % c->paths.size()].data->endpoint->count_completion(!status.ok());
  SendSlot& s = c->sends[ctx->slot % c->depth];
  if (s.active && s.seq == ctx->seq && !s.done) {
    if (!status.ok()) {
      MsgHeader a = header(MsgType::abort, *c, ctx->slot, s.seq);
      a.aux = kWriteFailed;
      (void)send_control(control_path(*c), a, nullptr, false, true);
      s.error = std::move(status).with_context(core::str("rendezvous write of message ", s.seq,
                                                         " on rail ",
                                                         rails_[ctx->index]->name()));
      s.done = true;
    } else if (++s.stripes_done == s.stripes) {
      s.local_done = true;
      maybe_complete_send(*c, s);
    }
  }
  maybe_erase(*c);
}

Result<Request> Engine::irecv(uint16_t comm, void* buf, size_t len, const Region& region) {
  auto l = lock();
  Status err;
  CommState* c = comm_for(comm, false, "irecv", &err);
  if (c == nullptr) return err;
  if (c->phase == CommPhase::failed) return c->error;
  XPORT_RETURN_IF_ERROR(check_local(region, buf, len, "irecv"));
  XPORT_RETURN_IF_ERROR(check_usable(c->paths, "irecv"));
  const uint64_t seq = c->next_seq;
  if (c->peer_closed && seq >= c->peer_sent) {
    return core::error(Code::closed, "irecv: the peer closed communicator ", comm, " after ",
                       c->peer_sent, " messages");
  }
  const uint16_t slot = static_cast<uint16_t>(seq % c->depth);
  RecvSlot& r = c->recvs[slot];
  if (r.active) {
    return core::error(Code::again, "irecv: ", c->depth,
                       " receives are outstanding on communicator ", comm,
                       " (test() them, or raise XPORT_MAX_REQUESTS)");
  }
  r = RecvSlot{};
  r.seq = seq;
  r.buf = static_cast<uint8_t*>(buf);
  r.cap = len;
  r.region = region.state_.get();
  // A buffer that can take a rendezvous message gets its clear-to-send now (the sender's write
  // can start the moment it has the message); an eager-sized one only if the sender asked
  // (RTS), and otherwise just counts towards the next eager credit.
  EarlyRts& rts = c->early_rts[slot];
  Status st;
  if (len > c->eager_max || (rts.valid && rts.seq == seq)) {
    rts.valid = false;
    st = send_cts(*c, r, slot);
  } else if (seq + 1 - c->reported_next >= std::max<uint64_t>(1, c->depth / 2)) {
    MsgHeader g = header(MsgType::credit, *c, slot, seq);
    st = send_control(control_path(*c), g, nullptr, false, true);
    if (st.ok()) c->reported_next = seq + 1;
  }
  if (!st.ok()) {
    r = RecvSlot{};
    return st.with_context("irecv");
  }
  r.active = true;
  c->next_seq += 1;
  EarlyEager& e = c->early_eager[slot];
  if (e.buffer != nullptr && e.seq == seq) {
    deliver(*c, r, e.buffer->data + e.offset, e.len);
    repost(e.owner, e.buffer);
    e.buffer = nullptr;
  }
  return Request{seq};
}

Status Engine::send_cts(CommState& c, RecvSlot& r, uint16_t slot) {
  const RegionState& rs = *r.region;
  MsgHeader h = header(MsgType::cts, c, slot, r.seq);
  h.length = r.cap;
  h.aux = rs.virt_addr ? reinterpret_cast<uint64_t>(r.buf)
                       : static_cast<uint64_t>(r.buf - rs.base);
  // The buffer's key on every rail shared with the peer: any rail may carry a stripe.
  std::vector<uint8_t> keys(8 * c.paths.size());
  for (size_t i = 0; i < c.paths.size(); ++i) {
    const uint64_t k = rs.mrs[i]->key();
    std::memcpy(keys.data() + 8 * i, &k, 8);
  }
  XPORT_RETURN_IF_ERROR(send_control(control_path(c), h, &keys, false, true)
                            .with_context("clear-to-send"));
  r.cts_sent = true;
  c.reported_next = std::max(c.reported_next, r.seq + 1);
  return Status::success();
}

void Engine::on_rts(const MsgHeader& h) {
  CommState* c = comms_->find(h.dst_comm);
  if (c == nullptr || c->is_send || c->peer_id != h.src_comm || c->depth == 0 ||
      h.slot != h.seq % c->depth) {
    ++routing_misses_;
    return;
  }
  RecvSlot& r = c->recvs[h.slot];
  if (r.active && r.seq == h.seq) {
    if (r.cts_sent || r.done) return;  // the usual case: the CTS went out when it was posted
    Status st = send_cts(*c, r, h.slot);
    if (!st.ok()) {
      r.error = std::move(st).with_context(core::str("irecv: message ", r.seq));
      r.done = true;
    }
  } else if (h.seq >= c->next_seq) {
    c->early_rts[h.slot] = EarlyRts{true, h.seq};
  } else {
    ++routing_misses_;
  }
}

void Engine::deliver(CommState& c, RecvSlot& r, const uint8_t* data, size_t len) {
  if (len > r.cap) {
    r.error = core::error(Code::truncated, "irecv: message ", r.seq, " of ", len,
                          " bytes does not fit the ", r.cap, "-byte receive buffer of comm ",
                          c.id);
  } else if (len > 0) {
    std::memcpy(r.buf, data, len);
  }
  r.bytes = len;
  r.done = true;
}

void Engine::on_eager(pool::Channel* owner, memory::Buffer* b, const MsgHeader& h, bool* hold) {
  CommState* c = comms_->find(h.dst_comm);
  if (c == nullptr || c->is_send || c->peer_id != h.src_comm || c->depth == 0 ||
      h.slot != h.seq % c->depth) {
    ++routing_misses_;
    return;
  }
  accept_eager(*c, owner, b, h.slot, h.seq, sizeof(MsgHeader), h.length, hold);
}

void Engine::on_eager_data(pool::Channel* owner, memory::Buffer* b, uint64_t data, size_t len,
                           bool* hold) {
  const CqData d = decode_cq_data(data);
  CommState* c = comms_->find(d.comm);
  // No header names the sender: it must at least have come on a data endpoint of one of the
  // communicator's rails (RDM endpoints are shared by all peers of a rail).
  bool on_path = false;
  if (c != nullptr) {
    for (const Path& p : c->paths) on_path = on_path || p.data->endpoint == owner->endpoint;
  }
  if (c == nullptr || c->is_send || c->depth == 0 || d.slot >= c->depth || !on_path) {
    ++routing_misses_;
    return;
  }
  const uint64_t seq = widen_seq(d.length, c->next_seq);
  if (seq % c->depth != d.slot) {
    ++routing_misses_;
    return;
  }
  accept_eager(*c, owner, b, d.slot, seq, 0, len, hold);
}

void Engine::accept_eager(CommState& c, pool::Channel* owner, memory::Buffer* b, uint16_t slot,
                          uint64_t seq, size_t offset, size_t len, bool* hold) {
  RecvSlot& r = c.recvs[slot];
  if (r.active && r.seq == seq && !r.done) {
    deliver(c, r, b->data + offset, len);
  } else if (seq >= c.next_seq && c.early_eager[slot].buffer == nullptr) {
    c.early_eager[slot] = EarlyEager{b, owner, seq, len, offset};
    *hold = true;
  } else {
    ++routing_misses_;
  }
}

void Engine::on_abort(const MsgHeader& h) {
  CommState* c = comms_->find(h.dst_comm);
  if (c == nullptr || c->is_send || c->peer_id != h.src_comm || c->depth == 0) {
    ++routing_misses_;
    return;
  }
  RecvSlot& r = c->recvs[h.seq % c->depth];
  if (!r.active || r.seq != h.seq || r.done) return;
  r.error = h.aux == kTooLarge
                ? core::error(Code::truncated, "irecv: the sender's message ", h.seq, " of ",
                              h.length, " bytes is larger than this ", r.cap,
                              "-byte receive buffer")
                : core::error(Code::peer_lost, "irecv: the sender failed to write message ",
                              h.seq);
  r.done = true;
}

void Engine::on_close(const MsgHeader& h) {
  CommState* c = comms_->find(h.dst_comm);
  if (c == nullptr || c->peer_id != h.src_comm) {
    ++routing_misses_;
    return;
  }
  if (c->is_send) {  // the receiver went away: nothing more can be delivered
    fail_comm(*c, core::error(Code::closed, "the peer closed communicator ", c->id));
    return;
  }
  // The sender sent h.seq messages: receives of those still complete when their data lands
  // (it may still be on another endpoint); receives beyond them fail now, later ones at once.
  c->peer_sent = h.seq;
  c->peer_closed = true;
  for (auto& r : c->recvs) {
    if (r.active && !r.done && r.seq >= h.seq) {
      r.error = core::error(Code::closed, "the peer closed communicator ", c->id, " after ",
                            h.seq, " messages");
      r.done = true;
    }
  }
}

void Engine::on_write_data(uint64_t data, size_t len) {
  const CqData d = decode_cq_data(data);
  CommState* c = comms_->find(d.comm);
  if (c == nullptr || c->is_send || d.slot >= c->depth) {
    ++routing_misses_;
    return;
  }
  RecvSlot& r = c->recvs[d.slot];
  if (!r.active || r.done) {
    ++routing_misses_;
    return;
  }
  size_t bytes = len;
  if (cq_data_bytes_ >= 8 && d.length != kLengthUnknown) bytes = d.length;
  if (bytes > r.cap) {
    r.error = core::error(Code::protocol, "irecv: a write of ", bytes, " bytes into the ", r.cap,
                          "-byte buffer of message ", r.seq);
    r.done = true;
    return;
  }
  // The message is complete when every stripe of the sender's plan has landed.
  const uint32_t stripes =
      cq_data_bytes_ >= 8 ? stripe_count(c->plan, bytes, static_cast<uint32_t>(c->paths.size()))
                          : 1;
  // The completion's len where the provider reports it; else this stripe's share of the
  // message (exact to the stripe alignment: which stripe arrived is not in the CQ data).
  rails_[polling_rail_]->bytes_in().add(len != 0 ? len : bytes / stripes);
  if (stripes > 1) rails_[polling_rail_]->stripes_in().add();
  if (++r.stripes_seen < stripes) return;
  r.bytes = bytes;
  r.done = true;
}

Result<Completion> Engine::test(uint16_t comm, Request req) {
  auto l = lock();
  XPORT_RETURN_IF_ERROR(progress_locked());
  CommState* c = comms_->find(comm);
  if (c == nullptr || c->user_closed || c->depth == 0) {
    return core::error(Code::invalid_argument, "test: communicator ", comm, " is not open");
  }
  const uint16_t slot = static_cast<uint16_t>(req.seq % c->depth);
  bool active, done;
  uint64_t seq;
  if (c->is_send) {
    active = c->sends[slot].active;
    done = c->sends[slot].done;
    seq = c->sends[slot].seq;
  } else {
    active = c->recvs[slot].active;
    done = c->recvs[slot].done;
    seq = c->recvs[slot].seq;
  }
  if (!active || seq != req.seq) {
    return core::error(Code::invalid_argument, "test: request ", req.seq,
                       " is not outstanding on communicator ", comm,
                       " (completed already, or never issued)");
  }
  if (!done) return Completion{false, 0};
  Status e;
  size_t n;
  if (c->is_send) {
    e = std::move(c->sends[slot].error);
    n = c->sends[slot].len;
    c->sends[slot].active = false;
  } else {
    e = std::move(c->recvs[slot].error);
    n = c->recvs[slot].bytes;
    c->recvs[slot].active = false;
  }
  if (!e.ok()) return e;
  return Completion{true, n};
}

Result<size_t> Engine::wait(uint16_t comm, Request req, Deadline deadline) {
  for (uint32_t spin = 0;; ++spin) {
    XPORT_ASSIGN_OR_RETURN(Completion done, test(comm, req));
    if (done.done) return done.bytes;
    if (spin % kSpinsPerYield == 0) {
      if (deadline.expired()) {
        return core::error(Code::timeout, "wait: request ", req.seq, " on communicator ", comm,
                           " did not complete before the deadline");
      }
      std::this_thread::yield();
    }
  }
}

}  // namespace xport::proto
