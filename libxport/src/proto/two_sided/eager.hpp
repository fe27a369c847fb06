// Eager messages and their flow control: small messages go whole to one rail without waiting
// for the receiver (headerless, routed by 8-byte remote CQ data, or behind a header in a bounce
// buffer), under credits the receiver grants as it posts receives; an early arrival waits in its
// receive buffer (or a copy) for its receive.
#pragma once

#include "proto/dispatch.hpp"
#include "proto/pending_queue.hpp"
#include "proto/device_state.hpp"

namespace xport::proto {

class Eager {
 public:
  explicit Eager(DeviceState& state) : state_(state), queued_(&state.counters.deferred_posts) {}
  // Where tagged arrivals are placed (the Engine wires it).
  void wire(Matching& matching) { matching_ = &matching; }
  // Completions of eager sends (headerless, and headered in a bounce buffer), eager and credit
  // messages, headerless eager arrivals.
  void register_handlers(Dispatch& d);

  // Sender: the message goes now if its credit allows, else waits for credit in order.
  Status start(CommState& c, SendSlot& s, uint16_t slot);
  // isend's common case, tried once its slot holds the message: host memory, within the inject
  // size and the eager limit, headerless, credit in hand, injected from the caller's buffer.
  // done: it is done (eager, finished). busy: the provider refused it (-FI_EAGAIN); nothing
  // was posted, and the caller queues it (defer) rather than asking the busy provider again.
  // no: not such a message, or the provider failed it; nothing was posted and the slot is as it
  // was (the general path, which queues or reports).
  enum class Inject { done, busy, no };
  Inject try_inject(CommState& c, SendSlot& s, uint16_t slot, const RegionRef& region);
  // Queues eager message s for progress to post (Eager::retry), on the data path's channel.
  Status defer(CommState& c, SendSlot& s, uint16_t slot);
  // Sent with no header, routed by the CQ data alone (where the provider carries 8 bytes).
  bool headerless(uint32_t tag) const;
  // Every receive up to `posted_through` is posted at the peer: waiting messages may go.
  void grant_credit(CommState& c, uint64_t posted_through);
  void on_credit(const Message& m);
  // A completion of an eager send (headerless: its request's context; headered: the bounce
  // buffer's).
  void on_sent(fabric::OpContext* ctx, const Status& st, memory::Buffer* b);
  void retry();
  bool queued() const { return !queued_.empty(); }
  // The rail's CQ failed: messages queued for it fail with their requests.
  void fail_rail(uint32_t rail, const Status& why);
  void clear() { queued_.clear(); }

  // Receiver: reports receives posted up to `last` towards the next credit (every depth/2).
  Status report_posted(CommState& c, uint64_t last);
  // An early arrival `u` for message r (placed) is delivered and its buffer given back; or
  // dropped (the message was refused).
  void take_unexpected(CommState& c, RecvSlot& r, Unexpected& u);
  void drop_unexpected(Unexpected& u);
  void on_eager(const Message& m);
  void on_eager_data(rail::RailEndpoint* ep, memory::Buffer* b, uint64_t data, size_t len,
                     bool* hold);

 private:
  // One attempt to post (or inject) message s; queues it when the provider, the CQ or the
  // bounce buffers are full. `buffer`: the bounce buffer a queued headered message is in.
  Status post(CommState& c, SendSlot& s, uint16_t slot, pool::Channel* ch,
              memory::Buffer* buffer, bool queued);
  // Injected from the caller's buffer: within the inject size, and not GPU memory the provider
  // registered (FI_HMEM: the CPU reads an inject's source).
  bool injectable(size_t len, const RegionRef& region) const;
  // Queues message s (and its bounce buffer, if any) for a later pass: the provider is busy.
  void queue(CommState& c, SendSlot& s, uint16_t slot, pool::Channel* ch, memory::Buffer* buffer);
  void accept(CommState& c, rail::RailEndpoint* ep, memory::Buffer* b, uint16_t slot,
              uint64_t seq, size_t offset, size_t len, uint32_t tag, bool* hold);
  void deliver(CommState& c, RecvSlot& r, const uint8_t* data, size_t len);
  void sent(fabric::OpContext* ctx, const fi_cq_data_entry& e);
  void send_failed(fabric::OpContext* ctx, const Status& st, int err);
  void buffer_sent(fabric::OpContext* ctx, const fi_cq_data_entry& e);
  void buffer_send_failed(fabric::OpContext* ctx, const Status& st, int err);
  DeviceState& state_;
  Matching* matching_ = nullptr;
  PendingQueue<PendingEager> queued_;
};

}  // namespace xport::proto
