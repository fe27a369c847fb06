// Rendezvous messages: the receiver clears the sender to write (CTS: buffer address, capacity,
// its key on every rail), the sender asks for it (RTS) when none came unasked, and writes the
// message with remote CQ data, striped over the rails; the receiver counts the stripes.
#pragma once

#include "proto/dispatch.hpp"
#include "proto/pending_queue.hpp"
#include "proto/device_state.hpp"

namespace xport::proto {

class Rendezvous {
 public:
  explicit Rendezvous(DeviceState& state)
      : state_(state), queued_(&state.counters.deferred_posts) {}
  // The eager credits a clear-to-send returns and where tagged requests-to-send are placed (the
  // Engine wires them).
  void wire(Eager& eager, Matching& matching) {
    eager_ = &eager;
    matching_ = &matching;
  }
  // Completions of rendezvous writes; CTS, RTS, ABORT and REFUSE messages; peers' writes.
  void register_handlers(Dispatch& d);

  // Sender: writes at once if the CTS is already here, else asks for it. `handoff`: the writes
  // of a CTS already here are queued for the next progress pass instead (PostMode::handoff).
  Status start(CommState& c, SendSlot& s, uint16_t slot, bool handoff = false);
  void on_cts(const Message& m);
  void on_write_done(fabric::OpContext* ctx, const Status& st);
  void retry();
  bool queued() const { return !queued_.empty(); }
  // The rail's CQ failed: stripes queued for it fail with their requests.
  void fail_rail(uint32_t rail, const Status& why);
  void clear() { queued_.clear(); }

  // The receiver refused message h.seq (its tag): the send fails, no ABORT owed.
  void on_refuse(const Message& m);

  // Receiver: the CQ room the writes of r's clear-to-send need, held until r is done
  // (Code::again when there is none); send_cts takes it if that was not done first.
  Status reserve_cts_room(CommState& c, RecvSlot& r);
  Status send_cts(CommState& c, RecvSlot& r, uint16_t slot);
  void on_rts(const Message& m);
  void on_abort(const Message& m);
  // A peer's write with remote CQ data landed on rail `rail` (`len`: the completion's).
  void on_write_data(uint64_t data, size_t len, uint32_t rail);

 private:
  // Checks the CTS against message s and posts its stripes (`defer`: queues them all for the
  // next progress pass, posting none here).
  void consume(CommState& c, SendSlot& s, uint16_t slot, const Cts& cts, bool defer = false);
  // Queues stripe `stripe` of message s for Rendezvous::retry (progress) to post; `since`: when
  // the provider first refused it (none yet: the XPORT_EAGAIN_TIMEOUT_MS clock starts at the
  // first refusal, and it is not counted as deferred).
  void queue_stripe(CommState& c, SendSlot& s, uint16_t slot, uint32_t stripe, uint64_t raddr,
                    const std::array<uint64_t, kMaxRails>& keys, Clock::time_point since);
  // Posts stripe `stripe` of message s (queued when the provider or the CQ is full).
  void write_done(fabric::OpContext* ctx, const fi_cq_data_entry& e);
  void write_failed(fabric::OpContext* ctx, const Status& st, int err);
  Status post_stripe(CommState& c, SendSlot& s, uint16_t slot, uint32_t stripe, uint64_t raddr,
                     const std::array<uint64_t, kMaxRails>& keys, bool queued);
  DeviceState& state_;
  Eager* eager_ = nullptr;
  Matching* matching_ = nullptr;
  PendingQueue<PendingStripe> queued_;
};

}  // namespace xport::proto
