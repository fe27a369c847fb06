// Window stream credits: the target grants each stream the sequence numbers it may send out of
// CQ room every stream shares, grows the grant of busy streams, and takes unused numbers back
// from idle ones while others wait; the initiator follows the grants and asks when held at its
// limit (docs/semantics.md, "Credits").
#include <algorithm>

#include "core/log.hpp"
#include "proto/control.hpp"
#include "proto/one_sided/one_sided.hpp"
#include "proto/one_sided/stream.hpp"

namespace xport::proto {

namespace {
// A stream's first grant, and the least a stream that asks grows to: small, so that a target
// holds little for a peer that opened a window and went quiet, and 1,024 streams' first grants
// fit the default CQ room (XPORT_CQ_ENTRIES' three quarters); a stream held at its limit grows
// its grant, when it asks, to what the operations it holds could use, at least doubling it, up to
// its span. (4: a put_signal takes 2 numbers.)
constexpr uint64_t kFirstGrant = 4;
}  // namespace

// ---- initiator ----

bool Streams::on_grant(OutStream& s, const MsgHeader& h) {
  if (h.aux < s.grant_epoch) return false;  // older than a take-back followed since
  // Never more than the span beyond the target's done mark (its tables are span long).
  const uint64_t most = std::max(s.done, h.seq) + s.span;
  if ((h.slot & kDoneTakeBack) != 0) {
    if (h.aux > s.grant_epoch) {
      // What was sent stays sent: the limit comes down to what went, at most.
      s.limit = std::min(s.limit, std::max(s.next_seq, std::min(h.length, most)));
      s.grant_epoch = h.aux;
      s.grant = s.limit - std::max(s.done, h.seq);
      s.want_sent = 0;
    }
    // (an answer again for a take-back repeated after a rail loss)
    MsgHeader a = window_header(MsgType::win_sync);
    a.seq = s.limit;
    a.aux = h.aux;
    a.slot = kSyncTakenBack;
    (void)send(s, a, nullptr);
    return false;
  }
  if (h.length == 0) return false;  // the grant is unchanged
  XPORT_LOG(trace, "device ", std::hex, state_.device_token, std::dec, " window stream ", s.id,
            ": granted up to ", h.length, " (epoch ", h.aux, "; limit ", s.limit, ", sent ",
            s.next_seq, ")");
  const uint64_t limit = std::min(h.length, most);
  s.grant_epoch = h.aux;
  if (limit <= s.limit) return false;
  s.limit = limit;
  s.grant = limit - std::max(s.done, h.seq);
  return true;
}

void Streams::ask_credits(OutStream& s, uint32_t seqs) {
  const uint64_t wanted = s.next_seq + seqs;
  if (s.phase != StreamPhase::ready || wanted <= s.limit || s.want_sent == s.limit + 1) return;
  XPORT_LOG(trace, "device ", std::hex, state_.device_token, std::dec, " window stream ", s.id,
            ": asking for numbers up to ", wanted, " (limit ", s.limit, ")");
  // Every operation it holds, too (up to a span: the target grants no more), so that a burst
  // on a fresh stream grows to its span in one round trip rather than one per doubling.
  uint64_t held = 0;
  for (const Piece& p : s.held) {
    if (held >= s.span) break;
    held += p.seqs();
  }
  MsgHeader h = window_header(MsgType::win_sync);
  h.seq = s.next_seq;
  h.length = wanted;
  h.aux = std::max(wanted, s.next_seq + held);
  h.slot = kSyncWant;
  if (send(s, h, nullptr).ok()) {
    s.want_sent = s.limit + 1;  // (+1: 0 is "never asked")
    ++state_.counters.window_credit_asks;
  }
}

// ---- target ----

uint64_t Streams::room_free() const {
  if (state_.rx_cq_data_mode) return UINT64_MAX;  // writes consume posted receives, not CQ room
  size_t free = SIZE_MAX;
  for (const auto& r : state_.rails) free = std::min(free, r->cq_free());
  // Window streams share three quarters of XPORT_CQ_ENTRIES; the rest, and some room on the
  // CQ whatever else holds it, is kept for what else completes there (control messages, sends,
  // reads): a target whose streams held every entry could not even send their grants.
  const uint64_t cap = state_.config.cq_entries / 4 * 3;
  const size_t keep = 32;
  const uint64_t by_cq = free > keep ? free - keep : 0;
  return std::min(by_cq, cap > room_held_ ? cap - room_held_ : 0);
}

void Streams::hold_room(InStream& s, uint64_t need) {
  if (state_.rx_cq_data_mode || need == s.cq_reserved) return;
  if (need > s.cq_reserved) {
    const auto more = static_cast<size_t>(need - s.cq_reserved);
    for (auto& r : state_.rails) (void)r->cq_take(more);  // (room_free() said it is there)
    room_held_ += more;
  } else {
    const auto less = static_cast<size_t>(s.cq_reserved - need);
    for (auto& r : state_.rails) r->cq_give(less);
    room_held_ -= std::min<uint64_t>(room_held_, less);
  }
  s.cq_reserved = static_cast<uint32_t>(need);
}

bool Streams::pressed(uint64_t free) const { return !starved_.empty() || free < kFirstGrant; }

bool Streams::regrant(InStream& s, bool more) {
  if (s.taking_back) return false;  // its limit is not known until the answer
  const uint64_t asked = s.want > s.done ? s.want - s.done : 0;
  const uint64_t free = room_free();
  uint64_t want = s.grant;  // (acknowledged traffic: the grant slides on)
  if (state_.rx_cq_data_mode) {
    want = s.span;
  } else if (pressed(free)) {
    // Room is short: exactly what it asked for, nothing ahead (numbers granted ahead would be
    // held by an initiator that may not come back for them soon).
    want = more ? asked : 0;
  } else if (more) {
    const uint64_t wished = s.wish > s.done ? s.wish - s.done : 0;
    want = std::max({kFirstGrant, s.grant * 2, asked, wished});
  }
  want = std::min<uint64_t>(want, s.span);
  uint64_t limit = std::max(s.limit, s.done + want);
  if (limit - s.done > s.cq_reserved && limit - s.done - s.cq_reserved > free) {
    // Not all of it: as much as fits if that covers what it asked for, else no more than it
    // has (a part of a piece's numbers would hold room nobody can use).
    limit = std::max(s.limit, s.done + s.cq_reserved + free);
    if (limit < s.want) limit = s.limit;
  }
  hold_room(s, limit - s.done);
  const bool moved = limit != s.limit;
  s.grant = limit - s.done;
  if (moved) {
    s.limit = limit;
    ++s.grant_epoch;
  }
  XPORT_LOG(trace, "window stream ", s.index, ": limit ", limit, " (done ", s.done, ", wants ",
            s.want, ", room held ", room_held_, ", free ", free, ")");
  if (s.want > s.limit && !s.starved) {
    s.starved = true;
    starved_.push_back({s.index, s.gen});
    work_ = true;  // (retry() sweeps idle streams for room)
  } else if (s.want <= s.limit) {
    s.starved = false;  // (its queue entry is dropped when reached)
  }
  return moved;
}

void Streams::feed_starved() {
  while (!starved_.empty()) {
    const Starved head = starved_.front();
    InStream* s = in(head.index, head.gen, true);
    if (s == nullptr || !s->starved) {
      starved_.pop_front();
      continue;
    }
    if (s->taking_back) return;  // (its answer feeds again)
    if (regrant(*s, true)) ack_now(*s);
    if (s->starved) return;  // no room for it yet: it stays first, the rest wait behind it
    starved_.pop_front();
  }
}

bool Streams::can_take_back(const InStream& s) const {
  return !s.starved && !s.taking_back && s.limit > s.done && s.waiting.empty() &&
         s.copies.empty();
}

void Streams::take_back(InStream& s) {
  XPORT_LOG(trace, "window stream ", s.index, ": taking back numbers ", s.done, "..", s.limit);
  s.taking_back = true;
  ++s.grant_epoch;
  ++state_.counters.window_take_backs;
  send_take_back(s);
}

void Streams::send_take_back(InStream& s) {
  MsgHeader h = window_header(MsgType::win_done);
  h.seq = s.done;
  h.length = s.done;  // every unused number
  h.aux = s.grant_epoch;
  h.slot = kDoneTakeBack;
  s.acked = s.done;
  reply(s, h);
}

void Streams::sweep_idle(size_t& budget) {
  auto& live = state_.in_stream_live;
  if (starved_.empty() || live.empty()) return;
  for (size_t n = std::min(live.size(), budget); n > 0; --n) {
    if (sweep_cursor_ >= live.size()) sweep_cursor_ = 0;
    InStream* s = state_.in_streams[live[sweep_cursor_++]].get();
    if (s == nullptr) continue;
    --budget;
    // (a stream granted what it asked for has not used it yet: not idle)
    const bool idle = s->swept == s->done && s->want <= s->done;
    s->swept = s->done;
    if (idle && can_take_back(*s)) take_back(*s);
  }
}

void Streams::on_credit_sync(InStream& s, const MsgHeader& h) {
  if ((h.slot & kSyncTakenBack) != 0) {
    if (!s.taking_back || h.aux != s.grant_epoch || h.seq > s.limit) {
      state_.miss(true);  // an answer to an older take-back, or more than it ever had
      return;
    }
    s.taking_back = false;
    s.limit = std::max(h.seq, s.done);
    s.grant = s.limit - s.done;
    hold_room(s, s.grant);
    if (s.want > s.limit && regrant(s, true)) ack_now(s);
    feed_starved();
    return;
  }
  // kSyncWant: numbers up to h.length (never beyond the span past its done mark).
  s.want = std::max(s.want, std::min(h.length, s.done + s.span));
  s.wish = std::max(s.wish, std::min(h.aux, s.done + s.span));
  if (s.starved) return;  // it waits its turn
  // Its grant grows even when the limit slid past what it asked for while the ask travelled
  // (acknowledged traffic): else a busy stream would stay at its first grant for good.
  if (regrant(s, true) || s.want <= s.limit) ack_now(s);  // (or a grant it has not heard: again)
}

}  // namespace xport::proto
