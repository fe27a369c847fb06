// Receive groups and tags: posting, placing messages by tag, the group's outcome.
#include "proto/two_sided/matching.hpp"

#include <utility>

#include "core/log.hpp"
#include "proto/control.hpp"
#include "proto/two_sided/eager.hpp"
#include "proto/two_sided/rendezvous.hpp"

namespace xport::proto {
namespace {

enum RefuseReason : uint64_t { kNoBufferLeft = 1, kOtherTag = 2 };

std::string tag_list(const CommState& c, const RecvSlot& head) {
  std::string out;
  for (uint32_t i = 0; i < head.group_n; ++i) {
    out += core::str(i == 0 ? "" : ", ", c.recvs[c.slot_of(head.group_base + i)].posted_tag);
  }
  return out;
}

}  // namespace

Status Matching::post(CommState& c, std::span<const Buffer> buffers) {
  const uint64_t base = c.next_seq;
  const auto n = static_cast<uint32_t>(buffers.size());
  for (uint32_t i = 0; i < n; ++i) {
    if (slot(c, base + i).active) {
      return core::error(Code::again, "irecv: ", c.depth, " receives are outstanding on "
                         "communicator ", c.id.index, " (test() them, or raise "
                         "XPORT_MAX_REQUESTS)");
    }
  }
  bool uniform = true;
  for (const Buffer& b : buffers) uniform = uniform && b.tag == buffers[0].tag;
  for (uint32_t i = 0; i < n; ++i) {
    RecvSlot& r = slot(c, base + i);
    r.reset();
    r.active = true;
    r.seq = base + i;
    r.group_base = base;
    r.group_n = static_cast<uint8_t>(n);
    r.posted_buf = buffers[i].buf;
    r.posted_cap = buffers[i].cap;
    r.posted_region = *buffers[i].region;
    r.posted_tag = buffers[i].tag;
  }
  // One tag for the whole group (every plain receive): message i takes buffer i.
  if (uniform) {
    for (uint32_t i = 0; i < n; ++i) assign(c, slot(c, base + i), static_cast<uint8_t>(i));
  }
  // A placed buffer that can take a rendezvous message gets its clear-to-send now (the sender
  // may write the moment it has the message), an eager-sized one only if its sender asked. The
  // CQ room their writes need is taken for all of them first: without it nothing is posted.
  std::array<bool, kMaxGroup> cts{};
  for (uint32_t i = 0; i < n; ++i) {
    RecvSlot& r = slot(c, base + i);
    const EarlyRts& e = c.early_rts[c.slot_of(r.seq)];
    const bool asked = e.valid && e.seq == r.seq;
    cts[i] = r.assigned && (asked ? e.tag == r.want_tag : r.cap > c.eager_max);
  }
  for (uint32_t i = 0; i < n; ++i) {
    if (!cts[i]) continue;
    Status room = rendezvous_->reserve_cts_room(c, slot(c, base + i));
    if (!room.ok()) {
      for (uint32_t k = 0; k < n; ++k) {
        RecvSlot& r = slot(c, base + k);
        state_.release_cts_room(c, r);
        r.reset();
      }
      return room;
    }
  }
  c.next_seq += n;
  for (uint32_t i = 0; i < n; ++i) {
    RecvSlot& r = slot(c, base + i);
    const auto s = c.slot_of(r.seq);
    EarlyRts& e = c.early_rts[s];
    if (e.valid && e.seq == r.seq) {
      e.valid = false;
      r.rts_pending = !r.assigned;
      if (!on_tag(c, r, e.tag, true)) continue;
    }
    if (cts[i]) {
      Status st = rendezvous_->send_cts(c, r, s);
      if (!st.ok()) state_.fail_recv(c, r, std::move(st).with_context(core::str("irecv: message ",
                                                                                 r.seq)));
    }
    // An eager message that came before its receive (a large buffer may get one too: its CTS
    // is then unused).
    Unexpected& u = c.unexpected[s];
    if (u.valid && u.seq == r.seq && !r.finished) {
      if (r.assigned) {
        if (on_tag(c, r, u.tag, false)) eager_->take_unexpected(c, r, u);
      } else {
        r.tag_known = true;
        r.tag = u.tag;
      }
    }
  }
  if (!uniform) resolve(c, base);
  if (c.peer_closed) {
    for (uint32_t i = 0; i < n; ++i) {
      RecvSlot& r = slot(c, base + i);
      if (r.seq >= c.peer_sent) {
        state_.fail_recv(c, r, core::error(Code::closed, "the peer closed communicator ",
                                           c.id.index, " after ", c.peer_sent, " messages"));
      }
    }
  }
  // Towards the sender's eager credit; a report that cannot go leaves the peer to be found
  // out by keepalive (the channel is gone).
  Status credit = eager_->report_posted(c, base + n - 1);
  if (!credit.ok()) XPORT_LOG(debug, "credit report: ", credit.to_string());
  return Status::success();
}

void Matching::assign(CommState& c, RecvSlot& r, uint8_t sub) {
  RecvSlot& b = slot(c, r.group_base + sub);
  r.assigned = true;
  r.sub = sub;
  r.want_tag = b.posted_tag;
  r.buf = b.posted_buf;
  r.cap = b.posted_cap;
  r.region = std::move(b.posted_region);  // (each posted buffer takes one message)
}

bool Matching::on_tag(CommState& c, RecvSlot& r, uint32_t tag, bool rts) {
  if (rts) r.rts_pending = true;
  if (r.assigned) {
    if (tag == r.want_tag) return true;
    refuse(c, r, tag, kOtherTag,
           core::error(Code::invalid_argument, "irecv: message ", r.seq, " of communicator ",
                       c.id.index, " was sent with tag ", tag, ", its receive buffer takes tag ",
                       r.want_tag));
    return false;
  }
  r.tag_known = true;
  r.tag = tag;
  resolve(c, r.group_base);
  return !(r.finished && !r.assigned);
}

void Matching::resolve(CommState& c, uint64_t base) {
  const RecvSlot& head = slot(c, base);
  if (!head.active || head.group_base != base || head.seq != base) return;
  const uint32_t n = head.group_n;
  std::array<bool, kMaxGroup> taken{};
  for (uint32_t i = 0; i < n; ++i) {
    const RecvSlot& r = slot(c, base + i);
    if (r.assigned) taken[r.sub] = true;
  }
  // In the sender's order: message i's buffer depends on the tags of the messages before it.
  for (uint32_t i = 0; i < n; ++i) {
    RecvSlot& r = slot(c, base + i);
    if (r.assigned || r.finished) continue;
    if (!r.tag_known) break;
    uint32_t j = 0;
    while (j < n && (taken[j] || slot(c, base + j).posted_tag != r.tag)) ++j;
    if (j == n) {
      refuse(c, r, r.tag, kNoBufferLeft,
             core::error(Code::invalid_argument, "irecv: message ", r.seq, " of communicator ",
                         c.id.index, " was sent with tag ", r.tag, ", which no buffer left in "
                         "its group takes (tags ", tag_list(c, head), ")"));
      continue;
    }
    taken[j] = true;
    assign(c, r, static_cast<uint8_t>(j));
    start(c, r);
  }
}

void Matching::start(CommState& c, RecvSlot& r) {
  const auto s = c.slot_of(r.seq);
  Unexpected& u = c.unexpected[s];
  if (u.valid && u.seq == r.seq) {
    eager_->take_unexpected(c, r, u);
    return;
  }
  if (r.rts_pending && !r.cts_sent) {
    Status st = rendezvous_->send_cts(c, r, s);
    if (!st.ok()) {
      state_.fail_recv(c, r, std::move(st).with_context(core::str("irecv: message ", r.seq)));
    }
  }
}

void Matching::refuse(CommState& c, RecvSlot& r, uint32_t tag, uint64_t reason, Status why) {
  const auto s = c.slot_of(r.seq);
  Unexpected& u = c.unexpected[s];
  if (u.valid && u.seq == r.seq) eager_->drop_unexpected(u);
  if (r.rts_pending) {
    // A rendezvous sender waits for a clear-to-send that will never come: it is told.
    MsgHeader h = comm_header(MsgType::refuse, c, s, r.seq);
    h.aux = reason;
    h.aux2 = tag;
    (void)state_.control->send(state_.control_path(c), h, nullptr, &c, Dependent{});
  }
  state_.fail_recv(c, r, std::move(why));
}

Result<GroupOutcome> Matching::take(CommState& c, uint64_t base) {
  RecvSlot& head = slot(c, base);
  if (!head.active || head.seq != base || head.group_base != base) {
    return core::error(Code::invalid_argument, "test: request ", base,
                       " is not outstanding on communicator ", c.id.index,
                       " (completed already, or never issued)");
  }
  const uint32_t n = head.group_n;
  for (uint32_t i = 0; i < n; ++i) {
    if (!slot(c, base + i).finished) return GroupOutcome{};
  }
  GroupOutcome out;
  out.done = true;
  out.count = n;
  Status error;
  for (uint32_t i = 0; i < n; ++i) {
    RecvSlot& r = slot(c, base + i);
    if (!r.error.ok() && error.ok()) error = std::exchange(r.error, Status());
    if (r.assigned) {
      out.sizes[r.sub] = r.bytes;
      out.bytes += r.bytes;
    }
  }
  for (uint32_t i = 0; i < n; ++i) slot(c, base + i).retire();
  if (!error.ok()) return error;
  return out;
}

}  // namespace xport::proto
