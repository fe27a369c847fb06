// The dispatch table: completions by their context's kind, messages by type, peers' writes by
// their CQ data.
#include "proto/dispatch.hpp"

#include "core/log.hpp"
#include "proto/device_state.hpp"

namespace xport::proto {

void Dispatch::done(const fi_cq_data_entry& e) {
  auto* ctx = fabric::op_context_of(e.op_context);
  rail::Rail& rail = *state_.rails[rail_];
  rail.health().consecutive_failures() = 0;
  XPORT_LOG(trace, "completion: flags 0x", std::hex, e.flags, " len ", std::dec, e.len, " data 0x",
            std::hex, e.data, " ctx ", e.op_context);
  // Target side of a write with data, unless it is a headerless eager message: a received
  // message (not a remote write) with CQ data, in one of our receive buffers.
  const bool remote_data = carries_remote_data(e);
  const bool eager_data = remote_data && (e.flags & FI_RECV) &&
                          !(e.flags & (FI_RMA | FI_REMOTE_WRITE)) && ctx != nullptr &&
                          ctx->type == fabric::OpType::rx_buffer;
  if (remote_data && !eager_data) {
    write_landed(e.data, e.len, static_cast<uint32_t>(rail_));
    // Providers in FI_RX_CQ_DATA mode consume a posted receive for the data: it goes back.
    // Otherwise op_context is undefined for remote completions and must not be read (the
    // entry's CQ room was held by the clear-to-send).
    if (state_.rx_cq_data_mode && ctx != nullptr && ctx->type == fabric::OpType::rx_buffer) {
      rail.cq_give();
      consumed_(ctx);
    }
    return;
  }
  if (ctx == nullptr) {
    state_.miss();
    return;
  }
  rail.cq_give();
  const auto type = static_cast<size_t>(ctx->type);
  if (type >= rows_.size() || !rows_[type].done) {
    state_.miss();
    return;
  }
  rows_[type].done(ctx, e);
}

void Dispatch::failed(void* context, const Status& status, int err) {
  auto* ctx = fabric::op_context_of(context);
  if (err != FI_ECANCELED) state_.note_failure(static_cast<uint32_t>(rail_), status, false);
  if (ctx == nullptr) {
    XPORT_LOG(warn, "error completion without context: ", status.to_string());
    state_.miss();
    return;
  }
  state_.rails[rail_]->cq_give();
  const auto type = static_cast<size_t>(ctx->type);
  if (type >= rows_.size() || !rows_[type].failed) {
    state_.miss();
    return;
  }
  rows_[type].failed(ctx, status, err);
}

void Dispatch::message_arrived(rail::RailEndpoint* ep, memory::Buffer* b, size_t len, bool* hold) {
  auto h = decode_header(b->data, len);
  if (!h) {
    state_.miss();
    XPORT_LOG(warn, "dropping malformed message on ", ep->label(), ": ", h.status().to_string());
    return;
  }
  route(Message{*h, b->data + sizeof(MsgHeader), len - sizeof(MsgHeader), ep, b, hold});
}

void Dispatch::route(const Message& m) {
  const size_t type = m.h.type;
  if (type >= routes_.size() || !routes_[type].handler) {
    state_.miss();
    return;
  }
  const Route& r = routes_[type];
  // A clear-to-send, a credit or a close from a listener may take another rail than its
  // CONN_ACK and overtake it: kept for the connecting communicator, replayed after the ACK.
  if (r.gated && gate_(m)) return;
  r.handler(m);
}

void Dispatch::write_landed(uint64_t data, size_t len, uint32_t rail) {
  if (is_window_write(data)) {  // comm id 0: a window's write, counted by its stream
    window_write_(data, len, rail);
  } else {
    rendezvous_write_(data, len, rail);
  }
}

void Dispatch::replay(Stashed& m) {
  bool hold = false;
  route(Message{m.header, m.body.data(), m.body.size(), nullptr, nullptr, &hold});
}

}  // namespace xport::proto
