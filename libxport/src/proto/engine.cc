// Engine: opening rails, the public-facing calls, the progress loop and the routing of every
// completion by its op context and remote CQ data, and teardown.
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
  return rc;
}

Engine::Engine() {
  core_.engine = this;
  core_.control = &control_;
  core_.connections = &connections_;
  core_.eager = &eager_;
  core_.rendezvous = &rendezvous_;
  core_.matching = &matching_;
  core_.one_sided = &one_sided_;
  core_.flusher = &flusher_;
  core_.health = &health_;
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
  {
    std::lock_guard<std::mutex> g(g_engines_mu);
    std::erase_if(g_engines, [](const std::weak_ptr<Engine>& w) { return w.expired(); });
    g_engines.push_back(inner);
  }
  Core& c = inner->core_;
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
  for (auto& r : c.rails) {
    if ((r->domain().mr_mode() & FI_MR_ENDPOINT) != 0) c.own_data_endpoints = false;
  }
  for (auto& r : c.rails) {
    for (rail::RailEndpoint* ep : r->endpoints()) {
      if (ep != nullptr) XPORT_RETURN_IF_ERROR(inner->control_.post_receives(ep));
    }
    r->health().refresh_link();
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
  // the rails' CQs and domains (declaration order in Core).
}

// Reads and drops what the CQs hold (bounded: a provider that keeps reporting is left).
void Engine::drain_cqs() {
  for (auto& r : core_.rails) {
    if (r->cq_failed()) continue;
    for (int reads = 0; reads < 1000; ++reads) {
      auto n = r->cq().poll(64, [](const fi_cq_data_entry&) {}, [](void*, Status, int) {});
      if (!n.ok() || *n == 0) break;
    }
  }
}

void Engine::peer_closed(uint64_t token) {
  Lock l(core_);
  if (shut_down_) return;
  auto it = core_.peers.find(token);
  if (it != core_.peers.end() && !it->second->closed) {
    core_.close_peer(*it->second, core::error(Code::closed, "the peer device (", std::hex, token,
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
  if (shut_down_) return;
  {
    Lock l(core_);
    // What peers said last is read first: a target that closed (win_gone) is sent nothing more.
    for (int i = 0; i < 8; ++i) progress_locked();
    std::vector<uint64_t> listeners;
    for (auto& [token, ls] : core_.listeners) listeners.push_back(token);
    for (uint64_t t : listeners) connections_.close_listener(t);
    // Window streams say goodbye first, while the communicators and channels they were opened
    // over still exist (closing a communicator may hand its channels back at once).
    for (auto& [id, w] : core_.windows) w->closed = true;
    one_sided_.shutdown();
    std::vector<CommId> open;
    core_.comms->for_each([&](uint16_t, CommState& c) { open.push_back(c.id); });
    for (CommId id : open) connections_.close(id);
  }
  // A bounded drain: CLOSE messages go out, operations in flight complete.
  const auto until = Clock::now() + std::chrono::milliseconds(500);
  for (;;) {
    Lock l(core_);
    progress_locked();
    bool busy = control_.queued();
    core_.comms->for_each([&](uint16_t, CommState& c) { busy = busy || c.outstanding > 0; });
    for (auto& [id, w] : core_.windows) busy = busy || w->free.size() != w->ops.size();
    if (!busy || Clock::now() >= until) break;
  }
  // Its farewells are out: the other devices of this process stop sending to it before its
  // endpoints close (no lock of this engine is held while another's is taken).
  std::vector<std::shared_ptr<Engine>> others;
  {
    std::lock_guard<std::mutex> g(g_engines_mu);
    g_closed_tokens.push_back(core_.device_token);
    for (const auto& w : g_engines) {
      if (auto e = w.lock(); e && e.get() != this) others.push_back(std::move(e));
    }
  }
  for (auto& e : others) e->peer_closed(core_.device_token);
  others.clear();
  // The public layer's per-device state goes after the lock below is released, once the
  // operations abandoned under it have let go of what they held of it.
  std::shared_ptr<void> attached;
  {
    std::lock_guard<std::mutex> g(attach_mu_);
    attached = std::move(attachment_);
    attach_closed_ = true;
  }
  Lock l(core_);
  shut_down_ = true;
  // What is still in flight is abandoned. The endpoints close first (until then a provider may
  // still use an operation's context, and cancelling may write into it), then what their CQs
  // still hold is read and dropped, and only then do contexts and registrations go.
  // Posted receives are cancelled first and their cancellations read while the endpoints are
  // open (a provider's fi_cq_strerror may look at the endpoint; the sockets provider leaks a
  // receive that is still posted when its endpoint closes).
  for (auto& r : core_.rails) {
    for (rail::RailEndpoint* ep : r->endpoints()) {
      if (ep != nullptr) ep->cancel_receives();
    }
  }
  if (!core_.connected_endpoints()) {
    core_.pool->for_each([](const pool::Channel& ch) {  // RDM communicators' own endpoints
      if (ch.owned) ch.owned->cancel_receives();
    });
  }
  drain_cqs();
  // What is still in flight is abandoned and stops holding registrations: each registration
  // holds the engine, so an abandoned operation holding one would keep both alive for ever
  // (LeakSanitizer: a send to a killed peer, FI_MR_ENDPOINT). Only the caller's own Regions
  // keep the data endpoint open below.
  core_.comms->for_each([](uint16_t, CommState& c) {
    for (SendSlot& s : c.sends) s.region.reset();
    for (RecvSlot& r : c.recvs) r.region.reset();
  });
  for (auto& w : core_.windows) {
    for (WindowOp& o : w.second->ops) o.region.reset();
  }
  for (auto& f : core_.flushes) f.second->region.reset();
  bool closed = true;
  for (auto& r : core_.rails) {
    const bool bound = (r->domain().mr_mode() & FI_MR_ENDPOINT) != 0 &&
                       core_.registry->registrations() > 0;
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
  core_.pool->for_each([](const pool::Channel& ch) {
    if (ch.owned) ch.owned->close_endpoint();
  });
  for (auto& ch : core_.retiring) {
    if (ch->owned) ch->owned->close_endpoint();
  }
  drain_cqs();
  control_.clear();
  eager_.clear();
  rendezvous_.clear();
  one_sided_.clear();
  core_.last_stream_id = 0;
  core_.last_window_id = 0;
  core_.out_streams.clear();  // (their peers and communicators go below)
  core_.in_streams.clear();
  core_.in_stream_live.clear();
  std::vector<CommState*> all;
  core_.comms->for_each([&](uint16_t, CommState& c) { all.push_back(&c); });
  size_t kept = 0;
  for (CommState* c : all) {
    if (!closed && c->outstanding > 0) {
      ++kept;  // its contexts may still be the provider's
      continue;
    }
    c->outstanding = 0;
    c->user_closed = true;
    core_.erase_comm(*c);
  }
  std::erase_if(core_.windows, [&](auto& w) {
    if (!closed && w.second->free.size() != w.second->ops.size()) {
      ++kept;
      return false;
    }
    return true;
  });
  core_.flushes.clear();
  if (kept > 0) {
    XPORT_LOG(warn, kept, " communicators or windows still had operations in flight when the "
              "device closed; with Regions still bound to its endpoints (FI_MR_ENDPOINT) their "
              "memory stays until those Regions go");
  }
  if (closed) core_.peers.clear();
}

std::shared_ptr<void> Engine::attachment(const std::function<std::shared_ptr<void>()>& make) {
  std::lock_guard<std::mutex> g(attach_mu_);
  if (attach_closed_) return nullptr;
  if (!attachment_) attachment_ = make();
  return attachment_;
}

// ---- memory ----

Result<RegionRef> Engine::register_memory(void* buf, size_t len, int cuda_device) {
  if (buf == nullptr || len == 0) {
    return core::error(Code::invalid_argument, "register_memory: empty buffer (", buf, ", ", len,
                       " bytes)");
  }
  Lock l(core_);
  std::vector<RegionRef> dropped;  // released under the lock, after the cache walk
  return core_.registry->acquire(buf, len, shared_from_this(), dropped, cuda_device);
}

void Engine::release_region(memory::RegionState& r) {
  if (core_.held_by_me()) {
    // The last holder was one of the engine's own operations, under the lock already.
    core_.registry->release(r);
    return;
  }
  Lock l(core_);
  core_.registry->release(r);
}

std::vector<uint8_t> Engine::export_key(const LocalBuffer& region) const {
  Lock l(core_);
  // The device closed (its Regions outlive it): a key would name a device nobody can reach, and
  // its endpoints, whose address a key carries, are gone.
  if (shut_down_) return {};
  const memory::RegionState& r = **region.region;
  RemoteKey k;
  k.virt_addr = r.virt_addr;
  k.base = reinterpret_cast<uint64_t>(region.view_base);
  k.length = region.view_length;
  k.mr_offset = static_cast<uint64_t>(region.view_base - r.base);
  k.device_token = r.device_token;
  k.staged = r.staged != nullptr;
  k.device = r.cuda_device >= 0;
  for (const auto& mr : r.mrs) k.keys.push_back(mr->key());
  // How to reach this device, so that a window can be opened from the key alone (RDM).
  if (!core_.connected_endpoints()) {
    if (auto a = core_.rails[0]->control()->endpoint().address();
        a.ok() && !a->empty() && a->size() <= kMaxHandleAddressBytes) {
      k.reach = std::move(a).value();
      k.provider_hash = provider_hash(core_.caps.provider);
    }
  }
  return encode_key(k);
}

Result<RemoteKey> Engine::import_key(std::span<const uint8_t> bytes) const {
  auto k = decode_key(bytes);
  if (!k) return k.status().with_context("import_key");
  if (k->keys.size() > kMaxRails) {
    return core::error(Code::invalid_argument, "import_key: the key describes ", k->keys.size(),
                       " rails, at most ", kMaxRails, " are supported");
  }
  if (k->virt_addr != ((core_.rails[0]->domain().mr_mode() & FI_MR_VIRT_ADDR) != 0)) {
    return core::error(Code::invalid_argument,
                       "import_key: the key's addressing (virtual or offset) does not match this "
                       "provider's FI_MR_VIRT_ADDR mode: was it exported by another provider?");
  }
  return std::move(k).value();
}

Status Engine::check_local(const LocalBuffer& region, const void* buf, size_t len,
                           const char* what) {
  if (region.region == nullptr || !*region.region) {
    return core::error(Code::invalid_argument, what, ": empty Region");
  }
  if ((*region.region)->owner.get() != static_cast<memory::RegionOwner*>(this)) {
    return core::error(Code::invalid_argument, what,
                       ": the Region was registered on another device");
  }
  const auto a = reinterpret_cast<uintptr_t>(buf);
  const auto b = reinterpret_cast<uintptr_t>(region.view_base);
  if (a < b || a - b > region.view_length || len > region.view_length - (a - b)) {
    return core::error(Code::invalid_argument, what, ": buffer [", buf, ", +", len,
                       ") is not inside the registered region [",
                       static_cast<const void*>(region.view_base), ", +", region.view_length,
                       ")");
  }
  return Status::success();
}

// ---- connections ----

Result<Connections::Listening> Engine::listen() {
  Lock l(core_);
  return connections_.listen();
}

Result<CommId> Engine::accept(uint64_t token, Deadline deadline) {
  CommId id;
  Status err;
  Status s = wait_until(
      deadline,
      [&] {
        auto r = connections_.take_accepted(token);
        if (!r) {
          err = r.status();
          return true;
        }
        id = *r;
        return static_cast<bool>(id);
      },
      "accept: no connection arrived before the deadline");
  if (!s) return s;
  if (!err) return err;
  return id;
}

Result<CommId> Engine::try_accept(uint64_t token) {
  refresh_links();
  Lock l(core_);
  progress_locked();
  return connections_.take_accepted(token);
}

void Engine::close_listener(uint64_t token) {
  Lock l(core_);
  connections_.close_listener(token);
}

Result<CommId> Engine::connect(std::span<const uint8_t> handle, Deadline deadline) {
  XPORT_ASSIGN_OR_RETURN(CommId id, connect_start(handle));
  Status s = wait_until(
      deadline,
      [&] {
        CommState* c = core_.comm(id);
        return c == nullptr || c->phase != Phase::connecting;
      },
      "connect: the listener did not answer before the deadline (is the peer alive and "
      "progressing?)");
  Lock l(core_);
  return connect_outcome(id, s);
}

Result<CommId> Engine::connect_start(std::span<const uint8_t> handle) {
  Lock l(core_);
  return connections_.start(handle);
}

Result<bool> Engine::connect_poll(CommId id, Deadline deadline) {
  refresh_links();
  Lock l(core_);
  progress_locked();
  CommState* c = core_.comm(id);
  if (c != nullptr && c->phase == Phase::connecting) {
    if (!deadline.expired()) return false;
    XPORT_RETURN_IF_ERROR(connect_outcome(id, Status(Code::timeout, "connect: the listener did "
                                                     "not answer before the deadline (is the peer "
                                                     "alive and progressing?)"))
                              .status());
  }
  XPORT_RETURN_IF_ERROR(connect_outcome(id, Status()).status());
  return true;
}

Result<CommId> Engine::connect_outcome(CommId id, Status s) {
  CommState* c = core_.comm(id);
  if (s.ok() && c == nullptr) s = Status(Code::internal, "connect: the communicator vanished");
  if (s.ok() && c->phase == Phase::failed) s = c->error;
  if (!s.ok()) {
    connections_.cancel(id);
    return s;
  }
  return id;
}

void Engine::connect_abandon(CommId id) {
  Lock l(core_);
  connections_.cancel(id);
}

void Engine::close_comm(CommId id) {
  Lock l(core_);
  flusher_.abandon_comm(id);
  connections_.close(id);
}

// ---- two-sided: two_sided/calls.cc ----

// ---- one-sided: one_sided/calls.cc ----

// ---- progress ----

Status Engine::progress() {
  refresh_links();
  Lock l(core_);
  progress_locked();
  return Status::success();
}

void Engine::refresh_links() {
  if (!links_due_.load(std::memory_order_relaxed)) return;
  if (!links_due_.exchange(false, std::memory_order_relaxed)) return;  // another thread took it
  // File I/O, with no lock held; the results are applied under the lock by progress.
  for (auto& r : core_.rails) r->health().refresh_link();
  links_fresh_.store(true, std::memory_order_relaxed);
}

size_t Engine::poll_cqs() {
  size_t handled = 0;
  for (size_t i = 0; i < core_.rails.size(); ++i) {
    rail::Rail& r = *core_.rails[i];
    if (r.cq_failed()) continue;
    dispatch_.polling(i);
    auto n = r.cq().poll(
        core_.config.cq_batch, [this](const fi_cq_data_entry& e) { dispatch_.done(e); },
        [this](void* ctx, Status s, int err) { dispatch_.failed(ctx, s, err); });
    if (!n.ok()) {
      // The CQ itself failed (overrun, a dead device): the rail is out of service for good;
      // other rails and their communicators go on.
      fail_rail(static_cast<uint32_t>(i),
                Status(Code::closed, core::str("rail ", r.name(), ": ", n.status().message())));
      continue;
    }
    handled += *n;
  }
  return handled;
}

void Engine::progress_locked() {
  if (core_.in_progress || shut_down_) return;
  core_.in_progress = true;
  // Receive buffers handled in the previous pass (Control::repost_later), and posts the
  // provider refused, go back before the CQs are read.
  if (control_.receives_waiting()) control_.retry_receives();
  // A bounded batch from every rail's CQ per pass: no rail starves another. Threads asleep in
  // a blocking wait are woken when it handled something (theirs may be among it).
  if (poll_cqs() > 0) {
    handled_gen_.store(handled_gen_.load(std::memory_order_relaxed) + 1,
                       std::memory_order_relaxed);
    if (waker_.sleepers().load(std::memory_order_relaxed) != 0) waker_.ring();
  }
  if (core_.connected_endpoints()) {
    Status s = connections_.progress_events();
    if (!s.ok()) XPORT_LOG(warn, "connection events: ", s.to_string());
    if (connections_.shutdowns_pending()) {
      // What a peer sent before it shut down (its CLOSE, the completions of what it took) can
      // reach the CQ in the same provider call that reported the shutdown: read it first, so
      // those sends complete as taken rather than fail with the connection.
      for (int batches = 0; batches < 64 && poll_cqs() > 0; ++batches) {
      }
      connections_.apply_shutdowns();
    }
  }
  // Posts queued for a retry (most passes have none).
  if (control_.queued()) control_.retry();
  if (eager_.queued()) eager_.retry();
  if (rendezvous_.queued()) rendezvous_.retry();
  // (one-sided: queued posts, and stream pieces held behind a fence, an uncounted get or credits,
  // which nothing else releases once the target's answers have come)
  if (one_sided_.queued()) one_sided_.retry();
  if (one_sided_.copying()) one_sided_.poll_copies();
  if (flusher_.queued()) flusher_.retry();
  if (++passes_ >= kPassesPerCheck || due_check_.load(std::memory_order_relaxed)) {
    passes_ = 0;
    due_check_.store(false, std::memory_order_relaxed);
    housekeeping();
  }
  core_.in_progress = false;
}

bool Engine::between_passes(uint32_t spin, const Deadline& d, WaitState& w) {
  if (core_.config.spin_gather.count() > 0 && !w.sleeping) {
    // A pass that handled completions (any thread's) and did not end this wait: the peer's
    // next messages gather before the next poll (XPORT_SPIN_GATHER_NS).
    const uint64_t gen = handled_gen_.load(std::memory_order_relaxed);
    if (w.paused_gen != UINT64_MAX && gen != w.paused_gen) {
      const auto until = Clock::now() + core_.config.spin_gather;
      do {
        for (int i = 0; i < 4; ++i) core::cpu_relax();
      } while (Clock::now() < until);
    }
    w.paused_gen = gen;
  }
  // Spinning, the clock is read every kSpinsPerYield passes; asleep, one pass per wake-up (64
  // passes after each 10 ms sleep were most of an idle wait's CPU on tcp;ofi_rxm).
  // Not after the first pass either: most waits of a ping-pong end within a few passes, and
  // a yield is a system call (on this VM ~0.3 µs of an 0.8 µs one-way shm message).
  if (!w.sleeping && (spin == 0 || spin % kSpinsPerYield != 0)) return true;
  if (d.expired()) return false;
  const auto now = Clock::now();
  if (w.began == Clock::time_point{}) w.began = now;
  const bool block = d.wait_mode() == WaitMode::block ||
                     (d.wait_mode() == WaitMode::by_knob && core_.config.block_waits);
  if (block) {
    if (w.sleep_after == Clock::time_point{}) w.sleep_after = now + core_.config.wait_spin;
    if (now >= w.sleep_after) {
      w.sleeping = true;
      sleep_once(d, w);
      return true;
    }
  }
  // The core goes to another thread only once the wait has lasted kYieldAfter: a thread that
  // shares its core with what it waits for still gets out of the way.
  if (now - w.began >= kYieldAfter) std::this_thread::yield();
  return true;
}

void Engine::open_waker_locked() {
  if (waker_.is_open() || waker_failed_) return;
  Status s = waker_.open();
  for (auto& r : core_.rails) {
    if (!s.ok()) break;
    if (r->cq().wait_fd() >= 0) s = waker_.watch(r->cq().wait_fd());
  }
  if (s.ok() && core_.connected_endpoints()) {
    // Connection events: the EQ's wait object, where it has one (else the tick).
    fid_eq* eq = core_.rails.empty() ? nullptr : core_.rails[0]->domain().eq();
    int fd = -1;
    if (eq != nullptr && fi_control(&eq->fid, FI_GETWAIT, &fd) == 0 && fd >= 0) {
      s = waker_.watch(fd);
      eq_watched_ = s.ok();
    }
  }
  if (!s.ok()) {
    waker_failed_ = true;  // waits spin instead; said once
    XPORT_LOG(warn, "blocking waits spin instead: ", s.to_string());
  }
}

void Engine::sleep_once(const Deadline& d, WaitState& w) {
  bool can_sleep = true;
  bool every_cq_has_fd = true;
  {
    Lock l(core_);
    open_waker_locked();
    if (waker_failed_ || shut_down_) {
      can_sleep = false;
    } else if (w.seen_gen != handled_gen_.load(std::memory_order_relaxed)) {
      // Completions were handled since this wait last looked: one more pass first, and after
      // a wake-up by traffic a spin again (more may follow at once).
      if (w.seen_gen != UINT64_MAX) {
        w.sleeping = false;
        w.sleep_after = Clock::now() + core_.config.wait_spin;
      }
      w.seen_gen = handled_gen_.load(std::memory_order_relaxed);
      w.idle_sleeps = 0;
      can_sleep = false;
    } else {
      for (auto& r : core_.rails) {
        if (r->cq_failed()) continue;
        if (r->cq().wait_fd() < 0) {
          every_cq_has_fd = false;
          continue;
        }
        fid_t f = &r->cq().get()->fid;
        if (fi_trywait(r->domain().fabric(), &f, 1) != 0) {  // entries to read first
          can_sleep = false;
          break;
        }
      }
      if (core_.connected_endpoints() && !eq_watched_) every_cq_has_fd = false;
      if (can_sleep && eq_watched_) {
        // The EQ's wait object stays readable until fi_trywait clears it.
        fid_t f = &core_.rails[0]->domain().eq()->fid;
        if (fi_trywait(core_.rails[0]->domain().fabric(), &f, 1) != 0) can_sleep = false;
      }
      if (can_sleep) waker_.sleepers().fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (!can_sleep) {
    std::this_thread::yield();
    return;
  }
  // Asleep on wait objects, a sleep still ends after a tick for what no wait object covers
  // (tcp;ofi_rxm's connection set-up, link states, peer health): 10 ms, doubling to 50 ms
  // while nothing is handled. Where a CQ has no wait object: 100 µs, doubling to 8 ms (a
  // message soon after the wait began is seen soon; an idle wait wakes 125 times a second).
  using std::chrono::microseconds;
  const microseconds first = every_cq_has_fd ? microseconds(10000) : microseconds(100);
  const microseconds most = every_cq_has_fd ? microseconds(50000) : microseconds(8000);
  const microseconds tick = std::min(first * (1u << std::min(w.idle_sleeps, 7u)), most);
  ++w.idle_sleeps;
  const auto left = std::chrono::duration_cast<std::chrono::microseconds>(d.remaining());
  waker_.sleep(std::min(tick, left));
  waker_.sleepers().fetch_sub(1, std::memory_order_relaxed);
  // Timers are due by the clock, not by passes (one pass per wake-up): the next pass looks.
  due_check_.store(true, std::memory_order_relaxed);
}

void Engine::housekeeping() {
  const auto now = Clock::now();
  if (core_.config.rail_check.count() != 0 && now >= next_link_read_) {
    next_link_read_ = now + core_.config.rail_check;
    links_due_.store(true, std::memory_order_relaxed);  // read by the next test() or progress()
  }
  const bool fresh = links_fresh_.load(std::memory_order_relaxed) &&
                     links_fresh_.exchange(false, std::memory_order_relaxed);
  if (core_.config.rail_check.count() != 0 && (fresh || now >= next_rail_check_)) {
    next_rail_check_ = now + core_.config.rail_check;
    apply_link_states(now);
  }
  if (now >= next_health_check_) {
    next_health_check_ = now + PeerHealth::kInterval;
    health_.check(now);
    control_.reap_retired(false);
  }
}

void Engine::fail_rail(uint32_t rail, const Status& why) {
  rail::Rail& r = *core_.rails[rail];
  XPORT_LOG(warn, why.to_string(), ": out of service for good");
  r.set_cq_failed();
  core_.note_failure(rail, why);  // quarantine, tell the peers, resend what may be lost
  // Sends with something in flight on it: failed (their completions will never come).
  std::vector<CommId> ids;
  core_.comms->for_each([&](uint16_t, CommState& c) { ids.push_back(c.id); });
  for (CommId id : ids) {
    CommState* c = core_.comm(id);
    if (c == nullptr || !c->is_send) continue;
    for (SendSlot& s : c->sends) {
      if (!s.active || s.outstanding == 0) continue;
      uint32_t lost = 0;
      if (s.eager && !s.queued && s.ctx.size() > 0 && s.ctx[0].type == fabric::OpType::eager_send &&
          s.ctx[0].rail == rail) {
        lost = 1;
      }
      for (uint32_t i = 0; i < s.stripes; ++i) {
        if ((s.stripes_posted & (1u << i)) && s.ctx[i].rail == rail) {
          s.stripes_posted &= ~(1u << i);
          ++s.stripes_done;
          ++lost;
        }
      }
      if (lost == 0) continue;
      core_.fail_send(*c, s, why);
      for (uint32_t k = 0; k < lost && (c = core_.comm(id)) != nullptr; ++k) core_.release(*c, s);
    }
  }
  // Posts queued for it would go to a dead NIC: eager sends and stripes fail with their
  // requests; control messages are dropped (what matters was sent again on the other rails).
  eager_.fail_rail(rail, why);
  rendezvous_.fail_rail(rail, why);
  control_.fail_rail(rail);
  // Bounce buffers with the provider on its endpoints (the rail's, and RDM communicators' own):
  // receives never come back, sends never complete (a headered eager send fails with its
  // request).
  std::vector<rail::RailEndpoint*> eps;
  for (rail::RailEndpoint* ep : r.endpoints()) {
    if (ep != nullptr) eps.push_back(ep);
  }
  core_.pool->for_each([&](const pool::Channel& ch) {
    if (ch.owned && ch.rail == rail && !core_.connected_endpoints()) {
      eps.push_back(ch.owned.get());
    }
  });
  for (rail::RailEndpoint* ep : eps) {
    ep->posted_rx = 0;
    control_.forget_receives(ep);
    for (size_t i = 0; i < ep->tx().count(); ++i) {
      memory::Buffer& b = ep->tx().at(static_cast<uint32_t>(i));
      if (!b.in_use) continue;
      if (b.ctx.type == fabric::OpType::eager_buffer) {
        eager_.on_sent(&b.ctx, why, &b);
      } else {
        ep->tx().give_back(&b);
      }
    }
  }
  one_sided_.fail_rail(rail, why);
  flusher_.fail_rail(rail, why);
}

void Engine::apply_link_states(Clock::time_point now) {
  for (auto& r : core_.rails) {
    if (r->cq_failed()) continue;  // never back: its CQ is gone
    rail::Health& h = r->health();
    const bool up = h.link_up();
    if (h.state() == rail::Health::State::up && !up) {
      h.quarantine("link down", now + core_.config.rail_retry);
      XPORT_LOG(warn, "rail ", r->name(), " quarantined: link down; new traffic avoids it");
      core_.announce_rail_state(r->index(), false);
      // What this device sent on it may never arrive: it goes again on the rails left (its
      // peers do the same for theirs when they hear of it).
      core_.resend_after_rail_loss(nullptr);
    } else if (h.state() == rail::Health::State::quarantined) {
      if (!up) {
        h.quarantine(h.reason(), now + core_.config.rail_retry);  // back off again
      } else if (now >= h.retry_at()) {
        h.restore();
        XPORT_LOG(info, "rail ", r->name(), " back in service: link up");
        core_.announce_rail_state(r->index(), true);
      }
    }
  }
}

namespace {
// A receive buffer outside every pool, for injected traffic: nothing may hold it.
struct Scratch {
  std::vector<uint8_t> bytes;
  memory::Buffer buffer;
  explicit Scratch(const uint8_t* p, size_t len) : bytes(p, p + len) {
    buffer.data = bytes.data();
  }
};
}  // namespace

void Engine::inject_message(size_t rail, const uint8_t* bytes, size_t len) {
  Lock l(core_);
  if (rail >= core_.rails.size() || shut_down_) return;
  auto h = decode_header(bytes, len);
  if (!h) {
    core_.miss();
    return;
  }
  Scratch s(bytes, len);
  bool hold = false;
  dispatch_.polling(rail);
  dispatch_.route(Message{*h, s.bytes.data() + sizeof(MsgHeader), len - sizeof(MsgHeader), nullptr,
                          &s.buffer, &hold});
}

void Engine::inject_cq_data(size_t rail, uint64_t data, const uint8_t* payload, size_t len,
                            bool eager) {
  Lock l(core_);
  if (rail >= core_.rails.size() || shut_down_) return;
  dispatch_.polling(rail);
  if (!eager) {
    dispatch_.write_landed(data, len, static_cast<uint32_t>(rail));
    return;
  }
  if (core_.rails[rail]->data() == nullptr) return;
  Scratch s(payload, len);
  bool hold = false;
  dispatch_.eager_arrived(nullptr, &s.buffer, data, len, &hold);
}

Stats Engine::stats() const {
  Lock l(core_);
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
    es.eagain_retries = c.eagain.get();
    s.endpoints.push_back(es);
  };
  for (const auto& r : core_.rails) {
    RailStats rs;
    rs.name = r->name();
    rs.state = r->health().state_name();
    rs.quarantine_events = r->health().quarantines().get();
    rs.low_latency_control = r->low_latency_control();
    rs.stripes_out = r->stripes_out().get();
    rs.stripes_in = r->stripes_in().get();
    rs.write_bytes_in = r->bytes_in().get();
    for (rail::RailEndpoint* ep : r->endpoints()) {
      if (ep != nullptr) rs.errors += ep->endpoint().counters().error_completions.get();
    }
    s.rails.push_back(rs);
    if (r->data()) add_ep(r->data()->endpoint(), r->name());
    if (r->separate_control()) add_ep(r->control()->endpoint(), r->name());
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
  // The pool: connections (each its own endpoint) and the RDM channels of every peer.
  PoolStats& ps = s.pool;
  ps.groups = core_.config.pool_groups;
  ps.channels_per_group = core_.config.pool_channels;
  uint64_t live_ops = 0;
  auto count_channel = [&](const pool::Channel& ch) {
    ++ps.channels;
    live_ops += ch.ops;
    ps.busiest_channel_ops = std::max(ps.busiest_channel_ops, ch.ops);
  };
  core_.pool->for_each([&](const pool::Channel& ch) {
    count_channel(ch);
    if (!ch.owned) return;
    if (ch.owned->has_endpoint()) add_ep(ch.owned->endpoint(), core_.rails[ch.rail]->name());
    for (const memory::BufferPool* b : {&ch.owned->rx(), &ch.owned->tx()}) {
      ps.registered_bytes += b->count() * b->size();
    }
  });
  for (const auto& [token, p] : core_.peers) {
    for (const auto& ch : p->channels) count_channel(*ch);
  }
  ps.cqs = core_.rails.size();  // one per rail, shared by its endpoints and connections
  core_.comms->for_each([&](uint16_t, CommState& c) {
    if (!c.paths.empty()) ++ps.comms_attached;
  });
  ps.primaries = core_.pool->primaries();
  ps.secondaries = core_.pool->secondaries();
  // Late arrivals (traffic for a communicator closed meanwhile) are expected: counted apart.
  ps.routing_misses = core_.counters.routing_misses - core_.counters.late_arrivals;
  ps.channel_ops = live_ops + core_.pool->ops_gone();
  s.comms_open = core_.comms->size();
  s.registrations = core_.registry->registrations();
  s.registered_bytes = core_.registry->registered_bytes();
  s.routing_misses = core_.counters.routing_misses;
  s.late_arrivals = core_.counters.late_arrivals;
  s.peers_lost = core_.counters.peers_lost;
  s.keepalives_sent = core_.counters.keepalives_sent;
  s.deferred_posts = core_.counters.deferred_posts;
  s.overflow_copies = core_.counters.overflow_copies;
  s.window_acks_sent = core_.counters.window_acks_sent;
  s.window_ops_held = core_.counters.window_ops_held;
  s.signals_applied = core_.counters.signals_applied;
  s.atomics_native = core_.counters.atomics_native;
  s.atomics_emulated = core_.counters.atomics_emulated;
  s.atomics_applied = core_.counters.atomics_applied;
  s.notifications = core_.counters.notifications;
  s.window_streams = core_.out_streams.size();
  s.window_streams += core_.in_stream_live.size();
  s.peers = core_.peers.size();
  s.mr_cache_hits = core_.registry->cache_hits();
  s.mr_cache_misses = core_.registry->cache_misses();
  return s;
}

}  // namespace xport::proto
