// The public API: thin handles over the protocol engine (design.md §1). The engine knows nothing
// of these classes; this layer builds them from the ids, tokens and registrations it returns.
#include "xport/context.hpp"

#include <optional>

#include "api/staging.hpp"
#include "api/staging_pool.hpp"
#include "api/shm_cleanup.hpp"
#include "api/telemetry_hook.hpp"
#include "core/knob.hpp"
#include "core/log.hpp"
#include "fabric/link.hpp"
#include "fabric/provider.hpp"
#include "proto/engine.hpp"

namespace xport {

namespace api {
// The one place that reads the public handles' insides.
struct Access {
  // What the engine registers and posts: the Region's own memory, or its host shadow.
  static proto::LocalBuffer local(const Region& r) {
    if (r.staged_) return {&r.state_, r.staged_->shadow_of(r.view_base_), r.view_length_};
    return {&r.state_, r.view_base_, r.view_length_};
  }
  static const std::shared_ptr<gpu::StagedMemory>& staged(const Region& r) { return r.staged_; }
  // The address the engine posts for the caller's p inside r (its shadow's, when staged); p
  // itself when outside r, which the engine then refuses by name.
  static const void* on_wire(const Region& r, const void* p, size_t len) {
    if (!r.staged_ || !r.contains(p, len)) return p;
    return r.staged_->shadow_of(p);
  }
  // A staged source [p, p+len) inside r: copied, in the call, into staging bytes of its own
  // (api/staging_pool.hpp) that the engine posts from, so the caller may rewrite its GPU buffer
  // at once and later operations from the range never reach them. Nothing for host memory, an
  // empty range, or one outside r (the engine refuses that by name, as before).
  static Result<std::optional<StagedSource>> stage(const Region& r, const void* p, size_t len,
                                                   const char* what) {
    if (!r.staged_ || len == 0 || !r.contains(p, len)) return std::optional<StagedSource>();
    // (the Region's own device's pool: a Region of another device stays refused by the engine)
    auto* e = static_cast<proto::Engine*>(r.state_->owner.get());
    XPORT_ASSIGN_OR_RETURN(StagedSource s, stage_source(*e, *r.staged_, p, len, what));
    return std::optional<StagedSource>(std::move(s));
  }
  static Result<std::optional<StagedSource>> stage(const Region& r, size_t offset, size_t len,
                                                   const char* what) {
    if (!r.staged_ || offset > r.view_length_) return std::optional<StagedSource>();
    return stage(r, r.view_base_ + offset, len, what);
  }
  static const proto::RemoteKey* key(const RemoteRegion& r) { return r.key_.get(); }
  static pool::CommId id(const SendComm& c) { return {c.id_, c.gen_}; }
  static pool::CommId id(const RecvComm& c) { return {c.id_, c.gen_}; }
  static const std::shared_ptr<proto::Engine>& engine(const SendComm& c) { return c.engine_; }
  static const std::shared_ptr<proto::Engine>& engine(const RecvComm& c) { return c.engine_; }

  static Region region(memory::RegionRef state, void* buf, size_t len,
                       std::shared_ptr<gpu::StagedMemory> staged, MemoryType type) {
    Region out;
    out.type_ = type;
    out.state_ = std::move(state);
    out.staged_ = std::move(staged);
    out.view_base_ = static_cast<uint8_t*>(buf);
    out.view_length_ = len;
    return out;
  }
  static RemoteRegion remote(proto::RemoteKey k) {
    RemoteRegion out;
    out.key_ = std::make_shared<const proto::RemoteKey>(std::move(k));
    return out;
  }
  template <typename Comm>
  static std::unique_ptr<Comm> comm(const std::shared_ptr<proto::Engine>& e, pool::CommId id) {
    auto out = std::unique_ptr<Comm>(new Comm());
    out->engine_ = e;
    out->id_ = id.index;
    out->gen_ = id.gen;
    if constexpr (std::is_same_v<Comm, RecvComm>) out->staged_ = std::make_shared<StagedArrivals>();
    return out;
  }
  static std::unique_ptr<PendingConnect> pending(const std::shared_ptr<proto::Engine>& e,
                                                 pool::CommId id, Deadline deadline) {
    auto out = std::unique_ptr<PendingConnect>(new PendingConnect());
    out->engine_ = e;
    out->id_ = id.index;
    out->gen_ = id.gen;
    out->deadline_ = deadline;
    return out;
  }
  static std::unique_ptr<Listener> listener(const std::shared_ptr<proto::Engine>& e,
                                            uint64_t token, std::vector<uint8_t> handle) {
    auto out = std::unique_ptr<Listener>(new Listener());
    out->engine_ = e;
    out->token_ = token;
    out->handle_ = std::move(handle);
    return out;
  }
  static const std::shared_ptr<proto::Engine>& engine(const Device& d) { return d.engine_; }
  static std::unique_ptr<Window> window(const std::shared_ptr<proto::Engine>& e, uint32_t id) {
    auto w = std::unique_ptr<Window>(new Window());
    w->engine_ = e;
    w->id_ = id;
    w->staged_ = std::make_shared<StagedArrivals>();
    w->local_clear_ = e->local_clear(id);
    return w;
  }
};
}  // namespace api

using api::Access;
using api::StagedArrivals;
using api::StagedSource;

std::vector<topology::ProviderNic> provider_nics() {
  std::vector<topology::ProviderNic> out;
  for (const auto& a : fabric::nic_attributes()) out.push_back({a.domain, a.pci, a.provider});
  return out;
}

namespace {
// The provider's word on the link rate first (it knows the NIC it drives), else the kernel's.
RailInfo describe_rail(const std::string& name, const fi_info* info) {
  RailInfo r;
  r.name = name;
  if (uint64_t bps = fabric::nic_link_speed(info)) {
    r.link_bits_per_s = bps;
    r.link_source = "libfabric";
  } else if (double gbps = topology::rail_link(name).rate_gbps; gbps > 0) {
    r.link_bits_per_s = static_cast<uint64_t>(gbps * 1e9);
    r.link_source = "sysfs";
  }
  return r;
}
}  // namespace

struct Context::State {
  fabric::InfoPtr info;
  std::vector<fabric::InfoPtr> domains;
  ProviderReport report;
  bool thread_safe = true;
};

Result<std::unique_ptr<Context>> Context::open(const ContextOptions& options) {
  XPORT_RETURN_IF_ERROR(validate_knobs());
  fabric::ProviderRequest req;
  req.provider = !options.provider.empty() ? options.provider
                                           : core::knob_string(core::KnobId::provider);
  req.domain = !options.domain.empty() ? options.domain : core::knob_string(core::KnobId::domain);
  req.peers_on_host = options.peers_on_host;
  const std::string& progress = core::knob_string(core::KnobId::progress);
  if (progress != "native" && progress != "auto" && progress != "manual") {
    return core::error(Code::invalid_argument, "XPORT_PROGRESS='", progress,
                       "': expected native, auto or manual");
  }
  req.want_auto_progress = progress != "manual";
  req.progress_native = progress == "native";
  const std::string& atomics = core::knob_string(core::KnobId::atomics);
  if (atomics != "auto" && atomics != "native" && atomics != "emulated") {
    return core::error(Code::invalid_argument, "XPORT_ATOMICS='", atomics,
                       "': expected auto, native or emulated");
  }
  req.want_atomics = atomics != "emulated";
  const std::string& gpu_memory = core::knob_string(core::KnobId::gpu_memory);
  if (gpu_memory != "auto" && gpu_memory != "hmem" && gpu_memory != "staged") {
    return core::error(Code::invalid_argument, "XPORT_GPU_MEMORY='", gpu_memory,
                       "': expected auto, hmem or staged");
  }
  // FI_HMEM only when asked for by name: auto stages GPU memory, the path whose every CPU access
  // goes through the CUDA driver (docs/semantics.md, "GPU memory": what HMEM does not cover yet).
  req.want_hmem = false;
  req.require_hmem = gpu_memory == "hmem";
  const std::string& wait = core::knob_string(core::KnobId::wait);
  if (wait != "spin" && wait != "block") {
    return core::error(Code::invalid_argument, "XPORT_WAIT='", wait, "': expected spin or block");
  }
  const std::string& control = core::knob_string(core::KnobId::control_endpoint);
  if (control != "auto" && control != "shared" && control != "separate") {
    return core::error(Code::invalid_argument, "XPORT_CONTROL_ENDPOINT='", control,
                       "': expected auto, shared or separate");
  }
  if (core::knob_bool(core::KnobId::shm_cleanup)) {
    // Before our own endpoints exist: files of processes that died are never mistaken for ours.
    api::remove_dead_shm_files("/dev/shm", core::knob_string(core::KnobId::telemetry_dir));
  }
  auto sel = fabric::select_provider(req);
  if (!sel) return sel.status().with_context("Context::open");
  auto ctx = std::unique_ptr<Context>(new Context());
  ctx->state_ = std::make_unique<State>();
  ctx->state_->info = std::move(sel->info);
  ctx->state_->domains = std::move(sel->domains);
  ctx->state_->report = std::move(sel->report);
  ctx->state_->thread_safe = options.thread_safe;
  return ctx;
}

Context::~Context() = default;

const ProviderReport& Context::provider() const { return state_->report; }

std::vector<std::string> Context::domains() const {
  std::vector<std::string> out;
  for (const auto& d : state_->domains) out.push_back(d->domain_attr->name);
  return out;
}

Result<std::unique_ptr<Device>> Context::open_device(const DeviceOptions& options) {
  std::vector<std::string> names = options.rails;
  if (names.empty()) {
    std::string list = core::knob_string(core::KnobId::rails);
    for (size_t pos = 0; !list.empty();) {
      size_t comma = list.find(',', pos);
      std::string name = list.substr(pos, comma == std::string::npos ? comma : comma - pos);
      if (name.empty()) {
        return core::error(Code::invalid_argument, "XPORT_RAILS='", list,
                           "': empty rail name (use comma-separated domain names)");
      }
      names.push_back(name);
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  }
  std::vector<const fi_info*> rails;
  if (names.empty()) {
    rails.push_back(state_->info.get());
  } else {
    for (const auto& name : names) {
      const fi_info* found = nullptr;
      for (const auto& d : state_->domains) {
        if (name == d->domain_attr->name) found = d.get();
      }
      if (found == nullptr) {
        std::string avail;
        for (const auto& d : domains()) avail += (avail.empty() ? "" : ", ") + d;
        return core::error(Code::not_found, "open_device: rail '", name, "' is not a domain of ",
                           state_->report.caps.provider, " (available: ", avail, ")");
      }
      for (const fi_info* r : rails) {
        if (r == found) {
          return core::error(Code::invalid_argument, "open_device: rail '", name,
                             "' is listed twice");
        }
      }
      rails.push_back(found);
    }
  }
  proto::EngineConfig cfg = proto::EngineConfig::from_knobs();
  cfg.thread_safe = state_->thread_safe;
  auto engine = proto::Engine::open(rails, state_->report.caps, cfg);
  if (!engine) return engine.status().with_context("open_device");
  auto d = std::unique_ptr<Device>(new Device());
  d->engine_ = std::move(engine).value();
  for (size_t i = 0; i < rails.size(); ++i) {
    d->rail_info_.push_back(describe_rail(d->engine_->rail_name(i), rails[i]));
  }
  d->telemetry_ = api::attach_device_telemetry(d->engine_, d->engine_->caps(), cfg.thread_safe);
  return d;
}

Device::~Device() = default;

const Capabilities& Device::capabilities() const { return engine_->caps(); }

std::vector<std::string> Device::rails() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < engine_->rail_count(); ++i) out.push_back(engine_->rail_name(i));
  return out;
}

Result<Region> Device::register_memory(void* buf, size_t len) {
  if (buf == nullptr || len == 0) {
    return core::error(Code::invalid_argument, "register_memory: empty buffer (", buf, ", ", len,
                       " bytes)");
  }
  // GPU memory: registered by the provider where the rails have FI_HMEM (XPORT_GPU_MEMORY
  // allowing), else a host shadow is registered in its place.
  XPORT_ASSIGN_OR_RETURN(auto placed, api::place(buf, len, engine_->caps().hmem_enabled));
  auto& staged = placed.staged;
  // (a range inside a larger staged range is a view into its shadow)
  void* registered = staged ? staged->shadow_of(buf) : buf;
  XPORT_ASSIGN_OR_RETURN(auto state,
                         engine_->register_memory(registered, len, placed.cuda_device));
  if (staged && !state->keepalive) {
    state->keepalive = staged;  // the shadow outlives its MRs
    state->staged = staged.get();
  }
  if (staged) {
    // The device's staging pool for this GPU's sources gets its page-locked slab now, while a
    // page-locked allocation cannot wait for a running kernel that waits on this device
    // (api/staging_pool.hpp). Without it the pool still grows, in ordinary host memory.
    auto pool = api::staging_pool(*engine_, staged->device());
    if (Status w = pool ? pool->warm() : Status::success(); !w.ok()) {
      XPORT_LOG(warn, "register_memory: no page-locked staging slab for GPU ", staged->device(),
                "'s sources (", w.to_string(), "): sources are staged through host memory");
    }
  }
  const MemoryType type =
      staged || placed.cuda_device >= 0 ? MemoryType::cuda : MemoryType::host;
  return Access::region(std::move(state), buf, len, std::move(staged), type);
}

Result<RemoteRegion> Device::import_key(std::span<const uint8_t> bytes) {
  XPORT_ASSIGN_OR_RETURN(auto key, engine_->import_key(bytes));
  return Access::remote(std::move(key));
}

Result<std::unique_ptr<Listener>> Device::listen() {
  XPORT_ASSIGN_OR_RETURN(auto l, engine_->listen());
  return Access::listener(engine_, l.token, std::move(l.handle));
}

Result<std::unique_ptr<SendComm>> Device::connect(const ConnectionHandle& handle,
                                                  Deadline deadline) {
  XPORT_ASSIGN_OR_RETURN(auto id, engine_->connect(handle, deadline));
  return Access::comm<SendComm>(engine_, id);
}

Result<std::unique_ptr<PendingConnect>> Device::start_connect(std::span<const uint8_t> handle,
                                                              Deadline deadline) {
  XPORT_ASSIGN_OR_RETURN(auto id, engine_->connect_start(handle));
  return Access::pending(engine_, id, deadline);
}

Status Device::progress() { return engine_->progress(); }

Stats Device::stats() const { return engine_->stats(); }

// ---- regions ----

std::vector<uint8_t> Region::export_key() const {
  if (!state_) return {};
  return static_cast<proto::Engine*>(state_->owner.get())->export_key(Access::local(*this));
}

bool Region::contains(const void* p, size_t len) const {
  if (!state_) return false;
  auto a = reinterpret_cast<uintptr_t>(p);
  auto b = reinterpret_cast<uintptr_t>(view_base_);
  return a >= b && a - b <= view_length_ && len <= view_length_ - (a - b);
}

uint64_t RemoteRegion::length() const { return key_ ? key_->length : 0; }

// ---- communicators ----

Listener::~Listener() {
  if (engine_) engine_->close_listener(token_);
}

Result<std::unique_ptr<RecvComm>> Listener::accept(Deadline deadline) {
  XPORT_ASSIGN_OR_RETURN(auto id, engine_->accept(token_, deadline));
  return Access::comm<RecvComm>(engine_, id);
}

Result<std::unique_ptr<RecvComm>> Listener::try_accept() {
  XPORT_ASSIGN_OR_RETURN(auto id, engine_->try_accept(token_));
  if (!id) return std::unique_ptr<RecvComm>();
  return Access::comm<RecvComm>(engine_, id);
}

PendingConnect::~PendingConnect() {
  if (engine_ && !finished_) engine_->connect_abandon({id_, gen_});
}

Result<std::unique_ptr<SendComm>> PendingConnect::poll() {
  if (finished_) {
    return core::error(Code::invalid_argument, "PendingConnect::poll: the connection attempt "
                       "already ended (its SendComm or error was returned)");
  }
  auto r = engine_->connect_poll({id_, gen_}, deadline_);
  if (!r.ok()) {
    finished_ = true;  // given up by the engine
    return r.status();
  }
  if (!*r) return std::unique_ptr<SendComm>();
  finished_ = true;
  return Access::comm<SendComm>(engine_, {id_, gen_});
}

SendComm::~SendComm() {
  if (engine_) engine_->close_comm({id_, gen_});
}

Result<Request> SendComm::isend(const void* buf, size_t len, const Region& region, uint32_t tag,
                                PostMode mode) {
  XPORT_ASSIGN_OR_RETURN(auto staged, Access::stage(region, buf, len, "isend"));
  const proto::LocalBuffer local = staged ? staged->local() : Access::local(region);
  const void* wire = staged ? staged->bytes : Access::on_wire(region, buf, len);
  XPORT_ASSIGN_OR_RETURN(uint64_t seq, engine_->isend({id_, gen_}, wire, len, local, tag,
                                                      mode == PostMode::handoff));
  return Request{seq};
}

namespace {
Completion to_public(const proto::Completion& c) {
  Completion out;
  out.done = c.done;
  out.bytes = c.bytes;
  out.count = c.count;
  static_assert(kMaxGroupedRecvs == proto::kMaxGroup);
  for (size_t i = 0; i < kMaxGroupedRecvs; ++i) out.sizes[i] = c.sizes[i];
  return out;
}

Status not_a_message(const char* what) {
  return core::error(Code::invalid_argument, what, ": a send communicator has no flush requests");
}
}  // namespace

Result<Completion> SendComm::test(Request r, TestMode mode) {
  if (r.kind != Request::Kind::message) return not_a_message("test");
  XPORT_ASSIGN_OR_RETURN(auto c,
                         engine_->test_send({id_, gen_}, r.seq, mode == TestMode::progress));
  return to_public(c);
}

Result<size_t> SendComm::wait(Request r, Deadline d) {
  if (r.kind != Request::Kind::message) return not_a_message("wait");
  return engine_->wait_send({id_, gen_}, r.seq, d);
}

RecvComm::~RecvComm() {
  if (engine_) engine_->close_comm({id_, gen_});
}

Result<Request> RecvComm::irecv(void* buf, size_t len, const Region& region, uint32_t tag,
                                PostMode mode) {
  const RecvBuffer one{buf, len, &region, tag};
  return irecv(std::span(&one, 1), mode);
}

Result<Request> RecvComm::irecv(std::span<const RecvBuffer> buffers, PostMode mode) {
  std::array<proto::RecvBufferRef, kMaxGroupedRecvs> refs;
  std::vector<StagedArrivals::Target> staged;
  if (buffers.size() > refs.size()) {
    return core::error(Code::invalid_argument, "irecv: ", buffers.size(), " buffers (a grouped "
                       "receive takes 1..", kMaxGroupedRecvs, ")");
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i].region == nullptr) {
      return core::error(Code::invalid_argument, "irecv: buffer ", i, " names no Region");
    }
    const Region& r = *buffers[i].region;
    refs[i] = {const_cast<void*>(Access::on_wire(r, buffers[i].buf, buffers[i].len)),
               buffers[i].len, Access::local(r), buffers[i].tag};
    if (Access::staged(r) && r.contains(buffers[i].buf, buffers[i].len)) {
      staged.resize(buffers.size());
      staged[i] = {Access::staged(r), buffers[i].buf, buffers[i].len};
    }
  }
  XPORT_ASSIGN_OR_RETURN(uint64_t seq,
                         engine_->irecv({id_, gen_}, std::span(refs.data(), buffers.size()),
                                        mode == PostMode::handoff));
  if (!staged.empty()) staged_->expect(seq, std::move(staged));
  return Request{seq};
}

Result<Completion> RecvComm::test(Request r, TestMode mode) {
  const bool progress = mode == TestMode::progress;
  if (r.kind == Request::Kind::flush) {
    XPORT_ASSIGN_OR_RETURN(bool done, engine_->test_flush({id_, gen_}, r.seq, progress));
    Completion out;
    out.done = done;
    return out;
  }
  if (!staged_->expects(r.seq)) {
    XPORT_ASSIGN_OR_RETURN(auto c, engine_->test({id_, gen_}, r.seq, progress));
    return to_public(c);
  }
  // Into staged GPU memory: done once the data is copied from the shadow to the GPU.
  Completion c;
  if (auto seen = staged_->recorded(r.seq)) {
    c = *seen;
  } else {
    auto e = engine_->test({id_, gen_}, r.seq, progress);
    if (!e.ok()) {
      staged_->forget(r.seq);
      return e.status();
    }
    c = to_public(*e);
    if (!c.done) return c;
    if (c.count <= 1) c.sizes[0] = c.bytes;
    staged_->record(r.seq, c);
  }
  XPORT_ASSIGN_OR_RETURN(bool copied, staged_->arrived(r.seq, std::span(c.sizes.data(), c.count ? c.count : 1)));
  if (!copied) return Completion{};
  return c;
}

Result<size_t> RecvComm::wait(Request r, Deadline d) {
  if (r.kind == Request::Kind::message && !staged_->expects(r.seq)) {
    return engine_->wait({id_, gen_}, r.seq, d);
  }
  proto::Engine::WaitState w;
  for (uint32_t spin = 0;; ++spin) {
    XPORT_ASSIGN_OR_RETURN(Completion c, test(r));
    if (c.done) return c.bytes;
    if (!engine_->between_passes(spin, d, w)) {
      return core::error(Code::timeout, "wait: ",
                         r.kind == Request::Kind::flush ? "flush " : "receive ", r.seq,
                         " on communicator ", id_, " did not complete before the deadline");
    }
  }
}

Status RecvComm::flush(const void* buf, size_t len, const Region& region, Deadline d) {
  return engine_->flush({id_, gen_}, Access::on_wire(region, buf, len), len, Access::local(region), d);
}

Result<Request> RecvComm::iflush(const void* buf, size_t len, const Region& region) {
  XPORT_ASSIGN_OR_RETURN(uint64_t id, engine_->iflush({id_, gen_}, Access::on_wire(region, buf, len),
                                                      len, Access::local(region)));
  return Request{id, Request::Kind::flush};
}

// ---- windows ----

Result<std::unique_ptr<Window>> Window::open(const SendComm& comm, Deadline deadline) {
  const auto& e = Access::engine(comm);
  XPORT_ASSIGN_OR_RETURN(uint32_t id, e->open_window(Access::id(comm), deadline));
  return Access::window(e, id);
}

Result<std::unique_ptr<Window>> Window::open(const RecvComm& comm, Deadline deadline) {
  const auto& e = Access::engine(comm);
  XPORT_ASSIGN_OR_RETURN(uint32_t id, e->open_window(Access::id(comm), deadline));
  return Access::window(e, id);
}

Result<std::unique_ptr<Window>> Window::open(Device& device, const ConnectionHandle& handle,
                                             Deadline deadline) {
  const auto& e = Access::engine(device);
  XPORT_ASSIGN_OR_RETURN(uint32_t id, e->open_window_to(handle, deadline));
  return Access::window(e, id);
}

Result<std::unique_ptr<Window>> Window::open(Device& device, const RemoteRegion& key,
                                             Deadline deadline) {
  const proto::RemoteKey* k = Access::key(key);
  if (k == nullptr) {
    return core::error(Code::invalid_argument, "window: empty RemoteRegion");
  }
  const auto& e = Access::engine(device);
  XPORT_ASSIGN_OR_RETURN(uint32_t id, e->open_window_to(*k, deadline));
  return Access::window(e, id);
}

Window::~Window() {
  if (engine_) engine_->close_window(id_);
}

namespace {
Status no_key(const char* what) {
  return core::error(Code::invalid_argument, what, ": empty RemoteRegion");
}

// A put into a peer's staged GPU memory is followed by a publish: a strong signal-like message
// the target applies by copying the range from its shadow on to its GPU (proto/signal.cc), so
// that quiet, strong signals and check() cover the copy. The engine issues the put, its publish
// and (put_signal) the signal behind them whole or not at all; check() of the put's ticket
// waits for the others.
Result<Ticket> put_published(proto::Engine& e, uint32_t window, StagedArrivals& staged,
                             const proto::LocalBuffer& local, size_t loff,
                             const proto::RemoteKey& k, size_t roff, size_t len,
                             const proto::Engine::SignalRequest* signal = nullptr) {
  XPORT_ASSIGN_OR_RETURN(auto t, e.put_published(window, local, loff, k, roff, len, signal));
  staged.follow(t.put, t.publish);
  if (t.signal != 0) staged.follow(t.put, t.signal);
  return t.put;
}

// What an operation posts from: a staged source's own bytes (at offset 0), or the Region.
struct Source {
  std::optional<StagedSource> staged;
  proto::LocalBuffer local;
  size_t offset = 0;
};
Status source(const Region& r, size_t offset, size_t len, const char* what, Source& out) {
  XPORT_ASSIGN_OR_RETURN(out.staged, Access::stage(r, offset, len, what));
  // (out is not moved from here on: local points into out.staged)
  out.local = out.staged ? out.staged->local() : Access::local(r);
  out.offset = out.staged ? 0 : offset;
  return Status::success();
}

Status staged_remote(const char* what) {
  return core::error(Code::unsupported, what, ": the remote region is GPU memory its owner "
                     "stages through a host shadow; ", what, " from or on it is not supported "
                     "yet (puts and signals are: docs/semantics.md, GPU memory)");
}

proto::Engine::SignalRequest signal_request(const proto::RemoteKey* key, size_t offset,
                                            uint64_t value, SignalOp op, SignalOrder order) {
  proto::Engine::SignalRequest r;
  r.key = key;
  r.offset = offset;
  r.value = value;
  r.op = op == SignalOp::set ? proto::WindowSignalOp::set : proto::WindowSignalOp::add;
  r.strong = order == SignalOrder::strong;
  return r;
}
}  // namespace

Result<Ticket> Window::put(const Region& local, size_t loff, const RemoteRegion& remote,
                           size_t roff, size_t len) {
  const proto::RemoteKey* k = Access::key(remote);
  if (k == nullptr) return no_key("put");
  Source src;
  XPORT_RETURN_IF_ERROR(source(local, loff, len, "put", src));
  if (k->staged && len > 0) {
    return put_published(*engine_, id_, *staged_, src.local, src.offset, *k, roff, len);
  }
  return engine_->put(id_, src.local, src.offset, *k, roff, len);
}

Result<Ticket> Window::get(const Region& local, size_t loff, const RemoteRegion& remote,
                           size_t roff, size_t len) {
  const proto::RemoteKey* k = Access::key(remote);
  if (k == nullptr) return no_key("get");
  if (k->staged) return staged_remote("get");
  XPORT_ASSIGN_OR_RETURN(Ticket t, engine_->get(id_, Access::local(local), loff, *k, roff, len));
  if (Access::staged(local)) {
    staged_->expect(t, {{Access::staged(local), static_cast<uint8_t*>(local.base()) + loff, len}});
  }
  return t;
}

Result<Ticket> Window::put_signal(const Region& local, size_t loff, const RemoteRegion& remote,
                                  size_t roff, size_t len, const RemoteRegion& signal,
                                  size_t soff, uint64_t value, SignalOp op, SignalOrder order) {
  const proto::RemoteKey* k = Access::key(remote);
  const proto::RemoteKey* sk = Access::key(signal);
  if (k == nullptr || sk == nullptr) return no_key("put_signal");
  if (sk->device) return proto::device_word("put_signal");  // before a staged put's publish goes out
  auto r = signal_request(sk, soff, value, op, order);
  Source src;
  XPORT_RETURN_IF_ERROR(source(local, loff, len, "put_signal", src));
  if (k->staged && len > 0) {
    return put_published(*engine_, id_, *staged_, src.local, src.offset, *k, roff, len, &r);
  }
  return engine_->put(id_, src.local, src.offset, *k, roff, len, &r);
}

Result<Ticket> Window::put_signal_counter(const Region& local, size_t loff,
                                          const RemoteRegion& remote, size_t roff, size_t len,
                                          const RemoteRegion& signal, size_t soff, uint64_t value,
                                          const Region& counter, size_t coff, SignalOp op,
                                          SignalOrder order) {
  const proto::RemoteKey* k = Access::key(remote);
  const proto::RemoteKey* sk = Access::key(signal);
  if (k == nullptr || sk == nullptr) return no_key("put_signal_counter");
  if (sk->device) return proto::device_word("put_signal_counter");  // before a staged put's publish goes out
  auto r = signal_request(sk, soff, value, op, order);
  const proto::LocalBuffer c = Access::local(counter);
  r.counter = &c;
  r.counter_offset = coff;
  Source src;
  XPORT_RETURN_IF_ERROR(source(local, loff, len, "put_signal_counter", src));
  if (k->staged && len > 0) {
    return put_published(*engine_, id_, *staged_, src.local, src.offset, *k, roff, len, &r);
  }
  return engine_->put(id_, src.local, src.offset, *k, roff, len, &r);
}

Result<Ticket> Window::signal(const RemoteRegion& signal, size_t soff, uint64_t value,
                              SignalOp op, SignalOrder order) {
  const proto::RemoteKey* sk = Access::key(signal);
  if (sk == nullptr) return no_key("signal");
  return engine_->signal(id_, signal_request(sk, soff, value, op, order));
}

Result<Ticket> Window::signal_counter(const RemoteRegion& signal, size_t soff, uint64_t value,
                                      const Region& counter, size_t coff, SignalOp op,
                                      SignalOrder order) {
  const proto::RemoteKey* sk = Access::key(signal);
  if (sk == nullptr) return no_key("signal_counter");
  auto r = signal_request(sk, soff, value, op, order);
  const proto::LocalBuffer c = Access::local(counter);
  r.counter = &c;
  r.counter_offset = coff;
  return engine_->signal(id_, r);
}

Result<Ticket> Window::reset_signal(const RemoteRegion& signal, size_t soff) {
  const proto::RemoteKey* sk = Access::key(signal);
  if (sk == nullptr) return no_key("reset_signal");
  return engine_->signal(id_, signal_request(sk, soff, 0, SignalOp::set, SignalOrder::strong));
}

Result<uint64_t> Window::read_signal(const Region& signal, size_t soff) const {
  return engine_->read_word(Access::local(signal), soff, "read_signal");
}

Status Window::wait_signal(const Region& signal, size_t soff, uint64_t value, Deadline d) {
  return engine_->wait_word(id_, Access::local(signal), soff, value, d, "wait_signal");
}

Status Window::wait_counter(const Region& counter, size_t coff, uint64_t value, Deadline d) {
  return engine_->wait_word(id_, Access::local(counter), coff, value, d, "wait_counter");
}

Result<Ticket> Window::atomic(AtomicOp op, const RemoteRegion& remote, size_t roff,
                              uint64_t operand, uint64_t compare, uint64_t* result) {
  const proto::RemoteKey* k = Access::key(remote);
  if (k == nullptr) return no_key("atomic");
  if (k->staged) return staged_remote("atomic");
  return engine_->atomic(id_, static_cast<proto::WindowAtomicOp>(op), *k, roff, operand, compare,
                         result);
}

bool Window::native_atomics() const { return engine_->native_atomics(); }

Result<Ticket> Window::post(const std::vector<TransferItem>& items,
                            const std::vector<uint8_t>& notification) {
  std::vector<proto::LocalBuffer> locals(items.size());
  std::vector<proto::Engine::TransferItem> out(items.size());
  std::vector<StagedArrivals::Target> gets;
  // Puts from staged GPU memory: each item's own staging bytes (sized once: locals point in).
  std::vector<std::optional<StagedSource>> sources(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const TransferItem& it = items[i];
    if (it.local == nullptr || it.remote == nullptr || Access::key(*it.remote) == nullptr) {
      return core::error(Code::invalid_argument, "transfer item ", i,
                         ": no local Region or an empty RemoteRegion");
    }
    locals[i] = Access::local(*it.local);
    if (Access::key(*it.remote)->staged) {
      if (it.kind == TransferItem::Kind::get) return staged_remote("transfer item get");
      if (!notification.empty()) {
        return core::error(Code::unsupported, "transfer item ", i, ": a notification after puts "
                           "into a peer's staged GPU memory is not supported yet");
      }
      out[i].publish = true;
    }
    if (it.kind == TransferItem::Kind::put) {
      XPORT_ASSIGN_OR_RETURN(sources[i], Access::stage(*it.local, it.local_offset, it.length,
                                                       "transfer"));
      if (sources[i]) locals[i] = sources[i]->local();
    } else if (Access::staged(*it.local) && it.local->contains(static_cast<uint8_t*>(it.local->base()) + it.local_offset, it.length)) {
      gets.push_back({Access::staged(*it.local),
                      static_cast<uint8_t*>(it.local->base()) + it.local_offset, it.length});
    }
    out[i].put = it.kind == TransferItem::Kind::put;
    out[i].local = &locals[i];
    out[i].local_offset = sources[i] ? 0 : it.local_offset;
    out[i].remote = Access::key(*it.remote);
    out[i].remote_offset = it.remote_offset;
    out[i].length = it.length;
  }
  std::vector<uint64_t> published;  // the publishes of its puts into staged GPU memory
  XPORT_ASSIGN_OR_RETURN(Ticket t, engine_->transfer(id_, out, notification, &published));
  if (!gets.empty()) staged_->expect(t, std::move(gets));
  for (Ticket p : published) staged_->follow(t, p);
  return t;
}

Result<TransferState> Window::check(Ticket ticket) {
  XPORT_ASSIGN_OR_RETURN(int done, engine_->check(id_, ticket));
  // Puts into a peer's staged GPU memory: delivered once their publishes are applied.
  for (Ticket f : staged_->followers(ticket)) {
    if (done != 1) break;
    XPORT_ASSIGN_OR_RETURN(done, engine_->check(id_, f));
  }
  if (done == 1) staged_->forget_followers(ticket);
  if (done == 1 && staged_->expects(ticket)) {
    XPORT_ASSIGN_OR_RETURN(bool copied, staged_->arrived(ticket, {}));
    if (!copied) return TransferState::pending;
  }
  return done == 1 ? TransferState::done : TransferState::pending;
}

std::vector<std::vector<uint8_t>> Window::take_notifications() {
  return engine_->take_notifications(id_);
}

Status Window::fence() { return engine_->fence(id_); }

Status Window::quiet(Deadline deadline) {
  // Staged gets issued before this call are copied out; later ones (other threads) are not
  // covered by this quiet.
  const uint64_t through = staged_->last_key();
  const uint64_t followed = staged_->last_followed();
  XPORT_RETURN_IF_ERROR(engine_->quiet(id_, deadline));
  staged_->forget_followers_through(followed);
  return staged_->settle_through(through);
}

Status Window::wait_local(Ticket ticket, Deadline deadline) {
  // A ticket under the engine's mark is locally complete without error (an injected put, a
  // sliding window's oldest): no lock, no engine call. Every 16th such call goes to the engine
  // all the same, which makes a progress pass if the window has provider operations in flight:
  // on a provider with manual progress that pass is what moves the bytes of larger puts (the
  // target's credit grants are read by the put that finds its stream short of them:
  // Engine::rma). (quick_: a relaxed count; concurrent callers may lose increments, never
  // correctness.)
  bool answered = false, pass = false;
  if (local_clear_ != nullptr && ticket != 0 &&
      ticket < local_clear_->load(std::memory_order_acquire)) {
    const uint32_t q = quick_.load(std::memory_order_relaxed);
    quick_.store(q + 1, std::memory_order_relaxed);
    answered = (q & 15) != 15;
    pass = !answered;
  }
  if (!answered) XPORT_RETURN_IF_ERROR(engine_->wait_local(id_, ticket, deadline, pass));
  if (!staged_->expects(ticket)) return Status::success();
  return staged_->arrived_wait(ticket, {});
}

uint64_t Window::issued() const { return engine_->window_issued(id_); }
uint64_t Window::completed() const { return engine_->window_completed(id_); }

const char* stat_op_name(int op) {
  return fabric::op_name(static_cast<fabric::OpKind>(op));
}

}  // namespace xport
