// Eager messages under credit-based flow control.
#include "proto/two_sided/eager.hpp"

#include "core/log.hpp"
#include "proto/control.hpp"
#include "proto/two_sided/matching.hpp"

namespace xport::proto {

void Eager::register_handlers(Dispatch& d) {
  d.completion<&Eager::sent, &Eager::send_failed>(fabric::OpType::eager_send, this);
  d.completion<&Eager::buffer_sent, &Eager::buffer_send_failed>(fabric::OpType::eager_buffer, this);
  d.message<&Eager::on_eager>(MsgType::eager, this);
  d.message<&Eager::on_credit>(MsgType::credit, this, /*gated=*/true);
  d.eager_data<&Eager::on_eager_data>(this);
}

void Eager::sent(fabric::OpContext* ctx, const fi_cq_data_entry&) {
  on_sent(ctx, Status(), nullptr);
}

void Eager::send_failed(fabric::OpContext* ctx, const Status& st, int) {
  on_sent(ctx, st, nullptr);
}

void Eager::buffer_sent(fabric::OpContext* ctx, const fi_cq_data_entry&) {
  auto* ep = static_cast<rail::RailEndpoint*>(ctx->owner);
  on_sent(ctx, Status(), &ep->tx().at(ctx->index));
}

void Eager::buffer_send_failed(fabric::OpContext* ctx, const Status& st, int) {
  auto* ep = static_cast<rail::RailEndpoint*>(ctx->owner);
  on_sent(ctx, st, &ep->tx().at(ctx->index));
}

Status Eager::start(CommState& c, SendSlot& s, uint16_t slot) {
  if (s.seq < c.credit_limit && c.credit_wait.empty()) {
    return post(c, s, slot, state_.data_path(c), nullptr, false);
  }
  s.waiting_credit = true;
  c.credit_wait.push_back(slot);
  return Status::success();
}

bool Eager::headerless(uint32_t tag) const {
  return state_.headerless_eager && tag <= kMaxCqDataTag;
}

bool Eager::injectable(size_t len, const RegionRef& region) const {
  return len <= state_.inject_size && !(region && region->cuda_device >= 0);
}

Eager::Inject Eager::try_inject(CommState& c, SendSlot& s, uint16_t slot,
                               const RegionRef& region) {
  if (!headerless(s.tag) || !injectable(s.len, region) || s.len > c.eager_max ||
      s.seq >= c.credit_limit || !c.credit_wait.empty()) {
    return Inject::no;
  }
  pool::Channel* ch = state_.data_path(c);
  if (ch->failed()) return Inject::no;
  const uint64_t data =
      encode_cq_data({c.peer_comm.index, slot, c.peer_comm.gen, eager_high(s.seq, s.tag)}, 8);
  Status st = ch->ep->endpoint().injectdata(s.buf, s.len, data, ch->peer);
  if (!st.ok()) return st.code() == Code::again ? Inject::busy : Inject::no;
  ++ch->ops;
  s.eager = true;
  s.finished = true;
  return Inject::done;
}

Status Eager::defer(CommState& c, SendSlot& s, uint16_t slot) {
  pool::Channel* ch = state_.data_path(c);
  if (ch->failed()) return core::error(Code::peer_lost, ch->label, ": ", ch->failure());
  queue(c, s, slot, ch, nullptr);
  return Status::success();
}

void Eager::queue(CommState& c, SendSlot& s, uint16_t slot, pool::Channel* ch,
                  memory::Buffer* buffer) {
  s.queued = true;
  state_.hold(c, s);
  queued_.push({c.id, slot, s.seq, ch, buffer}, Clock::now());
}

void Eager::grant_credit(CommState& c, uint64_t posted_through) {
  c.credit_limit = std::max(c.credit_limit, posted_through + 1 + c.depth);
  while (!c.credit_wait.empty()) {
    SendSlot& s = c.sends[c.credit_wait.front()];
    if (!s.active || s.finished || !s.waiting_credit) {  // failed or cancelled meanwhile
      c.credit_wait.pop_front();
      continue;
    }
    if (s.seq >= c.credit_limit) break;
    c.credit_wait.pop_front();
    s.waiting_credit = false;
    Status st = post(c, s, c.slot_of(s.seq), state_.data_path(c), nullptr, false);
    if (!st.ok()) {
      state_.fail_send(c, s,
                       std::move(st).with_context(core::str("eager send of message ", s.seq)));
    }
  }
}

void Eager::on_credit(const Message& m) {
  CommState* c = state_.route(m.h, DeviceState::Side::send);
  if (c != nullptr) grant_credit(*c, m.h.seq);
}

Status Eager::post(CommState& c, SendSlot& s, uint16_t slot, pool::Channel* ch,
                   memory::Buffer* buffer, bool queued) {
  if (ch->failed()) return core::error(Code::peer_lost, ch->label, ": ", ch->failure());
  rail::RailEndpoint& ep = *ch->ep;
  rail::Rail& rail = *state_.rails[ch->rail];
  Status st;
  fabric::OpContext* ctx = nullptr;
  if (headerless(s.tag)) {
    // Straight from the caller's buffer (registered on every rail), routed by the CQ data.
    const uint64_t data = encode_cq_data(
        {c.peer_comm.index, slot, c.peer_comm.gen, eager_high(s.seq, s.tag)}, 8);
    if (injectable(s.len, s.region)) {
      st = ep.endpoint().injectdata(s.buf, s.len, data, ch->peer);
      if (st.ok()) {
        ++ch->ops;
        s.finished = true;
        if (queued) state_.release(c, s);
        return st;
      }
    } else if (!rail.cq_take()) {
      st = Status(Code::again, "CQ full");
    } else {
      ctx = &s.ctx[0];
      *ctx = fabric::OpContext{};
      ctx->type = fabric::OpType::eager_send;
      ctx->owner = &ep;
      st = Status(Code::again, "");  // posted below
    }
    if (ctx != nullptr) {
      ctx->rail = ch->rail;
      ctx->comm = c.id.index;
      ctx->comm_gen = c.id.gen;
      ctx->slot = slot;
      ctx->seq = s.seq;
      st = ep.endpoint().senddata(s.buf, s.len, s.region->desc(ch->rail), data, ch->peer, ctx);
      if (!st.ok()) rail.cq_give();
    }
  } else {
    // A header in a bounce buffer of the data endpoint, the payload behind it: copied there by
    // the CPU, or, from GPU memory the provider registered (FI_HMEM), gathered by the provider
    // from the Region with its descriptor (the CPU cannot read it; isend sends such a message
    // by rendezvous where the provider gathers no two buffers).
    const bool gather = s.len > 0 && s.region && s.region->cuda_device >= 0;
    const size_t len = sizeof(MsgHeader) + s.len;
    memory::Buffer* b = buffer != nullptr ? buffer : ep.tx().take();
    if (b == nullptr) {
      st = Status(Code::again, core::str("no free send buffer on ", ch->label));
    } else {
      if (buffer == nullptr) {
        MsgHeader h = comm_header(MsgType::eager, c, slot, s.seq);
        h.length = s.len;
        h.aux2 = s.tag;
        std::memcpy(b->data, &h, sizeof(h));
        if (s.len > 0 && !gather) std::memcpy(b->data + sizeof(h), s.buf, s.len);
      }
      buffer = b;
      if (len <= state_.inject_size && !gather) {
        st = ep.endpoint().inject(b->data, len, ch->peer);
        if (st.ok()) {
          ++ch->ops;
          ep.tx().give_back(b);
          s.finished = true;
          if (queued) state_.release(c, s);
          return st;
        }
      } else if (!rail.cq_take()) {
        st = Status(Code::again, "CQ full");
      } else {
        b->ctx.type = fabric::OpType::eager_buffer;
        b->ctx.comm = c.id.index;  // the request the completion belongs to
        b->ctx.comm_gen = c.id.gen;
        b->ctx.slot = slot;
        b->ctx.seq = s.seq;
        st = gather ? ep.endpoint().send2(b->data, sizeof(MsgHeader), ep.tx().desc(), s.buf,
                                          s.len, s.region->desc(ch->rail), ch->peer, &b->ctx)
                    : ep.endpoint().send(b->data, len, ep.tx().desc(), ch->peer, &b->ctx);
        if (!st.ok()) rail.cq_give();
      }
    }
  }
  if (st.ok()) {
    ++ch->ops;
    if (!queued) state_.hold(c, s);
    return st;
  }
  if (st.code() == Code::again) {
    // The provider is busy (or still connecting), or buffers or CQ room are short: progress
    // posts it later; the request stays open and its wait() deadline bounds the caller.
    if (queued) return st;  // stays queued (retry() keeps it)
    queue(c, s, slot, ch, buffer);
    return Status::success();
  }
  if (buffer != nullptr) ep.tx().give_back(buffer);
  state_.note_failure(ch->rail, st);
  if (queued) state_.release(c, s);
  return st;
}

void Eager::retry() {
  queued_.retry([&](PendingQueue<PendingEager>::Entry& e) {
    const PendingEager& p = e.post;
    CommState* c = state_.comm(p.comm);
    if (c == nullptr) return false;  // cannot happen: the queued post holds its communicator
    SendSlot& s = c->sends[p.slot];
    if (!s.active || s.seq != p.seq || s.finished) {
      // Cancelled (closed) or failed meanwhile: never posted, so never read again.
      if (p.buffer != nullptr) p.ch->ep->tx().give_back(p.buffer);
      state_.release(*c, s);
      return false;
    }
    Status st = post(*c, s, p.slot, p.ch, p.buffer, true);
    if (st.ok()) {
      s.queued = false;
      return false;
    }
    if (st.code() == Code::again) {
      if (!state_.expired(e.since)) return true;
      st = core::error(Code::again, "eager send of message ", s.seq, ": the provider stayed "
                       "busy for XPORT_EAGAIN_TIMEOUT_MS");
      if (p.buffer != nullptr) p.ch->ep->tx().give_back(p.buffer);
      state_.fail_send(*c, s, st);
      state_.release(*c, s);
      return false;
    }
    state_.fail_send(*c, s, std::move(st).with_context("eager send"));
    return false;
  });
}

void Eager::fail_rail(uint32_t rail, const Status& why) {
  queued_.drop_if([&](PendingQueue<PendingEager>::Entry& e) {
    const PendingEager& p = e.post;
    if (p.ch->rail != rail) return false;
    if (p.buffer != nullptr) p.ch->ep->tx().give_back(p.buffer);
    if (CommState* c = state_.comm(p.comm)) {
      SendSlot& sl = c->sends[p.slot];
      sl.queued = false;
      state_.fail_send(*c, sl, why);
      state_.release(*c, sl);
    }
    return true;
  });
}

void Eager::on_sent(fabric::OpContext* ctx, const Status& st, memory::Buffer* b) {
  auto* ep = static_cast<rail::RailEndpoint*>(ctx->owner);
  ep->endpoint().count_completion(!st.ok());
  const CommId id{ctx->comm, ctx->comm_gen};
  const uint16_t slot = ctx->slot;
  const uint64_t seq = ctx->seq;
  if (b != nullptr) ep->tx().give_back(b);
  CommState* c = state_.comm(id);
  if (c == nullptr) {
    state_.miss(true);
    return;
  }
  SendSlot& s = c->sends[slot];
  if (s.active && s.seq == seq) {
    if (!st.ok()) {
      state_.fail_send(*c, s, st.with_context(core::str("eager send of message ", s.seq)));
      // The provider could not deliver to that peer: on a shared (RDM) endpoint the peer is
      // unreachable; a connection's failure, or that of an endpoint of the communicator's own,
      // is that communicator's.
      if (st.code() == Code::peer_lost && c->peer != nullptr && !c->connection &&
          c->own.empty()) {
        state_.fail_peer(*c->peer, st);
      } else if (st.code() == Code::peer_lost) {
        state_.fail_comm(*c, st);
      }
    } else {
      s.finished = true;
    }
  }
  state_.release(*c, s);
}

Status Eager::report_posted(CommState& c, uint64_t last) {
  if (last + 1 - c.reported_next < std::max<uint64_t>(1, c.depth / 2)) return Status::success();
  MsgHeader g{};
  g.type = static_cast<uint8_t>(MsgType::credit);
  g.version = kWireVersion;
  g.dst_comm = c.peer_comm.index;
  g.dst_gen = c.peer_comm.gen;
  g.src_comm = c.id.index;
  g.src_gen = c.id.gen;
  g.slot = c.slot_of(last);
  g.seq = last;
  XPORT_RETURN_IF_ERROR(state_.control->send(state_.control_path(c), g, nullptr, &c, Dependent{}));
  c.reported_next = last + 1;
  return Status::success();
}

void Eager::take_unexpected(CommState& c, RecvSlot& r, Unexpected& u) {
  deliver(c, r, u.data(), u.len);
  drop_unexpected(u);
}

void Eager::drop_unexpected(Unexpected& u) {
  if (u.buffer != nullptr) {
    u.owner->held -= 1;
    state_.control->repost(u.owner, u.buffer);
  }
  u = Unexpected{};
}

void Eager::on_eager(const Message& m) {
  if (m.buffer == nullptr) return;  // (eager messages are never replayed)
  const MsgHeader& h = m.h;
  CommState* c = state_.route(h, DeviceState::Side::recv);
  if (c == nullptr) return;
  if (h.slot != c->slot_of(h.seq)) {
    state_.miss();
    return;
  }
  accept(*c, m.ep, m.buffer, h.slot, h.seq, sizeof(MsgHeader), h.length,
         static_cast<uint32_t>(h.aux2), m.hold);
}

void Eager::on_eager_data(rail::RailEndpoint* ep, memory::Buffer* b, uint64_t data, size_t len,
                          bool* hold) {
  const CqData d = decode_cq_data(data, 8);
  CommState* c = state_.comm({d.comm, d.field});
  if (c == nullptr) {
    state_.miss(true);
    return;
  }
  if (!c->is_send && c->connection != nullptr && c->connection->ep == ep) {
    c = state_.ready_accepted(*c);
    if (c == nullptr) {
      state_.miss();
      return;
    }
  }
  // No header names the sender: it must at least have come on a data endpoint of one of the
  // communicator's rails (RDM endpoints are shared by all peers of a rail).
  bool on_path = ep == nullptr;  // (injected by a test: no endpoint to check)
  for (const pool::Path& p : c->paths) on_path = on_path || p.data->ep == ep;
  if (c->is_send || c->phase == Phase::connecting || c->depth == 0 || d.slot >= c->depth ||
      !on_path) {
    state_.miss();
    return;
  }
  const uint64_t seq = widen_seq(eager_seq_low(d.high), c->next_seq, kEagerSeqBits);
  if (c->slot_of(seq) != d.slot) {
    state_.miss();
    return;
  }
  if (c->peer != nullptr) c->peer->heard = true;
  accept(*c, ep, b, d.slot, seq, 0, len, eager_tag(d.high), hold);
}

void Eager::accept(CommState& c, rail::RailEndpoint* ep, memory::Buffer* b, uint16_t slot,
                   uint64_t seq, size_t offset, size_t len, uint32_t tag, bool* hold) {
  RecvSlot& r = c.recvs[slot];
  const bool posted = r.active && r.seq == seq && !r.finished;
  if (posted && r.assigned) {
    if (matching_->on_tag(c, r, tag, false)) deliver(c, r, b->data + offset, len);
    return;
  }
  // Before its receive, or for a group still placing its messages by tag: held until placed.
  Unexpected& u = c.unexpected[slot];
  if ((!posted && seq < c.next_seq) || u.valid) {
    state_.miss();
    return;
  }
  u.valid = true;
  u.seq = seq;
  u.len = len;
  u.tag = tag;
  // Credits bound a communicator's early arrivals to its depth; an endpoint's receive buffers
  // are shared by every communicator, so at most half of them are held: beyond that the message
  // is copied out and its buffer goes back at once.
  if (ep != nullptr && ep->held < ep->rx().count() / 2) {
    u.buffer = b;
    u.owner = ep;
    u.offset = offset;
    ep->held += 1;
    *hold = true;
  } else {
    u.copy.assign(b->data + offset, b->data + offset + len);
    ++state_.counters.overflow_copies;
  }
  if (posted) matching_->on_tag(c, r, tag, false);  // places it (and delivers) if it can
}

void Eager::deliver(CommState& c, RecvSlot& r, const uint8_t* data, size_t len) {
  if (len > 0 && r.region && r.region->cuda_device >= 0) {
    // The CPU cannot copy into GPU memory the provider registered (FI_HMEM), and the engine
    // has no GPU copy: the receive fails rather than touching it (rendezvous messages, written
    // by the NIC, are received there).
    r.error = core::error(Code::unsupported, "irecv: message ", r.seq, " of ", len, " bytes "
                          "came eagerly (XPORT_EAGER_MAX) for a buffer in GPU memory registered "
                          "with the provider (XPORT_GPU_MEMORY=hmem), which this CPU cannot "
                          "write; receive eager-sized messages into host memory, or use "
                          "XPORT_GPU_MEMORY=staged (docs/semantics.md, GPU memory)");
  } else if (len > r.cap) {
    r.error = core::error(Code::truncated, "irecv: message ", r.seq, " of ", len,
                          " bytes does not fit the ", r.cap, "-byte receive buffer of comm ",
                          c.id.index);
  } else if (len > 0) {
    std::memcpy(r.buf, data, len);
  }
  r.bytes = len;
  r.finished = true;
  state_.release_cts_room(c, r);
}

}  // namespace xport::proto
