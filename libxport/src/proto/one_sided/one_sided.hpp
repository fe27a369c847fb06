// One-sided windows, the engine's part for them. Its concerns live in their own files:
//   window.hpp    windows: opening and closing, ranges and keys, provider operations, tickets
//   stream.hpp    ordering and sequence: per-peer streams, credits, fences, acknowledgements;
//                 at the target, counting what landed and applying operations in their turn
//   signal.hpp    signals (and the counters that count their remote completion)
//   atomic.hpp    atomics, native (FI_ATOMIC) and emulated (a message the target applies)
//   transfer.hpp  notifications of transfers
// This file posts what a stream releases (puts, gets, the messages of signals, atomics and
// notifications) and routes provider completions back to their windows.
#pragma once

#include <array>
#include <optional>

#include "proto/dispatch.hpp"
#include "proto/one_sided/atomic.hpp"
#include "proto/one_sided/signal.hpp"
#include "proto/one_sided/stream.hpp"
#include "proto/one_sided/transfer.hpp"
#include "proto/one_sided/window.hpp"
#include "proto/pending_queue.hpp"
#include "proto/device_state.hpp"

namespace xport::proto {

class OneSided {
 public:
  explicit OneSided(DeviceState& state)
      : state_(state),
        queued_(&state.counters.deferred_posts),
        windows_(state, *this),
        streams_(state, *this),
        signals_(state, *this),
        atomics_(state, *this),
        transfers_(state, *this) {}

  Windows& windows() { return windows_; }
  Streams& streams() { return streams_; }
  Signals& signals() { return signals_; }
  Atomics& atomics() { return atomics_; }
  Transfers& transfers() { return transfers_; }

  // Puts and gets: checks everything (window, ranges, the key's device, free contexts for every
  // stripe) before issuing anything; the stream posts them now or when their turn comes.
  // `signal` (put_signal) follows the data.
  Result<Ticket> rma(uint32_t window, fabric::OpType op, const memory::RegionRef& local,
                     uint8_t* lbuf, size_t len, const RemoteKey& remote, size_t roff,
                     const Signals::Spec* signal);

  // A put in pieces of `piece` bytes (0: one piece), each followed by its `publish` (a put into
  // a peer's staged GPU memory: the target copies each piece's range on to its GPU; nullptr:
  // none), then (put_signal) `signal`, made strong behind them; each write piece waits for
  // `gate` (its source copied in from staged GPU memory) to have its bytes. One operation: every
  // check, and room for each ticket and operation context, before anything is issued; then all
  // of it, or nothing (Code::again with nothing taken). Tickets: the put's (every write piece),
  // the publish's (every publish), the signal's (0: none).
  struct Pieces {
    const Signals::Spec* publish = nullptr;  // the whole range's: each piece publishes its part
    const Signals::Spec* signal = nullptr;
    size_t piece = 0;
    std::shared_ptr<SourceGate> gate;
    // The target's shadow gets the bytes from the gate's copy itself (own_shadow: a window to
    // this very device): no write goes, only the publishes (needed) and the signal.
    bool in_place = false;
  };
  Result<std::array<Ticket, 3>> put_pieces(uint32_t window, const memory::RegionRef& local,
                                           uint8_t* lbuf, size_t len, const RemoteKey& remote,
                                           size_t roff, const Pieces& how);
  // Posts what its stream holds that may go now (a gate opened or failed: put_pieces).
  void post_ready(uint32_t window);
  // Where a put through `window` into [roff, +len) of `remote` lands when the window leads to
  // this very device (the key is one of its own staged registrations: a GPU team's own rank):
  // the registration's shadow bytes, and what keeps them alive; nothing when the key is not
  // this device's staged memory, the range does not fit, or a fence holds the stream (a copy
  // straight into the shadow would start before what the fence orders first).
  std::optional<OwnShadow> own_shadow(uint32_t window, const RemoteKey& remote, size_t roff,
                                      size_t len);

  // The stripes a `len`-byte put or get to `remote` is cut into (0 for nothing).
  Result<uint32_t> stripes(const WindowState& w, const RemoteKey& remote, size_t len,
                           const char* what) const;
  // The common put, in one pass over its state: a put (no signal) of one stripe, from host
  // memory, on an open window whose stream has nothing held and credit for it. Numbered as
  // submit() would and handed to the provider here, without a piece: injected where it fits
  // the provider's inject size (locally complete when the call returns, no window operation),
  // else posted with a window operation of its own, as post() would (the provider's
  // completion finishes it). nullopt when anything about it is not plain (a check that would
  // fail, no credit or free operation, a rail down, the rail's CQ full) or the provider
  // refused: nothing has changed, and the caller takes rma(), which checks everything, names
  // what is wrong, and otherwise does what it does for any put (tries again, queues it).
  // `local` is a registration of this device and [lbuf, +len) inside the caller's Region
  // (OneSidedCalls::put checks both). *short_after: the stream is now short of credit, as
  // short_of_credit() would answer.
  std::optional<Ticket> plain_put(uint32_t window, const memory::RegionRef& local,
                                  uint8_t* lbuf, size_t len, const RemoteKey& remote,
                                  size_t roff, bool* short_after);
  // Adds a put or get (and a put_signal's signal) to ticket `t` and hands it to the stream.
  Status add_rma(WindowState& w, OutStream& s, Ticket t, fabric::OpType op,
                 const memory::RegionRef& local, uint8_t* lbuf, size_t len,
                 const RemoteKey& remote, size_t roff, const Signals::Spec* signal,
                 const char* what, std::shared_ptr<SourceGate> gate = nullptr,
                 uint64_t gate_need = 0);
  // Posts a piece the stream released, its counted operations numbered from `base`.
  void post(OutStream& s, Piece& p, uint64_t base);
  // One native atomic of a window operation (its operands in its slot).
  Status post_atomic(WindowState& w, uint32_t index, uint64_t raddr, uint64_t key);
  // A provider completion of a window operation (put, get, native atomic).
  void on_done(fabric::OpContext* ctx, const Status& st);
  // Progress: posts queued for the provider, streams' queues, operations waiting at targets.
  void retry();
  bool queued() const { return !queued_.empty() || streams_.queued(); }
  // Whether the window's stream could not take another quarter of its grant now (the
  // target's acknowledgements, which only a progress pass reads, are due).
  bool short_of_credit(uint32_t window);
  // That quarter (at least one number): plain_put asks it too.
  static uint32_t credit_reserve(const OutStream& s) {
    return static_cast<uint32_t>(std::max<uint64_t>(1, std::min<uint64_t>(s.grant, s.span) / 4));
  }
  // Target: staged GPU copies of operations (signal.cc, Signals::stage).
  bool copying() const { return streams_.copying(); }
  void poll_copies() { streams_.poll_copies(); }
  // The rail's CQ failed: its operations (posted or queued) will never be reported.
  void fail_rail(uint32_t rail, const Status& why);
  // A peer was lost: its streams and their windows fail, its streams here are dropped.
  void fail_peer(pool::Peer& p, const Status& why);
  // A rail went out of service here (nullptr) or at `p`: window messages it may have lost go
  // again (Streams::resend_after_rail_loss).
  void resend_after_rail_loss(const pool::Peer* p) { streams_.resend_after_rail_loss(p); }
  // A communicator failed: window streams over its connection fail (and their windows).
  void fail_comm(CommId comm, const Status& why);
  // Adds the peers something of this device waits on (keepalives and peer loss watch them): a
  // window operation or wait in flight, a stream opening, or, as a target, a take-back of a
  // stream's unused credits awaiting its answer (an initiator that died holding credits is
  // declared lost, and its room given to the streams that wait). One pass over windows and
  // streams, whatever the number of peers.
  void add_waited_peers(std::unordered_set<const pool::Peer*>& out) const;
  // Completions of puts, gets and native atomics; the win_* messages and window writes (its
  // parts' handlers).
  void register_handlers(Dispatch& d);
  // Device teardown: streams are told, windows forgotten.
  void shutdown();
  // Teardown: queued posts are dropped.
  void clear() { queued_.clear(); }

 private:
  // Posts one stripe of a put or a get. *injected: a put small enough to inject went, and
  // is locally complete now (the caller finishes its operation).
  Status post_rma(WindowState& w, uint32_t index, uint8_t* local, size_t len, uint64_t raddr,
                  uint64_t key, uint64_t data, bool* injected);
  void posted(WindowState& w, uint32_t index, Status st, const PendingRma& retry);
  void op_done(fabric::OpContext* ctx, const fi_cq_data_entry&) { on_done(ctx, Status()); }
  void op_failed(fabric::OpContext* ctx, const Status& st, int) { on_done(ctx, st); }
  DeviceState& state_;
  PendingQueue<PendingRma> queued_;
  Windows windows_;
  Streams streams_;
  Signals signals_;
  Atomics atomics_;
  Transfers transfers_;
};

}  // namespace xport::proto
