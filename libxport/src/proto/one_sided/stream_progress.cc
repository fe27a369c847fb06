// Streams (window operations to one peer), their part of a progress pass: retrying what waits,
// stalls, a peer's failure, and teardown.
#include "proto/one_sided/stream.hpp"

#include <algorithm>

#include "core/log.hpp"
#include "core/random.hpp"
#include "proto/control.hpp"
#include "proto/one_sided/one_sided.hpp"

namespace xport::proto {

bool Streams::scan() const {
  if (!starved_.empty()) return true;  // (sweep_idle takes room back for them)
  for (const auto& [id, s] : state_.out_streams) {
    if (!s->held.empty() || (s->windows == 0 && s->openers == 0)) return true;
  }
  for (uint16_t index : state_.in_stream_live) {
    const InStream* in = state_.in_streams[index].get();
    if (in != nullptr && !in->waiting.empty()) return true;
  }
  return false;
}

void Streams::retry() {
  size_t budget = state_.config.progress_batch;
  std::vector<uint32_t> ids;
  for (auto& [id, s] : state_.out_streams) ids.push_back(id);
  for (uint32_t id : ids) {
    OutStream* s = find(id);
    if (s == nullptr) continue;
    pump(*s, budget);
    if ((s = find(id)) == nullptr || s->windows > 0 || s->openers > 0 || !s->held.empty()) {
      continue;
    }
    // Idle (no window uses it): closed once everything it sent is acknowledged.
    if (s->phase == StreamPhase::ready && (s->done < s->next_seq || s->uncounted_inflight > 0)) {
      request_ack(*s, s->next_seq);
      continue;
    }
    if (s->phase == StreamPhase::connecting) continue;  // its opener is still waiting
    if (s->phase == StreamPhase::ready) {
      MsgHeader h = window_header(MsgType::win_close);
      (void)send(*s, h, nullptr);
      closing(*s);
    }
    erase_out(*s);
  }
  size_t apply = state_.config.progress_batch;
  // (by position: nothing here closes a stream; a pass copies no list)
  for (size_t i = 0; i < state_.in_stream_live.size(); ++i) {
    InStream* s = state_.in_streams[state_.in_stream_live[i]].get();
    if (s == nullptr || s->waiting.empty()) continue;
    drain(*s, apply);
    maybe_ack(*s);
  }
  sweep_idle(apply);
  work_ = scan();  // what a budget or a credit left for a later pass
}

void Streams::fail_peer(pool::Peer& p, const Status& why) {
  for (auto& [id, s] : state_.out_streams) {
    if (s->peer == &p) fail(*s, why);
  }
  const std::vector<uint16_t> live = state_.in_stream_live;  // (erase_in changes it)
  for (uint16_t index : live) {
    InStream* s = state_.in_streams[index].get();
    if (s != nullptr && s->peer == &p) erase_in(*s);
  }
}

void Streams::check_stalls(Clock::time_point now) {
  std::vector<uint32_t> stalled;
  for (auto& [id, s] : state_.out_streams) {
    if (s->phase != StreamPhase::ready || s->sync_sent <= s->done) continue;
    // Only while the peer answers (a keepalive's answer, any message) after it was asked: a
    // silent one is declared lost on the same clock, which says more.
    if (s->peer == nullptr || s->peer->dead || s->peer->last_heard <= s->sync_since) continue;
    if (now - s->sync_since > state_.config.peer_timeout) stalled.push_back(id);
  }
  for (uint32_t id : stalled) {
    OutStream* s = find(id);
    if (s == nullptr) continue;
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - s->sync_since);
    fail(*s, core::error(Code::fabric, "window stream to device ", std::hex,
                         s->peer != nullptr ? s->peer->token : 0, std::dec, ": operation ",
                         s->done, " never reached the target (asked to acknowledge up to ",
                         s->sync_sent, ", no progress for ", waited.count(),
                         " ms, XPORT_PEER_TIMEOUT_MS): a write its provider refused (a key that "
                         "does not cover the range?) or lost; the stream is closed, windows "
                         "opened from now on to that device use a new one"));
  }
}

void Streams::add_waited_peers(std::unordered_set<const pool::Peer*>& out) const {
  for (const auto& [id, s] : state_.out_streams) {
    if (s->phase == StreamPhase::connecting ||
        (s->phase == StreamPhase::ready &&
         (!s->held.empty() || s->done < s->next_seq || s->awaiting_count > 0))) {
      out.insert(s->peer);
    }
  }
  for (uint16_t index : state_.in_stream_live) {
    const InStream* s = state_.in_streams[index].get();
    if (s != nullptr && s->taking_back) out.insert(s->peer);
  }
}

void Streams::shutdown() {
  // (wait_local's answers without the engine stop: it says what a closed device says)
  for (auto& [id, w] : state_.windows) w->local_clear->store(0, std::memory_order_release);
  for (auto& [id, s] : state_.out_streams) {
    if (s->phase != StreamPhase::ready) continue;
    MsgHeader h = window_header(MsgType::win_close);
    (void)send(*s, h, nullptr);
    s->phase = StreamPhase::failed;
    s->error = Status(Code::closed, "the device closed");
  }
  // Every initiator still holding a stream to this device hears that it is gone and sends
  // nothing more: one in this process would otherwise write into the memory of an endpoint
  // closed here (shm maps a peer in the same process once, and unmaps it with its endpoint).
  for (auto& in : state_.in_streams) {
    if (in == nullptr) continue;
    MsgHeader h = window_header(MsgType::win_gone);
    reply(*in, h, false);
  }
}

}  // namespace xport::proto
