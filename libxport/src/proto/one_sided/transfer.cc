// Transfers: batches of puts and gets as one ticket, and their notifications.
#include "proto/one_sided/transfer.hpp"

#include "proto/one_sided/one_sided.hpp"

namespace xport::proto {

Result<Ticket> Transfers::post(uint32_t window, const std::vector<Item>& items,
                               const std::vector<uint8_t>& notification,
                               std::vector<Ticket>* published) {
  const char* what = "transfer";
  Status err;
  WindowState* w = os_.windows().usable(window, what, &err);
  if (w == nullptr) return err;
  if (notification.size() > kMaxNotifyBytes) {
    return core::error(Code::invalid_argument, "transfer: a notification of ",
                       notification.size(), " bytes (at most ", kMaxNotifyBytes, ")");
  }
  if (items.empty() && notification.empty()) {
    return core::error(Code::invalid_argument, "transfer: nothing to transfer");
  }
  // Everything is checked, and contexts and tickets counted, before anything is issued.
  uint32_t contexts = 0;
  size_t publishes = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    if (it.key == nullptr) {
      return core::error(Code::invalid_argument, "transfer: item ", i, " has an empty RemoteRegion");
    }
    if (it.op != fabric::OpType::put && it.op != fabric::OpType::get) {
      return core::error(Code::invalid_argument, "transfer: item ", i, " is neither put nor get");
    }
    XPORT_RETURN_IF_ERROR(os_.windows()
                              .check_remote(*w, *it.key, it.remote_offset, it.len, what)
                              .with_context(core::str("item ", i)));
    XPORT_ASSIGN_OR_RETURN(uint32_t n, os_.stripes(*w, *it.key, it.len, what));
    contexts += n;
    publishes += it.publish && it.op == fabric::OpType::put && it.len > 0 ? 1 : 0;
  }
  if (Windows::kMaxTickets - std::min(Windows::kMaxTickets, w->tickets.size()) < 1 + publishes) {
    return core::error(Code::again, "transfer: takes ", 1 + publishes, " tickets (itself and ",
                       "the publishes of its puts into a peer's staged GPU memory), and ",
                       Windows::kMaxTickets, " operations are nearly all not yet complete on "
                       "the window; call quiet()");
  }
  // More than the window has can never be free at once: `again` ("quiet and retry") would loop.
  if (contexts > Windows::kOps) {
    return core::error(Code::invalid_argument, "transfer: its ", items.size(), " items need ",
                       contexts, " provider operations, more than a window has (",
                       Windows::kOps, "): split it into transfers of at most ", Windows::kOps,
                       " operations (one per item, one per stripe of an item striped over rails)");
  }
  if (w->free.size() < contexts) {
    return core::error(Code::again, "transfer: needs ", contexts, " operations, ", w->free.size(),
                       " are free on the window; call quiet()");
  }
  OutStream* s = os_.streams().find(w->stream);
  XPORT_ASSIGN_OR_RETURN(Ticket t, os_.windows().begin(*w, what));
  os_.windows().ticket(*w, t)->transfer = true;
  for (const Item& it : items) {
    XPORT_RETURN_IF_ERROR(os_.add_rma(*w, *s, t, it.op, it.region, it.local, it.len, *it.key,
                                      it.remote_offset, nullptr, what));
  }
  Piece p;
  p.window = w->id;
  p.ticket = t;
  if (!notification.empty()) {
    // After every earlier operation of the stream, the transfer's own gets included; its
    // application is acknowledged at once, so check() sees the transfer done promptly.
    p.kind = PieceKind::notify;
    p.flags = kWinStrong | kWinAckNow;
    p.after.uncounted = s->next_uncounted;
    p.payload = notification;
    os_.windows().ticket(*w, t)->local_left += 1;
  } else {
    p.kind = PieceKind::sync;
  }
  os_.streams().submit(*s, std::move(p));
  // Each put into a peer's staged GPU memory is followed by its publish (a strong signal-like
  // message: the target copies the range on to its GPU), in this hold of the lock.
  for (const Item& it : items) {
    if (!it.publish || it.op != fabric::OpType::put || it.len == 0) continue;
    if ((w = os_.windows().find(window)) == nullptr) return t;
    Signals::Spec pub;
    pub.key = it.key;
    pub.offset = it.remote_offset;
    pub.value = it.len;
    pub.op = WindowSignalOp::publish;
    pub.strong = true;
    XPORT_ASSIGN_OR_RETURN(Ticket pt, os_.windows().begin(*w, what));  // (room checked above)
    os_.signals().submit(*w, *s, pt, pub);
    if (published != nullptr) published->push_back(pt);
  }
  if ((w = os_.windows().find(window)) != nullptr) os_.windows().settle(*w, t);
  return t;
}

void Transfers::send_notify(OutStream& s, const Piece& p, uint64_t seq) {
  MsgHeader h{};
  h.type = static_cast<uint8_t>(MsgType::win_notify);
  h.version = kWireVersion;
  h.seq = seq;
  h.slot = static_cast<uint16_t>(p.flags << 8);
  Status st = os_.streams().send_op(s, h, &p.payload);
  if (st.ok()) return;
  if (WindowState* w = os_.windows().find(p.window)) {
    os_.windows().fail(*w, p.ticket, st.with_context("notification"));
  }
  os_.streams().fail(s, st.with_context("notification"));
}

void Transfers::apply(InStream& in, const MsgHeader&, std::vector<uint8_t> payload) {
  in.notes.push_back(std::move(payload));
  ++state_.counters.notifications;
}

std::vector<std::vector<uint8_t>> Transfers::take(uint32_t window) {
  std::vector<std::vector<uint8_t>> out;
  WindowState* w = os_.windows().find(window);
  if (w == nullptr) return out;
  for (uint16_t index : state_.in_stream_live) {
    InStream* in = state_.in_streams[index].get();
    if (in == nullptr || in->peer != w->peer) continue;
    for (auto& n : in->notes) out.push_back(std::move(n));
    in->notes.clear();
  }
  return out;
}

}  // namespace xport::proto
