// The control path: control messages (connection set-up, clear-to-send, credits, aborts,
// closes, keepalives) in bounce buffers of a rail's control endpoint or a connection; the
// posted receive buffers of every endpoint; and connections being retired.
#pragma once

#include <memory>
#include <vector>

#include "proto/dispatch.hpp"
#include "proto/hook.hpp"
#include "proto/pending_queue.hpp"
#include "proto/device_state.hpp"

namespace xport::proto {

class Control {
 public:
  explicit Control(DeviceState& state)
      : state_(state), queued_(&state.counters.deferred_posts), rx_waiting_(nullptr) {}
  // Completions of receive buffers (what arrived goes on to the dispatch table's arrivals) and
  // of control messages' send buffers.
  void register_handlers(Dispatch& d);
  // A connection whose receive buffer failed with its peer lost (bound by the engine).
  Hook<void(pool::Channel&, const Status&)> connection_lost;

  // Sends a control message on `ch`, a path of `owner` (or, without a communicator, a channel of
  // `peer`). When the provider is busy, no bounce buffer is free or the CQ has no room, it is
  // queued and retried by progress; if it still cannot go after XPORT_EAGAIN_TIMEOUT_MS, `dep`
  // fails (or, with no dependent, the peer is declared unreachable). Returns an error only when
  // the message can never be sent (then nothing is queued).
  Status send(pool::Channel* ch, const MsgHeader& h, const std::vector<uint8_t>* body,
              CommState* owner, Dependent dep, pool::Peer* peer = nullptr);
  // Progress: every queued message once, in order.
  void retry();
  bool queued() const { return !queued_.empty(); }
  // The rail's CQ failed: messages queued for its shared endpoints are dropped (what matters was
  // sent again on the other rails).
  void fail_rail(uint32_t rail);
  // The completion of a control message's bounce buffer.
  void on_sent(memory::Buffer* b, const Status& st);

  // Receive buffers: (re)posted, or queued for progress when the provider or the CQ is full.
  void repost(rail::RailEndpoint* ep, memory::Buffer* b);
  // A buffer whose completion was just handled: reposted at the start of the next progress
  // pass (off the path from a completion to the caller), or now when fewer than half of the
  // endpoint's buffers are posted.
  void repost_later(rail::RailEndpoint* ep, memory::Buffer* b);
  Status post_receives(rail::RailEndpoint* ep);
  void retry_receives();
  bool receives_waiting() const { return !rx_waiting_.empty(); }
  // The endpoint's buffers are with the provider no more (its rail failed): none is reposted.
  void forget_receives(const rail::RailEndpoint* ep);
  // Teardown: nothing queued is posted any more.
  void clear();

  // A connection no communicator uses any more: its receives are cancelled and its endpoint
  // closes once every completion naming its buffers has been read (or, for a provider that
  // reports no cancellations, after a bounded wait).
  void retire(std::unique_ptr<pool::Channel> connection);
  void reap_retired(bool force);
  // Connection events for retired connections: their FI_SHUTDOWN lets them go.
  void on_shutdown(fid_t fid);
  bool is_retiring(fid_t fid) const;
  static constexpr std::chrono::seconds kRetireWait{2};

 private:
  // One attempt: ok (sent), Code::again (keep it queued), or an error that stands. `peer`
  // names whom an error completion concerns.
  Status attempt(pool::Channel* ch, const MsgHeader& h, const uint8_t* body, size_t len,
                 const pool::Peer* peer);
  void give_up(PendingControl& p, Status why);
  void received(fabric::OpContext* ctx, const fi_cq_data_entry& e);
  void receive_failed(fabric::OpContext* ctx, const Status& st, int err);
  void consumed(fabric::OpContext* ctx);
  void sent(fabric::OpContext* ctx, const fi_cq_data_entry& e);
  void send_failed(fabric::OpContext* ctx, const Status& st, int err);
  void done_with(PendingControl& p);
  DeviceState& state_;
  Dispatch* dispatch_ = nullptr;
  PendingQueue<PendingControl> queued_;
  PendingQueue<PendingRx> rx_waiting_;          // receive buffers to post again (not counted)
  std::vector<const pool::Channel*> blocked_;  // retry(): channels with a message kept this pass
};

}  // namespace xport::proto
