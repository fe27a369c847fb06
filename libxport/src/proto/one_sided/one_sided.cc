// One-sided windows: issuing puts and gets, posting what streams release, and routing provider
// completions and window messages to their parts.
#include "proto/one_sided/one_sided.hpp"

#include "core/log.hpp"
#include "rail/stripes.hpp"

namespace xport::proto {

Result<uint32_t> OneSided::stripes(const WindowState& w, const RemoteKey& remote, size_t len,
                                   const char* what) const {
  if (len == 0) return 0u;
  const uint32_t rails = static_cast<uint32_t>(std::min(w.paths.size(), remote.keys.size()));
  DeviceState::RailList healthy;
  const uint32_t up = state_.healthy_rails(rails, healthy, w.peer);
  if (up == 0) return state_.no_rail_error(rails, w.peer, what);
  // Every stripe takes a sequence number, and a put_signal one more, within the credits.
  const OutStream* s = streams_.find(w.stream);
  const uint32_t most = s != nullptr && s->span > 1 ? s->span - 1 : 1;
  return std::min(rail::stripe_count(state_.config.stripe, len, up), most);
}

Status OneSided::add_rma(WindowState& w, OutStream& s, Ticket t, fabric::OpType op,
                         const memory::RegionRef& local, uint8_t* lbuf, size_t len,
                         const RemoteKey& remote, size_t roff, const Signals::Spec* signal,
                         const char* what, std::shared_ptr<SourceGate> gate,
                         uint64_t gate_need) {
  XPORT_ASSIGN_OR_RETURN(uint32_t n, stripes(w, remote, len, what));
  if (n == 0 && signal == nullptr) return Status::success();
  Piece p;
  p.window = w.id;
  p.ticket = t;
  p.kind = op == fabric::OpType::put ? PieceKind::write : PieceKind::read;
  p.local = lbuf;
  p.len = len;
  p.region = local;
  p.stripes = n;
  p.raddr = Windows::remote_address(remote, roff);
  p.rails = static_cast<uint32_t>(std::min<size_t>(remote.keys.size(), kMaxRails));
  for (uint32_t i = 0; i < p.rails; ++i) p.keys[i] = remote.keys[i];
  p.gate = std::move(gate);
  p.gate_need = gate_need;
  XPORT_RETURN_IF_ERROR(windows_.reserve(w, n, t, op, p, what));
  TicketState& ts = *windows_.ticket(w, t);
  ts.local_left += n;
  if (op == fabric::OpType::get) {
    // Gets are not counted at the target: strong signals and fences wait for them here.
    const uint64_t ordinal = s.next_uncounted++;
    for (uint32_t i = 0; i < n; ++i) w.ops[p.ops[i]].uncounted = ordinal;
    s.uncounted_inflight += n;
  }
  if (signal != nullptr) {
    p.with_signal = true;
    signals_.fill(p, ts, *signal);
    if (signal->strong) p.after.uncounted = s.next_uncounted;
    ts.local_left += 1;
  }
  streams_.submit(s, std::move(p));
  return Status::success();
}

Result<Ticket> OneSided::rma(uint32_t window, fabric::OpType op, const memory::RegionRef& local,
                             uint8_t* lbuf, size_t len, const RemoteKey& remote, size_t roff,
                             const Signals::Spec* signal) {
  const char* what = op == fabric::OpType::get ? "get" : signal != nullptr ? "put_signal" : "put";
  Status err;
  WindowState* w = windows_.usable(window, what, &err);
  if (w == nullptr) return err;
  XPORT_RETURN_IF_ERROR(windows_.check_remote(*w, remote, roff, len, what));
  if (signal != nullptr) XPORT_RETURN_IF_ERROR(signals_.check(*w, *signal, what));
  XPORT_ASSIGN_OR_RETURN(uint32_t n, stripes(*w, remote, len, what));
  if (w->free.size() < n) {
    return core::error(Code::again, what, ": ", Windows::kOps, " operations outstanding on the "
                       "window; call quiet()");
  }
  OutStream* s = streams_.find(w->stream);
  XPORT_ASSIGN_OR_RETURN(Ticket t, windows_.begin(*w, what));
  Status st = add_rma(*w, *s, t, op, local, lbuf, len, remote, roff, signal, what);
  if ((w = windows_.find(window)) == nullptr) return t;
  if (!st.ok()) {
    w->tickets.erase(t);  // nothing of it was issued
    return st;
  }
  windows_.settle(*w, t);  // (a zero-length put or get is complete at once)
  return t;
}

Result<std::array<Ticket, 3>> OneSided::put_pieces(uint32_t window,
                                                    const memory::RegionRef& local, uint8_t* lbuf,
                                                    size_t len, const RemoteKey& remote,
                                                    size_t roff, const Pieces& how) {
  const char* what = how.signal != nullptr ? "put_signal" : "put";
  Status err;
  WindowState* w = windows_.usable(window, what, &err);
  if (w == nullptr) return err;
  XPORT_RETURN_IF_ERROR(windows_.check_remote(*w, remote, roff, len, what));
  if (how.publish != nullptr) XPORT_RETURN_IF_ERROR(signals_.check(*w, *how.publish, what));
  if (how.signal != nullptr) XPORT_RETURN_IF_ERROR(signals_.check(*w, *how.signal, what));
  if (how.in_place && (how.publish == nullptr || how.gate == nullptr)) {
    return core::error(Code::internal, what, ": a put whose bytes are copied into place needs "
                       "its publishes and its copy's gate");
  }
  size_t piece = how.piece == 0 || how.piece >= len ? std::max<size_t>(len, 1) : how.piece;
  uint32_t n = 0;  // operation contexts: every piece's stripes (none in place: no write goes)
  for (size_t off = 0; off < len && !how.in_place; off += piece) {
    XPORT_ASSIGN_OR_RETURN(uint32_t k, stripes(*w, remote, std::min(piece, len - off), what));
    n += k;
  }
  if (!how.in_place && piece < len && n + Windows::kOps / 2 > w->free.size()) {
    // Pieces overlap one put's copies with its transfer; a window with half its contexts in
    // flight already overlaps operations, and pieces are never a reason to refuse: the put goes
    // whole (its gate then opens once the whole source is in place).
    XPORT_ASSIGN_OR_RETURN(n, stripes(*w, remote, len, what));
    piece = std::max<size_t>(len, 1);
  }
  if (n > Windows::kOps) {
    return core::error(Code::invalid_argument, what, ": ", len, " bytes in pieces of ", piece,
                       " take ", n, " operation contexts, more than a window has (",
                       Windows::kOps, ")");
  }
  if (w->free.size() < n) {
    return core::error(Code::again, what, ": ", Windows::kOps, " operations outstanding on the "
                       "window; call quiet()");
  }
  // The put, its publishes and its signal: up to three tickets, or none of them. In place, the
  // publishes are the put's own ticket's (no write goes: it is locally complete once they are
  // sent, after its copy, and delivered once they are applied).
  const bool own_publish = how.publish != nullptr && !how.in_place;
  const size_t tickets = 1 + (own_publish ? 1 : 0) + (how.signal != nullptr ? 1 : 0);
  if (Windows::kMaxTickets - std::min(Windows::kMaxTickets, w->tickets.size()) < tickets) {
    return core::error(Code::again, what, ": a put in pieces takes ", tickets,
                       " tickets (the put", own_publish ? ", its publishes" : "",
                       how.signal ? ", its signal" : "", "), and ", Windows::kMaxTickets,
                       " operations are nearly all not yet complete on the window; call quiet()");
  }
  OutStream* s = streams_.find(w->stream);
  std::array<Ticket, 3> out{0, 0, 0};
  XPORT_ASSIGN_OR_RETURN(out[0], windows_.begin(*w, what));
  if (own_publish) {
    XPORT_ASSIGN_OR_RETURN(out[1], windows_.begin(*w, what));
  }
  if (how.signal != nullptr) {
    XPORT_ASSIGN_OR_RETURN(out[2], windows_.begin(*w, what));
  }
  // (the checks above leave add_rma nothing to refuse but a window gone under it)
  for (size_t off = 0; off < len; off += piece) {
    const size_t plen = std::min(piece, len - off);
    if ((w = windows_.find(window)) == nullptr) return out;
    if (Status st = how.in_place ? Status::success()
                                 : add_rma(*w, *s, out[0], fabric::OpType::put, local, lbuf + off,
                                           plen, remote, roff + off, nullptr, what, how.gate,
                                           off + plen);
        !st.ok()) {
      if (off == 0 && (w = windows_.find(window)) != nullptr) {
        for (Ticket t : out) {
          if (t != 0) w->tickets.erase(t);  // nothing of it was issued
        }
      }
      return st;  // (later pieces: the checks above make this unreachable)
    }
    if (how.publish != nullptr && (w = windows_.find(window)) != nullptr) {
      Signals::Spec p = *how.publish;
      p.offset += off;
      p.value = plen;
      signals_.submit(*w, *s, own_publish ? out[1] : out[0], p, how.gate, off + plen);
    }
  }
  if (how.signal != nullptr && (w = windows_.find(window)) != nullptr) {
    signals_.submit(*w, *s, out[2], *how.signal, how.gate, len);
  }
  if ((w = windows_.find(window)) != nullptr) windows_.settle(*w, out[0]);
  return out;
}

std::optional<OwnShadow> OneSided::own_shadow(uint32_t window, const RemoteKey& remote,
                                              size_t roff, size_t len) {
  if (!remote.staged || remote.keys.empty() || len == 0 ||
      remote.device_token != state_.registry->device_token()) {
    return std::nullopt;
  }
  const WindowState* w = windows_.find(window);
  if (w == nullptr || w->closed || !Windows::remote_fits(*w, remote, roff, len)) {
    return std::nullopt;  // (put_pieces says why)
  }
  const OutStream* s = streams_.find(w->stream);
  if (s == nullptr || streams_.fenced(*s, 0)) return std::nullopt;
  for (const Piece& p : s->held) {
    if (p.kind == PieceKind::fence) return std::nullopt;
  }
  const memory::RegionState* r = state_.registry->find_by_key(remote.keys[0]);
  if (r == nullptr || r->staged == nullptr) return std::nullopt;
  // (as the target resolves a write's address)
  uint8_t* at = r->local_bytes(Windows::remote_address(remote, roff), len);
  if (at == nullptr) return std::nullopt;
  return OwnShadow{at, r->keepalive};
}

void OneSided::post_ready(uint32_t window) {
  const WindowState* w = windows_.find(window);
  if (OutStream* s = w != nullptr ? streams_.find(w->stream) : nullptr) streams_.post_ready(*s);
}

bool OneSided::short_of_credit(uint32_t window) {
  const WindowState* w = windows_.find(window);
  const OutStream* s = w != nullptr ? streams_.find(w->stream) : nullptr;
  return s != nullptr && !streams_.can_post_now(*s, credit_reserve(*s));
}

// ---- posting ----

std::optional<Ticket> OneSided::plain_put(uint32_t window, const memory::RegionRef& local,
                                          uint8_t* lbuf, size_t len, const RemoteKey& remote,
                                          size_t roff, bool* short_after) {
  // (As post_rma: never injected from GPU memory the provider registered, which the CPU cannot
  // read; posted from GPU memory, staged or not, it takes rma() and post().)
  if (len == 0 || local->cuda_device >= 0) return {};
  const bool inject = len <= state_.inject_size;
  // What rma() checks (Windows::usable, check_remote), and what its general path needs.
  OutStream* found = nullptr;
  WindowState* wp = windows_.ready(window, &found);
  if (wp == nullptr || wp->free.empty() || wp->tickets.size() >= Windows::kMaxTickets ||
      !found->held.empty() || !Windows::remote_fits(*wp, remote, roff, len)) {
    return {};
  }
  WindowState& w = *wp;
  OutStream& s = *found;
  // Credit computed once: for this put, and for the quarter short_of_credit() asks after it.
  const uint64_t limit = streams_.credit_limit(s);
  if (s.next_seq >= limit || streams_.fenced(s, 0)) return {};
  const size_t rails = std::min({w.paths.size(), remote.keys.size(), size_t{kMaxRails}});
  DeviceState::RailList healthy;
  const uint32_t up = state_.healthy_rails(rails, healthy, w.peer);
  if (up == 0 || rail::stripe_count(state_.config.stripe, len, up) != 1) return {};
  const uint32_t rail = healthy[w.next_stripe % up];
  pool::Channel* ch = w.paths[rail].data;
  if (ch->failed()) return {};
  const uint64_t seq = s.next_seq;
  const uint64_t data =
      encode_window_write(s.target, s.target_gen, seq, state_.cq_data_bytes, s.seq_bits);
  const uint64_t raddr = Windows::remote_address(remote, roff);
  fabric::Endpoint& ep = ch->ep->endpoint();
  const Ticket t = w.next_ticket;
  if (inject) {
    if (!ep.inject_writedata(lbuf, len, data, ch->peer, raddr, remote.keys[rail]).ok()) return {};
    w.tickets.add(t).need_seq = seq + 1;  // locally complete; remotely once the target counts it
    if (w.local_clear->load(std::memory_order_relaxed) == t) {
      w.local_clear->store(t + 1, std::memory_order_release);
    }
    w.completed += 1;
  } else {
    // As reserve() and post(): a window operation, its context naming the ticket and the rail,
    // and a CQ entry of the rail held for its completion.
    rail::Rail& r = *state_.rails[ch->rail];
    if (!r.cq_take()) return {};
    const uint32_t index = w.free.back();
    WindowOp& o = w.ops[index];
    o.ctx.type = fabric::OpType::put;
    o.ctx.seq = t;
    o.ctx.stripe = 0;
    o.ctx.rail = static_cast<uint8_t>(rail);
    if (!ep.writedata(lbuf, len, local->desc(rail), data, ch->peer, raddr, remote.keys[rail],
                      &o.ctx)
             .ok()) {
      r.cq_give();
      return {};
    }
    w.free.pop_back();
    o.busy = true;
    o.region = local;
    o.uncounted = 0;
    TicketState& ts = w.tickets.add(t);
    ts.need_seq = seq + 1;
    ts.local_left = 1;
  }
  w.next_ticket = t + 1;
  w.next_stripe += 1;
  s.next_seq = seq + 1;
  w.issued += 1;
  *short_after = limit - s.next_seq < credit_reserve(s);
  return t;
}

Status OneSided::post_rma(WindowState& w, uint32_t index, uint8_t* local, size_t len,
                          uint64_t raddr, uint64_t key, uint64_t data, bool* injected) {
  WindowOp& o = w.ops[index];
  const uint8_t rail = o.ctx.rail;
  pool::Channel* ch = w.paths[rail].data;
  if (ch->failed()) return core::error(Code::peer_lost, ch->label, ": ", ch->failure());
  // Never from GPU memory the provider registered (FI_HMEM): an inject's source is read by the
  // CPU, which cannot load from cudaMalloc'd memory.
  const bool device_source = o.region && o.region->cuda_device >= 0;
  if (o.ctx.type == fabric::OpType::put && len <= state_.inject_size && !device_source) {
    // A write that fits the provider's inject size: the source is reusable when the call
    // returns (locally complete at once, no CQ entry to read); the target counts it by its
    // CQ data as any other, so quiet and signals still wait for it to land.
    Status st = ch->ep->endpoint().inject_writedata(local, len, data, ch->peer, raddr, key);
    *injected = st.ok();
    return st;
  }
  rail::Rail& r = *state_.rails[ch->rail];
  if (!r.cq_take()) return Status(Code::again, "CQ full");
  void* desc = o.region->desc(rail);
  Status st = o.ctx.type == fabric::OpType::put
                  ? ch->ep->endpoint().writedata(local, len, desc, data, ch->peer, raddr, key,
                                                 &o.ctx)
                  : ch->ep->endpoint().read(local, len, desc, ch->peer, raddr, key, &o.ctx);
  if (!st.ok()) r.cq_give();
  return st;
}

Status OneSided::post_atomic(WindowState& w, uint32_t index, uint64_t raddr, uint64_t key) {
  WindowOp& o = w.ops[index];
  pool::Channel* ch = w.paths[o.ctx.rail].data;
  if (ch->failed()) return core::error(Code::peer_lost, ch->label, ": ", ch->failure());
  rail::Rail& r = *state_.rails[ch->rail];
  if (!r.cq_take()) return Status(Code::again, "CQ full");
  auto* words = reinterpret_cast<uint64_t*>(o.scratch->data);
  void* desc = ch->ep->atomic_slots()->desc();
  fabric::Endpoint& ep = ch->ep->endpoint();
  Status st;
  switch (static_cast<WindowAtomicOp>(o.atomic_op)) {
    case WindowAtomicOp::compare_swap:
      st = ep.compare_atomic(&words[0], desc, &words[1], desc, &words[2], desc, ch->peer, raddr,
                             key, &o.ctx);
      break;
    case WindowAtomicOp::swap:
      st = ep.fetch_atomic(&words[0], desc, &words[2], desc, ch->peer, raddr, key,
                           FI_ATOMIC_WRITE, &o.ctx);
      break;
    case WindowAtomicOp::fetch:
      st = ep.fetch_atomic(&words[0], desc, &words[2], desc, ch->peer, raddr, key,
                           FI_ATOMIC_READ, &o.ctx);
      break;
    default:  // add (its value fetched and dropped: completion means applied) and fetch-add
      st = ep.fetch_atomic(&words[0], desc, &words[2], desc, ch->peer, raddr, key, FI_SUM,
                           &o.ctx);
      break;
  }
  if (!st.ok()) r.cq_give();
  return st;
}

// The outcome of posting one provider operation: queued for progress, posted, or failed.
void OneSided::posted(WindowState& w, uint32_t index, Status st, const PendingRma& retry) {
  const uint32_t stream = w.stream;
  const bool counted = w.ops[index].ctx.type == fabric::OpType::put;
  if (st.code() == Code::again) {
    // (the clock is read only for a post that is queued: its XPORT_EAGAIN_TIMEOUT_MS starts now)
    queued_.push(retry, Clock::now());
    return;
  }
  if (st.ok()) {
    w.issued += 1;
    return;
  }
  state_.note_failure(w.ops[index].ctx.rail, st);
  windows_.finish_op(w, index, st);
  // A counted write that never goes leaves a gap the target's count cannot pass.
  if (counted) {
    if (OutStream* s = streams_.find(stream)) streams_.fail(*s, st);
  }
}

void OneSided::post(OutStream& s, Piece& p, uint64_t base) {
  WindowState* w = windows_.find(p.window);
  if (w == nullptr) return;  // cannot happen: its reserved operations keep it
  const uint32_t id = w->id;
  const Ticket t = p.ticket;
  if (p.seqs() > 0) {
    if (TicketState* ts = windows_.ticket(*w, t)) {
      ts->need_seq = std::max(ts->need_seq, base + p.seqs());
    }
  }
  switch (p.kind) {
    case PieceKind::write:
    case PieceKind::read: {
      const bool put = p.kind == PieceKind::write;
      const uint32_t rails = static_cast<uint32_t>(std::min<size_t>(w->paths.size(), p.rails));
      DeviceState::RailList healthy;
      const uint32_t up = state_.healthy_rails(rails, healthy, w->peer);
      const uint32_t first = up > 0 ? w->next_stripe++ % up : 0;
      for (uint32_t i = 0; i < p.stripes && (w = windows_.find(id)) != nullptr; ++i) {
        const uint32_t index = p.ops[i];
        if (up == 0 || s.phase != StreamPhase::ready) {
          const Status why = up == 0 ? state_.no_rail_error(rails, w->peer, put ? "put" : "get")
                                     : s.error;
          windows_.finish_op(*w, index, why);
          if (put && up == 0) streams_.fail(s, why);
          continue;
        }
        WindowOp& o = w->ops[index];
        o.ctx.rail = static_cast<uint8_t>(healthy[(first + i) % up]);
        o.ctx.stripe = i;
        const uint64_t off = rail::stripe_offset(state_.config.stripe, p.len, p.stripes, i);
        const uint64_t end = rail::stripe_offset(state_.config.stripe, p.len, p.stripes, i + 1);
        const uint64_t data =
            put ? encode_window_write(s.target, s.target_gen, base + i, state_.cq_data_bytes,
                                      s.seq_bits)
                : 0;
        PendingRma retry{id, index, p.local + off, end - off, p.raddr + off,
                         p.keys[o.ctx.rail], data, false};
        bool injected = false;
        Status st = post_rma(*w, index, retry.local, retry.len, retry.raddr, retry.key, data,
                             &injected);
        if (st.ok() && p.stripes > 1) state_.rails[o.ctx.rail]->stripes_out().add();
        posted(*w, index, std::move(st), retry);
        if (injected) windows_.finish_op(*w, index, Status::success());
      }
      if (p.with_signal && (w = windows_.find(id)) != nullptr) {
        if (s.phase == StreamPhase::ready) {
          signals_.send(s, p, base + p.stripes, base);
        } else {
          windows_.fail(*w, t, s.error);
        }
        if ((w = windows_.find(id)) != nullptr) windows_.piece_sent(*w, t);
      }
      return;
    }
    case PieceKind::native_atomic: {
      const uint32_t index = p.ops[0];
      PendingRma retry{id, index, nullptr, 0, p.raddr, p.keys[w->ops[index].ctx.rail], 0, true};
      Status st = atomics_.post_native(*w, p);
      posted(*w, index, std::move(st), retry);
      return;
    }
    case PieceKind::signal: signals_.send(s, p, base, base); break;
    case PieceKind::emulated_atomic: atomics_.send_emulated(s, p, base); break;
    case PieceKind::notify: transfers_.send_notify(s, p, base); break;
    case PieceKind::sync: streams_.request_ack(s, s.next_seq); return;
    case PieceKind::fence: return;
  }
  if ((w = windows_.find(id)) != nullptr) windows_.piece_sent(*w, t);
}

void OneSided::retry() {
  queued_.retry([&](PendingQueue<PendingRma>::Entry& e) {
    const PendingRma& p = e.post;
    WindowState* w = windows_.find(p.window);
    if (w == nullptr) return false;  // cannot happen: a busy op keeps its window
    bool injected = false;
    Status st = p.atomic ? post_atomic(*w, p.op, p.raddr, p.key)
                         : post_rma(*w, p.op, p.local, p.len, p.raddr, p.key, p.data, &injected);
    if (st.code() == Code::again && state_.expired(e.since)) {
      st = core::error(Code::again, "the provider stayed busy (-FI_EAGAIN) or the CQ full for "
                       "XPORT_EAGAIN_TIMEOUT_MS");
    } else if (st.code() == Code::again) {
      return true;
    }
    if (st.ok()) {
      w->issued += 1;
      if (injected) windows_.finish_op(*w, p.op, Status::success());
      return false;
    }
    const bool counted = w->ops[p.op].ctx.type == fabric::OpType::put;
    const uint32_t stream = w->stream;
    windows_.finish_op(*w, p.op, st);
    if (counted) {
      if (OutStream* s = streams_.find(stream)) streams_.fail(*s, st);
    }
    return false;
  });
  streams_.retry();
}

// ---- completions ----

void OneSided::register_handlers(Dispatch& d) {
  d.completion<&OneSided::op_done, &OneSided::op_failed>(fabric::OpType::put, this);
  d.completion<&OneSided::op_done, &OneSided::op_failed>(fabric::OpType::get, this);
  d.completion<&OneSided::op_done, &OneSided::op_failed>(fabric::OpType::atomic, this);
  streams_.register_handlers(d);
  atomics_.register_handlers(d);
}

void OneSided::on_done(fabric::OpContext* ctx, const Status& st) {
  auto* w = static_cast<WindowState*>(ctx->owner);
  w->paths[ctx->rail].data->ep->endpoint().count_completion(!st.ok());
  const char* what = ctx->type == fabric::OpType::put   ? "put"
                     : ctx->type == fabric::OpType::get ? "get"
                                                        : "atomic";
  if (ctx->type == fabric::OpType::atomic) atomics_.on_native_done(w->ops[ctx->index], st);
  const bool counted = ctx->type == fabric::OpType::put;
  const uint32_t stream = w->stream;
  const Status err = st.ok() ? st : st.with_context(what);
  windows_.finish_op(*w, ctx->index, err);  // (may erase a closed window)
  if (!st.ok() && counted) {
    // The write's number never lands: the stream cannot count past it (as a queue pair in
    // error): its windows fail and must be reopened.
    if (OutStream* s = streams_.find(stream)) streams_.fail(*s, err);
  }
}

void OneSided::fail_rail(uint32_t rail, const Status& why) {
  std::vector<PendingRma> dropped;
  queued_.drop_if([&](PendingQueue<PendingRma>::Entry& e) {
    WindowState* w = windows_.find(e.post.window);
    const bool on_rail = w != nullptr && w->ops[e.post.op].ctx.rail == rail;
    if (on_rail) dropped.push_back(e.post);
    return on_rail;
  });
  for (const PendingRma& p : dropped) {
    if (WindowState* w = windows_.find(p.window)) on_done(&w->ops[p.op].ctx, why);
  }
  // (By id and index: finishing an operation may erase its closed window.)
  std::vector<std::pair<uint32_t, uint32_t>> lost;
  for (auto& [id, w] : state_.windows) {
    for (uint32_t i = 0; i < w->ops.size(); ++i) {
      if (w->ops[i].busy && w->ops[i].ctx.rail == rail) lost.emplace_back(id, i);
    }
  }
  for (auto [id, i] : lost) {
    WindowState* w = windows_.find(id);
    if (w == nullptr || !w->ops[i].busy) continue;
    // Operations still held in their stream's queue were never posted: they go with the queue.
    bool held = false;
    if (OutStream* s = streams_.find(w->stream)) {
      for (const Piece& p : s->held) {
        for (uint32_t k = 0; k < p.stripes && !held; ++k) held = p.window == id && p.ops[k] == i;
        held = held || (p.kind == PieceKind::native_atomic && p.window == id && p.ops[0] == i);
      }
    }
    if (!held) on_done(&w->ops[i].ctx, why);
  }
}

void OneSided::fail_peer(pool::Peer& p, const Status& why) {
  streams_.fail_peer(p, why);
  for (auto& [id, w] : state_.windows) {
    if (w->peer == &p && w->first_error.ok()) w->first_error = why;
  }
}

void OneSided::fail_comm(CommId comm, const Status& why) {
  for (auto& [id, s] : state_.out_streams) {
    if (s->via == comm) streams_.fail(*s, why);
  }
  for (auto& in : state_.in_streams) {
    if (in != nullptr && in->via == comm) in->reply = nullptr;  // (erased when it closes)
  }
}

void OneSided::add_waited_peers(std::unordered_set<const pool::Peer*>& out) const {
  streams_.add_waited_peers(out);
  for (const auto& [id, w] : state_.windows) {
    if (w->waiters > 0 || w->busy()) out.insert(w->peer);
  }
}

void OneSided::shutdown() { streams_.shutdown(); }

}  // namespace xport::proto
