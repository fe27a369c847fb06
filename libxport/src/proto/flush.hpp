// Flush: after a receive into device memory, a read of the received buffer through every rail
// of its communicator into that rail's flush target; each read completes after the writes that
// came on its rail, which is what makes the data visible before a kernel uses it.
#pragma once

#include "proto/dispatch.hpp"
#include "proto/pending_queue.hpp"
#include "proto/device_state.hpp"

namespace xport::proto {

class Flusher {
 public:
  explicit Flusher(DeviceState& state) : state_(state), unposted_(&state.counters.deferred_posts) {}
  // Completions of flush reads.
  void register_handlers(Dispatch& d);

  // Starts a flush of [buf, buf+len): its id, or 0 when nothing is to be read (len 0, or
  // connected endpoints, whose receive completion already orders the data).
  Result<uint64_t> start(CommState& c, const uint8_t* buf, size_t len, const RegionRef& region);
  bool done(uint64_t id) const;
  // The outcome of a done flush (and forgets it).
  Status finish(uint64_t id);
  // The caller stopped waiting: forgotten once its reads complete.
  void abandon(uint64_t id);
  // Every flush of a communicator being closed.
  void abandon_comm(CommId comm);
  bool owned_by(uint64_t id, CommId comm) const;
  void on_done(fabric::OpContext* ctx, const Status& st);
  void retry();
  bool queued() const { return !unposted_.empty(); }
  // The rail's CQ failed: its reads will never be reported.
  void fail_rail(uint32_t rail, const Status& why);

 private:
  Status post(FlushState& f, uint32_t i);
  void read_done(fabric::OpContext* ctx, const fi_cq_data_entry&) { on_done(ctx, Status()); }
  void read_failed(fabric::OpContext* ctx, const Status& st, int) { on_done(ctx, st); }
  DeviceState& state_;
  struct Read {
    uint64_t flush = 0;
    uint32_t index = 0;  // its read (rail) in the flush
  };
  PendingQueue<Read> unposted_;
};

}  // namespace xport::proto
