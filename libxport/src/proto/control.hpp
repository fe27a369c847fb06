// The control path: control messages (connection set-up, clear-to-send, credits, aborts,
// closes, keepalives) in bounce buffers of a rail's control endpoint or a connection; the
// posted receive buffers of every endpoint; and connections being retired.
#pragma once

#include <memory>
#include <vector>

#include "proto/state.hpp"

namespace xport::proto {

class Control {
 public:
  explicit Control(Core& core) : core_(core) {}

  // Sends a control message on `ch`, a path of `owner` (or, without a communicator, a channel of
  // `peer`). When the provider is busy, no bounce buffer is free or the CQ has no room, it is
  // queued and retried by progress; if it still cannot go after XPORT_EAGAIN_TIMEOUT_MS, `dep`
  // fails (or, with no dependent, the peer is declared unreachable). Returns an error only when
  // the message can never be sent (then nothing is queued).
  Status send(pool::Channel* ch, const MsgHeader& h, const std::vector<uint8_t>* body,
              CommState* owner, Dependent dep, pool::Peer* peer = nullptr);
  // Progress: every queued message once, in order.
  void retry();
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
  // One attempt: ok (sent), Code::again (keep it queued), or an error that stands.
  Status attempt(PendingControl& p);
  void give_up(PendingControl& p, Status why);
  void done_with(PendingControl& p);
  Core& core_;
};

}  // namespace xport::proto
