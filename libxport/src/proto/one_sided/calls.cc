// OneSidedCalls: the one-sided calls of the public API (the public Window's): opening windows,
// issuing operations with the caller's local ranges checked, and the waits, each with its
// deadline.
#include "proto/one_sided/calls.hpp"

#include <atomic>

#include "core/log.hpp"

namespace xport::proto {

Status device_word(const char* what) {
  return core::error(Code::unsupported, what, ": the remote word is in GPU memory its owner "
                     "registered with the provider (XPORT_GPU_MEMORY=hmem): signals and "
                     "emulated atomics are applied by the owner's CPU, which cannot write GPU "
                     "memory, so they are refused on it (puts and gets are not); keep signal and "
                     "atomic words in host memory (docs/semantics.md, GPU memory)");
}

// The caller took an opener reference on the stream (openers) under the lock that found or made
// it: until this call turns it into a window, progress does not close the stream as unused (it
// did, between the two locks, when the answer came in between: "the stream vanished").
namespace {
constexpr const char* kNoAnswer =
    "window: the peer did not answer the window request before the deadline (is it alive and "
    "progressing?)";
}  // namespace

Status OneSidedCalls::wait_answers(std::span<const uint32_t> streams, Deadline deadline) {
  return wait_until(
      deadline,
      [&] {
        for (uint32_t id : streams) {
          if (id == 0) continue;
          OutStream* s = one_sided_.streams().find(id);
          if (s != nullptr && s->phase == StreamPhase::connecting) return false;
        }
        return true;
      },
      kNoAnswer);
}

Result<uint32_t> OneSidedCalls::finish_open(uint32_t stream, CommId comm, Deadline deadline) {
  return settle_open(stream, comm, wait_answers(std::span(&stream, 1), deadline));
}

Result<uint32_t> OneSidedCalls::settle_open(uint32_t stream, CommId comm, const Status& waited) {
  Lock l(state_);
  OutStream* s = one_sided_.streams().find(stream);
  if (s != nullptr && s->openers > 0) {
    s->openers -= 1;
    one_sided_.streams().note_work();  // the last opener gone: idle unless it has a window
  }
  if (s != nullptr && s->phase == StreamPhase::connecting) {
    one_sided_.streams().abandon(stream, waited);
    return waited;
  }
  if (s == nullptr) return core::error(Code::internal, "window: the stream vanished");
  if (s->phase == StreamPhase::failed) return s->error;
  CommState* c = comm ? state_.comm(comm) : nullptr;
  if (comm && c == nullptr) return core::error(Code::closed, "window: the communicator closed");
  return one_sided_.windows().make(*s, c);
}

Result<OutStream*> OneSidedCalls::stream_for(CommId comm) {
  CommState* c = state_.comm(comm);
  if (c == nullptr || c->user_closed) {
    return core::error(Code::invalid_argument, "window: communicator ", comm.index,
                       " is not open");
  }
  if (c->phase != Phase::ready) {
    return c->phase == Phase::failed
               ? c->error
               : core::error(Code::invalid_argument, "window: communicator is not connected");
  }
  XPORT_ASSIGN_OR_RETURN(OutStream * s, one_sided_.streams().for_comm(*c));
  s->openers += 1;  // (settle_open drops it)
  return s;
}

Result<OutStream*> OneSidedCalls::stream_for(const RemoteKey& key) {
  if (key.reach.empty()) {
    return core::error(Code::invalid_argument, "window: the key carries no address of the "
                       "device that exported it (exported over connected endpoints?)");
  }
  return stream_to(key.device_token, key.provider_hash, key.reach);
}

Result<OutStream*> OneSidedCalls::stream_to(uint64_t token, uint32_t provider_hash,
                                            const std::vector<uint8_t>& address) {
  XPORT_ASSIGN_OR_RETURN(OutStream * s,
                         one_sided_.streams().for_address(token, provider_hash, address));
  s->openers += 1;  // (settle_open drops it)
  return s;
}

Result<uint32_t> OneSidedCalls::open_window(CommId comm, Deadline deadline) {
  uint32_t stream = 0;
  {
    Lock l(state_);
    XPORT_ASSIGN_OR_RETURN(OutStream * s, stream_for(comm));
    stream = s->id;
  }
  return finish_open(stream, comm, deadline);
}

Result<uint32_t> OneSidedCalls::open_window_to(const std::vector<uint8_t>& bytes,
                                               Deadline deadline) {
  auto h = decode_handle(bytes);
  if (!h) return h.status().with_context("window");
  if (h->endpoint_type != 0) {
    return core::error(Code::unsupported, "window: the handle is for connected endpoints: open "
                       "windows over a communicator there");
  }
  uint32_t stream = 0;
  {
    Lock l(state_);
    XPORT_ASSIGN_OR_RETURN(OutStream * s,
                           stream_to(h->device_token, h->provider_hash, h->address));
    stream = s->id;
  }
  return finish_open(stream, CommId{}, deadline);
}

Result<uint32_t> OneSidedCalls::open_window_to(const RemoteKey& key, Deadline deadline) {
  uint32_t stream = 0;
  {
    Lock l(state_);
    XPORT_ASSIGN_OR_RETURN(OutStream * s, stream_for(key));
    stream = s->id;
  }
  return finish_open(stream, CommId{}, deadline);
}

std::vector<Result<uint32_t>> OneSidedCalls::open_windows(std::span<const OpenTarget> targets,
                                                          Deadline deadline) {
  std::vector<Result<uint32_t>> out;
  out.reserve(targets.size());
  std::vector<uint32_t> streams(targets.size(), 0);
  {
    Lock l(state_);  // every request goes now
    for (size_t i = 0; i < targets.size(); ++i) {
      Result<OutStream*> s = targets[i].key != nullptr ? stream_for(*targets[i].key)
                                                       : stream_for(targets[i].comm);
      if (s.ok()) streams[i] = (*s)->id;
      out.push_back(s.ok() ? Result<uint32_t>(0u) : Result<uint32_t>(s.status()));
    }
  }
  // One wait for every answer (targets sharing a stream share its answer).
  const Status st = wait_answers(streams, deadline);
  for (size_t i = 0; i < targets.size(); ++i) {
    if (streams[i] != 0) out[i] = settle_open(streams[i], targets[i].comm, st);
  }
  return out;
}

void OneSidedCalls::close_window(uint32_t id) {
  Lock l(state_);
  one_sided_.windows().close(id);
}

Result<uint64_t*> OneSidedCalls::local_word(const LocalBuffer& region, size_t offset,
                                            const char* what) {
  if (offset > region.view_length || region.view_length - offset < sizeof(uint64_t)) {
    return core::error(Code::invalid_argument, what, ": the word at offset ", offset,
                       " is outside the local region of ", region.view_length, " bytes");
  }
  auto* p = const_cast<uint8_t*>(region.view_base) + offset;
  XPORT_RETURN_IF_ERROR(memory_.check_local(region, p, sizeof(uint64_t), what));
  if ((*region.region)->cuda_device >= 0) {
    return core::error(Code::unsupported, what, ": the word at offset ", offset, " is in GPU "
                       "memory registered with the provider (XPORT_GPU_MEMORY=hmem), which this "
                       "CPU cannot read or write; keep signal and counter words in host memory "
                       "(docs/semantics.md, GPU memory)");
  }
  if (reinterpret_cast<uintptr_t>(p) % alignof(uint64_t) != 0) {
    return core::error(Code::invalid_argument, what, ": the word at offset ", offset, " (",
                       static_cast<void*>(p), ") is not 8-byte aligned");
  }
  return reinterpret_cast<uint64_t*>(p);
}

Result<Signals::Spec> OneSidedCalls::signal_spec(const SignalRequest& r, const char* what) {
  if (r.key->device) return device_word(what);
  Signals::Spec spec;
  spec.key = r.key;
  spec.offset = r.offset;
  spec.value = r.value;
  spec.op = r.op;
  spec.strong = r.strong;
  spec.past_signals = r.strong && r.past_signals;
  if (r.counter != nullptr) {
    XPORT_ASSIGN_OR_RETURN(spec.counter, local_word(*r.counter, r.counter_offset, what));
    spec.counter_region = *r.counter->region;
  }
  return spec;
}

Result<uint64_t> OneSidedCalls::rma(uint32_t window, fabric::OpType op, const LocalBuffer& local,
                                    size_t loff, const RemoteKey& remote, size_t roff, size_t len,
                                    const SignalRequest* signal) {
  const char* what = op == fabric::OpType::get ? "get" : signal != nullptr ? "put_signal" : "put";
  Lock l(state_);
  if (loff > local.view_length || len > local.view_length - loff) {
    return core::error(Code::invalid_argument, what, ": local range [", loff, ", +", len,
                       ") is outside the local region of ", local.view_length, " bytes");
  }
  uint8_t* p = const_cast<uint8_t*>(local.view_base) + loff;
  XPORT_RETURN_IF_ERROR(memory_.check_local(local, p, len, what));
  Signals::Spec spec;
  if (signal != nullptr) {
    XPORT_ASSIGN_OR_RETURN(spec, signal_spec(*signal, what));
  }
  Result<uint64_t> t = one_sided_.rma(window, op, *local.region, p, len, remote, roff,
                                      signal != nullptr ? &spec : nullptr);
  // A stream running short of credit: one pass reads the target's acknowledgements now, so
  // that a caller who only issues (no wait, or wait_local's quick answers) is not held back.
  if (t.ok() && one_sided_.short_of_credit(window)) driver_.progress_locked();
  return t;
}

Result<uint64_t> OneSidedCalls::put(uint32_t window, const LocalBuffer& local, size_t loff,
                                    const RemoteKey& remote, size_t roff, size_t len,
                                    const SignalRequest* signal) {
  if (signal == nullptr) {
    // A plain put (one stripe from host memory, most puts on one rail): one pass over its state
    // (OneSided::plain_put), instead of rma()'s checks, then its plan and piece, then the post,
    // then short_of_credit()'s second look at the stream. Anything not plain goes to rma()
    // (which takes the lock again: this one is released first).
    if (loff <= local.view_length && len <= local.view_length - loff && local.region != nullptr &&
        *local.region && memory_.owns(**local.region)) {
      Lock l(state_);
      bool short_after = false;
      if (std::optional<Ticket> t = one_sided_.plain_put(
              window, *local.region, const_cast<uint8_t*>(local.view_base) + loff, len, remote,
              roff, &short_after)) {
        // (as rma: the target's acknowledgements read now, while the stream has credit left)
        if (short_after) driver_.progress_locked();
        return *t;
      }
    }
  }
  return rma(window, fabric::OpType::put, local, loff, remote, roff, len, signal);
}

Result<OneSidedCalls::Published> OneSidedCalls::put_pieces(uint32_t window,
                                                           const LocalBuffer& local, size_t loff,
                                                           const RemoteKey& remote, size_t roff,
                                                           size_t len, const PutPieces& how) {
  const char* what = how.signal != nullptr ? "put_signal" : "put";
  Lock l(state_);
  if (loff > local.view_length || len > local.view_length - loff) {
    return core::error(Code::invalid_argument, what, ": local range [", loff, ", +", len,
                       ") is outside the local region of ", local.view_length, " bytes");
  }
  uint8_t* p = const_cast<uint8_t*>(local.view_base) + loff;
  XPORT_RETURN_IF_ERROR(memory_.check_local(local, p, len, what));
  Signals::Spec sig;
  if (how.signal != nullptr) {
    XPORT_ASSIGN_OR_RETURN(sig, signal_spec(*how.signal, what));
    sig.strong = true;  // behind every piece (and publish: only a strong signal waits for its copy)
  }
  Signals::Spec publish;
  publish.key = &remote;
  publish.offset = roff;
  publish.value = len;
  publish.op = WindowSignalOp::publish;
  publish.strong = true;
  OneSided::Pieces pieces;
  pieces.publish = how.publish ? &publish : nullptr;
  pieces.signal = how.signal != nullptr ? &sig : nullptr;
  pieces.piece = how.piece;
  pieces.gate = how.gate;
  pieces.in_place = how.in_place;
  XPORT_ASSIGN_OR_RETURN(auto t, one_sided_.put_pieces(window, *local.region, p, len, remote,
                                                       roff, pieces));
  if (one_sided_.short_of_credit(window)) driver_.progress_locked();  // (as rma)
  return Published{t[0], t[1], t[2]};
}

void OneSidedCalls::post_ready(uint32_t window) {
  Lock l(state_);
  one_sided_.post_ready(window);
}

std::optional<OwnShadow> OneSidedCalls::own_shadow(uint32_t window, const RemoteKey& remote,
                                                   size_t roff, size_t len) {
  Lock l(state_);
  return one_sided_.own_shadow(window, remote, roff, len);
}

void OneSidedCalls::attach_copy(uint32_t window, SourceGate& gate,
                                Result<std::unique_ptr<gpu::StagedCopyIn>> copy) {
  Lock l(state_);
  if (copy.ok()) {
    gate.copy = std::move(copy).value();
  } else {
    gate.advance(copy.status());
  }
  one_sided_.post_ready(window);
}

Result<uint64_t> OneSidedCalls::get(uint32_t window, const LocalBuffer& local, size_t loff,
                                    const RemoteKey& remote, size_t roff, size_t len) {
  return rma(window, fabric::OpType::get, local, loff, remote, roff, len, nullptr);
}

Result<uint64_t> OneSidedCalls::signal(uint32_t window, const SignalRequest& signal) {
  const char* what = signal.counter != nullptr ? "signal_counter" : "signal";
  Lock l(state_);
  XPORT_ASSIGN_OR_RETURN(Signals::Spec spec, signal_spec(signal, what));
  Result<uint64_t> t = one_sided_.signals().signal(window, spec, what);
  if (t.ok() && one_sided_.short_of_credit(window)) driver_.progress_locked();  // (as rma)
  return t;
}

Result<uint64_t> OneSidedCalls::atomic(uint32_t window, WindowAtomicOp op, const RemoteKey& remote,
                                       size_t roff, uint64_t operand, uint64_t compare,
                                       uint64_t* result) {
  if (static_cast<uint8_t>(op) >= kWindowAtomicOps) {
    return core::error(Code::invalid_argument, "atomic: unknown operation ", int(op));
  }
  if (remote.device) return device_word("atomic");
  Lock l(state_);
  Result<uint64_t> t =
      one_sided_.atomics().issue(window, op, remote, roff, operand, compare, result);
  if (t.ok() && one_sided_.short_of_credit(window)) driver_.progress_locked();  // (as rma)
  return t;
}

Result<uint64_t> OneSidedCalls::transfer(uint32_t window, const std::vector<TransferItem>& items,
                                         const std::vector<uint8_t>& notification,
                                         std::vector<uint64_t>* published) {
  Lock l(state_);
  std::vector<Transfers::Item> checked;
  checked.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const TransferItem& it = items[i];
    const std::string what = core::str("transfer item ", i);
    if (it.local == nullptr) {
      return core::error(Code::invalid_argument, what, ": no local Region");
    }
    const LocalBuffer& local = *it.local;
    if (it.local_offset > local.view_length || it.length > local.view_length - it.local_offset) {
      return core::error(Code::invalid_argument, what, ": local range [", it.local_offset, ", +",
                         it.length, ") is outside the local region of ", local.view_length,
                         " bytes");
    }
    uint8_t* p = const_cast<uint8_t*>(local.view_base) + it.local_offset;
    XPORT_RETURN_IF_ERROR(memory_.check_local(local, p, it.length, what.c_str()));
    checked.push_back({it.put ? fabric::OpType::put : fabric::OpType::get, *local.region, p,
                       it.length, it.remote, it.remote_offset, it.publish});
  }
  return one_sided_.transfers().post(window, checked, notification, published);
}

Status OneSidedCalls::fence(uint32_t window) {
  Lock l(state_);
  Status err;
  WindowState* w = one_sided_.windows().usable(window, "fence", &err);
  if (w == nullptr) return err;
  one_sided_.streams().fence(*one_sided_.streams().find(w->stream));
  return Status::success();
}

Status OneSidedCalls::quiet(uint32_t window, Deadline deadline) {
  Ticket target = 0;
  {
    Lock l(state_);
    WindowState* w = one_sided_.windows().find(window);
    if (w == nullptr || w->closed) {
      return core::error(Code::invalid_argument, "quiet: window ", window, " is not open");
    }
    // Only what was issued before this call: concurrent issuers cannot keep it waiting.
    target = w->next_ticket;
    if (one_sided_.windows().quiet_done(*w, target)) {
      return one_sided_.windows().take_error(*w, target);
    }
    // Delivery is known from the target's acknowledgement: ask for it now.
    if (OutStream* s = one_sided_.streams().find(w->stream)) {
      one_sided_.streams().request_ack(*s, s->next_seq);
    }
  }
  Status s = wait_until(
      deadline,
      [&] {
        WindowState* w = one_sided_.windows().find(window);
        if (w == nullptr) return true;
        if (OutStream* st = one_sided_.streams().find(w->stream); st != nullptr && st->held.empty()) {
          one_sided_.streams().request_ack(*st, st->next_seq);
        }
        return one_sided_.windows().quiet_done(*w, target);
      },
      "quiet");
  Lock l(state_);
  WindowState* w = one_sided_.windows().find(window);
  if (w == nullptr) return core::error(Code::closed, "quiet: the window closed meanwhile");
  if (!s.ok()) {
    uint64_t left = 0;
    w->tickets.for_each([&](Ticket t, const TicketState&) { left += t < target; });
    return core::error(Code::timeout, "quiet: ", left, " operations issued before it were not "
                       "yet delivered or applied at the deadline");
  }
  return one_sided_.windows().take_error(*w, target);
}

Status OneSidedCalls::wait_local(uint32_t window, uint64_t ticket, Deadline deadline, bool pass) {
  {
    // Locally complete already (an injected put, a sliding window's oldest): answered without
    // a progress pass, which on tcp;ofi_rxm is a system call per put. One such call in 16 (and
    // each that Window::wait_local sends with `pass`) makes its pass all the same while the
    // window has provider operations in flight: on a provider with manual progress, passes are
    // what move larger puts' bytes. With none in flight (injected puts only) there is nothing
    // for it to move: the target's credit grants, the other thing it read, are read by the put
    // that finds its stream short of them (rma).
    Lock l(state_);
    if (WindowState* w = one_sided_.windows().find(window);
        w != nullptr && !w->closed && ticket != 0 && ticket < w->next_ticket &&
        (w->free.size() == w->ops.size() || (!pass && (++quick_local_ & 15) != 0))) {
      // (local_state()'s answer 1, without building its Result: settled without error, or
      // locally done; a failed ticket's error is answered below, every time it is asked)
      const TicketState* ts = w->tickets.find(ticket);
      if (ts == nullptr ? Windows::settled_clean(*w, ticket)
                        : (ts->error.ok() && ts->local_done())) {
        if (ticket >= w->local_clear->load(std::memory_order_relaxed)) {
          one_sided_.windows().advance_clear(*w);
        }
        return Status::success();
      }
    }
  }
  Status outcome;
  Status s = wait_until(
      deadline,
      [&] {
        WindowState* w = one_sided_.windows().find(window);
        if (w == nullptr) {
          outcome = core::error(Code::invalid_argument, "wait_local: window ", window,
                                " is not open");
          return true;
        }
        // Most passes: outstanding, nothing failed, not yet locally complete (local_state's 0,
        // without building its Result).
        if (ticket != 0 && ticket < w->next_ticket) {
          if (const TicketState* ts = one_sided_.windows().ticket(*w, ticket);
              ts != nullptr && ts->error.ok() && !ts->local_done()) {
            return false;
          }
        }
        auto r = one_sided_.windows().local_state(*w, ticket, false);
        if (!r.ok()) {
          outcome = r.status();
          return true;
        }
        if (*r == 1) one_sided_.windows().advance_clear(*w);
        return *r == 1;
      },
      "wait_local");
  if (!s.ok()) {
    return core::error(Code::timeout, "wait_local: operation ", ticket, " on window ", window,
                       " was not locally complete at the deadline");
  }
  return outcome;
}

Result<int> OneSidedCalls::check(uint32_t window, uint64_t ticket) {
  driver_.refresh_links();
  Lock l(state_);
  driver_.progress_locked();
  WindowState* w = one_sided_.windows().find(window);
  if (w == nullptr || w->closed) {
    return core::error(Code::invalid_argument, "check: window ", window, " is not open");
  }
  Result<int> st = one_sided_.windows().local_state(*w, ticket, true);
  // Delivery is known from the target's acknowledgement, which it sends by itself only every
  // credits/2 operations: a caller polling check() on a lone put asks for it (once per range of
  // sequence numbers, as quiet does).
  if (st.ok() && *st == 0) {
    if (OutStream* s = one_sided_.streams().find(w->stream); s != nullptr && s->held.empty()) {
      one_sided_.streams().request_ack(*s, s->next_seq);
    }
  }
  return st;
}

Status OneSidedCalls::wait_word(uint32_t window, const LocalBuffer& region, size_t offset,
                                uint64_t value, Deadline deadline, const char* what) {
  uint64_t* word = nullptr;
  {
    Lock l(state_);
    XPORT_ASSIGN_OR_RETURN(word, local_word(region, offset, what));
    WindowState* w = one_sided_.windows().find(window);
    if (w == nullptr || w->closed) {
      return core::error(Code::invalid_argument, what, ": window ", window, " is not open");
    }
    // While someone waits, the window's peer is watched (keepalives): its loss ends the wait.
    w->waiters += 1;
  }
  Status lost;
  Status s = wait_until(
      deadline,
      [&] {
        if (reached(std::atomic_ref<uint64_t>(*word).load(std::memory_order_acquire), value)) {
          return true;
        }
        WindowState* w = one_sided_.windows().find(window);
        if (w != nullptr && w->peer != nullptr && w->peer->dead) {
          lost = core::error(Code::peer_lost, what, ": the window's peer is lost (",
                             w->peer->death, ")");
          return true;
        }
        OutStream* st = w != nullptr ? one_sided_.streams().find(w->stream) : nullptr;
        if (st != nullptr && st->phase == StreamPhase::failed) {  // its connection failed...
          lost = st->error.with_context(what);
          return true;
        }
        return false;
      },
      what);
  Lock l(state_);
  if (WindowState* w = one_sided_.windows().find(window); w != nullptr && w->waiters > 0) {
    w->waiters -= 1;
  }
  if (!lost.ok()) return lost;
  if (!s.ok()) {
    return core::error(Code::timeout, what, ": the word at offset ", offset, " is ",
                       std::atomic_ref<uint64_t>(*word).load(std::memory_order_acquire),
                       ", it did not reach ", value, " before the deadline");
  }
  return Status::success();
}

Result<uint64_t> OneSidedCalls::read_word(const LocalBuffer& region, size_t offset,
                                          const char* what) {
  XPORT_ASSIGN_OR_RETURN(uint64_t * word, local_word(region, offset, what));
  return std::atomic_ref<uint64_t>(*word).load(std::memory_order_acquire);
}

std::vector<std::vector<uint8_t>> OneSidedCalls::take_notifications(uint32_t window) {
  driver_.refresh_links();
  Lock l(state_);
  driver_.progress_locked();
  return one_sided_.transfers().take(window);
}

std::shared_ptr<const std::atomic<uint64_t>> OneSidedCalls::local_clear(uint32_t window) {
  Lock l(state_);
  WindowState* w = one_sided_.windows().find(window);
  if (w == nullptr || w->closed) return nullptr;
  return w->local_clear;
}

uint64_t OneSidedCalls::window_issued(uint32_t window) const {
  Lock l(state_);
  auto it = state_.windows.find(window);
  return it != state_.windows.end() ? it->second->issued : 0;
}

uint64_t OneSidedCalls::window_completed(uint32_t window) const {
  Lock l(state_);
  auto it = state_.windows.find(window);
  return it != state_.windows.end() ? it->second->completed : 0;
}

}  // namespace xport::proto
