// Signals: issued alone or after a put's data, applied by the target in their turn.
#include "proto/one_sided/signal.hpp"

#include <atomic>

#include "core/log.hpp"
#include "gpu/staged_memory.hpp"
#include "proto/one_sided/one_sided.hpp"

namespace xport::proto {

Status Signals::check(const WindowState& w, const Spec& spec, const char* what) const {
  if (spec.key == nullptr) {
    return core::error(Code::invalid_argument, what, ": empty RemoteRegion for the signal");
  }
  if (spec.op == WindowSignalOp::publish) {
    return os_.windows().check_remote(w, *spec.key, spec.offset, spec.value, what);
  }
  return os_.windows().check_remote_word(w, *spec.key, spec.offset, what);
}

void Signals::fill(Piece& p, TicketState& t, const Spec& spec) const {
  p.op = static_cast<uint8_t>(spec.op);
  // Counters, and publishes (check() of a put into staged GPU memory waits for them), want the
  // target's acknowledgement as soon as they are done.
  const bool ack_now = spec.counter != nullptr || spec.op == WindowSignalOp::publish;
  p.flags = static_cast<uint8_t>((spec.strong ? kWinStrong : 0) | (ack_now ? kWinAckNow : 0) |
                                 (spec.strong && spec.past_signals ? kWinPastSignals : 0));
  p.word = Windows::remote_address(*spec.key, spec.offset);
  p.word_key = spec.key->keys[0];
  p.operand = spec.value;
  if (spec.counter != nullptr) {
    t.counter = spec.counter;
    t.counter_region = spec.counter_region;
  }
}

Result<Ticket> Signals::signal(uint32_t window, const Spec& spec, const char* what) {
  Status err;
  WindowState* w = os_.windows().usable(window, what, &err);
  if (w == nullptr) return err;
  XPORT_RETURN_IF_ERROR(check(*w, spec, what));
  OutStream* s = os_.streams().find(w->stream);
  XPORT_ASSIGN_OR_RETURN(Ticket t, os_.windows().begin(*w, what));
  submit(*w, *s, t, spec);
  return t;
}

void Signals::submit(WindowState& w, OutStream& s, Ticket t, const Spec& spec,
                     std::shared_ptr<SourceGate> gate, uint64_t gate_need) {
  TicketState& ts = *os_.windows().ticket(w, t);
  Piece p;
  p.window = w.id;
  p.ticket = t;
  p.kind = PieceKind::signal;
  fill(p, ts, spec);
  // Strong: behind every earlier operation to the peer, gets and native atomics included (the
  // target orders the counted ones; these are waited for here).
  if (spec.strong) p.after.uncounted = s.next_uncounted;
  p.gate = std::move(gate);
  p.gate_need = gate_need;
  ts.local_left += 1;  // (a put's publishes share one ticket: put_pieces)
  os_.streams().submit(s, std::move(p));
}

void Signals::send(OutStream& s, const Piece& p, uint64_t seq, uint64_t cover_from) {
  MsgHeader h{};
  h.type = static_cast<uint8_t>(MsgType::win_signal);
  h.version = kWireVersion;
  h.seq = seq;
  h.length = (p.flags & kWinStrong) ? 0 : cover_from;
  h.slot = static_cast<uint16_t>(p.op | (p.flags << 8));
  h.aux = p.word;
  h.aux2 = p.word_key;
  std::vector<uint8_t> body(sizeof(uint64_t));
  std::memcpy(body.data(), &p.operand, sizeof(uint64_t));
  s.signalled[seq % s.span] = OutStream::Awaiting{seq, p.window, p.ticket, true};
  Status st = os_.streams().send_op(s, h, &body);
  if (st.ok()) return;
  // Its number is taken: without it the target's count would stop there.
  if (WindowState* w = os_.windows().find(p.window)) {
    os_.windows().fail(*w, p.ticket, st.with_context("signal"));
  }
  os_.streams().fail(s, st.with_context("signal"));
}

uint64_t* Signals::resolve(uint64_t address, uint64_t key, WindowStatus* status) const {
  memory::RegionState* r = state_.registry->find_by_key(key);
  if (r == nullptr) {
    *status = WindowStatus::no_region;
    return nullptr;
  }
  uint8_t* p = r->local_bytes(address, sizeof(uint64_t));
  if (p == nullptr) {
    *status = WindowStatus::outside;
    return nullptr;
  }
  if (reinterpret_cast<uintptr_t>(p) % alignof(uint64_t) != 0) {
    *status = WindowStatus::unaligned;
    return nullptr;
  }
  *status = WindowStatus::ok;
  return reinterpret_cast<uint64_t*>(p);
}

void Signals::copy_failed(InStream& in, uint64_t seq) {
  MsgHeader h{};
  h.seq = seq;
  answer(in, h, WindowStatus::no_region);
}

void Signals::answer(InStream& in, const MsgHeader& h, WindowStatus status) {
  MsgHeader r{};
  r.type = static_cast<uint8_t>(MsgType::win_result);
  r.version = kWireVersion;
  r.seq = h.seq;
  r.length = in.done;
  r.slot = static_cast<uint16_t>(status);
  os_.streams().reply(in, r);
}

std::unique_ptr<gpu::StagedCopy> Signals::prepare(const MsgHeader& h, uint64_t operand) {
  const auto op = static_cast<WindowSignalOp>(h.slot & 0xff);
  if (op == WindowSignalOp::publish) return nullptr;
  memory::RegionState* r = state_.registry->find_by_key(h.aux2);
  if (r == nullptr || r->staged == nullptr) return nullptr;
  WindowStatus st = WindowStatus::ok;
  uint64_t* word = resolve(h.aux, h.aux2, &st);
  if (word == nullptr) return nullptr;  // (stage() answers why, in its turn)
  // (the registration may start inside the shadow: a sub-range sharing it, api/staging.cc)
  auto c = r->staged->start_word_update(r->staged->device_of(word),
                                        op == WindowSignalOp::set ? gpu::WordOp::set
                                                                  : gpu::WordOp::add,
                                        operand, true);
  return c.ok() ? std::move(c).value() : nullptr;  // (failed: stage() starts it again)
}

Signals::Staging Signals::stage(InStream& in, const MsgHeader& h, uint64_t operand,
                                std::unique_ptr<gpu::StagedCopy> early) {
  const auto op = static_cast<WindowSignalOp>(h.slot & 0xff);
  memory::RegionState* r = state_.registry->find_by_key(h.aux2);
  if (r == nullptr || r->staged == nullptr) return Staging::none;  // applied as host memory
  const uint64_t len = op == WindowSignalOp::publish ? operand : sizeof(uint64_t);
  uint8_t* at = r->local_bytes(h.aux, len);
  if (at == nullptr) return Staging::none;  // apply() answers the initiator with why
  uint8_t* gpu = r->staged->device_of(at);  // (r may start inside the shadow)
  Result<std::unique_ptr<gpu::StagedCopy>> copy = Status(Code::internal, "no copy");
  if (op != WindowSignalOp::publish) {
    WindowStatus st = WindowStatus::ok;
    if (resolve(h.aux, h.aux2, &st) == nullptr) return Staging::none;  // (as above)
    // On the GPU word itself: an add reads it first, so a kernel's own write to the word (a
    // reset) counts; updates of one word go one after the other. The shadow word (what the host
    // reads) gets the result on the way.
    if (early != nullptr) {
      early->release();
      copy = std::move(early);
    } else {
      copy = r->staged->start_word_update(
          gpu, op == WindowSignalOp::set ? gpu::WordOp::set : gpu::WordOp::add, operand);
    }
    if (copy.ok()) ++state_.counters.signals_applied;
  } else {
    if (len == 0) return Staging::done;
    copy = r->staged->start_copy_out({{gpu, len}});
  }
  if (!copy.ok()) {
    // The data is in the shadow but not on the GPU: fail the window rather than lie.
    XPORT_LOG(error, "window operation ", h.seq, ": copying ", len, " bytes on to GPU memory "
              "failed: ", copy.status().to_string());
    answer(in, h, WindowStatus::no_region);
    return Staging::done;
  }
  in.copies.emplace_back(h.seq, std::move(copy).value());
  return Staging::copying;
}

void Signals::apply(InStream& in, const MsgHeader& h, uint64_t operand) {
  if (static_cast<WindowSignalOp>(h.slot & 0xff) == WindowSignalOp::publish) return;
  WindowStatus st = WindowStatus::ok;
  uint64_t* word = resolve(h.aux, h.aux2, &st);
  if (word == nullptr) {
    // The initiator checked the word against the key it had: the region went since.
    XPORT_LOG(info, "window signal ", h.seq, " not applied: ",
              window_status_text(static_cast<uint8_t>(st)));
    answer(in, h, st);
    return;
  }
  // The waiter reads with acquire: the data this signal covers is visible before it.
  std::atomic_ref<uint64_t> a(*word);
  if (static_cast<WindowSignalOp>(h.slot & 0xff) == WindowSignalOp::set) {
    a.store(operand, std::memory_order_release);
  } else {
    a.fetch_add(operand, std::memory_order_release);
  }
  ++state_.counters.signals_applied;
}

}  // namespace xport::proto
