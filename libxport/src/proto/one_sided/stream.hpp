// Ordering and sequence of one-sided operations. A stream carries everything this device's
// windows send to one peer device (connected endpoints: over one connection), numbered in one
// 64-bit sequence: writes carry their number's low bits in remote CQ data, signals, emulated
// atomics and notifications all of it in their header. The target counts what landed; an
// operation is applied once its turn comes (strong: every number below it done; weak: the writes
// it covers landed), and the target's win_done acknowledgements (every half of the credits, or
// when asked) move the initiator's `done` mark: delivery completion, credits, fences.
#pragma once

#include <algorithm>
#include <deque>
#include <unordered_set>

#include "proto/dispatch.hpp"
#include "proto/device_state.hpp"

namespace xport::proto {

class OneSided;

class Streams {
 public:
  Streams(DeviceState& state, OneSided& os) : state_(state), os_(os) {}
  // win_* messages of streams and their operations, and window writes.
  void register_handlers(Dispatch& d);

  // ---- initiator ----
  // The stream to the peer of `comm` (made and requested when there is none; connected
  // endpoints: over the communicator's connection, which every later window to that peer then
  // shares, whatever communicator it is opened over).
  Result<OutStream*> for_comm(CommState& comm);
  // A stream to the device behind a connection handle's (or a key's) control address.
  Result<OutStream*> for_address(uint64_t token, uint32_t provider_hash,
                                 const std::vector<uint8_t>& address);
  OutStream* find(uint32_t id) const;
  // Gives up a stream whose request was not answered in time.
  void abandon(uint32_t id, const Status& why);
  // A window stopped using it: closed once nothing of it is in flight.
  void release(OutStream& s);
  // Queues a piece behind the stream's earlier ones, or posts it now when nothing is queued
  // and its credits, fence and ordering allow.
  void submit(OutStream& s, Piece&& p);
  // Posts what is held and may go now (a put's pieces whose source gate opened, or whose copy
  // failed: those are dropped).
  void post_ready(OutStream& s);
  // A fence: operations issued after it wait until every one issued before it is done.
  void fence(OutStream& s);
  // Asks the target to acknowledge once every number below `upto` is done.
  void request_ack(OutStream& s, uint64_t upto);
  // Sends a message of the stream to its target.
  Status send(OutStream& s, MsgHeader& h, const std::vector<uint8_t>* body);
  // Sends an operation's message (a signal, an emulated atomic: `awaiting` its answer, a
  // notification), kept in the stream's SentLog until the target is known to have it.
  Status send_op(OutStream& s, MsgHeader& h, const std::vector<uint8_t>* body,
                 bool awaiting = false);
  // A rail went out of service here (peer == nullptr) or at `peer`: what window streams may have
  // lost on it goes again on the rails left, each idempotent at its receiver (docs/semantics.md,
  // "Rail health"): at initiators, the stream requests not yet answered, the operation messages
  // the target may not have, the last acknowledgement asked for, and the closes of the streams
  // closed lately; at targets, the done mark.
  void resend_after_rail_loss(const pool::Peer* peer);
  // The stream failed (a write error, its peer lost): its windows' tickets fail.
  // (farewell: tell the target with a win_close; not when the target itself said it is gone)
  void fail(OutStream& s, const Status& why, bool farewell = true);

  // ---- target ----
  void on_request(const Message& m);
  void on_write(uint64_t data, size_t len, uint32_t rail);
  void on_operation(const Message& m);
  void on_sync(const Message& m);
  // Target: operations into staged GPU memory whose copy has finished are done (then what
  // waited behind them runs, and acknowledgements go).
  void poll_copies();
  bool copying() const { return copies_inflight_ != 0; }
  void on_close(const Message& m);
  // Initiator: the target's device closed (win_gone): the stream fails, nothing more is sent.
  void on_gone(const Message& m);
  InStream* in(uint16_t index, uint8_t gen, bool check_gen) const;
  // Sends a message back to the initiator of `in`.
  void reply(InStream& in, MsgHeader& h, bool ack = true);

  // ---- initiator: answers ----
  void on_accept(const Message& m);
  void on_done(const Message& m);
  // The target's done mark moved to `done` (from a win_done or a win_result).
  void advance(OutStream& s, uint64_t done);

  // Progress: queued pieces released, waiting operations applied (bounded per pass), idle
  // streams closed.
  void retry();
  // Whether retry() may have work: a stream with queued pieces or without windows (to close),
  // or operations waiting to be applied here. O(1): progress asks every pass. Set where a stream
  // is made, gains a held piece or a waiting operation, or loses a window or an opener (note_work
  // for callers outside); retry() sets it to what remains.
  bool queued() const { return work_; }
  void note_work() { work_ = true; }
  // Whether a piece of `seqs` counted numbers with no ordering mark of its own could go now
  // (nothing held before it, credits, fences): what submit() asks.
  bool can_post_now(const OutStream& s, uint32_t seqs) const;
  // The first sequence number the stream's credits do not cover: it may release numbers below
  // it. Credits count from the oldest number whose answer is still awaited (an emulated
  // atomic's slot is not reused before its win_result came, whatever overtook it).
  uint64_t credit_limit(const OutStream& s) const {
    uint64_t base = s.done;
    if (s.awaiting_count > 0) {
      for (const auto& a : s.awaiting) {
        if (a.valid && a.seq < base) base = a.seq;
      }
    }
    return std::min(base + s.span, s.limit);
  }
  // Whether a fence (or `after_uncounted`, a piece's own mark) holds what comes next back.
  bool fenced(const OutStream& s, uint64_t after_uncounted) const {
    if (s.done < s.fence.counted) return true;
    const uint64_t mark = std::max(s.fence.uncounted, after_uncounted);
    return mark != 0 && min_uncounted(s) < mark;
  }
  void fail_peer(pool::Peer& p, const Status& why);
  // A stream whose target was asked to acknowledge and has not moved its done mark for
  // XPORT_PEER_TIMEOUT_MS while the peer is alive fails (Code::fabric): a number that never
  // lands (a write the target's provider refused and reported to nobody, as libfabric 1.17's
  // tcp;ofi_rxm and sockets do) would otherwise hold every later operation of every window of
  // this device to that peer. Windows opened afterwards get a new stream.
  void check_stalls(Clock::time_point now);
  void add_waited_peers(std::unordered_set<const pool::Peer*>& out) const;
  void shutdown();

 private:
  Result<OutStream*> make(pool::Peer* peer, CommState* via);
  Status request(OutStream& s, pool::Channel* ch);
  bool can_release(const OutStream& s, uint32_t seqs, uint64_t after_uncounted) const;
  bool can_release(const OutStream& s, const Piece& p) const {
    return can_release(s, p.seqs(), p.after.uncounted);
  }
  uint64_t min_uncounted(const OutStream& s) const;
  void pump(OutStream& s, size_t& budget);
  void drop_held(OutStream& s, const Status& why);
  // A held piece that will never go: its ticket fails with `why`, its contexts are given back.
  void drop_piece(Piece& p, const Status& why);
  // A gate holding its source's copy (SourceRead::until_local): how far the copy got.
  static void poll_gate(SourceGate& g);
  // Whether a piece's source is in place (a piece without a gate always is).
  static bool gate_open(const Piece& p) {
    return !p.gate || (!p.gate->failed.load(std::memory_order_acquire) &&
                       p.gate->ready.load(std::memory_order_acquire) >= p.gate_need);
  }
  void erase_out(OutStream& s);
  // Target side.
  Result<InStream*> make_in(pool::Peer* peer, CommId via, pool::Channel* reply);
  void erase_in(InStream& in);
  bool ready(const InStream& in, const MsgHeader& h) const;
  // A strong signal with kWinPastSignals: below it, all done but signals already begun.
  bool past_signals_ready(const InStream& in, uint64_t seq) const;
  // Whether operation `seq` arrived before (applied, landed, waiting for its turn, or copying on
  // to GPU memory): a message sent again after a rail went down whose first copy came too.
  bool seen(const InStream& in, uint64_t seq) const;
  // A repeated operation: dropped (an emulated atomic's answer goes again).
  void repeated(InStream& in, const MsgHeader& h);
  // Target: the done mark goes to the initiator now, whether or not it was sent before.
  void ack_now(InStream& in);
  void mark(InStream& in, uint64_t seq);
  // Applies an operation whose turn came (its number is done from then on).
  void execute(InStream& in, WaitingOp& op);
  void drain(InStream& in, size_t& budget);
  void maybe_ack(InStream& in);
  // This device's addresses towards `peer` (none over connected endpoints: the connection is
  // the path).
  Result<std::vector<RailAddresses>> local_addresses(pool::Peer& peer);

  // ---- credits (stream_credits.cc; docs/semantics.md "Credits") ----
  // Initiator: a win_done's grant or take-back (before its done mark is applied); true when
  // the limit rose (what is held may go).
  bool on_grant(OutStream& s, const MsgHeader& h);
  // Initiator: held at its limit with `seqs` numbers to go: asks the target for more (once per
  // limit).
  void ask_credits(OutStream& s, uint32_t seqs);
  // Target: a win_sync's kSyncWant or kSyncTakenBack.
  void on_credit_sync(InStream& in, const MsgHeader& h);
  // Target: moves the stream's limit within the span and the CQ room all streams share (`more`:
  // grow the grant: the stream is new, or asked, held at its limit); true when the limit moved. A stream that
  // asked and got less than it asked joins the starved queue.
  bool regrant(InStream& in, bool more);
  // Target: the CQ room window streams may still take on every rail (beyond a keep for other
  // traffic); sets the room the stream holds.
  uint64_t room_free() const;
  void hold_room(InStream& in, uint64_t need);
  // Target: room came back: streams that asked get it, oldest first.
  void feed_starved();
  // Target, progress: while streams starve, the unused numbers of streams whose done mark has
  // not moved since the last sweep are taken back (bounded work per pass).
  void sweep_idle(size_t& budget);
  // Target: whether the stream holds numbers it could give back now (granted, unused, nothing of
  // it waiting or copying, not waiting for room itself, no take-back in flight).
  bool can_take_back(const InStream& in) const;
  // Target: takes the stream's unused numbers back (a new epoch), and sends that take-back
  // (again after a rail loss: the same epoch, answered again, applied once).
  void take_back(InStream& in);
  void send_take_back(InStream& in);
  // Target: streams wait for room, or a stream that asked now could not get a first grant
  // (`free`: room_free()).
  bool pressed(uint64_t free) const;
  bool pressed() const { return pressed(room_free()); }
  struct Starved {
    uint16_t index = 0;
    uint8_t gen = 0;
  };
  std::deque<Starved> starved_;
  size_t sweep_cursor_ = 0;
  uint64_t room_held_ = 0;  // CQ room held by all in-streams (per rail)
  DeviceState& state_;
  OneSided& os_;
  // Streams closed lately (their win_close may have been on a rail that went down since): sent
  // again on a rail loss within kCloseMemory of the close.
  struct Closed {
    uint64_t peer = 0;  // its token (the peer itself may be retired since)
    uint16_t id = 0;
    uint8_t gen = 0;
    uint16_t target = 0;
    uint8_t target_gen = 0;
    Clock::time_point at{};
  };
  static constexpr std::chrono::seconds kCloseMemory{10};
  std::deque<Closed> closed_;
  void closing(const OutStream& s);
  // An accepting answer for no stream waiting here: the target's stream is closed.
  void refuse_answer(const MsgHeader& h);
  // What queued() found by looking at every stream (retry() keeps work_ to it).
  bool scan() const;
  size_t in_live_ = 0;
  size_t copies_inflight_ = 0;  // operations waiting for their copy on to GPU memory
  bool work_ = false;           // queued()
};

}  // namespace xport::proto
