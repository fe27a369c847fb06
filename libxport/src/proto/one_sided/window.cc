// Windows: lifetime, checks before issue, provider operations and tickets.
#include "proto/one_sided/window.hpp"

#include <algorithm>
#include <atomic>

#include "core/log.hpp"
#include "proto/one_sided/one_sided.hpp"

namespace xport::proto {

Result<uint32_t> Windows::make(OutStream& s, CommState* comm) {
  auto w = std::make_unique<WindowState>();
  w->id = state_.next_window++;
  w->peer = s.peer;
  w->paths = s.paths;
  w->stream = s.id;
  w->ops.resize(kOps);
  for (uint32_t i = 0; i < kOps; ++i) {
    w->ops[i].ctx.owner = w.get();
    w->ops[i].ctx.index = i;
    w->free.push_back(kOps - 1 - i);
  }
  state_.ref(s.peer);
  if (comm != nullptr) {
    w->comm = comm->id;
    state_.hold(*comm);
  }
  s.windows += 1;
  const uint32_t id = w->id;
  state_.windows[id] = std::move(w);
  return id;
}

WindowState* Windows::find(uint32_t id) const {
  if (id != 0 && id == state_.last_window_id) return state_.last_window;
  auto it = state_.windows.find(id);
  if (it == state_.windows.end()) return nullptr;
  state_.last_window_id = id;
  state_.last_window = it->second.get();
  return state_.last_window;
}

WindowState* Windows::ready(uint32_t id, OutStream** stream) const {
  WindowState* w = find(id);
  if (w == nullptr || w->closed || (w->peer != nullptr && w->peer->dead)) return nullptr;
  OutStream* s = os_.streams().find(w->stream);
  if (s == nullptr || s->phase != StreamPhase::ready) return nullptr;
  *stream = s;
  return w;
}

WindowState* Windows::usable(uint32_t id, const char* what, Status* err) {
  OutStream* ready_stream = nullptr;
  if (WindowState* w = ready(id, &ready_stream)) return w;
  // Not usable: which of ready()'s conditions failed, named.
  WindowState* w = find(id);
  if (w == nullptr || w->closed) {
    *err = core::error(Code::invalid_argument, what, ": window ", id, " is not open");
    return nullptr;
  }
  if (w->peer != nullptr && w->peer->closed) {
    *err = DeviceState::check_open(*w->peer, what);
    return nullptr;
  }
  if (w->peer != nullptr && w->peer->dead) {
    *err = core::error(Code::peer_lost, what, ": the window's peer is lost (", w->peer->death, ")");
    return nullptr;
  }
  // (what is left: the stream is not ready)
  const OutStream* s = os_.streams().find(w->stream);
  *err = s != nullptr && !s->error.ok()
             ? s->error.with_context(what)
             : core::error(Code::closed, what, ": the window's stream is closed");
  return nullptr;
}

void Windows::maybe_erase(WindowState& w) {
  if (!w.closed || w.busy()) return;
  const CommId comm = w.comm;
  pool::Peer* peer = w.peer;
  const uint32_t stream = w.stream;
  if (state_.last_window_id == w.id) state_.last_window_id = 0;
  state_.windows.erase(w.id);  // destroys w
  if (CommState* c = state_.comm(comm)) state_.release(*c);
  if (OutStream* s = os_.streams().find(stream)) os_.streams().release(*s);
  state_.unref(peer);
}

void Windows::close(uint32_t id) {
  WindowState* w = find(id);
  if (w == nullptr) return;
  w->closed = true;
  w->local_clear->store(0, std::memory_order_release);
  maybe_erase(*w);
}

Status Windows::check_remote(const WindowState& w, const RemoteKey& k, size_t off, size_t len,
                             const char* what) const {
  if (remote_fits(w, k, off, len)) return Status::success();
  // Which of remote_fits()'s conditions failed, named.
  if (w.peer != nullptr && k.device_token != w.peer->token) {
    return core::error(Code::invalid_argument, what, ": the remote key was exported by another "
                       "device (token ", std::hex, k.device_token, ") than this window's peer (",
                       w.peer->token, ")");
  }
  if (k.keys.empty()) return core::error(Code::invalid_argument, what, ": empty RemoteRegion");
  // (what is left: the range is outside the key's)
  return core::error(Code::invalid_argument, what, ": remote range [", off, ", +", len,
                     ") is outside the remote region of ", k.length, " bytes");
}

Status Windows::check_remote_word(const WindowState& w, const RemoteKey& k, size_t off,
                                  const char* what) const {
  XPORT_RETURN_IF_ERROR(check_remote(w, k, off, sizeof(uint64_t), what));
  // The word's address in the owner's process is base + off either way (keys carry it).
  if ((k.base + off) % alignof(uint64_t) != 0) {
    return core::error(Code::invalid_argument, what, ": the remote word at offset ", off,
                       " (address 0x", std::hex, k.base + off, ") is not 8-byte aligned");
  }
  return Status::success();
}

Result<Ticket> Windows::begin(WindowState& w, const char* what) {
  if (w.tickets.size() >= kMaxTickets) {
    return core::error(Code::again, what, ": ", kMaxTickets, " operations are not yet complete "
                       "on the window; call quiet()");
  }
  const Ticket t = w.next_ticket++;
  w.tickets.add(t);
  return t;
}

TicketState* Windows::ticket(WindowState& w, Ticket t) {
  return w.tickets.find(t);
}

Status Windows::reserve(WindowState& w, uint32_t n, Ticket t, fabric::OpType type, Piece& p,
                        const char* what) {
  if (w.free.size() < n) {
    return core::error(Code::again, what, ": ", kOps, " operations outstanding on the window; "
                       "call quiet()");
  }
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t index = w.free.back();
    w.free.pop_back();
    WindowOp& o = w.ops[index];
    o.busy = true;
    o.region = p.region;
    o.ctx.type = type;
    o.ctx.seq = t;
    o.ctx.stripe = i;
    o.uncounted = 0;
    p.ops[i] = index;
  }
  return Status::success();
}

void Windows::finish_op(WindowState& w, uint32_t index, const Status& st) {
  WindowOp& o = w.ops[index];
  if (!o.busy) return;
  const Ticket t = o.ctx.seq;
  o.busy = false;
  o.region.reset();  // (under the lock: released at once, as the engine's own)
  if (o.scratch != nullptr) {
    if (auto* ep = static_cast<rail::RailEndpoint*>(o.scratch->ctx.owner)) {
      ep->atomic_slots()->give_back(o.scratch);
    }
    o.scratch = nullptr;
  }
  o.result = nullptr;
  if (o.uncounted != 0) {
    if (OutStream* s = os_.streams().find(w.stream); s != nullptr && s->uncounted_inflight > 0) {
      s->uncounted_inflight -= 1;
    }
    o.uncounted = 0;
  }
  w.completed += 1;
  w.free.push_back(index);
  if (TicketState* ts = ticket(w, t)) {
    if (ts->local_left > 0) ts->local_left -= 1;
    if (!st.ok()) fail(w, t, st);
    settle(w, t);
  }
}

void Windows::piece_sent(WindowState& w, Ticket t) {
  if (TicketState* ts = ticket(w, t)) {
    if (ts->local_left > 0) ts->local_left -= 1;
    settle(w, t);
  }
}

void Windows::record_failure(WindowState& w, Ticket t, const Status& why) {
  // Kept for check() and wait_local() (quiet() reports first_error): the newest kMaxFailed.
  w.failed.emplace(t, why);
  w.failures += 1;
  if (w.failed.size() > kMaxFailed) {
    w.forgotten = std::max(w.forgotten, w.failed.begin()->first);
    w.failed.erase(w.failed.begin());
  }
}

void Windows::fail(WindowState& w, Ticket t, const Status& why) {
  TicketState* ts = ticket(w, t);
  if (ts == nullptr) return;
  lower_clear(w, t);
  if (ts->error.ok()) ts->error = why;
  if (w.first_error.ok()) w.first_error = why;
}

void Windows::fail_late(WindowState& w, Ticket t, const Status& why) {
  if (ticket(w, t) != nullptr) {
    fail(w, t, why);
    return;
  }
  if (t == 0 || t >= w.next_ticket || !settled_clean(w, t)) return;  // (failed already)
  lower_clear(w, t);
  record_failure(w, t, why);
  if (w.first_error.ok()) w.first_error = why;
}

void Windows::settle(WindowState& w, Ticket t) {
  TicketState* found = w.tickets.find(t);
  if (found == nullptr) return;
  TicketState& ts = *found;
  if (!ts.local_done() || ts.results_left > 0) return;
  if (ts.error.ok()) {
    const OutStream* s = os_.streams().find(w.stream);
    const uint64_t done = s != nullptr ? s->done : 0;
    if (ts.need_seq > done) return;  // not yet delivered / applied at the target
    if (ts.counter != nullptr) {
      // The counter counts remote completion: the caller waits on it (wait_counter).
      std::atomic_ref<uint64_t>(*ts.counter).fetch_add(1, std::memory_order_release);
    }
  } else {
    record_failure(w, t, ts.error);
  }
  w.tickets.erase(t);
  maybe_erase(w);
}

void Windows::on_stream(OutStream& s) {
  // One sweep per window: tickets that only waited for the target's count (most: puts, gets,
  // signals) leave at once, their counters counted; failed ones go through settle(), which
  // records their error. (By id afterwards: settling and erasing may erase a closed window.)
  std::vector<std::pair<uint32_t, Ticket>> failed;
  std::vector<uint32_t> closed;
  for (auto& [id, wp] : state_.windows) {
    WindowState& w = *wp;
    if (w.stream != s.id || w.tickets.empty()) continue;
    const uint32_t wid = id;
    w.tickets.erase_if([&](Ticket t, TicketState& ts) {
      if (!ts.error.ok()) {
        failed.emplace_back(wid, t);
        return false;
      }
      if (ts.need_seq > s.done || !ts.local_done() || ts.results_left > 0) return false;
      if (ts.counter != nullptr) {
        // The counter counts remote completion: the caller waits on it (wait_counter).
        std::atomic_ref<uint64_t>(*ts.counter).fetch_add(1, std::memory_order_release);
      }
      return true;
    });
    if (w.closed) {
      closed.push_back(id);
    } else {
      advance_clear(w);
    }
  }
  for (auto [id, t] : failed) {
    if (WindowState* w = find(id)) settle(*w, t);
  }
  for (uint32_t id : closed) {
    if (WindowState* w = find(id)) maybe_erase(*w);
  }
}

void Windows::advance_clear(WindowState& w) {
  if (w.closed) return;
  uint64_t c = w.local_clear->load(std::memory_order_relaxed);
  if (c == 0) return;  // (closed, or the device shut down)
  const uint64_t start = c;
  while (c < w.next_ticket) {
    if (const TicketState* ts = w.tickets.find(c)) {
      if (!ts->error.ok() || !ts->local_done()) break;
    } else if (!settled_clean(w, c)) {
      break;  // settled with an error (reported for as long as the window lives)
    }
    ++c;
  }
  if (c != start) w.local_clear->store(c, std::memory_order_release);
}

bool Windows::quiet_done(const WindowState& w, Ticket target) const {
  return w.tickets.empty() || w.tickets.lowest() >= target;
}

Status Windows::take_error(WindowState& w, Ticket target) {
  (void)target;
  Status e = std::move(w.first_error);
  w.first_error = Status();
  // Each failure is reported by one quiet; the tickets' own errors stay for check() and
  // wait_local(), which used to answer "done" once a quiet had cleared them.
  if (!e.ok() && w.failures > 1) {
    e = Status(e.code(), core::str(e.message(), " (", w.failures, " operations of window ", w.id,
                                   " failed since the previous quiet; check() and wait_local() "
                                   "name each)"));
  }
  w.failures = 0;
  return e;
}

Result<int> Windows::local_state(WindowState& w, Ticket t, bool remote) {
  if (t == 0 || t >= w.next_ticket) {
    return core::error(Code::invalid_argument, "ticket ", t, " was not issued on window ", w.id);
  }
  if (auto f = w.failed.find(t); f != w.failed.end()) return f->second;
  TicketState* ts = ticket(w, t);
  if (ts == nullptr) {
    if (settled_clean(w, t)) return 1;
    return core::error(Code::invalid_argument, "ticket ", t, " of window ", w.id, ": its outcome "
                       "is no longer known (the window keeps the errors of its last ", kMaxFailed,
                       " failed operations; ticket ", w.forgotten, " and those before it are "
                       "forgotten)");
  }
  // A failed ticket is reported once nothing of it is with the provider any more.
  if (!ts->error.ok()) return ts->local_left == 0 ? Result<int>(ts->error) : Result<int>(0);
  return remote ? 0 : (ts->local_done() ? 1 : 0);
}

}  // namespace xport::proto
