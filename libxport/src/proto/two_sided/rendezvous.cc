// Rendezvous: clear-to-send, request-to-send, striped writes with remote CQ data.
#include "proto/two_sided/rendezvous.hpp"

#include "core/log.hpp"
#include "proto/control.hpp"
#include "proto/two_sided/eager.hpp"
#include "proto/two_sided/matching.hpp"
#include "rail/stripes.hpp"

namespace xport::proto {
namespace {


enum AbortReason : uint64_t { kTooLarge = 1, kWriteFailed = 2, kOtherTag = 3 };

}  // namespace

void Rendezvous::register_handlers(Dispatch& d) {
  d.completion<&Rendezvous::write_done, &Rendezvous::write_failed>(fabric::OpType::rndv_write,
                                                                   this);
  d.message<&Rendezvous::on_cts>(MsgType::cts, this, /*gated=*/true);
  d.message<&Rendezvous::on_abort>(MsgType::abort, this);
  d.message<&Rendezvous::on_rts>(MsgType::rts, this);
  d.message<&Rendezvous::on_refuse>(MsgType::refuse, this);
  d.rendezvous_write<&Rendezvous::on_write_data>(this);
}

void Rendezvous::write_done(fabric::OpContext* ctx, const fi_cq_data_entry&) {
  on_write_done(ctx, Status());
}

void Rendezvous::write_failed(fabric::OpContext* ctx, const Status& st, int) {
  on_write_done(ctx, st);
}

Status Rendezvous::start(CommState& c, SendSlot& s, uint16_t slot, bool handoff) {
  EarlyCts& e = c.early_cts[slot];
  if (e.valid && e.cts.seq == s.seq) {
    e.valid = false;
    consume(c, s, slot, e.cts, handoff);
    return Status::success();
  }
  // Ask for the clear-to-send in case the receive was posted with an eager-sized buffer (then
  // none comes unasked); a receiver that sent one already ignores this.
  MsgHeader r = comm_header(MsgType::rts, c, slot, s.seq);
  r.length = s.len;
  r.aux2 = s.tag;
  XPORT_RETURN_IF_ERROR(state_.control->send(state_.control_path(c), r, nullptr, &c,
                                             Dependent{Dependent::Kind::send, c.id, slot, s.seq})
                            .with_context("request-to-send"));
  s.rts_sent = true;
  return Status::success();
}

void Rendezvous::on_cts(const Message& m) {
  const MsgHeader& h = m.h;
  CommState* c = state_.route(h, DeviceState::Side::send);
  if (c == nullptr) return;
  if (h.slot != c->slot_of(h.seq)) {
    state_.miss();
    return;
  }
  Cts cts;
  cts.seq = h.seq;
  cts.raddr = h.aux;
  cts.length = h.length;
  cts.tag = static_cast<uint32_t>(h.aux2);
  cts.rails = static_cast<uint32_t>(m.len / 8);
  std::memcpy(cts.keys.data(), m.body, m.len);
  // A clear-to-send also says every receive up to it is posted: eager credit.
  eager_->grant_credit(*c, h.seq);
  SendSlot& s = c->sends[h.slot];
  if (s.active && s.seq == h.seq) {
    if (!s.eager && !s.cts_consumed) consume(*c, s, h.slot, cts);
  } else if (h.seq >= c->next_seq) {
    c->early_cts[h.slot] = EarlyCts{true, cts};
  }
  // Otherwise the CTS of an eager message that completed without it (the receive was posted
  // with a large buffer): nothing to do.
}

void Rendezvous::consume(CommState& c, SendSlot& s, uint16_t slot, const Cts& cts, bool defer) {
  s.cts_consumed = true;
  if (s.finished) return;
  if (s.tag != cts.tag) {
    state_.fail_send(c, s, core::error(Code::invalid_argument, "isend: message ", s.seq,
                                       " has tag ", s.tag, ", the receiver's buffer for it takes "
                                       "tag ", cts.tag));
    return;
  }
  if (s.len > cts.length) {
    state_.fail_send(c, s, core::error(Code::truncated, "isend: message ", s.seq, " of ", s.len,
                                       " bytes is larger than the receiver's buffer of ",
                                       cts.length, " bytes"));
    return;
  }
  if (cts.rails < c.paths.size()) {
    state_.fail_send(c, s, core::error(Code::protocol, "isend: clear-to-send for message ", s.seq,
                                       " carries ", cts.rails, " keys for ", c.paths.size(),
                                       " rails"));
    return;
  }
  // Large messages are striped over the rails (the plan both sides compute from the length, or
  // the count the 4-byte CQ data carries), the first rail rotating from message to message.
  // Quarantined rails just carry none: their stripes go to the rails in service.
  s.stripes = rail::stripe_count(c.plan, s.len, static_cast<uint32_t>(c.paths.size()));
  if (state_.cq_data_bytes < 8) s.stripes = std::min(s.stripes, kMaxNarrowStripes);
  s.stripes_done = 0;
  s.stripes_posted = 0;
  DeviceState::RailList healthy;
  const uint32_t up = state_.healthy_rails(c.paths.size(), healthy, c.peer);
  if (up == 0) {
    state_.fail_send(c, s, state_.no_rail_error(c.paths.size(), c.peer, "isend"));
    return;
  }
  const uint32_t first = c.next_stripe++ % up;
  for (uint32_t i = 0; i < s.stripes; ++i) s.ctx[i].rail = static_cast<uint8_t>(healthy[(first + i) % up]);
  if (defer) {  // the thread that drives progress posts them (PostMode::handoff)
    for (uint32_t i = 0; i < s.stripes; ++i) {
      queue_stripe(c, s, slot, i, cts.raddr, cts.keys, Clock::time_point{});
    }
    return;
  }
  for (uint32_t i = 0; i < s.stripes && !s.finished; ++i) {
    Status st = post_stripe(c, s, slot, i, cts.raddr, cts.keys, false);
    if (!st.ok() && st.code() != Code::again) {
      state_.fail_send(c, s, std::move(st).with_context(core::str("rendezvous write of message ",
                                                                   s.seq)));
    }
  }
}

Status Rendezvous::post_stripe(CommState& c, SendSlot& s, uint16_t slot, uint32_t stripe,
                               uint64_t raddr, const std::array<uint64_t, kMaxRails>& keys,
                               bool queued) {
  fabric::OpContext& ctx = s.ctx[stripe];
  const uint8_t rail = ctx.rail;
  const uint64_t off = rail::stripe_offset(c.plan, s.len, s.stripes, stripe);
  const uint64_t end = rail::stripe_offset(c.plan, s.len, s.stripes, stripe + 1);
  pool::Channel* ch = c.paths[rail].data;
  ctx = fabric::OpContext{};
  ctx.type = fabric::OpType::rndv_write;
  ctx.rail = rail;
  ctx.comm = c.id.index;
  ctx.comm_gen = c.id.gen;
  ctx.slot = slot;
  ctx.seq = s.seq;
  ctx.stripe = stripe;
  ctx.owner = ch->ep;
  CqData d;
  d.comm = c.peer_comm.index;
  d.slot = slot;
  if (state_.cq_data_bytes >= 8) {
    d.field = c.peer_comm.gen;
    d.high = s.len < kLengthUnknown ? static_cast<uint32_t>(s.len) : kLengthUnknown;
  } else {
    d.field = static_cast<uint8_t>(s.stripes - 1);
  }
  const uint64_t data = encode_cq_data(d, state_.cq_data_bytes);
  rail::Rail& r = *state_.rails[rail];
  Status st;
  if (ch->failed()) {
    st = core::error(Code::peer_lost, ch->label, ": ", ch->failure());
  } else if (!r.cq_take()) {
    st = Status(Code::again, "CQ full");
  } else {
    st = ch->ep->endpoint().writedata(s.buf + off, end - off, s.region->desc(rail), data,
                                      ch->peer, raddr + off, keys[rail], &ctx);
    if (st.ok()) ++ch->ops;
    else r.cq_give();
  }
  if (st.code() == Code::again) {
    if (!queued) queue_stripe(c, s, slot, stripe, raddr, keys, Clock::now());
    return st;
  }
  if (!st.ok()) {
    state_.note_failure(rail, st);
    if (queued) state_.release(c, s);
    return st;
  }
  if (!queued) state_.hold(c, s);
  s.stripes_posted |= 1u << stripe;
  if (s.stripes > 1) r.stripes_out().add();
  return st;
}

void Rendezvous::queue_stripe(CommState& c, SendSlot& s, uint16_t slot, uint32_t stripe,
                              uint64_t raddr, const std::array<uint64_t, kMaxRails>& keys,
                              Clock::time_point since) {
  state_.hold(c, s);
  PendingStripe p;
  p.comm = c.id;
  p.slot = slot;
  p.seq = s.seq;
  p.stripe = stripe;
  p.raddr = raddr;
  p.keys = keys;
  // (a refused post is counted; a handoff's stripes, queued before any try, are not)
  queued_.push(p, since, since != Clock::time_point{});
}

void Rendezvous::retry() {
  queued_.retry([&](PendingQueue<PendingStripe>::Entry& e) {
    const PendingStripe& p = e.post;
    CommState* c = state_.comm(p.comm);
    if (c == nullptr) return false;  // cannot happen: the queued post holds its communicator
    SendSlot& s = c->sends[p.slot];
    if (!s.active || s.seq != p.seq || s.finished) {
      state_.release(*c, s);  // failed meanwhile: this stripe is never posted
      return false;
    }
    Status st = post_stripe(*c, s, p.slot, p.stripe, p.raddr, p.keys, true);
    if (st.code() == Code::again && e.since == Clock::time_point{}) {
      // Queued by a handoff call and refused at its first try: the clock starts now.
      e.since = Clock::now();
      return true;
    }
    if (st.code() == Code::again && state_.expired(e.since)) {
      state_.fail_send(*c, s, core::error(Code::again, "rendezvous write of message ", s.seq,
                                          ": the provider stayed busy (-FI_EAGAIN) for "
                                          "XPORT_EAGAIN_TIMEOUT_MS"));
      state_.release(*c, s);
      return false;
    }
    if (st.code() == Code::again) return true;
    if (!st.ok()) {
      state_.fail_send(*c, s, std::move(st).with_context(core::str("rendezvous write of message ",
                                                                    s.seq)));
    }
    return false;
  });
}

void Rendezvous::fail_rail(uint32_t rail, const Status& why) {
  queued_.drop_if([&](PendingQueue<PendingStripe>::Entry& e) {
    const PendingStripe& p = e.post;
    CommState* c = state_.comm(p.comm);
    if (c == nullptr || c->sends[p.slot].ctx[p.stripe].rail != rail) return false;
    state_.fail_send(*c, c->sends[p.slot], why);
    state_.release(*c, c->sends[p.slot]);
    return true;
  });
}

void Rendezvous::on_write_done(fabric::OpContext* ctx, const Status& st) {
  static_cast<rail::RailEndpoint*>(ctx->owner)->endpoint().count_completion(!st.ok());
  CommState* c = state_.comm({ctx->comm, ctx->comm_gen});
  if (c == nullptr) {
    state_.miss(true);
    return;
  }
  SendSlot& s = c->sends[ctx->slot];
  if (s.active && s.seq == ctx->seq) {
    s.stripes_posted &= ~(1u << ctx->stripe);
    ++s.stripes_done;
    if (!st.ok()) {
      state_.fail_send(*c, s, st.with_context(core::str("rendezvous write of message ", s.seq,
                                                        " on rail ",
                                                        state_.rails[ctx->rail]->name())));
    } else if (s.stripes_done == s.stripes) {
      s.finished = true;
    }
  }
  state_.release(*c, s);
}

Status Rendezvous::reserve_cts_room(CommState& c, RecvSlot& r) {
  // The writes a CTS allows complete on this side's CQs with remote CQ data: their room is
  // held until the receive is done (every stripe could land on one rail). Providers in
  // FI_RX_CQ_DATA mode consume a posted receive instead, whose room is held already.
  if (state_.rx_cq_data_mode || r.cq_reserved != 0) return Status::success();
  uint32_t room = rail::stripe_count(c.plan, r.cap, static_cast<uint32_t>(c.paths.size()));
  if (state_.cq_data_bytes < 8) room = std::min(room, kMaxNarrowStripes);
  for (size_t i = 0; i < c.paths.size(); ++i) {
    if (!state_.rails[c.paths[i].data->rail]->cq_take(room)) {
      for (size_t k = 0; k < i; ++k) state_.rails[c.paths[k].data->rail]->cq_give(room);
      return core::error(Code::again, "irecv: no CQ room for the writes of another "
                         "rendezvous receive (XPORT_CQ_ENTRIES); complete some first");
    }
  }
  r.cq_reserved = room;
  return Status::success();
}

Status Rendezvous::send_cts(CommState& c, RecvSlot& r, uint16_t slot) {
  XPORT_RETURN_IF_ERROR(reserve_cts_room(c, r));
  MsgHeader h = comm_header(MsgType::cts, c, slot, r.seq);
  h.length = r.cap;
  h.aux = r.region->remote_address(r.buf);
  h.aux2 = r.want_tag;
  // The buffer's key on every rail shared with the peer: any rail may carry a stripe.
  std::vector<uint8_t> keys(8 * c.paths.size());
  for (size_t i = 0; i < c.paths.size(); ++i) {
    const uint64_t k = r.region->key(c.paths[i].data->rail);
    std::memcpy(keys.data() + 8 * i, &k, 8);
  }
  Status s = state_.control->send(state_.control_path(c), h, &keys, &c,
                                  Dependent{Dependent::Kind::recv, c.id, slot, r.seq});
  if (!s.ok()) {
    state_.release_cts_room(c, r);
    return s.with_context("clear-to-send");
  }
  r.cts_sent = true;
  c.reported_next = std::max(c.reported_next, r.seq + 1);
  return Status::success();
}

void Rendezvous::on_rts(const Message& m) {
  const MsgHeader& h = m.h;
  CommState* c = state_.route(h, DeviceState::Side::recv);
  if (c == nullptr) return;
  if (h.slot != c->slot_of(h.seq)) {
    state_.miss();
    return;
  }
  RecvSlot& r = c->recvs[h.slot];
  const auto tag = static_cast<uint32_t>(h.aux2);
  if (r.active && r.seq == h.seq) {
    if (r.finished) return;
    // Checks the tag, or places the message of a group still placing by tag (which then
    // sends the clear-to-send itself).
    if (!matching_->on_tag(*c, r, tag, true) || !r.assigned) return;
    if (r.cts_sent) return;  // the usual case: the CTS went out when posted
    Status st = send_cts(*c, r, h.slot);
    if (!st.ok()) state_.fail_recv(*c, r, std::move(st).with_context(core::str("irecv: message ", r.seq)));
  } else if (h.seq >= c->next_seq) {
    c->early_rts[h.slot] = EarlyRts{true, h.seq, tag};
  }
  // Otherwise its receive was posted and is done: the request crossed the clear-to-send, and
  // the data (on the data endpoints) overtook it (on the control endpoint). Nothing to do.
}

void Rendezvous::on_refuse(const Message& m) {
  const MsgHeader& h = m.h;
  CommState* c = state_.route(h, DeviceState::Side::send);
  if (c == nullptr) return;
  if (h.slot != c->slot_of(h.seq)) {
    state_.miss();
    return;
  }
  SendSlot& s = c->sends[h.slot];
  if (!s.active || s.seq != h.seq || s.finished) return;
  state_.fail_send(*c, s,
                   core::error(Code::invalid_argument, "isend: the receiver refused message ",
                         h.seq, " (tag ", s.tag, "): ",
                         h.aux == 1 ? "no buffer left in its grouped receive takes that tag"
                         : "its receive buffer takes another tag"),
                   /*tell_receiver=*/false);
}

void Rendezvous::on_abort(const Message& m) {
  const MsgHeader& h = m.h;
  CommState* c = state_.route(h, DeviceState::Side::recv);
  if (c == nullptr) return;
  RecvSlot& r = c->recvs[c->slot_of(h.seq)];
  if (!r.active || r.seq != h.seq || r.finished) return;
  state_.fail_recv(*c, r,
                   h.aux == kTooLarge
                       ? core::error(Code::truncated, "irecv: the sender's message ", h.seq, " of ",
                         h.length, " bytes is larger than this ", r.cap,
                         "-byte receive buffer")
                   : h.aux == kOtherTag
                       ? core::error(Code::invalid_argument, "irecv: the sender's message ", h.seq,
                         " carries another tag than ", r.want_tag,
                         ", the tag of its receive buffer")
                       : core::error(Code::peer_lost, "irecv: the sender failed to write message ",
                         h.seq));
}

void Rendezvous::on_write_data(uint64_t data, size_t len, uint32_t rail) {
  const CqData d = decode_cq_data(data, state_.cq_data_bytes);
  const bool wide = state_.cq_data_bytes >= 8;
  // With 4-byte CQ data there is no room for a generation: the receive slot must be waiting
  // for writes (its CTS out, not yet complete), which only its own sender was cleared for.
  CommState* c = wide ? state_.comm({d.comm, d.field}) : state_.comms->find_any(d.comm);
  if (c == nullptr) {
    state_.miss(true);
    return;
  }
  if (c->is_send || c->depth == 0 || d.slot >= c->depth) {
    state_.miss();
    return;
  }
  RecvSlot& r = c->recvs[d.slot];
  if (!r.active || r.finished || !r.cts_sent) {
    state_.miss(true);
    return;
  }
  if (c->peer != nullptr) c->peer->heard = true;
  uint32_t stripes;
  size_t bytes;
  if (wide) {
    bytes = d.high != kLengthUnknown ? d.high : len;
    stripes = rail::stripe_count(c->plan, bytes, static_cast<uint32_t>(c->paths.size()));
  } else {
    r.bytes += len;
    bytes = r.bytes;
    stripes = static_cast<uint32_t>(d.field) + 1;
  }
  rail::Rail& rl = *state_.rails[rail];
  rl.bytes_in().add(len != 0 ? len : bytes / stripes);
  if (stripes > 1) rl.stripes_in().add();
  if (bytes > r.cap) {
    state_.fail_recv(*c, r, core::error(Code::protocol, "irecv: a write of ", bytes,
                                        " bytes into the ", r.cap, "-byte buffer of message ",
                                        r.seq));
    return;
  }
  // The message is complete when every stripe of the sender's plan has landed.
  if (++r.stripes_seen < stripes) return;
  r.bytes = bytes;
  r.finished = true;
  state_.release_cts_room(*c, r);
}

}  // namespace xport::proto
