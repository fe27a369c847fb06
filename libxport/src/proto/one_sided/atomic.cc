// Atomics: native (FI_ATOMIC on one rail) or emulated (applied by the target's progress).
#include "proto/one_sided/atomic.hpp"

#include <atomic>

#include "core/log.hpp"
#include "proto/one_sided/one_sided.hpp"

namespace xport::proto {

void Atomics::register_handlers(Dispatch& d) {
  d.message<&Atomics::on_result>(MsgType::win_result, this);
}

void Atomics::negotiate() {
  state_.native_atomics = false;
  if (state_.config.atomics == EngineConfig::Atomics::emulated || !state_.caps.atomics_enabled) {
    return;
  }
  for (auto& r : state_.rails) {
    if (r->data() == nullptr || (r->domain().info()->caps & FI_ATOMIC) == 0 ||
        r->data()->atomic_slots() == nullptr || !r->data()->endpoint().atomics_valid()) {
      return;
    }
  }
  state_.native_atomics = true;
}

Result<Ticket> Atomics::issue(uint32_t window, WindowAtomicOp op, const RemoteKey& key,
                              size_t offset, uint64_t operand, uint64_t compare,
                              uint64_t* result) {
  const char* what = "atomic";
  Status err;
  WindowState* w = os_.windows().usable(window, what, &err);
  if (w == nullptr) return err;
  XPORT_RETURN_IF_ERROR(os_.windows().check_remote_word(*w, key, offset, what));
  if (state_.config.atomics == EngineConfig::Atomics::native && !state_.native_atomics) {
    return core::error(Code::unsupported, "atomic: XPORT_ATOMICS=native, but provider ",
                       state_.caps.provider, " does not perform 64-bit fetch and compare atomics "
                       "here (FI_ATOMIC ", state_.caps.atomics ? "offered" : "not offered", ")");
  }
  OutStream* s = os_.streams().find(w->stream);
  Piece p;
  p.window = w->id;
  p.op = static_cast<uint8_t>(op);
  p.word = Windows::remote_address(key, offset);
  p.word_key = key.keys[0];
  p.operand = operand;
  p.compare = compare;
  memory::Buffer* slot = nullptr;
  uint32_t rail = 0;
  if (state_.native_atomics) {
    // One rail for every atomic (the first in service both ways), so that all initiators'
    // atomics on a word meet in one NIC.
    const uint32_t rails = static_cast<uint32_t>(std::min(w->paths.size(), key.keys.size()));
    DeviceState::RailList healthy;
    if (state_.healthy_rails(rails, healthy, w->peer) == 0) {
      return state_.no_rail_error(rails, w->peer, what);
    }
    rail = healthy[0];
    slot = state_.rails[rail]->data()->atomic_slots()->take();
    if (slot == nullptr) {
      return core::error(Code::again, "atomic: ", rail::kAtomicSlots, " native atomics are in "
                         "flight on rail ", state_.rails[rail]->name(), "; complete some first");
    }
  }
  auto t = os_.windows().begin(*w, what);
  if (!t.ok()) {
    if (slot != nullptr) state_.rails[rail]->data()->atomic_slots()->give_back(slot);
    return t.status();
  }
  p.ticket = *t;
  TicketState& ts = *os_.windows().ticket(*w, *t);
  ts.fetch = op != WindowAtomicOp::add;
  ts.local_left = 1;
  if (slot != nullptr) {
    p.kind = PieceKind::native_atomic;
    p.raddr = p.word;
    p.keys[rail] = key.keys[rail];
    Status st = os_.windows().reserve(*w, 1, *t, fabric::OpType::atomic, p, what);
    if (!st.ok()) {
      state_.rails[rail]->data()->atomic_slots()->give_back(slot);
      w->tickets.erase(*t);
      return st;
    }
    WindowOp& o = w->ops[p.ops[0]];
    o.scratch = slot;
    o.result = result;
    o.atomic_op = p.op;
    o.ctx.rail = static_cast<uint8_t>(rail);
    o.uncounted = s->next_uncounted++;
    s->uncounted_inflight += 1;
    ++state_.counters.atomics_native;
  } else {
    // Emulated: applied at the target after every earlier operation of the stream (strong),
    // gets and native atomics included.
    p.kind = PieceKind::emulated_atomic;
    p.flags = kWinStrong;
    p.after.uncounted = s->next_uncounted;
    ts.results_left = 1;
    ts.result = result;
    ++state_.counters.atomics_emulated;
  }
  os_.streams().submit(*s, std::move(p));
  return *t;
}

Status Atomics::post_native(WindowState& w, Piece& p) {
  WindowOp& o = w.ops[p.ops[0]];
  const uint8_t rail = o.ctx.rail;
  auto* words = reinterpret_cast<uint64_t*>(o.scratch->data);
  words[0] = p.operand;
  words[1] = p.compare;
  words[2] = 0;
  return os_.post_atomic(w, p.ops[0], p.raddr, p.keys[rail]);
}

void Atomics::on_native_done(WindowOp& o, const Status& st) {
  if (st.ok() && o.result != nullptr && o.scratch != nullptr) {
    std::memcpy(o.result, o.scratch->data + 2 * sizeof(uint64_t), sizeof(uint64_t));
  }
}

void Atomics::send_emulated(OutStream& s, Piece& p, uint64_t seq) {
  OutStream::Awaiting& a = s.awaiting[seq % s.span];
  a = OutStream::Awaiting{seq, p.window, p.ticket, true};
  s.awaiting_count += 1;
  MsgHeader h{};
  h.type = static_cast<uint8_t>(MsgType::win_atomic);
  h.version = kWireVersion;
  h.seq = seq;
  h.slot = static_cast<uint16_t>(p.op | (p.flags << 8));
  h.aux = p.word;
  h.aux2 = p.word_key;
  const WindowOperand v{p.operand, p.compare};
  std::vector<uint8_t> body(sizeof(v));
  std::memcpy(body.data(), &v, sizeof(v));
  Status st = os_.streams().send_op(s, h, &body, /*awaiting=*/true);
  if (st.ok()) return;
  a.valid = false;
  s.awaiting_count -= 1;
  if (WindowState* w = os_.windows().find(p.window)) {
    if (TicketState* t = os_.windows().ticket(*w, p.ticket); t != nullptr && t->results_left > 0) {
      t->results_left -= 1;
    }
    os_.windows().fail(*w, p.ticket, st.with_context("atomic"));
  }
  os_.streams().fail(s, st.with_context("atomic"));
}

void Atomics::apply(InStream& in, const MsgHeader& h, const WindowOperand& v) {
  WindowStatus st = WindowStatus::ok;
  uint64_t* word = os_.signals().resolve(h.aux, h.aux2, &st);
  uint64_t old = 0;
  if (word != nullptr) {
    std::atomic_ref<uint64_t> a(*word);
    switch (static_cast<WindowAtomicOp>(h.slot & 0xff)) {
      case WindowAtomicOp::add:
      case WindowAtomicOp::fetch_add: old = a.fetch_add(v.operand, std::memory_order_acq_rel); break;
      case WindowAtomicOp::swap: old = a.exchange(v.operand, std::memory_order_acq_rel); break;
      case WindowAtomicOp::compare_swap:
        old = v.compare;
        a.compare_exchange_strong(old, v.operand, std::memory_order_acq_rel);
        break;
      case WindowAtomicOp::fetch: old = a.load(std::memory_order_acquire); break;
    }
    ++state_.counters.atomics_applied;
  }
  // Kept, in case the initiator asks again (its message went again after a rail went down).
  if (in.answers.empty()) in.answers.resize(in.span);
  in.answers[h.seq % in.span] = {h.seq, old, static_cast<uint8_t>(st), true};
  MsgHeader r{};
  r.type = static_cast<uint8_t>(MsgType::win_result);
  r.version = kWireVersion;
  r.seq = h.seq;
  r.aux = old;
  r.length = in.done;
  r.slot = static_cast<uint16_t>(st);
  os_.streams().reply(in, r);
}

void Atomics::on_result(const Message& m) {
  const MsgHeader& h = m.h;
  OutStream* s = os_.streams().find(h.dst_comm);
  if (s == nullptr || s->gen != (h.dst_gen & 0xf) || s->target != h.src_comm ||
      s->phase != StreamPhase::ready) {
    state_.miss(true);
    return;
  }
  const auto status = static_cast<uint8_t>(h.slot);
  OutStream::Awaiting& a = s->awaiting[h.seq % s->span];
  if (a.valid && a.seq == h.seq) {
    a.valid = false;
    s->awaiting_count -= 1;
    s->sent.answered(h.seq);
    s->sent.prune(s->done);
    if (WindowState* w = os_.windows().find(a.window)) {
      if (TicketState* t = os_.windows().ticket(*w, a.ticket)) {
        if (status == 0 && t->result != nullptr) *t->result = h.aux;
        if (t->results_left > 0) t->results_left -= 1;
      }
      if (status != 0) {
        os_.windows().fail(*w, a.ticket,
                           core::error(Code::invalid_argument, "atomic (operation ", h.seq,
                                       ") failed at the target: ", window_status_text(status)));
      }
      os_.windows().settle(*w, a.ticket);
    }
  } else if (status != 0) {
    // A signal the target could not apply: its ticket fails (check(), wait_local() and quiet()
    // report it; it used to reach quiet() alone, check() answering done).
    const Status why = core::error(Code::invalid_argument, "signal (operation ", h.seq,
                                   ") failed at the target: ", window_status_text(status));
    const OutStream::Awaiting& sig = s->signalled[h.seq % s->span];
    WindowState* w = sig.valid && sig.seq == h.seq ? os_.windows().find(sig.window) : nullptr;
    if (w != nullptr) {
      os_.windows().fail_late(*w, sig.ticket, why);
    } else {
      for (auto& [id, ws] : state_.windows) {
        if (ws->stream == s->id && ws->first_error.ok()) ws->first_error = why;
      }
    }
  }
  if ((s = os_.streams().find(h.dst_comm)) != nullptr) os_.streams().advance(*s, h.length);
}

}  // namespace xport::proto
