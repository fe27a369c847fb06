// Window streams at the target: counting what landed, applying operations in their turn and
// acknowledging them (the initiator's side is stream.cc).
#include "proto/one_sided/stream.hpp"

#include <algorithm>

#include "core/log.hpp"
#include "proto/control.hpp"
#include "proto/one_sided/one_sided.hpp"

namespace xport::proto {

InStream* Streams::in(uint16_t index, uint8_t gen, bool check_gen) const {
  if (index == 0 || index >= state_.in_streams.size()) return nullptr;
  InStream* s = state_.in_streams[index].get();
  if (s == nullptr || (check_gen && s->gen != (gen & 0xf))) return nullptr;
  return s;
}

Result<InStream*> Streams::make_in(pool::Peer* peer, CommId via, pool::Channel* reply) {
  const uint16_t limit = window_stream_limit(state_.cq_data_bytes);
  if (state_.in_streams.empty()) {
    state_.in_streams.resize(limit);
    state_.in_stream_gen.assign(limit, 0);
    for (uint16_t i = 1; i < limit; ++i) state_.in_stream_free.push_back(i);
  }
  if (state_.in_stream_free.empty()) {
    return core::error(Code::resource, "no free window stream (", limit - 1, ")");
  }
  const unsigned bits = window_seq_bits(state_.cq_data_bytes, state_.config.test_seq_bits);
  const uint32_t span = static_cast<uint32_t>(
      std::min<uint64_t>(state_.config.window_credits, uint64_t{1} << bits));
  const uint16_t index = state_.in_stream_free.front();
  state_.in_stream_free.pop_front();
  auto s = std::make_unique<InStream>();
  s->index = index;
  s->gen = state_.in_stream_gen[index];
  s->peer = peer;
  state_.ref(peer);
  s->via = via;
  if (CommState* c = state_.comm(via)) state_.hold(*c);
  s->reply = reply;
  s->span = span;
  s->seq_bits = bits;
  s->landed.assign(span, 0);
  InStream* out = s.get();
  state_.in_streams[index] = std::move(s);
  state_.in_stream_live.push_back(index);
  ++in_live_;
  // Every write of the stream completes here with remote CQ data (FI_RX_CQ_DATA providers
  // consume a posted receive instead): its first grant is what the shared room allows now,
  // perhaps nothing (it asks once it has something to send, and waits for room).
  (void)regrant(*out, true);
  return out;
}

void Streams::erase_in(InStream& s) {
  hold_room(s, 0);
  copies_inflight_ -= std::min(copies_inflight_, s.copies.size());
  pool::Peer* peer = s.peer;
  const CommId via = s.via;
  const uint16_t index = s.index;
  state_.in_stream_gen[index] = static_cast<uint8_t>((state_.in_stream_gen[index] + 1) & 0xf);
  state_.in_streams[index].reset();  // destroys s
  auto& live = state_.in_stream_live;
  if (auto it = std::find(live.begin(), live.end(), index); it != live.end()) {
    *it = live.back();
    live.pop_back();
  }
  if (in_live_ > 0) --in_live_;
  state_.in_stream_free.push_back(index);
  if (CommState* c = state_.comm(via)) state_.release(*c);
  state_.unref(peer);
  feed_starved();  // (its room came back)
}

void Streams::on_request(const Message& m) {
  const MsgHeader& h = m.h;
  rail::RailEndpoint* ep = m.ep;
  auto req = decode_conn_request(m.body, m.len);
  if (!req || req->body.device_token != h.aux || req->body.nonce != h.aux2) {
    state_.miss();
    XPORT_LOG(warn, "dropping a window request: ",
              req ? "its header and body disagree" : req.status().to_string());
    return;
  }
  pool::Peer* peer = nullptr;
  pool::Channel* reply = nullptr;
  CommId via;
  if (state_.connected_endpoints()) {
    pool::Channel* ch = ep != nullptr && ep->has_endpoint()
                            ? state_.pool->by_fid(&ep->endpoint().get()->fid)
                            : nullptr;
    // A stream over a connection lives with a communicator on it (its failure is theirs).
    CommState* c = nullptr;
    if (ch != nullptr) {
      state_.comms->for_each([&](uint16_t, CommState& k) {
        if (c == nullptr && k.connection == ch && k.phase == Phase::ready) c = &k;
      });
    }
    if (c == nullptr) {
      state_.miss();
      return;
    }
    peer = c->peer;
    reply = ch;
    via = c->id;
  } else {
    peer = state_.peer_for(req->body.device_token);
    if (peer->closed) {
      state_.miss();  // a device of this process that closed sends nothing: a forgery
      return;
    }
  }
  state_.ref(peer);
  uint8_t refusal = 0;
  if (!state_.connected_endpoints()) {
    if (peer->dead) {  // a device given up on asks again: it is alive
      peer->dead = false;
      peer->death.clear();
    }
    Status paths = state_.set_paths(*peer, req->rails);
    if (!paths.ok() || peer->paths.empty()) {
      XPORT_LOG(info, "refusing a window stream: ", paths.to_string());
      refusal = static_cast<uint8_t>(paths.code() == Code::resource ? WindowRefusal::peers
                                                                    : WindowRefusal::bad);
      reply = state_.refusal_channel(*peer, req->rails);
    } else {
      reply = peer->paths[0].control;
      state_.release_knock(*peer, ep, req->rails);
    }
  }
  peer->last_heard = Clock::now();
  if (refusal == 0 && h.slot != state_.cq_data_bytes) {
    refusal = static_cast<uint8_t>(WindowRefusal::bad);  // another CQ data layout
  }
  InStream* s = nullptr;
  bool repeated_request = false;
  if (refusal == 0) {
    // A request sent again (its answer, or itself, went on a rail that went down since): the
    // stream made for it is the answer.
    for (uint16_t index : state_.in_stream_live) {
      InStream* in = state_.in_streams[index].get();
      if (in != nullptr && in->peer == peer && in->nonce == h.aux2 &&
          in->initiator == h.src_comm && in->initiator_gen == (h.src_gen & 0xf)) {
        s = in;
        repeated_request = true;
        break;
      }
    }
  }
  if (refusal == 0 && s == nullptr) {
    auto made = make_in(peer, via, reply);
    if (made) {
      s = *made;
    } else {
      XPORT_LOG(info, "refusing a window stream: ", made.status().to_string());
      refusal = static_cast<uint8_t>(WindowRefusal::streams);
    }
  }
  MsgHeader a = window_header(MsgType::win_ack);
  a.dst_comm = h.src_comm;
  a.dst_gen = h.src_gen;
  a.aux = state_.device_token;
  a.aux2 = h.aux2;
  ConnAck ack;
  ack.body.nonce = h.aux2;
  ack.body.device_token = state_.device_token;
  ack.body.eager_max = static_cast<uint32_t>(state_.config.eager_max);
  ack.body.depth = 1;
  if (s != nullptr) {
    s->initiator = h.src_comm;
    s->initiator_gen = static_cast<uint8_t>(h.src_gen & 0xf);
    s->nonce = h.aux2;
    // 1 + the first grant (a repeated request's stream may have more since: told in win_done).
    a.seq = 1 + s->limit;
    a.length = s->span;
    a.slot = static_cast<uint16_t>(s->seq_bits);
    a.src_comm = s->index;
    a.src_gen = s->gen;
    auto local = local_addresses(*peer);
    if (local) {
      ack.rails = std::move(local).value();
    } else {
      XPORT_LOG(info, "refusing a window stream: ", local.status().to_string());
      a.seq = 0;
      a.slot = static_cast<uint8_t>(WindowRefusal::peers);
      if (!repeated_request) erase_in(*s);
      s = nullptr;
    }
  } else {
    a.slot = refusal;
  }
  std::vector<uint8_t> bytes = encode_conn_ack(ack);
  if (reply != nullptr) {
    CommState* owner = state_.comm(via);
    Status st = state_.control->send(reply, a, &bytes, owner, Dependent{},
                                     owner == nullptr ? peer : nullptr);
    if (!st.ok() && s != nullptr && !repeated_request) erase_in(*s);
  } else if (s != nullptr && !repeated_request) {
    erase_in(*s);
  }
  state_.unref(peer);
}

void Streams::reply(InStream& s, MsgHeader& h, bool ack) {
  h.dst_comm = s.initiator;
  h.dst_gen = s.initiator_gen;
  h.src_comm = s.index;
  h.src_gen = s.gen;
  CommState* owner = state_.comm(s.via);
  pool::Channel* ch = s.reply;
  if (owner == nullptr && s.peer != nullptr && !s.peer->paths.empty()) {
    uint32_t cursor = 0;
    ch = state_.pick(s.peer->paths, cursor, s.peer).control;
  }
  if (ch == nullptr) return;
  if (ack) ++state_.counters.window_acks_sent;
  (void)state_.control->send(ch, h, nullptr, owner, Dependent{}, owner == nullptr ? s.peer : nullptr);
}

void Streams::mark(InStream& s, uint64_t seq) {
  // In order with nothing ahead (most: one rail, or the stream's numbers arriving in turn):
  // done moves past it, no flag to set and clear (and no division: credits need not be a
  // power of two).
  if (seq == s.done && s.ahead == 0) {
    s.done += 1;
    return;
  }
  s.landed[seq % s.span] = 1;
  s.ahead += 1;
  while (s.landed[s.done % s.span] != 0) {
    s.landed[s.done % s.span] = 0;
    s.ahead -= 1;
    s.done += 1;
  }
}

bool Streams::ready(const InStream& s, const MsgHeader& h) const {
  const uint8_t flags = static_cast<uint8_t>(h.slot >> 8);
  if ((flags & kWinStrong) && (flags & kWinPastSignals)) return past_signals_ready(s, h.seq);
  if (flags & kWinStrong) return s.done == h.seq;
  for (uint64_t q = std::max(h.length, s.done); q < h.seq; ++q) {
    if (s.landed[q % s.span] == 0) return false;
  }
  return true;
}

void Streams::on_write(uint64_t data, size_t len, uint32_t rail) {
  const bool wide = state_.cq_data_bytes >= 8;
  const WindowWrite w = decode_window_write(data, state_.cq_data_bytes, kWideSeqBits);
  InStream* s = in(w.stream, w.gen, wide);
  if (s == nullptr) {
    state_.miss(true);
    return;
  }
  const uint64_t seq = widen_window_seq(w.seq_low & seq_mask(s->seq_bits), s->done, s->seq_bits);
  // (no flag is set while none is ahead: mark())
  if (seq >= s->limit || (s->ahead != 0 && s->landed[seq % s->span] != 0)) {
    state_.miss();  // beyond the credits, or twice: not from this stream's initiator
    return;
  }
  if (s->peer != nullptr) s->peer->heard = true;  // (the health sweep reads the clock)
  if (len != 0) state_.rails[rail]->bytes_in().add(len);
  mark(*s, seq);
  if (!s->waiting.empty()) {
    size_t budget = state_.config.progress_batch;
    drain(*s, budget);
  }
  maybe_ack(*s);
}

void Streams::on_operation(const Message& m) {
  const MsgHeader& h = m.h;
  const uint8_t* body = m.body;
  const size_t len = m.len;
  InStream* s = in(h.dst_comm, h.dst_gen, true);
  if (s == nullptr) {
    state_.miss(true);
    return;
  }
  const bool strong = ((h.slot >> 8) & kWinStrong) != 0;
  if (h.seq >= s->limit || (!strong && h.length > h.seq)) {
    state_.miss();
    return;
  }
  if (h.seq < s->done || seen(*s, h.seq)) {
    repeated(*s, h);
    return;
  }
  if (s->peer != nullptr) s->peer->heard = true;  // (the health sweep reads the clock)
  WaitingOp op;
  op.h = h;
  if (h.type == static_cast<uint8_t>(MsgType::win_notify)) {
    op.payload.assign(body, body + len);
  } else {
    std::memcpy(&op.operand, body, std::min(len, sizeof(op.operand)));
  }
  if (ready(*s, h)) {
    execute(*s, op);
  } else {
    if (h.type == static_cast<uint8_t>(MsgType::win_signal)) {
      op.early = os_.signals().prepare(h, op.operand.operand);
    }
    s->waiting.push_back(std::move(op));
    note_work();
  }
  size_t budget = state_.config.progress_batch;
  drain(*s, budget);
  maybe_ack(*s);
}

void Streams::execute(InStream& s, WaitingOp& op) {
  if ((op.h.slot >> 8) & kWinAckNow) s.sync_wanted = std::max(s.sync_wanted, op.h.seq + 1);
  // Into staged GPU memory: done once the copy on to the GPU has finished (poll_copies).
  if (op.h.type == static_cast<uint8_t>(MsgType::win_signal)) {
    const Signals::Staging st = os_.signals().stage(s, op.h, op.operand.operand,
                                                   std::move(op.early));
    if (st == Signals::Staging::copying) {
      ++copies_inflight_;
      return;
    }
    if (st == Signals::Staging::done) {
      mark(s, op.h.seq);
      return;
    }
  }
  mark(s, op.h.seq);
  switch (static_cast<MsgType>(op.h.type)) {
    case MsgType::win_signal: os_.signals().apply(s, op.h, op.operand.operand); break;
    case MsgType::win_atomic: os_.atomics().apply(s, op.h, op.operand); break;
    case MsgType::win_notify: os_.transfers().apply(s, op.h, std::move(op.payload)); break;
    default: break;
  }
}

void Streams::drain(InStream& s, size_t& budget) {
  for (bool moved = true; moved && budget > 0 && !s.waiting.empty();) {
    moved = false;
    for (size_t i = 0; i < s.waiting.size() && budget > 0;) {
      if (!ready(s, s.waiting[i].h)) {
        ++i;
        continue;
      }
      WaitingOp op = std::move(s.waiting[i]);
      s.waiting.erase(s.waiting.begin() + static_cast<std::ptrdiff_t>(i));
      execute(s, op);
      --budget;
      moved = true;
    }
  }
}

void Streams::poll_copies() {
  // (by position: nothing here closes a stream; a pass copies no list)
  for (size_t i = 0; i < state_.in_stream_live.size(); ++i) {
    InStream* s = state_.in_streams[state_.in_stream_live[i]].get();
    if (s == nullptr || s->copies.empty()) continue;
    bool moved = false;
    for (size_t i = 0; i < s->copies.size();) {
      auto done = s->copies[i].second->done();
      if (done.ok() && !*done) {
        ++i;
        continue;
      }
      if (!done.ok()) {
        XPORT_LOG(error, "window operation ", s->copies[i].first, ": the copy on to GPU memory "
                  "failed: ", done.status().to_string());
        os_.signals().copy_failed(*s, s->copies[i].first);  // not applied: the initiator knows
      }
      mark(*s, s->copies[i].first);
      s->copies.erase(s->copies.begin() + static_cast<std::ptrdiff_t>(i));
      if (copies_inflight_ > 0) --copies_inflight_;
      moved = true;
    }
    if (moved) {
      size_t budget = state_.config.progress_batch;
      drain(*s, budget);
      maybe_ack(*s);
    }
  }
}

bool Streams::past_signals_ready(const InStream& s, uint64_t seq) const {
  // Every operation below it done, or a signal whose word update has begun (its copies run on
  // the GPU; updates of one word keep their order in the word's line). Publishes (a put's copy
  // on to the GPU) and anything not begun still hold it.
  for (uint64_t q = s.done; q < seq; ++q) {
    if (s.landed[q % s.span] != 0) continue;
    auto it = std::find_if(s.copies.begin(), s.copies.end(),
                           [q](const auto& c) { return c.first == q; });
    if (it == s.copies.end() || !it->second->word_update()) return false;
  }
  return true;
}

bool Streams::seen(const InStream& s, uint64_t seq) const {
  if (s.ahead != 0 && s.landed[seq % s.span] != 0) return true;
  for (const WaitingOp& op : s.waiting) {
    if (op.h.seq == seq) return true;
  }
  for (const auto& c : s.copies) {
    if (c.first == seq) return true;
  }
  return false;
}

void Streams::repeated(InStream& s, const MsgHeader& h) {
  state_.miss(true);  // (counted as traffic that was on its way: late, not misrouted)
  if (h.type != static_cast<uint8_t>(MsgType::win_atomic) || s.answers.empty()) return;
  const InStream::Answer& a = s.answers[h.seq % s.span];
  if (!a.valid || a.seq != h.seq) return;  // not applied yet: its answer will go then
  MsgHeader r = window_header(MsgType::win_result);
  r.seq = a.seq;
  r.aux = a.value;
  r.length = s.done;
  r.slot = a.status;
  reply(s, r);
}

void Streams::maybe_ack(InStream& s) {
  if (s.done == s.acked) return;
  // Room is short: what landed gives its room back at once, for the streams that wait.
  if (s.cq_reserved > s.limit - s.done && !state_.rx_cq_data_mode && pressed()) {
    hold_room(s, s.limit - s.done);
    feed_starved();
  }
  // Half its grant used since the last acknowledgement: the grant slides on (it grows only when
  // the initiator asks, held at its limit: kSyncWant).
  const bool busy = s.done - s.acked >= std::max<uint64_t>(1, s.grant / 2);
  if (!busy && !(s.sync_wanted > s.acked && s.done >= s.sync_wanted)) return;
  // Everything the initiator asked about is done (a quiet's answer) while the room is short:
  // its unused numbers are taken back with this answer, which it reads in the same pass (an
  // initiator that then stays out of libxport holds nothing another stream waits for).
  if (!busy && pressed() && can_take_back(s)) {
    take_back(s);
    return;
  }
  (void)regrant(s, false);
  ack_now(s);
}

void Streams::ack_now(InStream& s) {
  MsgHeader h = window_header(MsgType::win_done);
  h.seq = s.done;
  h.length = s.taking_back ? 0 : s.limit;  // (taking back: the answer sets the limit)
  h.aux = s.grant_epoch;
  s.acked = s.done;
  reply(s, h);
}

void Streams::on_sync(const Message& m) {
  const MsgHeader& h = m.h;
  InStream* s = in(h.dst_comm, h.dst_gen, true);
  if (s == nullptr) {
    state_.miss(true);
    return;
  }
  if (s->peer != nullptr) s->peer->heard = true;  // (the health sweep reads the clock)
  if (h.slot != 0) {
    on_credit_sync(*s, h);
    return;
  }
  s->sync_wanted = std::max(s->sync_wanted, h.seq);
  // Reached already: answered now, even if this mark went before (a win_sync sent again after
  // a rail went down, whose first answer may have been lost on it).
  if (h.seq <= s->done) {
    ack_now(*s);
    return;
  }
  maybe_ack(*s);
}

void Streams::on_close(const Message& m) {
  const MsgHeader& h = m.h;
  InStream* s = in(h.dst_comm, h.dst_gen, true);
  if (s == nullptr) {
    state_.miss(true);
    return;
  }
  erase_in(*s);
}

}  // namespace xport::proto
