// Engine: composing the parts and the facades of the public calls, opening rails, and teardown
// (the facades and the progress pass are in the files the end of this one names).
#include "proto/engine.hpp"

#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include "core/knob.hpp"
#include "core/log.hpp"

namespace xport::proto {

namespace {
// This process's engines. Two devices of one process are each other's peers (xport-loopback,
// tests, a runtime with a device per GPU), and shm maps a peer in the same process once: when a
// device closes, its endpoints' memory is unmapped, and a post to it from another device of the
// process is a SIGSEGV inside the provider. A closing device tells the others first.
std::mutex g_engines_mu;
std::vector<std::weak_ptr<Engine>> g_engines;
// The tokens of this process's devices that closed: a device that learns of one only later (a
// key or a handle of it used after it closed) never posts to it either. 8 bytes per device
// closed in the life of the process.
std::vector<uint64_t> g_closed_tokens;
}  // namespace

bool device_closed_in_process(uint64_t token) {
  std::lock_guard<std::mutex> g(g_engines_mu);
  return std::find(g_closed_tokens.begin(), g_closed_tokens.end(), token) !=
         g_closed_tokens.end();
}

// core/knob.cc's ranges hold XPORT_MAX_REQUESTS to 1..4096 and XPORT_STRIPE_RAILS to 0..32
// (core cannot include proto): these keep the two in step.
static_assert(kMaxSlots == 4096, "XPORT_MAX_REQUESTS's range in core/knob.cc (kRanges)");
static_assert(kMaxRails == 32, "XPORT_STRIPE_RAILS's range in core/knob.cc (kRanges)");

EngineConfig EngineConfig::from_knobs() {
  using core::KnobId;
  using core::knob_int;
  EngineConfig c;
  c.eager_max = static_cast<size_t>(knob_int(KnobId::eager_max));
  c.headerless_eager = core::knob_bool(KnobId::eager_in_cq_data);
  // Ranged knobs hold an in-range value: one outside its range is refused where knobs are read
  // (core/knob.cc, kRanges) and the knob keeps its default.
  c.max_requests = static_cast<uint16_t>(knob_int(KnobId::max_requests));  // 1..kMaxSlots
  c.rx_buffers = static_cast<size_t>(knob_int(KnobId::rx_buffers));
  c.tx_buffers = static_cast<size_t>(knob_int(KnobId::tx_buffers));
  c.cq_batch = static_cast<size_t>(knob_int(KnobId::cq_batch));
  c.cq_entries = static_cast<size_t>(knob_int(KnobId::cq_entries));
  c.max_comms = static_cast<size_t>(knob_int(KnobId::max_comms));
  c.pool_groups = static_cast<uint32_t>(knob_int(KnobId::pool_groups));
  c.pool_channels = static_cast<uint32_t>(knob_int(KnobId::pool_channels));
  c.pool_depth_multiplier = static_cast<uint32_t>(knob_int(KnobId::pool_depth_multiplier));
  c.shard_peers = static_cast<uint32_t>(knob_int(KnobId::shard_peers));
  c.max_shards = static_cast<uint32_t>(knob_int(KnobId::max_shards));
  c.listen_backlog = static_cast<size_t>(knob_int(KnobId::listen_backlog));
  c.eagain_timeout = std::chrono::milliseconds(knob_int(KnobId::eagain_timeout_ms));
  c.keepalive = std::chrono::milliseconds(knob_int(KnobId::keepalive_ms));
  c.peer_timeout = std::chrono::milliseconds(knob_int(KnobId::peer_timeout_ms));
  c.close_linger = std::chrono::milliseconds(knob_int(KnobId::close_linger_ms));
  c.stripe.threshold = static_cast<uint64_t>(knob_int(KnobId::stripe_threshold));
  c.stripe.align = static_cast<uint32_t>(knob_int(KnobId::stripe_align));  // a power of two
  // Each stripe spans at least two alignment units, so rounding never empties one.
  c.stripe.min = std::max<uint64_t>(knob_int(KnobId::stripe_min), 2ull * c.stripe.align);
  c.stripe.max_rails = static_cast<uint32_t>(knob_int(KnobId::stripe_rails));  // 0..kMaxRails
  c.rail_check = std::chrono::milliseconds(knob_int(KnobId::rail_check_ms));
  c.rail_retry = std::chrono::milliseconds(knob_int(KnobId::rail_retry_ms));
  const std::string& atomics = core::knob_string(KnobId::atomics);
  c.atomics = atomics == "native"     ? EngineConfig::Atomics::native
              : atomics == "emulated" ? EngineConfig::Atomics::emulated
                                      : EngineConfig::Atomics::automatic;
  c.window_credits = static_cast<uint32_t>(std::clamp<int64_t>(knob_int(KnobId::window_credits),
                                                               8, 1 << 30));
  c.progress_batch = static_cast<size_t>(knob_int(KnobId::progress_batch));
  c.test_seq_bits = static_cast<unsigned>(knob_int(KnobId::test_seq_bits));
  c.block_waits = core::knob_string(KnobId::wait) == "block";
  c.wait_spin = std::chrono::microseconds(std::max<int64_t>(knob_int(KnobId::wait_spin_us), 0));
  c.spin_gather_knob = knob_int(KnobId::spin_gather_ns);
  const std::string& ce = core::knob_string(KnobId::control_endpoint);
  c.control_endpoint = ce == "shared"     ? EngineConfig::ControlEndpoint::shared
                       : ce == "separate" ? EngineConfig::ControlEndpoint::separate
                                          : EngineConfig::ControlEndpoint::automatic;
  return c;
}

bool EngineConfig::separate_control(std::string_view provider) const {
  switch (control_endpoint) {
    case ControlEndpoint::shared: return false;
    case ControlEndpoint::separate: return true;
    case ControlEndpoint::automatic: break;
  }
  // tcp;ofi_rxm takes FI_TC_LOW_LATENCY and ignores it, and a second endpoint is a second set
  // of sockets for its progress to poll (an 8-byte ping-pong: 17 µs with two, 10.7 with one).
  // Elsewhere the control endpoint stays its own: cxi honours the class, shm gained nothing
  // measurable (1.49 µs either way), and with one endpoint for everything, control messages to
  // a dead shm peer held up other peers' (the strict provider's killed-peer tests).
  return provider != "tcp;ofi_rxm";
}

std::chrono::nanoseconds EngineConfig::spin_gather_for(std::string_view provider) const {
  if (spin_gather_knob >= 0) {
    return std::chrono::nanoseconds(std::min<int64_t>(spin_gather_knob, 100000));
  }
  // shm's progress locks the endpoint's shared region at every poll, the lock a peer takes to
  // queue a command there, so a target that polls flat out slows its writers down (the bare
  // loop's 8-byte write rate rose by 40-65% when its target spent 0.15 µs per completion). A
  // microsecond after each productive pass took libxport's 8-byte put rate from 0.91 to 1.32
  // M/s (medians; slowest runs 1.09 against 0.76 in another call), and left the ping-pongs as
  // they were (docs/benchmarks.md, ninth pass). On tcp;ofi_rxm, whose waiter moves the bytes
  // itself (manual progress), it slowed puts: none there.
  return provider == "shm" ? std::chrono::nanoseconds(1000) : std::chrono::nanoseconds(0);
}

rail::RailConfig EngineConfig::rail_config(std::string_view provider) const {
  rail::RailConfig rc;
  rc.separate_control = separate_control(provider);
  rc.rx_buffers = rx_buffers;
  rc.tx_buffers = tx_buffers;
  // A buffer holds an eager message or the largest control message (a CONN_REQ or CONN_ACK);
  // an RDM rail's separate control endpoint, which carries no eager messages, only the latter
  // (with the default eager limit that halves its share of the footprint: Linux's default
  // RLIMIT_MEMLOCK is 8 MiB).
  const size_t control = sizeof(ConnBody) + kMaxConnAddressBytes;
  static_assert(sizeof(ConnBody) >= sizeof(AckBody) && kMaxNotifyBytes <= kMaxConnAddressBytes);
  rc.buffer_bytes = sizeof(MsgHeader) + std::max(eager_max, control);
  rc.control_buffer_bytes = sizeof(MsgHeader) + control;
  // The posted receives and send buffers of both endpoints, and room for operations.
  rc.cq_size = 2 * (rx_buffers + tx_buffers) + cq_entries;
  rc.cq_wait_fd = block_waits;
  // shm maps every endpoint that sends to a shard into its address table before libxport reads
  // the message: the door's small queue bounds how many first requests one pass maps there.
  if (provider == "shm") rc.door_queue = kShmDoorQueue;
  rc.shard_rx_buffers = std::min<size_t>(rx_buffers, 32);
  rc.shard_tx_buffers = std::min<size_t>(tx_buffers, 32);
  return rc;
}

Engine::Engine() {
  state_.control = &control_;
  // Each part gets the few others it calls, and nothing else.
  eager_.wire(matching_);
  rendezvous_.wire(eager_, matching_);
  matching_.wire(eager_, rendezvous_);
  health_.wire(one_sided_);
  state_.windows_comm_failed.bind<&OneSided::fail_comm>(&one_sided_);
  state_.windows_peer_failed.bind<&OneSided::fail_peer>(&one_sided_);
  state_.windows_rails_lost.bind<&OneSided::resend_after_rail_loss>(&one_sided_);
  // The dispatch table: each part registers the completions, messages and arrivals it handles.
  control_.register_handlers(dispatch_);
  connections_.register_handlers(dispatch_);
  eager_.register_handlers(dispatch_);
  rendezvous_.register_handlers(dispatch_);
  one_sided_.register_handlers(dispatch_);
  flusher_.register_handlers(dispatch_);
  health_.register_handlers(dispatch_);
  control_.connection_lost.bind<&Connections::fail_channel>(&connections_);
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
  auto inner = std::shared_ptr<Engine>(new Engine());
  inner->memory_.bind(inner);  // (what each registration holds)
  DeviceState& c = inner->state_;
  c.config = config;
  c.caps = caps;
  c.cq_data_bytes = info->domain_attr->cq_data_size;
  c.inject_size = info->tx_attr->inject_size;
  c.iov_limit = info->tx_attr->iov_limit;
  c.rx_cq_data_mode = (info->mode & FI_RX_CQ_DATA) != 0;
  // libfabric 1.17's sockets provider drops FI_REMOTE_CQ_DATA from a message it had to buffer
  // as unexpected (no receive posted when it arrived), leaving stale data: such a message could
  // not be told from a headered one. Headers there.
  c.headerless_eager =
      c.cq_data_bytes >= 8 && config.headerless_eager && caps.provider != "sockets";
  while (c.device_token == 0) {
    if (getrandom(&c.device_token, sizeof(c.device_token), 0) != sizeof(c.device_token)) {
      c.device_token = static_cast<uint64_t>(Clock::now().time_since_epoch().count()) ^
                       (uint64_t{static_cast<uint32_t>(getpid())} << 32);
    }
  }
  if (c.config.eager_max > info->ep_attr->max_msg_size - sizeof(MsgHeader)) {
    c.config.eager_max = info->ep_attr->max_msg_size - sizeof(MsgHeader);
  }
  c.config.spin_gather = c.config.spin_gather_for(caps.provider);
  const rail::RailConfig rc = c.config.rail_config(caps.provider);
  std::vector<memory::Registry::Rail> targets;
  for (const fi_info* r : rails) {
    if (r->domain_attr->cq_data_size != c.cq_data_bytes) {
      return core::error(Code::unsupported, "rails differ in remote CQ data size (",
                         r->domain_attr->cq_data_size, " vs ", c.cq_data_bytes, " bytes)");
    }
    XPORT_ASSIGN_OR_RETURN(auto rail,
                           rail::Rail::open(r, rc, static_cast<uint8_t>(c.rails.size())));
    // Under FI_MR_ENDPOINT a region is bound to the rail's data endpoint, the only endpoint that
    // moves caller memory (control messages use the control endpoint's own buffers).
    targets.push_back({&rail->domain(), rail->data() ? &rail->data()->endpoint() : nullptr});
    c.rails.push_back(std::move(rail));
  }
  c.registry = std::make_unique<memory::Registry>(std::move(targets), c.device_token);
  inner->one_sided_.atomics().negotiate();
  c.comms = std::make_unique<pool::CommTable<CommState>>(c.config.max_comms);
  c.pool = std::make_unique<pool::Pool>(c.config.pool_groups, c.config.pool_channels);
  // Without sharing, an RDM communicator opens data endpoints of its own; not under
  // FI_MR_ENDPOINT, where a region is bound to the rail's data endpoint only (docs/pool.md).
  c.own_data_endpoints = c.config.pool_groups == 0 && !c.connected_endpoints();
  // Endpoint shards likewise: a region bound to shard 0's data endpoint is written there only.
  c.shards = !c.connected_endpoints();
  for (auto& r : c.rails) {
    if ((r->domain().mr_mode() & FI_MR_ENDPOINT) != 0) {
      c.own_data_endpoints = false;
      c.shards = false;
    }
  }
  for (auto& r : c.rails) {
    for (rail::RailEndpoint* ep : r->endpoints()) {
      if (ep != nullptr) XPORT_RETURN_IF_ERROR(inner->control_.post_receives(ep));
    }
    r->health().refresh_link();
  }
  // Known to the other devices of this process (told when one of them closes) only now that it
  // is whole: a device closing on another thread meanwhile would drive this one's progress
  // over rails still being opened.
  {
    std::lock_guard<std::mutex> g(g_engines_mu);
    std::erase_if(g_engines, [](const std::weak_ptr<Engine>& w) { return w.expired(); });
    g_engines.push_back(inner);
  }
  // The public handle: its last copy shuts the engine down; `inner` (also held by every
  // registration) keeps the domains open until the last Region goes.
  Engine* raw = inner.get();
  return std::shared_ptr<Engine>(raw, [inner](Engine* e) mutable {
    e->shutdown();
    inner.reset();
  });
}

Engine::~Engine() {
  // shutdown() ran (the handle's deleter) and no registration is left: endpoints close before
  // the rails' CQs and domains (declaration order in DeviceState).
}

// Reads and drops what the CQs hold (bounded: a provider that keeps reporting is left).
void Engine::drain_cqs() {
  for (auto& r : state_.rails) {
    if (r->cq_failed()) continue;
    for (int reads = 0; reads < 1000; ++reads) {
      auto n = r->cq().poll(64, [](const fi_cq_data_entry&) {}, [](void*, Status, int) {});
      if (!n.ok() || *n == 0) break;
    }
  }
}

void Engine::peer_closed(uint64_t token) {
  Lock l(state_);
  if (state_.shut_down) return;
  auto it = state_.peers.find(token);
  if (it != state_.peers.end() && !it->second->closed) {
    state_.close_peer(*it->second, core::error(Code::closed, "the peer device (", std::hex, token,
                                               std::dec, ") in this process closed"));
  }
  // What it sent last is read while its memory is still mapped (its endpoints close once this
  // returns), whether or not this device still knows it as a peer: libfabric's shm handles a
  // peer's name, the end of a send or a transfer from it by touching the peer's region (its
  // lock, an inject buffer handed back, a response) in this device's progress; after it
  // closed, that was a SIGSEGV inside the provider. Nothing new goes to it from here on (its
  // channels are gone; a peer made for its token later is made closed).
  for (int i = 0; i < 8; ++i) progress_locked();
}

void Engine::shutdown() {
  if (state_.shut_down) return;
  {
    Lock l(state_);
    // What peers said last is read first: a target that closed (win_gone) is sent nothing more.
    for (int i = 0; i < 8; ++i) progress_locked();
    std::vector<uint64_t> listeners;
    for (auto& [token, ls] : state_.listeners) listeners.push_back(token);
    for (uint64_t t : listeners) connections_.close_listener(t);
    // Window streams say goodbye first, while the communicators and channels they were opened
    // over still exist (closing a communicator may hand its channels back at once).
    for (auto& [id, w] : state_.windows) w->closed = true;
    one_sided_.shutdown();
    std::vector<CommId> open;
    state_.comms->for_each([&](uint16_t, CommState& c) { open.push_back(c.id); });
    for (CommId id : open) connections_.close(id);
  }
  // A bounded drain: CLOSE messages go out, operations in flight complete.
  const auto until = Clock::now() + std::chrono::milliseconds(500);
  for (;;) {
    Lock l(state_);
    progress_locked();
    bool busy = control_.queued();
    state_.comms->for_each([&](uint16_t, CommState& c) { busy = busy || c.outstanding > 0; });
    for (auto& [id, w] : state_.windows) busy = busy || w->free.size() != w->ops.size();
    if (!busy || Clock::now() >= until) break;
  }
  // Its farewells are out: the other devices of this process stop sending to it before its
  // endpoints close (no lock of this engine is held while another's is taken).
  std::vector<std::shared_ptr<Engine>> others;
  {
    std::lock_guard<std::mutex> g(g_engines_mu);
    g_closed_tokens.push_back(state_.device_token);
    for (const auto& w : g_engines) {
      if (auto e = w.lock(); e && e.get() != this) others.push_back(std::move(e));
    }
  }
  for (auto& e : others) e->peer_closed(state_.device_token);
  others.clear();
  // The public layer's per-device state goes after the lock below is released, once the
  // operations abandoned under it have let go of what they held of it.
  std::shared_ptr<void> attached;
  {
    std::lock_guard<std::mutex> g(attach_mu_);
    attached = std::move(attachment_);
    attach_closed_ = true;
  }
  Lock l(state_);
  state_.shut_down = true;
  // What is still in flight is abandoned. The endpoints close first (until then a provider may
  // still use an operation's context, and cancelling may write into it), then what their CQs
  // still hold is read and dropped, and only then do contexts and registrations go.
  // Posted receives are cancelled first and their cancellations read while the endpoints are
  // open (a provider's fi_cq_strerror may look at the endpoint; the sockets provider leaks a
  // receive that is still posted when its endpoint closes).
  for (auto& r : state_.rails) {
    for (rail::RailEndpoint* ep : r->endpoints()) {
      if (ep != nullptr) ep->cancel_receives();
    }
  }
  if (!state_.connected_endpoints()) {
    state_.pool->for_each([](const pool::Channel& ch) {  // RDM communicators' own endpoints
      if (ch.owned) ch.owned->cancel_receives();
    });
  }
  drain_cqs();
  // What is still in flight is abandoned and stops holding registrations: each registration
  // holds the engine, so an abandoned operation holding one would keep both alive for ever
  // (LeakSanitizer: a send to a killed peer, FI_MR_ENDPOINT). Only the caller's own Regions
  // keep the data endpoint open below.
  state_.comms->for_each([](uint16_t, CommState& c) {
    for (SendSlot& s : c.sends) s.region.reset();
    for (RecvSlot& r : c.recvs) r.region.reset();
  });
  for (auto& w : state_.windows) {
    for (WindowOp& o : w.second->ops) o.region.reset();
  }
  for (auto& f : state_.flushes) f.second->region.reset();
  bool closed = true;
  for (auto& r : state_.rails) {
    const bool bound = (r->domain().mr_mode() & FI_MR_ENDPOINT) != 0 &&
                       state_.registry->registrations() > 0;
    for (rail::RailEndpoint* ep : r->endpoints()) {
      if (ep == nullptr) continue;
      if (bound && ep == r->data()) {
        // Caller's Regions are bound to it (FI_MR_ENDPOINT) and outlive the device: it stays
        // open until they go, and so must what its operations name.
        closed = false;
        continue;
      }
      ep->close_endpoint();
    }
  }
  state_.pool->for_each([](const pool::Channel& ch) {
    if (ch.owned) ch.owned->close_endpoint();
  });
  for (auto& ch : state_.retiring) {
    if (ch->owned) ch->owned->close_endpoint();
  }
  drain_cqs();
  control_.clear();
  eager_.clear();
  rendezvous_.clear();
  one_sided_.clear();
  state_.last_stream_id = 0;
  state_.last_window_id = 0;
  state_.out_streams.clear();  // (their peers and communicators go below)
  state_.in_streams.clear();
  state_.in_stream_live.clear();
  std::vector<CommState*> all;
  state_.comms->for_each([&](uint16_t, CommState& c) { all.push_back(&c); });
  size_t kept = 0;
  for (CommState* c : all) {
    if (!closed && c->outstanding > 0) {
      ++kept;  // its contexts may still be the provider's
      continue;
    }
    c->outstanding = 0;
    c->user_closed = true;
    state_.erase_comm(*c);
  }
  std::erase_if(state_.windows, [&](auto& w) {
    if (!closed && w.second->free.size() != w.second->ops.size()) {
      ++kept;
      return false;
    }
    return true;
  });
  state_.flushes.clear();
  if (kept > 0) {
    XPORT_LOG(warn, kept, " communicators or windows still had operations in flight when the "
              "device closed; with Regions still bound to its endpoints (FI_MR_ENDPOINT) their "
              "memory stays until those Regions go");
  }
  if (closed) state_.peers.clear();
}

std::shared_ptr<void> Engine::attachment(const std::function<std::shared_ptr<void>()>& make) {
  std::lock_guard<std::mutex> g(attach_mu_);
  if (attach_closed_) return nullptr;
  if (!attachment_) attachment_ = make();
  return attachment_;
}

// ---- the facades: memory in regions.cc, connections in connections/calls.cc, two-sided in
// two_sided/calls.cc, one-sided in one_sided/calls.cc; progress: progress.cc; stats: stats.cc ----

}  // namespace xport::proto
