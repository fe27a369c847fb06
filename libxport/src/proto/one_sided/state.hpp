// The state of one-sided windows (part of the engine's DeviceState, under its lock): windows with
// their provider operations and tickets, the per-peer streams that number and order what windows
// send (initiator side: OutStream) and count what lands (target side: InStream), and the
// operations waiting on either side. docs/semantics.md ("One-sided") states what they promise.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fabric/op_context.hpp"
#include "gpu/staged_memory.hpp"
#include "memory/bounce_buffers.hpp"
#include "memory/registry.hpp"
#include "pool/channel.hpp"
#include "pool/comm_table.hpp"
#include "pool/peer.hpp"
#include "proto/one_sided/wire.hpp"

namespace xport::proto {

using pool::CommId;
using Ticket = uint64_t;

// One provider operation of a window: a put or get stripe, or a native atomic.
struct WindowOp {
  fabric::OpContext ctx;  // ctx.seq: its ticket; ctx.stripe: its stripe; ctx.owner: the window
  memory::RegionRef region;
  memory::Buffer* scratch = nullptr;  // native atomic: its operand / compare / result slot
  uint64_t* result = nullptr;         // native atomic: where the fetched value goes
  uint64_t uncounted = 0;             // get or native atomic: its ordinal in the stream (0: none)
  uint8_t atomic_op = 0;              // native atomic: its WindowAtomicOp
  bool busy = false;
};

// An operation a window issued, until it is complete at every level it has.
struct TicketState {
  uint32_t local_left = 0;    // its pieces not yet locally complete (posted or waiting)
  uint64_t need_seq = 0;      // remotely complete once the stream's done mark reaches this
  uint32_t results_left = 0;  // emulated atomics whose answer has not come
  bool fetch = false;         // a fetching atomic: local completion is its value in place
  bool transfer = false;      // a transfer: check() reports it
  uint64_t* result = nullptr;              // emulated fetching atomic: where the value goes
  memory::RegionRef counter_region;        // a counter to add 1 to once remotely complete
  uint64_t* counter = nullptr;
  Status error;
  bool local_done() const { return local_left == 0 && (!fetch || results_left == 0); }
  // Back to a new ticket's state: what TicketState{} assigned would give, without building one
  // per ticket (the region is released only where set; an ok Status holds nothing).
  void reset() {
    local_left = 0;
    need_seq = 0;
    results_left = 0;
    fetch = false;
    transfer = false;
    result = nullptr;
    if (counter_region) counter_region.reset();
    counter = nullptr;
    error = Status();
  }
};

// A window's tickets not yet complete. Tickets are numbered in issue order, so a ring indexed by
// ticket - lowest stands in for a map: no allocation per operation once the ring has grown to
// the span in flight, O(1) lookup. Completed tickets leave holes until the lowest one goes.
class TicketTable {
 public:
  bool empty() const { return live_ == 0; }
  size_t size() const { return live_; }
  // `t` is above every ticket added before.
  TicketState& add(Ticket t) {
    if (span_ == 0) base_ = t;
    while (base_ + span_ < t) push(0);  // (numbers taken but never added: holes)
    push(t);
    ++live_;
    return at(span_ - 1).state;
  }
  TicketState* find(Ticket t) {
    if (t < base_ || t - base_ >= span_) return nullptr;
    Entry& e = at(static_cast<size_t>(t - base_));
    return e.ticket == t ? &e.state : nullptr;
  }
  const TicketState* find(Ticket t) const { return const_cast<TicketTable*>(this)->find(t); }
  void erase(Ticket t) {
    if (find(t) == nullptr) return;
    vacate(at(static_cast<size_t>(t - base_)));
    trim_front();
  }
  // The lowest ticket not yet complete (not empty()).
  Ticket lowest() const { return base_; }
  // Erases every ticket for which p(ticket, state) is true, in one sweep, lowest first (p may
  // not add or erase).
  template <typename P>
  void erase_if(P&& p) {
    for (size_t i = 0; i < span_; ++i) {
      Entry& e = at(i);
      if (e.ticket != 0 && p(e.ticket, e.state)) vacate(e);
    }
    trim_front();
  }
  // f(ticket, state) for every ticket not yet complete, lowest first. f may not add or erase.
  template <typename F>
  void for_each(F&& f) {
    for (size_t i = 0; i < span_; ++i) {
      Entry& e = at(i);
      if (e.ticket != 0) f(e.ticket, e.state);
    }
  }
  template <typename F>
  void for_each(F&& f) const {
    for (size_t i = 0; i < span_; ++i) {
      const Entry& e = const_cast<TicketTable*>(this)->at(i);
      if (e.ticket != 0) f(e.ticket, e.state);
    }
  }

 private:
  struct Entry {
    Ticket ticket = 0;  // 0: a hole
    TicketState state;
  };
  Entry& at(size_t i) { return ring_[(head_ + i) & mask_]; }
  // A live entry becomes a hole.
  void vacate(Entry& e) {
    e.ticket = 0;
    e.state.reset();  // (lets its counter region go)
    --live_;
  }
  // The holes at the low end leave the span (the lowest ticket moves up).
  void trim_front() {
    while (span_ > 0 && at(0).ticket == 0) {
      head_ = (head_ + 1) & mask_;
      --span_;
      ++base_;
    }
  }
  void push(Ticket t) {
    if (span_ == ring_.size()) grow();
    Entry& e = at(span_++);
    e.ticket = t;
  }
  void grow() {
    std::vector<Entry> bigger(std::max<size_t>(16, ring_.size() * 2));
    for (size_t i = 0; i < span_; ++i) bigger[i] = std::move(at(i));
    ring_ = std::move(bigger);
    mask_ = ring_.size() - 1;
    head_ = 0;
  }
  std::vector<Entry> ring_;  // a power of two long
  size_t mask_ = 0;          // ring_.size() - 1 (not recomputed per lookup: Entry's size is odd)
  size_t head_ = 0;          // ring_ index of ticket base_
  size_t span_ = 0;          // entries from base_ (live or holes)
  Ticket base_ = 0;
  size_t live_ = 0;
};

struct WindowState {
  uint32_t id = 0;
  CommId comm;                 // the communicator it was opened from, if any (held)
  pool::Peer* peer = nullptr;  // a reference is held
  std::vector<pool::Path> paths;
  uint32_t stream = 0;         // its OutStream
  uint32_t next_stripe = 0;
  // Every ticket below it is locally complete without error (0: no claim). Written under the
  // engine lock; read without it by Window::wait_local (api), which answers a ticket below it
  // with no engine call. Lowered when a ticket fails and when the window closes or the device
  // shuts down, moved up over tickets found locally complete (Windows::advance_clear), never
  // past a ticket that failed (so the lock-free answer cannot turn a failure into success).
  std::shared_ptr<std::atomic<uint64_t>> local_clear = std::make_shared<std::atomic<uint64_t>>(1);
  Ticket next_ticket = 1;      // issued operations are numbered from 1
  uint64_t completed = 0;      // provider operations completed
  uint64_t issued = 0;         // provider operations issued
  Status first_error;          // since the last quiet, which reports it (once)
  uint64_t failures = 0;       // tickets settled with an error since the last quiet
  std::vector<WindowOp> ops;
  std::vector<uint32_t> free;
  TicketTable tickets;                    // not yet complete
  // Tickets settled with an error, each reported by check() and wait_local() every time they are
  // asked for as long as the window is open (quiet() does not take them): the newest
  // Windows::kMaxFailed; `forgotten` is the newest whose record was dropped to keep that bound
  // (every ticket up to it and not under local_clear is answered "no longer known", never done).
  std::map<Ticket, Status> failed;
  Ticket forgotten = 0;
  uint32_t waiters = 0;        // calls waiting on a word it watches (the peer is waited on)
  bool closed = false;
  bool busy() const { return free.size() != ops.size() || !tickets.empty(); }
};

// What a later operation must wait for at the initiator (a fence, or a strong signal behind gets
// and native atomics): the target's done mark, and the completion of every uncounted operation
// (gets, native atomics) numbered below a mark.
struct Barrier {
  uint64_t counted = 0;
  uint64_t uncounted = 0;
};

enum class PieceKind : uint8_t {
  write, read, signal, emulated_atomic, native_atomic, notify,
  fence,  // a fence issued while pieces were queued: takes effect when it reaches the head
  sync,   // asks the target for an acknowledgement of everything before it (a transfer's end)
};

// How much of a put's source is in place to be posted: a put from staged GPU memory copies its
// source into staging bytes piece by piece, and each write piece waits in its stream's queue
// for its bytes (docs/semantics.md, "GPU memory"). Moved on by the calling thread while the
// call waits for the copy (SourceRead::in_call), or, holding the copy, by progress under the
// engine's lock (SourceRead::until_local: Streams::pump polls it).
struct SourceGate {
  std::atomic<uint64_t> ready{0};   // bytes in place, from the source's start
  std::atomic<bool> failed{false};  // the copy failed (why): what of the put is held is dropped
  Status why;                       // written once, before failed is set
  const char* what = "put";         // the operation, for why
  std::unique_ptr<gpu::StagedCopyIn> copy;  // until_local: the copy progress polls
  // What the copy answered (StagedCopyIn::ready): more bytes in place, or its failure. True when
  // the gate moved (what it holds may go, or be dropped). Only the gate's one poller calls it.
  bool advance(const Result<size_t>& in_place) {
    if (!in_place.ok()) {
      why = in_place.status().with_context(std::string(what) +
                                           ": copying its GPU source into staging bytes");
      failed.store(true, std::memory_order_release);
      return true;
    }
    if (*in_place <= ready.load(std::memory_order_relaxed)) return false;
    ready.store(*in_place, std::memory_order_release);
    return true;
  }
};

// The shadow bytes of this device's own staged registration that a put lands in (OneSided::
// own_shadow), and what keeps them alive while a copy into them runs.
struct OwnShadow {
  uint8_t* bytes = nullptr;
  std::shared_ptr<void> keep;
};

// One operation (or a transfer's item) on its way out: sent at once, or held in its stream's
// queue (in issue order) until credits, fences, strong ordering and its source gate let it go.
struct Piece {
  uint32_t window = 0;
  Ticket ticket = 0;
  PieceKind kind = PieceKind::write;
  uint8_t op = 0;        // WindowSignalOp / WindowAtomicOp
  uint8_t flags = 0;     // WindowFlags
  Barrier after;
  // writes and reads: the local range, its stripes' window operations, the remote address
  uint8_t* local = nullptr;
  size_t len = 0;
  memory::RegionRef region;
  uint32_t stripes = 0;
  std::array<uint32_t, kMaxRails> ops{};
  uint64_t raddr = 0;
  std::array<uint64_t, kMaxRails> keys{};
  uint32_t rails = 0;    // rails the remote key covers
  bool with_signal = false;  // a put_signal: its signal follows the writes
  // signals and atomics: the target word (its address and rail-0 key) and operands
  uint64_t word = 0;
  uint64_t word_key = 0;
  uint64_t operand = 0;
  uint64_t compare = 0;
  std::vector<uint8_t> payload;  // a notification
  // A piece of a put whose source is copied in while it waits: it goes once `gate` has
  // `gate_need` bytes in place, and is dropped (its ticket failed) if the copy failed.
  std::shared_ptr<SourceGate> gate;
  uint64_t gate_need = 0;
  uint32_t seqs() const {
    switch (kind) {
      case PieceKind::write: return stripes + (with_signal ? 1 : 0);
      case PieceKind::signal:
      case PieceKind::emulated_atomic:
      case PieceKind::notify: return 1;
      default: return 0;
    }
  }
};

enum class StreamPhase : uint8_t { connecting, ready, failed };

// The messages of a stream's operations (signals, emulated atomics, notifications) since the
// target's done mark, in sequence order, each kept until the target is known to have it (its
// number below the done mark; an emulated atomic: its answer came), so that they can go again
// on another rail when one that may have carried them goes out of service. A ring that grows to
// the most in flight (at most the stream's credits) and then allocates nothing.
class SentLog {
 public:
  struct Entry {
    MsgHeader h{};
    std::vector<uint8_t> body;  // (its capacity is kept for the next message in its place)
    bool awaiting = false;      // an emulated atomic whose answer has not come
  };
  bool empty() const { return count_ == 0; }
  void push(const MsgHeader& h, const std::vector<uint8_t>* body, bool awaiting) {
    if (count_ == ring_.size()) grow();
    Entry& e = ring_[(head_ + count_) & (ring_.size() - 1)];
    e.h = h;
    if (body != nullptr) e.body.assign(body->begin(), body->end());
    else e.body.clear();
    e.awaiting = awaiting;
    ++count_;
  }
  // The target has every number below `done`: entries below it that wait for no answer go.
  void prune(uint64_t done) {
    while (count_ > 0 && at(0).h.seq < done && !at(0).awaiting) {
      head_ = (head_ + 1) & (ring_.size() - 1);
      --count_;
    }
  }
  // Operation `seq`'s answer came (an emulated atomic).
  void answered(uint64_t seq) {
    for (size_t i = 0; i < count_; ++i) {
      if (at(i).h.seq == seq) at(i).awaiting = false;
    }
  }
  // f(entry) for every entry, oldest first (f may not push or prune).
  template <typename F>
  void for_each(F&& f) const {
    for (size_t i = 0; i < count_; ++i) f(const_cast<SentLog*>(this)->at(i));
  }

 private:
  Entry& at(size_t i) { return ring_[(head_ + i) & (ring_.size() - 1)]; }
  void grow() {
    std::vector<Entry> bigger(std::max<size_t>(8, ring_.size() * 2));
    for (size_t i = 0; i < count_; ++i) bigger[i] = std::move(at(i));
    ring_ = std::move(bigger);
    head_ = 0;
  }
  std::vector<Entry> ring_;  // a power of two long
  size_t head_ = 0;
  size_t count_ = 0;
};

// The initiator side of a stream: everything this device's windows send to one peer device
// (connected endpoints: over the connection of the communicator it was made for), numbered in
// one sequence.
struct OutStream {
  uint32_t id = 0;
  uint8_t gen = 0;
  pool::Peer* peer = nullptr;  // a reference is held
  CommId via;                  // connected endpoints: the communicator whose connection it uses
  std::vector<pool::Path> paths;
  StreamPhase phase = StreamPhase::connecting;
  Status error;
  uint64_t nonce = 0;
  uint16_t target = 0;         // the target's InStream
  uint8_t target_gen = 0;
  // Credits: the numbers it may send are those below `limit`, which the target grants and
  // takes back (win_done, docs/semantics.md "Credits"); `span` bounds them (never more than
  // span beyond the done mark: its per-number tables are `span` long, numbered modulo span).
  uint32_t span = 0;
  uint64_t limit = 0;
  uint64_t grant_epoch = 0;    // of the last grant or take-back it followed
  uint64_t grant = 0;          // limit - done when the limit last moved (credit_reserve)
  uint64_t want_sent = 0;      // the limit at which it last asked for more (win_sync, kSyncWant)
  unsigned seq_bits = 0;
  uint64_t next_seq = 0;
  uint64_t done = 0;           // the target's done mark, as last heard
  uint64_t sync_sent = 0;      // the highest mark a win_sync asked for
  // Since when an acknowledgement asked for (sync_sent > done) has been awaited without the done
  // mark moving: past XPORT_PEER_TIMEOUT_MS the stream fails (Streams::check_stalls).
  std::chrono::steady_clock::time_point sync_since{};
  uint64_t next_uncounted = 1; // ordinals of gets and native atomics
  uint32_t uncounted_inflight = 0;
  Barrier fence;               // operations issued from now on wait for it
  std::deque<Piece> held;
  uint32_t next_control = 0;
  int windows = 0;
  int openers = 0;             // window opens waiting on it (it stays while they wait)
  std::chrono::steady_clock::time_point opened{};
  // Emulated atomics waiting for their answer, by sequence number modulo credits.
  struct Awaiting {
    uint64_t seq = 0;
    uint32_t window = 0;
    Ticket ticket = 0;
    bool valid = false;
  };
  std::vector<Awaiting> awaiting;
  uint32_t awaiting_count = 0;
  // Signals sent (publishes included), by sequence number modulo credits: a target that cannot
  // apply one (its region went) answers with its number, which fails that ticket.
  std::vector<Awaiting> signalled;
  SentLog sent;  // operation messages the target may not have yet
};

// A message of a stream that arrived before its turn (copied out of its receive buffer).
struct WaitingOp {
  MsgHeader h{};
  WindowOperand operand{};
  std::vector<uint8_t> payload;
  // A signal into staged GPU memory that arrived before its turn: its update has read the GPU
  // word already and applies once released (Signals::prepare).
  std::unique_ptr<gpu::StagedCopy> early;
};

// The target side of a stream: what one initiator's windows sent here, counted by sequence number.
struct InStream {
  uint16_t index = 0;
  uint8_t gen = 0;
  pool::Peer* peer = nullptr;  // a reference is held
  CommId via;                  // connected endpoints: the communicator of its connection (held)
  pool::Channel* reply = nullptr;
  uint16_t initiator = 0;      // the initiator's OutStream
  uint8_t initiator_gen = 0;
  uint64_t nonce = 0;
  // Numbers below `limit` are granted to the initiator (never more than `span` beyond done:
  // the per-number tables are span long). The grant moves with the stream's traffic, out of
  // CQ room all streams share (Streams::regrant); `cq_reserved` is the room it holds.
  uint32_t span = 0;
  uint64_t limit = 0;
  uint64_t grant = 0;          // limit - done when the limit last moved
  uint64_t grant_epoch = 0;    // bumped by every grant and take-back (win_done aux)
  bool taking_back = false;    // a take-back (kDoneTakeBack) awaits its answer: no grant meanwhile
  bool starved = false;        // in Streams::starved_: asked for numbers and got none
  uint64_t want = 0;           // numbers it asked for beyond its limit (win_sync length)
  uint64_t wish = 0;           // numbers its held operations could use (win_sync aux)
  uint64_t swept = UINT64_MAX; // the done mark at the last pressure sweep (idle if unmoved)
  unsigned seq_bits = 0;
  uint64_t done = 0;           // every operation below it is done
  // credits flags, one per number in [done, done + credits): set where it landed or was applied
  // while a number below it had not (mark(): in-order numbers only move done)
  std::vector<uint8_t> landed;
  uint32_t ahead = 0;          // flags set in landed
  std::deque<WaitingOp> waiting;
  uint64_t acked = 0;          // the done mark last sent
  uint64_t sync_wanted = 0;    // acknowledge once the done mark reaches it (win_sync, counters)
  uint32_t cq_reserved = 0;    // CQ room held on every rail for its writes
  std::deque<std::vector<uint8_t>> notes;  // notifications not yet taken
  // Operations done once their copy on to GPU memory has finished (staged regions), by seq.
  std::vector<std::pair<uint64_t, std::unique_ptr<gpu::StagedCopy>>> copies;
  // The answers of emulated atomics applied here, by sequence number modulo credits (made at
  // the first): an atomic sent again after a rail went down is answered again, not applied
  // twice. A slot is reused only once the initiator has the answer it held (its credits count
  // from its oldest unanswered atomic).
  struct Answer {
    uint64_t seq = 0;
    uint64_t value = 0;
    uint8_t status = 0;
    bool valid = false;
  };
  std::vector<Answer> answers;
};

// A window provider operation that met -FI_EAGAIN or found no CQ room: posted by progress.
struct PendingRma {
  uint32_t window = 0;
  uint32_t op = 0;  // index in the window's ops
  uint8_t* local = nullptr;
  size_t len = 0;
  uint64_t raddr = 0;
  uint64_t key = 0;
  uint64_t data = 0;       // a write's remote CQ data
  bool atomic = false;     // a native atomic (its operands are in its window operation)
};

}  // namespace xport::proto
