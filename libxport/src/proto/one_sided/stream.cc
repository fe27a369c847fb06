// Window streams at the initiator: numbering, credits, fences and acknowledgements (progress,
// failures and teardown of both sides: stream_progress.cc; the target's side: stream_target.cc).
#include "proto/one_sided/stream.hpp"


#include <algorithm>

#include "core/log.hpp"
#include "core/random.hpp"
#include "proto/control.hpp"
#include "proto/one_sided/one_sided.hpp"

namespace xport::proto {

Result<std::vector<RailAddresses>> Streams::local_addresses(pool::Peer& peer) {
  if (state_.connected_endpoints()) return std::vector<RailAddresses>{};
  return state_.local_addresses(peer);
}

void Streams::register_handlers(Dispatch& d) {
  d.message<&Streams::on_request>(MsgType::win_req, this);
  d.message<&Streams::on_accept>(MsgType::win_ack, this);
  d.message<&Streams::on_operation>(MsgType::win_signal, this);
  d.message<&Streams::on_operation>(MsgType::win_atomic, this);
  d.message<&Streams::on_operation>(MsgType::win_notify, this);
  d.message<&Streams::on_done>(MsgType::win_done, this);
  d.message<&Streams::on_sync>(MsgType::win_sync, this);
  d.message<&Streams::on_close>(MsgType::win_close, this);
  d.message<&Streams::on_gone>(MsgType::win_gone, this);
  d.window_write<&Streams::on_write>(this);
}

// ---- initiator ----

OutStream* Streams::find(uint32_t id) const {
  if (id != 0 && id == state_.last_stream_id) return state_.last_stream;
  auto it = state_.out_streams.find(id);
  if (it == state_.out_streams.end()) return nullptr;
  state_.last_stream_id = id;
  state_.last_stream = it->second.get();
  return state_.last_stream;
}

Result<OutStream*> Streams::make(pool::Peer* peer, CommState* via) {
  // Ids travel in 16 bits with a 4-bit generation: an id comes back only after 65535 others.
  uint32_t counter = state_.next_out_stream;
  uint16_t index = 0;
  for (int tries = 0; tries < 65536 && index == 0; ++tries, ++counter) {
    const auto candidate = static_cast<uint16_t>(counter & 0xffff);
    if (candidate != 0 && state_.out_streams.count(candidate) == 0) index = candidate;
  }
  if (index == 0) return core::error(Code::resource, "window: 65535 window streams are open");
  state_.next_out_stream = counter;
  auto s = std::make_unique<OutStream>();
  s->id = index;
  s->gen = static_cast<uint8_t>(((counter - 1) >> 16) & 0xf);
  s->peer = peer;
  state_.ref(peer);
  if (via != nullptr) {
    s->via = via->id;
    s->paths = via->paths;
    state_.hold(*via);
  } else {
    s->paths = peer->paths;
  }
  s->nonce = core::random64();
  s->opened = Clock::now();
  OutStream* out = s.get();
  state_.out_streams[index] = std::move(s);
  work_ = true;  // no window yet: retry() closes it unless an opener comes
  return out;
}

Status Streams::request(OutStream& s, pool::Channel* ch) {
  ConnRequest r;
  r.body = state_.conn_body(s.nonce);
  XPORT_ASSIGN_OR_RETURN(r.rails, local_addresses(*s.peer));
  std::vector<uint8_t> body = encode_conn_request(r);
  MsgHeader h = window_header(MsgType::win_req);
  h.src_comm = static_cast<uint16_t>(s.id);
  h.src_gen = s.gen;
  h.slot = static_cast<uint16_t>(state_.cq_data_bytes);  // both ends must agree on the layout
  h.aux = state_.device_token;
  h.aux2 = s.nonce;
  CommState* owner = s.via ? state_.comm(s.via) : nullptr;
  return state_.control->send(ch, h, &body, owner, Dependent{},
                              owner == nullptr ? s.peer : nullptr);
}

Result<OutStream*> Streams::for_comm(CommState& c) {
  // One stream per peer device, whatever communicator a window is opened over: its numbering is
  // what orders one window's operations behind another's (a fence, a strong signal). Connected
  // endpoints included: there the stream runs over the connection of the communicator it was
  // made for, which it holds open (a stream per communicator let a strong signal on one window
  // overtake a fenced put on another, over another connection).
  for (auto& [id, s] : state_.out_streams) {
    if (s->peer == c.peer && s->phase != StreamPhase::failed) return s.get();
  }
  XPORT_ASSIGN_OR_RETURN(OutStream * s, make(c.peer, c.connection ? &c : nullptr));
  Status st = request(*s, state_.control_path(c));
  if (!st.ok()) {
    fail(*s, st);
    return st.with_context("window request");
  }
  return s;
}

Result<OutStream*> Streams::for_address(uint64_t token, uint32_t hash,
                                        const std::vector<uint8_t>& address) {
  if (hash != provider_hash(state_.caps.provider)) {
    return core::error(Code::invalid_argument, "window: the peer uses another provider (this "
                       "device uses '", state_.caps.provider, "')");
  }
  if (state_.connected_endpoints()) {
    return core::error(Code::unsupported, "window: provider ", state_.caps.provider, " uses "
                       "connected endpoints: open windows over a communicator there");
  }
  pool::Peer* peer = state_.peer_for(token);
  XPORT_RETURN_IF_ERROR(DeviceState::check_open(*peer, "window"));
  for (auto& [id, s] : state_.out_streams) {
    if (s->peer == peer && !s->via && s->phase != StreamPhase::failed) return s.get();
  }
  state_.ref(peer);  // held across set-up; the stream takes its own
  if (peer->dead) {  // a device declared dead earlier is asked afresh
    peer->dead = false;
    peer->death.clear();
    peer->last_heard = Clock::now();
  }
  Status st;
  if (peer->paths.empty() || peer->paths[0].control == nullptr) {
    if (peer->paths.empty()) peer->paths.resize(1);
    auto ch = state_.door_channel(*peer, address);
    if (ch) peer->paths[0].control = *ch;
    else st = ch.status();
  }
  Result<OutStream*> made = st.ok() ? make(peer, nullptr) : Result<OutStream*>(st);
  state_.unref(peer);
  if (!made) return made.status().with_context("window");
  OutStream* s = *made;
  st = request(*s, peer->paths[0].control);
  if (!st.ok()) {
    fail(*s, st);
    return st.with_context("window request");
  }
  return s;
}

void Streams::abandon(uint32_t id, const Status& why) {
  if (OutStream* s = find(id); s != nullptr && s->phase == StreamPhase::connecting) fail(*s, why);
}

void Streams::on_accept(const Message& m) {
  const MsgHeader& h = m.h;
  const uint8_t* body = m.body;
  const size_t len = m.len;
  OutStream* s = find(h.dst_comm);
  if (s == nullptr || s->gen != (h.dst_gen & 0xf) || s->phase != StreamPhase::connecting ||
      h.aux2 != s->nonce) {
    state_.miss(true);  // an answer to a request given up, or a forgery
    const bool ours = s != nullptr && s->gen == (h.dst_gen & 0xf) && h.aux2 == s->nonce &&
                      s->phase == StreamPhase::ready && s->target == h.src_comm &&
                      s->target_gen == (h.src_gen & 0xf);
    if (h.seq != 0 && !ours) refuse_answer(h);
    return;
  }
  if (h.aux != s->peer->token) {
    fail(*s, core::error(Code::protocol, "window: the peer answered as device ", std::hex, h.aux,
                         ", expected ", s->peer->token));
    return;
  }
  if (h.seq == 0) {
    fail(*s, core::error(Code::resource, "window: the peer refused the stream: ",
                         window_refusal_text(static_cast<uint8_t>(h.slot))));
    return;
  }
  auto ack = decode_conn_ack(body, len);
  const unsigned bits = h.slot;
  if (!ack || bits == 0 || bits > kWideSeqBits || h.length == 0 ||
      h.length > (uint64_t{1} << bits) || h.seq - 1 > h.length) {
    fail(*s, core::error(Code::protocol, "window: malformed answer (", bits, " sequence bits, ",
                         "a span of ", h.length, ", a first grant of ", h.seq - 1, ack ? "" : ", ",
                         ack ? "" : ack.status().message(), ")"));
    return;
  }
  if (!s->via) {
    Status st = state_.set_paths(*s->peer, ack->rails);
    if (!st.ok()) {
      fail(*s, std::move(st).with_context("window"));
      return;
    }
    s->paths = s->peer->paths;
  }
  s->target = h.src_comm;
  s->target_gen = static_cast<uint8_t>(h.src_gen & 0xf);
  s->span = static_cast<uint32_t>(h.length);
  s->limit = h.seq - 1;
  s->grant = s->limit;
  s->seq_bits = bits;
  s->awaiting.assign(s->span, OutStream::Awaiting{});
  s->signalled.assign(s->span, OutStream::Awaiting{});
  s->phase = StreamPhase::ready;
  s->peer->last_heard = Clock::now();
}

void Streams::release(OutStream& s) {
  if (s.windows > 0) s.windows -= 1;  // (closed by retry() once idle: callers may hold `s`)
  work_ = true;
}

uint64_t Streams::min_uncounted(const OutStream& s) const {
  if (s.uncounted_inflight == 0) return UINT64_MAX;
  uint64_t m = UINT64_MAX;
  for (const auto& [id, w] : state_.windows) {
    if (w->stream != s.id) continue;
    for (const WindowOp& o : w->ops) {
      if (o.busy && o.uncounted != 0 && o.uncounted < m) m = o.uncounted;
    }
  }
  return m;
}

bool Streams::can_post_now(const OutStream& s, uint32_t seqs) const {
  return s.held.empty() && s.phase == StreamPhase::ready && can_release(s, seqs, 0);
}

bool Streams::can_release(const OutStream& s, uint32_t seqs, uint64_t after_uncounted) const {
  return s.next_seq + seqs <= credit_limit(s) && !fenced(s, after_uncounted);
}

void Streams::submit(OutStream& s, Piece&& p) {
  if (s.held.empty() && s.phase == StreamPhase::ready && gate_open(p) && can_release(s, p)) {
    const uint64_t base = s.next_seq;
    s.next_seq += p.seqs();
    os_.post(s, p, base);
    return;
  }
  ++state_.counters.window_ops_held;
  const uint32_t seqs = p.seqs();
  s.held.push_back(std::move(p));
  work_ = true;
  request_ack(s, s.next_seq);  // credits and fences move with the target's answers
  if (s.held.size() == 1) ask_credits(s, seqs);
}

void Streams::fence(OutStream& s) {
  if (s.held.empty()) {
    s.fence = Barrier{s.next_seq, s.next_uncounted};
    request_ack(s, s.next_seq);
    return;
  }
  Piece f;
  f.kind = PieceKind::fence;
  f.after.uncounted = s.next_uncounted;
  s.held.push_back(std::move(f));
  work_ = true;
}

void Streams::pump(OutStream& s, size_t& budget) {
  while (!s.held.empty() && budget > 0 && s.phase == StreamPhase::ready) {
    Piece& head = s.held.front();
    if (head.kind == PieceKind::fence) {
      s.fence = Barrier{s.next_seq, head.after.uncounted};
      s.held.pop_front();
      request_ack(s, s.next_seq);
      continue;
    }
    if (head.gate && head.gate->copy && !gate_open(head)) poll_gate(*head.gate);
    if (head.gate && head.gate->failed.load(std::memory_order_acquire)) {
      Piece p = std::move(head);  // its source never came: it and what of its put follows go
      s.held.pop_front();
      drop_piece(p, p.gate->why);
      continue;
    }
    if (!gate_open(head)) return;  // its source's copy is still running (post_ready follows it)
    if (!can_release(s, head)) {
      request_ack(s, s.next_seq);
      ask_credits(s, head.seqs());
      return;
    }
    Piece p = std::move(head);
    s.held.pop_front();
    const uint64_t base = s.next_seq;
    s.next_seq += p.seqs();
    --budget;
    os_.post(s, p, base);
  }
}

void Streams::request_ack(OutStream& s, uint64_t upto) {
  if (s.phase != StreamPhase::ready || upto <= s.done || upto <= s.sync_sent) return;
  MsgHeader h = window_header(MsgType::win_sync);
  h.seq = upto;
  if (!send(s, h, nullptr).ok()) return;
  if (s.sync_sent <= s.done) s.sync_since = Clock::now();  // (no answer was awaited before)
  s.sync_sent = upto;
}

Status Streams::send(OutStream& s, MsgHeader& h, const std::vector<uint8_t>* body) {
  h.dst_comm = s.target;
  h.dst_gen = s.target_gen;
  h.src_comm = static_cast<uint16_t>(s.id);
  h.src_gen = s.gen;
  if (s.via) {
    CommState* c = state_.comm(s.via);
    if (c == nullptr || s.paths.empty()) {
      return core::error(Code::closed, "window: the communicator of the stream is gone");
    }
    return state_.control->send(s.paths[0].control, h, body, c, Dependent{});
  }
  if (s.paths.empty()) return core::error(Code::closed, "window: the stream has no path");
  // Any rail in service: the target orders by sequence number, not by arrival.
  pool::Channel* ch = state_.pick(s.paths, s.next_control, s.peer).control;
  return state_.control->send(ch, h, body, nullptr, Dependent{}, s.peer);
}

Status Streams::send_op(OutStream& s, MsgHeader& h, const std::vector<uint8_t>* body,
                        bool awaiting) {
  Status st = send(s, h, body);
  // (connected endpoints: the connection is the only path, there is no other rail to go on)
  if (st.ok() && !s.via) s.sent.push(h, body, awaiting);
  return st;
}

void Streams::resend_after_rail_loss(const pool::Peer* peer) {
  std::vector<uint32_t> ids;
  for (auto& [id, s] : state_.out_streams) {
    if (!s->via && (peer == nullptr || s->peer == peer)) ids.push_back(id);
  }
  for (uint32_t id : ids) {
    OutStream* s = find(id);
    if (s == nullptr || s->peer == nullptr || s->peer->dead) continue;
    if (s->phase == StreamPhase::connecting) {
      // The target answers a repeated request (same nonce) with the stream it made for it.
      if (!s->peer->paths.empty()) {
        (void)request(*s, state_.pick(s->peer->paths, s->next_control, s->peer).control);
      }
      continue;
    }
    if (s->phase != StreamPhase::ready) continue;
    // The target drops what it has already (by number) and answers an atomic it applied again.
    s->sent.for_each([&](const SentLog::Entry& e) {
      if (e.h.seq < s->done && !e.awaiting) return;
      MsgHeader h = e.h;
      (void)send(*s, h, e.body.empty() ? nullptr : &e.body);
    });
    if (s->sync_sent > s->done) {
      MsgHeader h = window_header(MsgType::win_sync);
      h.seq = s->sync_sent;
      (void)send(*s, h, nullptr);
    }
    s->want_sent = 0;  // (a request for credits that was on it is made again when held)
    if (!s->held.empty()) work_ = true;
  }
  for (size_t i = 0; i < state_.in_stream_live.size(); ++i) {
    InStream* in = state_.in_streams[state_.in_stream_live[i]].get();
    if (in == nullptr || in->via || (peer != nullptr && in->peer != peer)) continue;
    if (in->taking_back) {
      send_take_back(*in);
    } else if (in->done > 0) {
      ack_now(*in);
    }
  }
  const auto now = Clock::now();
  while (!closed_.empty() && now - closed_.front().at > kCloseMemory) closed_.pop_front();
  for (const Closed& c : closed_) {
    auto it = state_.peers.find(c.peer);
    if (it == state_.peers.end() || (peer != nullptr && it->second.get() != peer)) continue;
    pool::Peer& p = *it->second;
    if (p.dead || p.paths.empty()) continue;
    MsgHeader h = window_header(MsgType::win_close);
    h.dst_comm = c.target;
    h.dst_gen = c.target_gen;
    h.src_comm = c.id;
    h.src_gen = c.gen;
    uint32_t cursor = 0;
    (void)state_.control->send(state_.pick(p.paths, cursor, &p).control, h, nullptr, nullptr,
                               Dependent{}, &p);
  }
}

void Streams::refuse_answer(const MsgHeader& h) {
  // A stream the target made for a request given up here, or for a copy of a request that came
  // late (a rail that went down delivered it after the stream it asked for had closed): it
  // would hold its slot and CQ room there for ever. (RDM: the answer names its device.)
  if (state_.connected_endpoints()) return;
  auto it = state_.peers.find(h.aux);
  if (it == state_.peers.end() || it->second->dead || it->second->paths.empty()) return;
  pool::Peer& p = *it->second;
  MsgHeader c = window_header(MsgType::win_close);
  c.dst_comm = h.src_comm;
  c.dst_gen = h.src_gen;
  c.src_comm = h.dst_comm;
  c.src_gen = h.dst_gen;
  uint32_t cursor = 0;
  (void)state_.control->send(state_.pick(p.paths, cursor, &p).control, c, nullptr, nullptr,
                             Dependent{}, &p);
}

void Streams::closing(const OutStream& s) {
  if (s.via || s.peer == nullptr) return;
  const auto now = Clock::now();
  while (!closed_.empty() && now - closed_.front().at > kCloseMemory) closed_.pop_front();
  closed_.push_back({s.peer->token, static_cast<uint16_t>(s.id), s.gen, s.target, s.target_gen,
                     now});
}

void Streams::on_gone(const Message& m) {
  const MsgHeader& h = m.h;
  OutStream* s = find(h.dst_comm);
  if (s == nullptr || s->gen != (h.dst_gen & 0xf) || s->target != h.src_comm) {
    state_.miss(true);
    return;
  }
  fail(*s, Status(Code::closed, "window: the target's device closed"), false);
}

void Streams::on_done(const Message& m) {
  const MsgHeader& h = m.h;
  OutStream* s = find(h.dst_comm);
  if (s == nullptr || s->gen != (h.dst_gen & 0xf) || s->target != h.src_comm) {
    state_.miss(true);
    return;
  }
  const bool more = on_grant(*s, h);
  const uint32_t id = s->id;
  const uint64_t done = s->done;
  advance(*s, h.seq);
  // (advance pumps what is held when the done mark moves; a grant alone releases it too)
  if (more && (s = find(id)) != nullptr && s->done == done) {
    size_t budget = state_.config.progress_batch;
    pump(*s, budget);
  }
}

void Streams::advance(OutStream& s, uint64_t done) {
  if (done > s.next_seq) {
    state_.miss();  // more than was ever sent: a forgery or a confused peer
    return;
  }
  if (s.peer != nullptr) s.peer->heard = true;  // (the health sweep reads the clock)
  if (done <= s.done) return;
  s.done = done;
  // The target moves: the wait for what is still asked of it starts again.
  if (s.sync_sent > done) s.sync_since = Clock::now();
  s.sent.prune(done);
  const uint32_t id = s.id;
  os_.windows().on_stream(s);
  if (OutStream* again = find(id)) {
    size_t budget = state_.config.progress_batch;
    pump(*again, budget);
  }
}

void Streams::poll_gate(SourceGate& g) {
  g.advance(g.copy->ready());
  // (failed, or done: its queue goes back now)
  if (g.failed.load(std::memory_order_relaxed) ||
      g.ready.load(std::memory_order_relaxed) == g.copy->length()) {
    g.copy.reset();
  }
}

void Streams::post_ready(OutStream& s) {
  size_t budget = s.held.size();
  pump(s, budget);
}

void Streams::drop_held(OutStream& s, const Status& why) {
  std::deque<Piece> held = std::move(s.held);
  s.held.clear();
  for (Piece& p : held) drop_piece(p, why);
}

void Streams::drop_piece(Piece& p, const Status& why) {
  if (p.kind == PieceKind::fence) return;
  const uint32_t ops = p.kind == PieceKind::write || p.kind == PieceKind::read ? p.stripes
                       : p.kind == PieceKind::native_atomic                   ? 1
                                                                               : 0;
  WindowState* w = os_.windows().find(p.window);
  if (w == nullptr) return;
  os_.windows().fail(*w, p.ticket, why);
  const bool message = p.kind == PieceKind::signal || p.kind == PieceKind::emulated_atomic ||
                       p.kind == PieceKind::notify || p.with_signal;
  if (TicketState* t = os_.windows().ticket(*w, p.ticket);
      t != nullptr && p.kind == PieceKind::emulated_atomic && t->results_left > 0) {
    t->results_left -= 1;
  }
  for (uint32_t i = 0; i < ops && (w = os_.windows().find(p.window)) != nullptr; ++i) {
    os_.windows().finish_op(*w, p.ops[i], why);
  }
  if (message && (w = os_.windows().find(p.window)) != nullptr) {
    os_.windows().piece_sent(*w, p.ticket);
  }
}

void Streams::fail(OutStream& s, const Status& why, bool farewell) {
  if (s.phase == StreamPhase::failed) return;
  const bool was_ready = s.phase == StreamPhase::ready;
  s.phase = StreamPhase::failed;
  s.error = why;
  XPORT_LOG(info, "window stream ", s.id, " failed: ", why.to_string());
  drop_held(s, why);
  // Everything not yet known complete at the target fails; answers still awaited never count.
  for (auto& a : s.awaiting) {
    if (!a.valid) continue;
    a.valid = false;
    if (WindowState* w = os_.windows().find(a.window)) {
      if (TicketState* t = os_.windows().ticket(*w, a.ticket)) {
        if (t->results_left > 0) t->results_left -= 1;
      }
      os_.windows().fail(*w, a.ticket, why);
    }
  }
  s.awaiting_count = 0;
  for (auto& [id, ws] : state_.windows) {
    WindowState* w = ws.get();  // (a lambda may not capture a structured binding before C++20)
    if (w->stream != s.id) continue;
    w->tickets.for_each([&](Ticket t, TicketState& ts) {
      if (ts.need_seq > s.done && ts.error.ok()) {
        Windows::lower_clear(*w, t);
        ts.error = why;
        if (w->first_error.ok()) w->first_error = why;
      }
    });
  }
  os_.windows().on_stream(s);
  if (was_ready && farewell && (s.peer == nullptr || !s.peer->dead)) {
    MsgHeader h = window_header(MsgType::win_close);
    (void)send(s, h, nullptr);  // the target frees its side (best effort)
    closing(s);
  }
}

void Streams::erase_out(OutStream& s) {
  pool::Peer* peer = s.peer;
  const CommId via = s.via;
  if (state_.last_stream_id == s.id) state_.last_stream_id = 0;
  state_.out_streams.erase(s.id);  // destroys s
  if (CommState* c = state_.comm(via)) state_.release(*c);
  state_.unref(peer);
}

// ---- progress, failures, teardown: stream_progress.cc ----

}  // namespace xport::proto
