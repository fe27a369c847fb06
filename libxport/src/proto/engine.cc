// Engine core: opening rails, registration on every rail, the progress loop, and routing of
// completions by op context.
#include "proto/engine.hpp"

#include <random>
#include <thread>

#include "core/knob.hpp"
#include "core/log.hpp"

namespace xport::proto {

EngineConfig EngineConfig::from_knobs() {
  using core::KnobId;
  using core::knob_int;
  EngineConfig c;
  c.eager_max = static_cast<size_t>(knob_int(KnobId::eager_max));
  c.headerless_eager = core::knob_bool(KnobId::eager_in_cq_data);
  c.max_requests =
      static_cast<uint16_t>(std::clamp<int64_t>(knob_int(KnobId::max_requests), 1, 4096));
  c.rx_buffers = static_cast<size_t>(std::max<int64_t>(knob_int(KnobId::rx_buffers), 16));
  c.tx_buffers = static_cast<size_t>(std::max<int64_t>(knob_int(KnobId::tx_buffers), 16));
  c.cq_batch = static_cast<size_t>(std::max<int64_t>(knob_int(KnobId::cq_batch), 1));
  c.max_comms = static_cast<size_t>(std::clamp<int64_t>(knob_int(KnobId::max_comms), 1, 65535));
  c.listen_backlog = static_cast<size_t>(std::max<int64_t>(knob_int(KnobId::listen_backlog), 1));
  c.eagain_timeout = std::chrono::milliseconds(knob_int(KnobId::eagain_timeout_ms));
  c.first_key = static_cast<uint64_t>(knob_int(KnobId::mr_key_base));
  c.stripe.threshold = static_cast<uint64_t>(knob_int(KnobId::stripe_threshold));
  c.stripe.align = static_cast<uint32_t>(std::clamp<int64_t>(knob_int(KnobId::stripe_align), 1, 1 << 30));
  if ((c.stripe.align & (c.stripe.align - 1)) != 0) c.stripe.align = 4096;
  // Each stripe spans at least two alignment units, so rounding never empties one.
  c.stripe.min = std::max<uint64_t>(knob_int(KnobId::stripe_min), 2ull * c.stripe.align);
  c.stripe.max_rails = static_cast<uint32_t>(std::clamp<int64_t>(knob_int(KnobId::stripe_rails), 0, kMaxRails));
  c.rail_check = std::chrono::milliseconds(knob_int(KnobId::rail_check_ms));
  c.rail_retry = std::chrono::milliseconds(knob_int(KnobId::rail_retry_ms));
  return c;
}

rail::RailConfig EngineConfig::rail_config() const {
  rail::RailConfig rc;
  rc.rx_buffers = rx_buffers;
  rc.tx_buffers = tx_buffers;
  // A buffer holds an eager message or the largest control message (a CONN_REQ).
  rc.buffer_bytes =
      sizeof(MsgHeader) + std::max(eager_max, sizeof(ConnBody) + kMaxConnAddressBytes);
  rc.first_key = first_key;
  rc.cq_size = 8 * (rc.rx_buffers + rc.tx_buffers);
  return rc;
}

Result<std::shared_ptr<Engine>> Engine::open(const std::vector<const fi_info*>& rails,
                                             const Capabilities& caps,
                                             const EngineConfig& config) {
  if (rails.empty()) return core::error(Code::invalid_argument, "a device needs at least one rail");
  if (rails.size() > kMaxRails) {
    return core::error(Code::invalid_argument, "a device has at most ", kMaxRails, " rails, ",
                       rails.size(), " requested");
  }
  const fi_info* info = rails[0];
  if (info->ep_attr->type == FI_EP_MSG && rails.size() > 1) {
    return core::error(Code::unsupported, "provider ", caps.provider,
                       " uses connected endpoints: one rail per device (", rails.size(),
                       " requested)");
  }
  auto e = std::shared_ptr<Engine>(new Engine());
  e->config_ = config;
  e->caps_ = caps;
  e->cq_data_bytes_ = info->domain_attr->cq_data_size;
  e->inject_size_ = info->tx_attr->inject_size;
  e->rx_cq_data_mode_ = (info->mode & FI_RX_CQ_DATA) != 0;
  e->headerless_eager_ = e->cq_data_bytes_ >= 8 && config.headerless_eager;
  e->device_token_ = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  if (e->config_.eager_max > info->ep_attr->max_msg_size - sizeof(MsgHeader)) {
    e->config_.eager_max = info->ep_attr->max_msg_size - sizeof(MsgHeader);
  }
  const rail::RailConfig rc = e->config_.rail_config();
  for (const fi_info* r : rails) {
    if (r->domain_attr->cq_data_size != e->cq_data_bytes_) {
      return core::error(Code::unsupported, "rails differ in remote CQ data size (",
                         r->domain_attr->cq_data_size, " vs ", e->cq_data_bytes_, " bytes)");
    }
    XPORT_ASSIGN_OR_RETURN(auto rail, rail::Rail::open(r, rc));
    e->rails_.push_back(std::move(rail));
  }
  e->comms_ = std::make_unique<pool::CommTable<CommState>>(e->config_.max_comms);
  for (uint32_t i = 0; i < e->rails_.size(); ++i) {
    auto& r = e->rails_[i];
    for (pool::Channel* ch : {r->data_channel(), r->control_channel()}) {
      if (ch == nullptr) continue;
      ch->rail = i;
      ch->endpoint->set_retry(&Engine::retry_hook, e.get(), e->config_.eagain_timeout);
      XPORT_RETURN_IF_ERROR(e->post_all_rx(ch));
    }
  }
  return e;
}

Engine::~Engine() {
  // Communicators and windows reference channels; channels' endpoints close before the rails.
  windows_.clear();
  comms_.reset();
  channels_.clear();
  rails_.clear();
}

RegionState::~RegionState() {
  if (engine) engine->deregister(*this);
}

void Engine::deregister(RegionState& r) {
  auto l = lock();
  mr_cache_.erase(r.base, &r);
  r.mrs.clear();
  registrations_ -= 1;
  registered_bytes_ -= r.length;
}

Result<Region> Engine::register_memory(void* buf, size_t len) {
  if (buf == nullptr || len == 0) {
    return core::error(Code::invalid_argument, "register_memory: empty buffer (", buf, ", ", len,
                       " bytes)");
  }
  auto l = lock();
  if (auto cached = mr_cache_.find(buf, len)) {
    // A live registration covers the range: share it (its owners keep it registered).
    Region out;
    out.state_ = std::move(cached);
    out.view_base_ = static_cast<uint8_t*>(buf);
    out.view_length_ = len;
    return out;
  }
  auto state = std::make_shared<RegionState>();
  state->base = static_cast<uint8_t*>(buf);
  state->length = len;
  state->virt_addr = (rails_[0]->domain().mr_mode() & FI_MR_VIRT_ADDR) != 0;
  const uint64_t access =
      FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  for (auto& r : rails_) {
    // Under FI_MR_ENDPOINT a region is bound to the rail's data endpoint, the only endpoint
    // that moves user memory (control messages use the control endpoint's own buffers).
    fabric::Endpoint* bind = nullptr;
    if (r->domain().mr_mode() & FI_MR_ENDPOINT) {
      if (r->data_channel() == nullptr) {
        return core::error(Code::unsupported, "provider ", caps_.provider,
                           " requires FI_MR_ENDPOINT with connected endpoints: not supported");
      }
      bind = r->data_channel()->endpoint;
    }
    auto mr = fabric::MemoryRegistration::create(r->domain(), buf, len, access, r->next_key(),
                                                 bind);
    if (!mr.ok()) return mr.status().with_context(core::str("register_memory on rail ", r->name()));
    state->mrs.push_back(std::move(mr).value());
  }
  state->engine = shared_from_this();
  registrations_ += 1;
  registered_bytes_ += len;
  mr_cache_.insert(buf, state);
  Region out;
  out.state_ = std::move(state);
  out.view_base_ = static_cast<uint8_t*>(buf);
  out.view_length_ = len;
  return out;
}

std::vector<uint8_t> Engine::export_key(const Region& region) const {
  const RegionState& r = *region.state_;
  RemoteKey k;
  k.virt_addr = r.virt_addr;
  k.base = reinterpret_cast<uint64_t>(region.view_base_);
  k.length = region.view_length_;
  k.mr_offset = static_cast<uint64_t>(region.view_base_ - r.base);
  k.device_token = device_token_;
  for (const auto& mr : r.mrs) k.keys.push_back(mr->key());
  return encode_key(k);
}

Result<RemoteRegion> Engine::import_key(std::span<const uint8_t> bytes) const {
  auto k = decode_key(bytes);
  if (!k.ok()) return k.status().with_context("import_key");
  if (k->keys.size() > kMaxRails) {
    return core::error(Code::invalid_argument, "import_key: the key describes ", k->keys.size(),
                       " rails, at most ", kMaxRails, " are supported");
  }
  if (k->virt_addr != ((rails_[0]->domain().mr_mode() & FI_MR_VIRT_ADDR) != 0)) {
    return core::error(Code::invalid_argument,
                       "import_key: the key's addressing (virtual or offset) does not match this "
                       "provider's FI_MR_VIRT_ADDR mode: was it exported by another provider?");
  }
  RemoteRegion r;
  r.virt_addr_ = k->virt_addr;
  r.base_ = k->base;
  r.length_ = k->length;
  r.mr_offset_ = k->mr_offset;
  r.keys_ = k->keys;
  return r;
}

Status Engine::check_local(const Region& region, const void* buf, size_t len, const char* what) {
  if (!region.valid()) return core::error(Code::invalid_argument, what, ": empty Region");
  if (region.state_->engine.get() != this) {
    return core::error(Code::invalid_argument, what,
                       ": the Region was registered on another device");
  }
  if (!region.contains(buf, len)) {
    return core::error(Code::invalid_argument, what, ": buffer [", buf, ", +", len,
                       ") is not inside the registered region [", region.base(), ", +",
                       region.length(), ")");
  }
  return Status::success();
}

// ---- progress ----

void Engine::retry_hook(void* self) {
  auto* e = static_cast<Engine*>(self);
  if (!e->in_progress_) (void)e->progress_locked();
}

Status Engine::progress() {
  auto l = lock();
  return progress_locked();
}

Status Engine::progress_locked() {
  if (in_progress_) return Status::success();
  in_progress_ = true;
  Status st;
  // A bounded batch from every rail's CQ per pass: no rail starves another.
  for (size_t i = 0; i < rails_.size(); ++i) {
    auto& r = rails_[i];
    polling_rail_ = i;
    auto n = r->cq().poll(
        config_.cq_batch, [this](const fi_cq_data_entry& e) { on_completion(e); },
        [this](void* ctx, Status s) { on_error(ctx, std::move(s)); });
    if (!n.ok() && st.ok()) st = n.status().with_context(core::str("rail ", r->name()));
  }
  if (st.ok() && connected_endpoints()) st = progress_events();
  check_rails();
  flush_pending();
  in_progress_ = false;
  return st;
}

void Engine::check_rails() {
  if (config_.rail_check.count() == 0) return;
  if (++passes_since_rail_check_ < kPassesPerRailCheck) return;
  passes_since_rail_check_ = 0;
  const auto now = Deadline::Clock::now();
  if (now < next_rail_check_) return;
  next_rail_check_ = now + config_.rail_check;
  for (auto& r : rails_) {
    const bool up = r->link_up();
    if (r->state() == rail::Rail::State::up && !up) {
      r->quarantine("link down", now + config_.rail_retry);
      XPORT_LOG(warn, "rail ", r->name(), " quarantined: link down; new traffic avoids it");
    } else if (r->state() == rail::Rail::State::quarantined) {
      if (!up) {
        r->quarantine(r->quarantine_reason(), now + config_.rail_retry);  // back off again
      } else if (now >= r->retry_at()) {
        r->restore();
        XPORT_LOG(info, "rail ", r->name(), " back in service: link up");
      }
    }
  }
}

void Engine::note_failure(uint32_t rail, const Status& status, bool from_post) {
  if (status.code() != Code::closed || rail >= rails_.size()) return;
  rail::Rail& r = *rails_[rail];
  if (!from_post && ++r.consecutive_failures() < kFatalInARow) return;
  if (r.state() == rail::Rail::State::up) {
    XPORT_LOG(warn, "rail ", r.name(), " quarantined after a fatal error: ", status.message());
  }
  r.quarantine(core::str("fatal error: ", status.message()),
               Deadline::Clock::now() + config_.rail_retry);
}

Status Engine::no_rail_error(size_t limit, const char* what) const {
  std::string why;
  for (size_t i = 0; i < limit; ++i) {
    why += core::str(why.empty() ? "" : ", ", rails_[i]->name(), ": ",
                     rails_[i]->quarantine_reason());
  }
  return core::error(Code::closed, what, ": every rail shared with the peer is quarantined (",
                     why, "); retry when a link is back");
}

void Engine::on_completion(const fi_cq_data_entry& e) {
  auto* ctx = fabric::op_context_of(e.op_context);
  rails_[polling_rail_]->consecutive_failures() = 0;
  XPORT_LOG(trace, "completion: flags 0x", std::hex, e.flags, " len ", std::dec, e.len,
            " data 0x", std::hex, e.data, " ctx ", e.op_context);
  // Target side of a write with data. (sockets also flags the initiator's own write completion
  // with FI_REMOTE_CQ_DATA, so initiator flags exclude it.)
  const bool remote_data =
      (e.flags & FI_REMOTE_CQ_DATA) && !(e.flags & (FI_WRITE | FI_READ | FI_SEND));
  // ... unless it is a headerless eager message: a received message (not a remote write) with
  // CQ data, in one of our receive buffers.
  const bool eager_data = remote_data && (e.flags & FI_RECV) &&
                          !(e.flags & (FI_RMA | FI_REMOTE_WRITE)) && ctx != nullptr &&
                          ctx->type == fabric::OpType::rx_buffer;
  if (remote_data && !eager_data) {
    on_write_data(e.data, e.len);
    // Providers in FI_RX_CQ_DATA mode consume a posted receive for the data: repost it.
    // Otherwise op_context is undefined for remote completions and must not be read.
    if (rx_cq_data_mode_ && ctx != nullptr && ctx->type == fabric::OpType::rx_buffer) {
      auto* ch = static_cast<pool::Channel*>(ctx->owner);
      repost(ch, &ch->rx->at(ctx->index));
    }
    return;
  }
  if (ctx == nullptr) {
    ++routing_misses_;
    return;
  }
  switch (ctx->type) {
    case fabric::OpType::rx_buffer: {
      auto* ch = static_cast<pool::Channel*>(ctx->owner);
      memory::Buffer* b = &ch->rx->at(ctx->index);
      ch->endpoint->counters().ops[static_cast<int>(fabric::OpKind::recv)].add();
      ch->endpoint->counters().bytes[static_cast<int>(fabric::OpKind::recv)].add(e.len);
      bool hold = false;
      if (eager_data) {
        on_eager_data(ch, b, e.data, e.len, &hold);
      } else {
        on_message(ch, b, e.len, &hold);
      }
      if (!hold) repost(ch, b);
      break;
    }
    case fabric::OpType::tx_buffer: {
      auto* ch = static_cast<pool::Channel*>(ctx->owner);
      ch->endpoint->count_completion(false);
      on_eager_sent(ctx, Status::success());
      ch->tx->give_back(&ch->tx->at(ctx->index));
      break;
    }
    case fabric::OpType::eager_send:
      static_cast<pool::Channel*>(ctx->owner)->endpoint->count_completion(false);
      on_eager_sent(ctx, Status::success());
      break;
    case fabric::OpType::rndv_write: on_write_done(ctx, Status::success()); break;
    case fabric::OpType::put:
    case fabric::OpType::get: on_window_done(ctx, Status::success()); break;
    case fabric::OpType::flush:
      static_cast<pool::Channel*>(ctx->owner)->endpoint->count_completion(false);
      ++flushes_done_;
      flush_in_flight_ = false;
      break;
  }
}

void Engine::on_error(void* context, Status status) {
  auto* ctx = fabric::op_context_of(context);
  if (ctx == nullptr) {
    XPORT_LOG(warn, "error completion without context: ", status.to_string());
    ++routing_misses_;
    note_failure(static_cast<uint32_t>(polling_rail_), status, false);
    return;
  }
  note_failure(static_cast<uint32_t>(polling_rail_), status, false);  // the CQ is the rail's
  switch (ctx->type) {
    case fabric::OpType::rx_buffer: {
      auto* ch = static_cast<pool::Channel*>(ctx->owner);
      ch->endpoint->counters().error_completions.add();
      XPORT_LOG(debug, "receive buffer error on ", ch->label, ": ", status.to_string());
      // A connected endpoint serves one peer: its loss fails that channel. The shared RDM
      // endpoints serve every peer: one peer's failure must not stop receives for the others.
      const bool shared = ch->peer == FI_ADDR_UNSPEC && !connected_endpoints();
      if (!shared && (status.code() == Code::peer_lost || ch->failed)) {
        fail_channel(ch, status);
      } else {
        repost(ch, &ch->rx->at(ctx->index));
      }
      break;
    }
    case fabric::OpType::tx_buffer: {
      auto* ch = static_cast<pool::Channel*>(ctx->owner);
      ch->endpoint->count_completion(true);
      on_eager_sent(ctx, status);
      ch->tx->give_back(&ch->tx->at(ctx->index));
      break;
    }
    case fabric::OpType::eager_send:
      static_cast<pool::Channel*>(ctx->owner)->endpoint->count_completion(true);
      on_eager_sent(ctx, std::move(status));
      break;
    case fabric::OpType::rndv_write: on_write_done(ctx, std::move(status)); break;
    case fabric::OpType::put:
    case fabric::OpType::get: on_window_done(ctx, std::move(status)); break;
    case fabric::OpType::flush:
      static_cast<pool::Channel*>(ctx->owner)->endpoint->count_completion(true);
      flush_error_ = std::move(status).with_context("flush");
      ++flushes_done_;
      flush_in_flight_ = false;
      break;
  }
}

Status Engine::flush(uint16_t comm, const void* buf, size_t len, const Region& region,
                     Deadline deadline) {
  uint64_t target = 0;
  {
    auto l = lock();
    Status err;
    if (comm_for(comm, false, "flush", &err) == nullptr) return err;
    XPORT_RETURN_IF_ERROR(check_local(region, buf, len, "flush"));
    if (len == 0) return Status::success();
    pool::Channel* ch = rails_[0]->data_channel();
    if (ch == nullptr || ch->owned_flush == nullptr) {
      return Status::success();  // connected endpoints: the receive completion already orders
    }
    const RegionState& rs = *region.state_;
    memory::Buffer& fb = ch->owned_flush->at(0);
    const uint64_t raddr = rs.virt_addr ? reinterpret_cast<uint64_t>(buf)
                                        : static_cast<uint64_t>(
                                              static_cast<const uint8_t*>(buf) - rs.base);
    const size_t n = std::min<size_t>(len, 4);
    if (flush_in_flight_) {
      return core::error(Code::again, "flush: another flush is in flight on this device");
    }
    target = flushes_done_ + 1;
    flush_error_ = Status();
    Status st = ch->endpoint->read(fb.data, n, ch->owned_flush->desc(), ch->self, raddr,
                                   rs.mrs[0]->key(), &fb.ctx, true);
    if (!st.ok()) return st.with_context("flush");
    flush_in_flight_ = true;
  }
  Status s = wait_until(deadline, [&] { return flushes_done_ >= target; },
                        "flush: the read did not complete before the deadline");
  // A timed-out read keeps the slot busy until it completes (its context is still posted).
  if (!s.ok()) return s;
  auto l = lock();
  flush_in_flight_ = false;
  return flush_error_;
}

void Engine::on_message(pool::Channel* ch, memory::Buffer* b, size_t len, bool* hold) {
  auto h = decode_header(b->data, len);
  if (!h.ok()) {
    ++routing_misses_;
    XPORT_LOG(warn, "dropping malformed message on ", ch->label, ": ", h.status().to_string());
    return;
  }
  const uint8_t* body = b->data + sizeof(MsgHeader);
  const size_t body_len = len - sizeof(MsgHeader);
  switch (static_cast<MsgType>(h->type)) {
    case MsgType::conn_req: on_conn_req(ch, *h, body, body_len); break;
    case MsgType::conn_ack: on_conn_ack(*h); break;
    case MsgType::conn_reject: on_conn_reject(*h); break;
    case MsgType::cts: {
      Cts cts;
      cts.seq = h->seq;
      cts.raddr = h->aux;
      cts.length = h->length;
      cts.rails = static_cast<uint32_t>(body_len / 8);
      std::memcpy(cts.keys.data(), body, body_len);
      on_cts(*h, cts);
      break;
    }
    case MsgType::eager: on_eager(ch, b, *h, hold); break;
    case MsgType::abort: on_abort(*h); break;
    case MsgType::close: on_close(*h); break;
    case MsgType::rts: on_rts(*h); break;
    case MsgType::credit: on_credit(*h); break;
  }
}

void Engine::repost(pool::Channel* ch, memory::Buffer* b) {
  if (ch->failed) return;
  Status s = ch->endpoint->recv(b->data, ch->rx->size(), ch->rx->desc(), FI_ADDR_UNSPEC, &b->ctx,
                                false);
  if (s.code() == Code::again) {
    pending_rx_.emplace_back(ch, b);
  } else if (!s.ok()) {
    XPORT_LOG(warn, "cannot repost a receive buffer on ", ch->label, ": ", s.to_string());
  }
}

Status Engine::post_all_rx(pool::Channel* ch) {
  for (size_t i = 0; i < ch->rx->count(); ++i) {
    memory::Buffer* b = ch->rx->take();
    Status s = ch->endpoint->recv(b->data, ch->rx->size(), ch->rx->desc(), FI_ADDR_UNSPEC,
                                  &b->ctx, true);
    if (!s.ok()) return s.with_context(core::str("posting receive buffers on ", ch->label));
  }
  return Status::success();
}

Status Engine::send_control(pool::Channel* ch, const MsgHeader& hdr,
                            const std::vector<uint8_t>* body, bool retry, bool queue_if_busy) {
  if (ch->failed) return core::error(Code::peer_lost, ch->label, ": ", ch->failure);
  const size_t body_len = body != nullptr ? body->size() : 0;
  const size_t len = sizeof(MsgHeader) + body_len;
  if (len > ch->tx->size()) {
    return core::error(Code::internal, "control message of ", len, " bytes exceeds the ",
                       ch->tx->size(), "-byte buffers of ", ch->label);
  }
  memory::Buffer* b = take_tx(ch, retry);
  Status s;
  if (b == nullptr) {
    s = core::error(Code::again, "no free send buffer on ", ch->label);
  } else {
    std::memcpy(b->data, &hdr, sizeof(hdr));
    if (body_len > 0) std::memcpy(b->data + sizeof(hdr), body->data(), body_len);
    b->ctx.comm = 0;  // a control message: no request waits for its completion
    if (len <= inject_size_) {
      s = ch->endpoint->inject(b->data, len, ch->peer, retry);
      ch->tx->give_back(b);
    } else {
      s = ch->endpoint->send(b->data, len, ch->tx->desc(), ch->peer, &b->ctx, retry);
      if (!s.ok()) ch->tx->give_back(b);
    }
  }
  if (s.code() == Code::again && queue_if_busy) {
    PendingControl p;
    p.ch = ch;
    p.hdr = hdr;
    if (body != nullptr) p.body = *body;
    p.since = Deadline::Clock::now();
    pending_control_.push_back(std::move(p));
    return Status::success();
  }
  return s;
}

memory::Buffer* Engine::take_tx(pool::Channel* ch, bool wait) {
  memory::Buffer* b = ch->tx->take();
  for (auto until = Deadline::after(config_.eagain_timeout);
       b == nullptr && wait && !until.expired();) {
    if (!in_progress_) (void)progress_locked();
    b = ch->tx->take();
  }
  return b;
}

Status Engine::post_rma(const PendingRma& op) {
  return op.ctx->type == fabric::OpType::put
             ? op.ch->endpoint->write(op.local, op.len, op.desc, op.ch->peer, op.raddr, op.key,
                                      op.ctx, false, 0, false)
             : op.ch->endpoint->read(op.local, op.len, op.desc, op.ch->peer, op.raddr, op.key,
                                     op.ctx, false);
}

void Engine::flush_pending() {
  for (size_t n = pending_rx_.size(); n > 0 && !pending_rx_.empty(); --n) {
    auto [ch, b] = pending_rx_.front();
    pending_rx_.erase(pending_rx_.begin());
    repost(ch, b);
  }
  for (size_t n = pending_control_.size(); n > 0; --n) {
    PendingControl p = std::move(pending_control_.front());
    pending_control_.pop_front();
    Status s = send_control(p.ch, p.hdr, p.body.empty() ? nullptr : &p.body, false, false);
    if (s.code() == Code::again && !expired(p.since)) {
      pending_control_.push_back(std::move(p));
    } else if (!s.ok()) {
      XPORT_LOG(warn, "dropping control message for ", p.ch->label, ": ", s.to_string());
    }
  }
  for (size_t n = pending_eager_.size(); n > 0; --n) {
    PendingEager p = pending_eager_.front();
    pending_eager_.pop_front();
    Status s = post_eager(p);
    if (s.ok()) continue;
    if (s.code() == Code::again && !expired(p.since)) {
      pending_eager_.push_back(p);
      continue;
    }
    on_eager_sent(p.ctx, std::move(s).with_context("eager send"));
    if (p.buffer != nullptr) p.ch->tx->give_back(p.buffer);
  }
  for (size_t n = pending_rma_.size(); n > 0; --n) {
    PendingRma p = pending_rma_.front();
    pending_rma_.pop_front();
    Status s = post_rma(p);
    if (s.ok()) continue;
    if (s.code() == Code::again && !expired(p.since)) {
      pending_rma_.push_back(p);
      continue;
    }
    on_window_done(p.ctx, std::move(s));
  }
  for (size_t n = pending_writes_.size(); n > 0; --n) {
    PendingWrite w = pending_writes_.front();
    pending_writes_.pop_front();
    CommState* c = comms_->find(w.comm);
    if (c == nullptr) continue;
    SendSlot& s = c->sends[w.slot];
    if (!s.active || s.seq != w.seq || s.done) continue;
    if (expired(w.since)) {
      s.error = core::error(Code::again, "rendezvous write of message ", s.seq,
                            ": the provider stayed busy (-FI_EAGAIN) for XPORT_EAGAIN_TIMEOUT_MS");
      s.done = true;
      continue;
    }
    post_stripe(*c, s, w.slot, w.stripe, w.raddr, w.keys, w.since);
  }
}

void Engine::fail_comm(CommState& c, Status why) {
  if (c.phase == CommPhase::failed) return;
  c.phase = CommPhase::failed;
  c.error = why;
  for (auto& s : c.sends) {
    if (s.active && !s.done) {
      s.error = why;
      s.done = true;
    }
  }
  for (auto& r : c.recvs) {
    if (r.active && !r.done) {
      r.error = why;
      r.done = true;
    }
  }
  XPORT_LOG(info, "communicator ", c.id, " failed: ", why.to_string());
}

void Engine::fail_channel(pool::Channel* ch, Status why) {
  if (!ch->failed) {
    ch->failed = true;
    ch->failure = why.message();
  }
  comms_->for_each([&](uint16_t, CommState& c) {
    if (uses(c.paths, ch)) fail_comm(c, why);
  });
  for (auto& [id, w] : windows_) {
    if (uses(w->paths, ch) && w->first_error.ok()) w->first_error = why;
  }
}

void Engine::maybe_erase(CommState& c) {
  if (!c.user_closed || c.inflight > 0) return;
  for (auto& e : c.early_eager) {
    if (e.buffer != nullptr) repost(e.owner, e.buffer);
    e.buffer = nullptr;
  }
  for (Path& p : c.paths) {
    p.data->refs -= 1;
    if (p.control != p.data) p.control->refs -= 1;
  }
  comms_->erase(c.id);
}

CommState* Engine::comm_for(uint16_t id, bool is_send, const char* op, Status* err) {
  CommState* c = comms_->find(id);
  if (c == nullptr || c->is_send != is_send || c->user_closed) {
    *err = core::error(Code::invalid_argument, op, ": communicator ", id, " is not open");
    return nullptr;
  }
  return c;
}

Stats Engine::stats() const {
  auto l = lock();
  Stats s;
  auto add_ep = [&](const fabric::Endpoint& ep, const std::string& rail) {
    EndpointStats es;
    es.name = ep.name();
    es.rail = rail;
    const auto& c = ep.counters();
    for (int i = 0; i < kStatOps; ++i) {
      es.ops[i] = c.ops[i].get();
      es.bytes[i] = c.bytes[i].get();
    }
    es.posted = c.posted.get();
    es.completed = c.completed.get();
    es.error_completions = c.error_completions.get();
    es.eagain_retries = c.eagain_retries.get();
    s.endpoints.push_back(es);
  };
  for (const auto& r : rails_) {
    RailStats rs;
    rs.name = r->name();
    rs.state = r->state_name();
    rs.quarantine_events = r->quarantines().get();
    rs.low_latency_control = r->low_latency_control();
    rs.stripes_out = r->stripes_out().get();
    rs.stripes_in = r->stripes_in().get();
    rs.write_bytes_in = r->bytes_in().get();
    for (pool::Channel* ch : {r->data_channel(), r->control_channel()}) {
      if (ch != nullptr) rs.errors += ch->endpoint->counters().error_completions.get();
    }
    s.rails.push_back(rs);
    if (r->data_channel()) add_ep(*r->data_channel()->endpoint, r->name());
    if (r->control_channel()) add_ep(*r->control_channel()->endpoint, r->name());
    CqStats cs;
    cs.name = "cq " + r->name();
    const auto& cc = r->cq().counters();
    cs.polls = cc.polls.get();
    cs.empty_polls = cc.empty_polls.get();
    cs.completions = cc.completions.get();
    cs.error_completions = cc.error_completions.get();
    cs.max_batch = cc.max_batch.get();
    s.cqs.push_back(cs);
  }
  for (const auto& ch : channels_) {
    if (ch->owned_endpoint) add_ep(*ch->owned_endpoint, rails_[0]->name());
  }
  s.comms_open = comms_->size();
  s.registrations = registrations_;
  s.registered_bytes = registered_bytes_;
  s.routing_misses = routing_misses_;
  s.mr_cache_hits = mr_cache_.hits();
  s.mr_cache_misses = mr_cache_.misses();
  return s;
}

}  // namespace xport::proto
