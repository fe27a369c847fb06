// Window (xport/window.hpp): one-sided operations on a window the engine holds; staged GPU
// sources copied in the call, staged destinations copied out before they are reported done.
#include <algorithm>
#include <optional>
#include <thread>

#include "api/access.hpp"
#include "core/format.hpp"
#include "core/knob.hpp"

namespace xport {

using api::Access;
using gpu::StagedArrivals;
using gpu::StagedSource;

Result<std::unique_ptr<Window>> Window::open(const SendComm& comm, Deadline deadline) {
  const auto& e = Access::engine(comm);
  XPORT_ASSIGN_OR_RETURN(uint32_t id, e->one_sided().open_window(Access::id(comm), deadline));
  return Access::window(e, id);
}

Result<std::unique_ptr<Window>> Window::open(const RecvComm& comm, Deadline deadline) {
  const auto& e = Access::engine(comm);
  XPORT_ASSIGN_OR_RETURN(uint32_t id, e->one_sided().open_window(Access::id(comm), deadline));
  return Access::window(e, id);
}

Result<std::unique_ptr<Window>> Window::open(Device& device, const ConnectionHandle& handle,
                                             Deadline deadline) {
  const auto& e = Access::engine(device);
  XPORT_ASSIGN_OR_RETURN(uint32_t id, e->one_sided().open_window_to(handle, deadline));
  return Access::window(e, id);
}

Result<std::unique_ptr<Window>> Window::open(Device& device, const RemoteRegion& key,
                                             Deadline deadline) {
  const proto::RemoteKey* k = Access::key(key);
  if (k == nullptr) {
    return core::error(Code::invalid_argument, "window: empty RemoteRegion");
  }
  const auto& e = Access::engine(device);
  XPORT_ASSIGN_OR_RETURN(uint32_t id, e->one_sided().open_window_to(*k, deadline));
  return Access::window(e, id);
}

namespace {
using Opened = std::vector<Result<std::unique_ptr<Window>>>;

// The engine's answers as windows, each target's error where it has one.
Opened windows_of(const std::shared_ptr<proto::Engine>& e, std::vector<Result<uint32_t>> ids,
                  Opened out, const std::vector<size_t>& at) {
  for (size_t i = 0; i < ids.size(); ++i) {
    out[at[i]] = ids[i].ok() ? Result<std::unique_ptr<Window>>(Access::window(e, *ids[i]))
                             : Result<std::unique_ptr<Window>>(ids[i].status());
  }
  return out;
}
}  // namespace

std::vector<Result<std::unique_ptr<Window>>> Window::open_all(
    std::span<const SendComm* const> comms, Deadline deadline) {
  Opened out;
  std::vector<proto::OneSidedCalls::OpenTarget> targets;
  std::vector<size_t> at;
  const std::shared_ptr<proto::Engine>* engine = nullptr;
  for (size_t i = 0; i < comms.size(); ++i) {
    out.emplace_back(core::error(Code::invalid_argument, "window: communicator ", i, " is null"));
    if (comms[i] == nullptr) continue;
    const auto& e = Access::engine(*comms[i]);
    if (engine == nullptr) engine = &e;
    if (e != *engine) {
      out[i] = core::error(Code::invalid_argument, "window: communicator ", i,
                           " is of another device than the first (one device per call)");
      continue;
    }
    targets.push_back({Access::id(*comms[i]), nullptr});
    at.push_back(i);
  }
  if (engine == nullptr) return out;
  return windows_of(*engine, (*engine)->one_sided().open_windows(targets, deadline),
                    std::move(out), at);
}

std::vector<Result<std::unique_ptr<Window>>> Window::open_all(
    Device& device, std::span<const RemoteRegion* const> keys, Deadline deadline) {
  Opened out;
  std::vector<proto::OneSidedCalls::OpenTarget> targets;
  std::vector<size_t> at;
  for (size_t i = 0; i < keys.size(); ++i) {
    const proto::RemoteKey* k = keys[i] != nullptr ? Access::key(*keys[i]) : nullptr;
    out.emplace_back(core::error(Code::invalid_argument, "window: key ", i, " is empty"));
    if (k == nullptr) continue;
    targets.push_back({proto::CommId{}, k});
    at.push_back(i);
  }
  const auto& e = Access::engine(device);
  return windows_of(e, e->one_sided().open_windows(targets, deadline), std::move(out), at);
}

Window::~Window() {
  if (engine_) engine_->one_sided().close_window(id_);
}

namespace {
Status no_key(const char* what) {
  return core::error(Code::invalid_argument, what, ": empty RemoteRegion");
}

// The piece size of a `len`-byte put from or into staged GPU memory (XPORT_GPU_STAGING_PIECE:
// at least two pieces, at most kMaxPieces, whole 4 KiB granules), or 0: one piece.
constexpr size_t kMaxPieces = 16;
size_t piece_size(size_t len) {
  const auto knob = static_cast<size_t>(core::knob_int(core::KnobId::gpu_staging_piece));
  if (knob == 0 || len < 2 * knob) return 0;
  const size_t count = std::min(kMaxPieces, (len + knob - 1) / knob);
  const size_t piece = (len + count - 1) / count;
  return (piece + 4095) / 4096 * 4096;
}

// The tickets of a put in pieces that check() of the put's waits for.
void follow(StagedArrivals& staged, const proto::OneSidedCalls::Published& t) {
  if (t.publish != 0) staged.follow(t.put, t.publish);
  if (t.signal != 0) staged.follow(t.put, t.signal);
}

// A put's source copy, waited for in the call (SourceRead::in_call): each piece goes as it lands.
// No lock is held (the copy engine works meanwhile). A copy that fails, or that has not finished
// within XPORT_TIMEOUT_MS (a GPU that hangs), fails the gate: what has not gone yet never goes,
// and the put's ticket fails with why; the call returns either way.
void wait_for_source(proto::Engine& e, uint32_t window, proto::SourceGate& gate,
                     gpu::StagedCopyIn& copy, size_t len) {
  const Deadline deadline = Deadline::from_knob();
  while (true) {
    if (gate.advance(copy.ready())) e.one_sided().post_ready(window);
    if (gate.failed.load(std::memory_order_relaxed) ||
        gate.ready.load(std::memory_order_relaxed) == len) {
      return;
    }
    if (deadline.expired()) {
      gate.advance(core::error(Code::timeout, "not finished within XPORT_TIMEOUT_MS (",
                               core::knob_int(core::KnobId::timeout_ms), " ms)"));
      e.one_sided().post_ready(window);
      return;
    }
    std::this_thread::yield();
  }
}

// A put from staged GPU memory into this device's own staged GPU memory (a window to itself: a
// GPU team's own rank): the source is copied straight into the destination's shadow, piece by
// piece, and only the publishes (each piece's copy on to the GPU) and the signal go through the
// window's stream, each gated on its piece's copy: no write, no staging bytes, no CPU copy of
// the data. The copy starts once the engine took the operation (refused: nothing was touched).
Result<Ticket> put_in_place(proto::Engine& e, uint32_t window, StagedArrivals& staged,
                            const Region& local, const uint8_t* src, const proto::RemoteKey& k,
                            size_t loff, size_t roff, size_t len, proto::OwnShadow into,
                            const proto::OneSidedCalls::SignalRequest* signal, const char* what,
                            SourceRead read) {
  proto::OneSidedCalls::PutPieces how;
  how.publish = true;
  how.signal = signal;
  how.piece = piece_size(len);
  how.in_place = true;
  auto gate = std::make_shared<proto::SourceGate>();
  gate->what = what;
  how.gate = gate;
  XPORT_ASSIGN_OR_RETURN(auto t, e.one_sided().put_pieces(window, Access::local(local), loff, k,
                                                          roff, len, how));
  follow(staged, t);
  auto copy = Access::staged(local)->start_copy_in_to(into.bytes, src, len, how.piece);
  if (copy.ok()) (*copy)->keep_until_done(std::move(into.keep));
  if (read == SourceRead::until_local || !copy.ok()) {
    // (failed to start: the gate fails, and what waits on it is dropped with the reason)
    e.one_sided().attach_copy(window, *gate, std::move(copy));
    return t.put;
  }
  wait_for_source(e, window, *gate, **copy, len);
  return t.put;
}

// A put from or into staged GPU memory. Into a peer's staged GPU memory, each piece is followed
// by a publish: a strong signal-like message the target applies by copying the piece's range
// from its shadow on to its GPU (proto/signal.cc), so that quiet, strong signals and check()
// cover the copy. A large one goes in pieces: its source's copy into staging bytes is started
// piece by piece, the engine takes the whole operation at once (or nothing: Code::again), and
// each write piece is posted as its bytes land, while the call waits for the last of them (the
// caller may reuse its buffer when the call returns); the target copies each piece on as it
// lands. A signal goes strong behind every piece; check() of the put's ticket waits for the
// publishes and the signal.
// With SourceRead::until_local the gate holds the source's copy, which progress polls (its
// pieces wait in the stream meanwhile), and the call returns without waiting for it.
// From staged GPU memory into this device's own (own_shadow): put_in_place instead.
Result<Ticket> staged_put(proto::Engine& e, uint32_t window, StagedArrivals& staged,
                          const Region& local, size_t loff, const proto::RemoteKey& k,
                          size_t roff, size_t len,
                          const proto::OneSidedCalls::SignalRequest* signal, const char* what,
                          SourceRead read) {
  if (const uint8_t* src = Access::gpu_range(local, loff, len); src != nullptr && k.staged) {
    if (std::optional<proto::OwnShadow> into = e.one_sided().own_shadow(window, k, roff, len)) {
      return put_in_place(e, window, staged, local, src, k, loff, roff, len, std::move(*into),
                          signal, what, read);
    }
  }
  proto::OneSidedCalls::PutPieces how;
  how.publish = k.staged;
  how.signal = signal;
  how.piece = piece_size(len);
  if (read == SourceRead::until_local && Access::staged(local)) {
    XPORT_ASSIGN_OR_RETURN(std::optional<gpu::PiecedSource> src,
                           Access::stage_pieces(local, loff, len, how.piece, what));
    if (src) {
      auto gate = std::make_shared<proto::SourceGate>();
      gate->what = what;
      gate->copy = std::move(src->copy);
      how.gate = gate;
      auto t = e.one_sided().put_pieces(window, src->bytes.local(), 0, k, roff, len, how);
      if (!t.ok()) {
        how.gate.reset();
        gate.reset();  // (src's bytes stay taken until its copy is done: keep_until_done)
        return t.status();
      }
      follow(staged, *t);
      return t->put;
    }
  }
  if (how.piece == 0) {
    XPORT_ASSIGN_OR_RETURN(std::optional<StagedSource> src, Access::stage(local, loff, len, what));
    const proto::LocalBuffer lb = src ? src->local() : Access::local(local);
    if (!k.staged) return e.one_sided().put(window, lb, src ? 0 : loff, k, roff, len, signal);
    XPORT_ASSIGN_OR_RETURN(auto t, e.one_sided().put_pieces(window, lb, src ? 0 : loff, k, roff,
                                                            len, how));
    follow(staged, t);
    return t.put;
  }
  XPORT_ASSIGN_OR_RETURN(std::optional<gpu::PiecedSource> src,
                         Access::stage_pieces(local, loff, len, how.piece, what));
  std::shared_ptr<proto::SourceGate> gate;
  if (src) {
    gate = std::make_shared<proto::SourceGate>();
    gate->what = what;
    how.gate = gate;
  }
  const proto::LocalBuffer lb = src ? src->bytes.local() : Access::local(local);
  // (refused: src's copy finishes before its bytes go back)
  XPORT_ASSIGN_OR_RETURN(auto t, e.one_sided().put_pieces(window, lb, src ? 0 : loff, k, roff,
                                                          len, how));
  follow(staged, t);
  if (src) wait_for_source(e, window, *gate, *src->copy, len);
  return t.put;
}

Status staged_remote(const char* what) {
  return core::error(Code::unsupported, what, ": the remote region is GPU memory its owner "
                     "stages through a host shadow; ", what, " from or on it is not supported "
                     "yet (puts and signals are: docs/semantics.md, GPU memory)");
}

proto::OneSidedCalls::SignalRequest signal_request(const proto::RemoteKey* key, size_t offset,
                                                   uint64_t value, SignalOp op, SignalOrder order) {
  proto::OneSidedCalls::SignalRequest r;
  r.key = key;
  r.offset = offset;
  r.value = value;
  r.op = op == SignalOp::set ? proto::WindowSignalOp::set : proto::WindowSignalOp::add;
  r.strong = order != SignalOrder::weak;
  r.past_signals = order == SignalOrder::after_data;
  return r;
}
}  // namespace

void Window::set_source_read(SourceRead read) {
  source_read_.store(read, std::memory_order_relaxed);
}

Result<Ticket> Window::put(const Region& local, size_t loff, const RemoteRegion& remote,
                           size_t roff, size_t len) {
  const proto::RemoteKey* k = Access::key(remote);
  if (k == nullptr) return no_key("put");
  if ((k->staged || Access::staged(local)) && len > 0) {
    return staged_put(*engine_, id_, *staged_, local, loff, *k, roff, len, nullptr, "put",
                      source_read_.load(std::memory_order_relaxed));
  }
  return engine_->one_sided().put(id_, Access::local(local), loff, *k, roff, len);
}

Result<Ticket> Window::get(const Region& local, size_t loff, const RemoteRegion& remote,
                           size_t roff, size_t len) {
  const proto::RemoteKey* k = Access::key(remote);
  if (k == nullptr) return no_key("get");
  if (k->staged) return staged_remote("get");
  XPORT_ASSIGN_OR_RETURN(Ticket t,
                         engine_->one_sided().get(id_, Access::local(local), loff, *k, roff, len));
  if (Access::staged(local)) {
    staged_->expect(t, {{Access::staged(local), static_cast<uint8_t*>(local.base()) + loff, len}});
  }
  return t;
}

Result<Ticket> Window::put_signal(const Region& local, size_t loff, const RemoteRegion& remote,
                                  size_t roff, size_t len, const RemoteRegion& signal,
                                  size_t soff, uint64_t value, SignalOp op, SignalOrder order) {
  const proto::RemoteKey* k = Access::key(remote);
  const proto::RemoteKey* sk = Access::key(signal);
  if (k == nullptr || sk == nullptr) return no_key("put_signal");
  if (sk->device) return proto::device_word("put_signal");  // before a staged put's publish goes out
  auto r = signal_request(sk, soff, value, op, order);
  if ((k->staged || Access::staged(local)) && len > 0) {
    return staged_put(*engine_, id_, *staged_, local, loff, *k, roff, len, &r, "put_signal",
                      source_read_.load(std::memory_order_relaxed));
  }
  return engine_->one_sided().put(id_, Access::local(local), loff, *k, roff, len, &r);
}

Result<Ticket> Window::put_signal_counter(const Region& local, size_t loff,
                                          const RemoteRegion& remote, size_t roff, size_t len,
                                          const RemoteRegion& signal, size_t soff, uint64_t value,
                                          const Region& counter, size_t coff, SignalOp op,
                                          SignalOrder order) {
  const proto::RemoteKey* k = Access::key(remote);
  const proto::RemoteKey* sk = Access::key(signal);
  if (k == nullptr || sk == nullptr) return no_key("put_signal_counter");
  if (sk->device) return proto::device_word("put_signal_counter");  // before a staged put's publish goes out
  auto r = signal_request(sk, soff, value, op, order);
  const proto::LocalBuffer c = Access::local(counter);
  r.counter = &c;
  r.counter_offset = coff;
  if ((k->staged || Access::staged(local)) && len > 0) {
    return staged_put(*engine_, id_, *staged_, local, loff, *k, roff, len, &r,
                      "put_signal_counter", source_read_.load(std::memory_order_relaxed));
  }
  return engine_->one_sided().put(id_, Access::local(local), loff, *k, roff, len, &r);
}

Result<Ticket> Window::signal(const RemoteRegion& signal, size_t soff, uint64_t value,
                              SignalOp op, SignalOrder order) {
  const proto::RemoteKey* sk = Access::key(signal);
  if (sk == nullptr) return no_key("signal");
  return engine_->one_sided().signal(id_, signal_request(sk, soff, value, op, order));
}

Result<Ticket> Window::signal_counter(const RemoteRegion& signal, size_t soff, uint64_t value,
                                      const Region& counter, size_t coff, SignalOp op,
                                      SignalOrder order) {
  const proto::RemoteKey* sk = Access::key(signal);
  if (sk == nullptr) return no_key("signal_counter");
  auto r = signal_request(sk, soff, value, op, order);
  const proto::LocalBuffer c = Access::local(counter);
  r.counter = &c;
  r.counter_offset = coff;
  return engine_->one_sided().signal(id_, r);
}

Result<Ticket> Window::reset_signal(const RemoteRegion& signal, size_t soff) {
  const proto::RemoteKey* sk = Access::key(signal);
  if (sk == nullptr) return no_key("reset_signal");
  return engine_->one_sided().signal(
      id_, signal_request(sk, soff, 0, SignalOp::set, SignalOrder::strong));
}

Result<uint64_t> Window::read_signal(const Region& signal, size_t soff) const {
  return engine_->one_sided().read_word(Access::local(signal), soff, "read_signal");
}

Status Window::wait_signal(const Region& signal, size_t soff, uint64_t value, Deadline d) {
  return engine_->one_sided().wait_word(id_, Access::local(signal), soff, value, d, "wait_signal");
}

Status Window::wait_counter(const Region& counter, size_t coff, uint64_t value, Deadline d) {
  return engine_->one_sided().wait_word(id_, Access::local(counter), coff, value, d,
                                        "wait_counter");
}

Result<Ticket> Window::atomic(AtomicOp op, const RemoteRegion& remote, size_t roff,
                              uint64_t operand, uint64_t compare, uint64_t* result) {
  const proto::RemoteKey* k = Access::key(remote);
  if (k == nullptr) return no_key("atomic");
  if (k->staged) return staged_remote("atomic");
  return engine_->one_sided().atomic(id_, static_cast<proto::WindowAtomicOp>(op), *k, roff, operand,
                                     compare, result);
}

bool Window::native_atomics() const { return engine_->one_sided().native_atomics(); }

Result<Ticket> Window::post(const std::vector<TransferItem>& items,
                            const std::vector<uint8_t>& notification) {
  std::vector<proto::LocalBuffer> locals(items.size());
  std::vector<proto::OneSidedCalls::TransferItem> out(items.size());
  std::vector<StagedArrivals::Target> gets;
  // Puts from staged GPU memory: each item's own staging bytes (sized once: locals point in).
  std::vector<std::optional<StagedSource>> sources(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const TransferItem& it = items[i];
    if (it.local == nullptr || it.remote == nullptr || Access::key(*it.remote) == nullptr) {
      return core::error(Code::invalid_argument, "transfer item ", i,
                         ": no local Region or an empty RemoteRegion");
    }
    locals[i] = Access::local(*it.local);
    if (Access::key(*it.remote)->staged) {
      if (it.kind == TransferItem::Kind::get) return staged_remote("transfer item get");
      if (!notification.empty()) {
        return core::error(Code::unsupported, "transfer item ", i, ": a notification after puts "
                           "into a peer's staged GPU memory is not supported yet");
      }
      out[i].publish = true;
    }
    if (it.kind == TransferItem::Kind::put) {
      XPORT_ASSIGN_OR_RETURN(sources[i], Access::stage(*it.local, it.local_offset, it.length,
                                                       "transfer"));
      if (sources[i]) locals[i] = sources[i]->local();
    } else if (Access::staged(*it.local) && it.local->contains(static_cast<uint8_t*>(it.local->base()) + it.local_offset, it.length)) {
      gets.push_back({Access::staged(*it.local),
                      static_cast<uint8_t*>(it.local->base()) + it.local_offset, it.length});
    }
    out[i].put = it.kind == TransferItem::Kind::put;
    out[i].local = &locals[i];
    out[i].local_offset = sources[i] ? 0 : it.local_offset;
    out[i].remote = Access::key(*it.remote);
    out[i].remote_offset = it.remote_offset;
    out[i].length = it.length;
  }
  std::vector<uint64_t> published;  // the publishes of its puts into staged GPU memory
  XPORT_ASSIGN_OR_RETURN(Ticket t,
                         engine_->one_sided().transfer(id_, out, notification, &published));
  if (!gets.empty()) staged_->expect(t, std::move(gets));
  for (Ticket p : published) staged_->follow(t, p);
  return t;
}

Result<TransferState> Window::check(Ticket ticket) {
  XPORT_ASSIGN_OR_RETURN(int done, engine_->one_sided().check(id_, ticket));
  // Puts into a peer's staged GPU memory: delivered once their publishes are applied.
  for (Ticket f : staged_->followers(ticket)) {
    if (done != 1) break;
    XPORT_ASSIGN_OR_RETURN(done, engine_->one_sided().check(id_, f));
  }
  if (done == 1) staged_->forget_followers(ticket);
  if (done == 1 && staged_->expects(ticket)) {
    XPORT_ASSIGN_OR_RETURN(bool copied, staged_->arrived(ticket, {}));
    if (!copied) return TransferState::pending;
  }
  return done == 1 ? TransferState::done : TransferState::pending;
}

std::vector<std::vector<uint8_t>> Window::take_notifications() {
  return engine_->one_sided().take_notifications(id_);
}

Status Window::fence() { return engine_->one_sided().fence(id_); }

Status Window::quiet(Deadline deadline) {
  // Staged gets issued before this call are copied out; later ones (other threads) are not
  // covered by this quiet.
  const uint64_t through = staged_->last_key();
  const uint64_t followed = staged_->last_followed();
  XPORT_RETURN_IF_ERROR(engine_->one_sided().quiet(id_, deadline));
  staged_->forget_followers_through(followed);
  return staged_->settle_through(through);
}

Status Window::wait_local(Ticket ticket, Deadline deadline) {
  // A ticket under the engine's mark is locally complete without error (an injected put, a
  // sliding window's oldest): no lock, no engine call. Every 16th such call goes to the engine
  // all the same, which makes a progress pass if the window has provider operations in flight:
  // on a provider with manual progress that pass is what moves the bytes of larger puts (the
  // target's credit grants are read by the put that finds its stream short of them:
  // OneSidedCalls::rma). (quick_: a relaxed count; concurrent callers may lose increments, never
  // correctness.)
  bool answered = false, pass = false;
  if (local_clear_ != nullptr && ticket != 0 &&
      ticket < local_clear_->load(std::memory_order_acquire)) {
    const uint32_t q = quick_.load(std::memory_order_relaxed);
    quick_.store(q + 1, std::memory_order_relaxed);
    answered = (q & 15) != 15;
    pass = !answered;
  }
  if (!answered) {
    XPORT_RETURN_IF_ERROR(engine_->one_sided().wait_local(id_, ticket, deadline, pass));
  }
  if (!staged_->expects(ticket)) return Status::success();
  return staged_->arrived_wait(ticket, {});
}

uint64_t Window::issued() const { return engine_->one_sided().window_issued(id_); }
uint64_t Window::completed() const { return engine_->one_sided().window_completed(id_); }

}  // namespace xport
