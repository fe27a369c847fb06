// The public API: thin handles over the protocol engine (design.md §1).
#include "xport/context.hpp"

#include "core/knob.hpp"
#include "core/log.hpp"
#include "fabric/link.hpp"
#include "fabric/provider.hpp"
#include "api/telemetry_hook.hpp"
#include "proto/engine.hpp"

namespace xport {

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
  if (progress != "auto" && progress != "manual") {
    return core::error(Code::invalid_argument, "XPORT_PROGRESS='", progress,
                       "': expected auto or manual");
  }
  req.want_auto_progress = progress == "auto";
  auto sel = fabric::select_provider(req);
  if (!sel.ok()) return sel.status().with_context("Context::open");
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
  if (!engine.ok()) return engine.status().with_context("open_device");
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
  return engine_->register_memory(buf, len);
}

Result<RemoteRegion> Device::import_key(std::span<const uint8_t> bytes) {
  return engine_->import_key(bytes);
}

Result<std::unique_ptr<Listener>> Device::listen() { return engine_->listen(); }

Result<std::unique_ptr<SendComm>> Device::connect(const ConnectionHandle& handle,
                                                  Deadline deadline) {
  return engine_->connect(handle, deadline);
}

Status Device::progress() { return engine_->progress(); }

Stats Device::stats() const { return engine_->stats(); }

// ---- regions ----


std::vector<uint8_t> Region::export_key() const {
  return state_ ? state_->engine->export_key(*this) : std::vector<uint8_t>{};
}

bool Region::contains(const void* p, size_t len) const {
  if (!state_) return false;
  auto a = reinterpret_cast<uintptr_t>(p);
  auto b = reinterpret_cast<uintptr_t>(view_base_);
  return a >= b && a - b <= view_length_ && len <= view_length_ - (a - b);
}

// ---- communicators ----

Listener::~Listener() {
  if (engine_) engine_->close_listener(token_);
}

Result<std::unique_ptr<RecvComm>> Listener::accept(Deadline deadline) {
  return engine_->accept(token_, deadline);
}

SendComm::~SendComm() {
  if (engine_) engine_->close_comm(id_);
}

Result<Request> SendComm::isend(const void* buf, size_t len, const Region& region) {
  return engine_->isend(id_, buf, len, region);
}

Result<Completion> SendComm::test(Request r) { return engine_->test(id_, r); }

Result<size_t> SendComm::wait(Request r, Deadline d) { return engine_->wait(id_, r, d); }

RecvComm::~RecvComm() {
  if (engine_) engine_->close_comm(id_);
}

Result<Request> RecvComm::irecv(void* buf, size_t len, const Region& region) {
  return engine_->irecv(id_, buf, len, region);
}

Result<Completion> RecvComm::test(Request r) { return engine_->test(id_, r); }

Result<size_t> RecvComm::wait(Request r, Deadline d) { return engine_->wait(id_, r, d); }

Status RecvComm::flush(const void* buf, size_t len, const Region& region, Deadline d) {
  return engine_->flush(id_, buf, len, region, d);
}

// ---- windows ----

namespace {
Result<std::unique_ptr<Window>> make_window(const std::shared_ptr<proto::Engine>& engine,
                                            uint16_t comm, std::unique_ptr<Window> w,
                                            std::shared_ptr<proto::Engine>* slot, uint32_t* id) {
  XPORT_ASSIGN_OR_RETURN(*id, engine->open_window(comm));
  *slot = engine;
  return w;
}
}  // namespace

Result<std::unique_ptr<Window>> Window::open(const SendComm& comm) {
  auto w = std::unique_ptr<Window>(new Window());
  auto* raw = w.get();
  return make_window(comm.engine_, comm.id_, std::move(w), &raw->engine_, &raw->id_);
}

Result<std::unique_ptr<Window>> Window::open(const RecvComm& comm) {
  auto w = std::unique_ptr<Window>(new Window());
  auto* raw = w.get();
  return make_window(comm.engine_, comm.id_, std::move(w), &raw->engine_, &raw->id_);
}

Window::~Window() {
  if (engine_) engine_->close_window(id_);
}

Status Window::put(const Region& local, size_t loff, const RemoteRegion& remote, size_t roff,
                   size_t len) {
  return engine_->put(id_, local, loff, remote, roff, len);
}

Status Window::get(const Region& local, size_t loff, const RemoteRegion& remote, size_t roff,
                   size_t len) {
  return engine_->get(id_, local, loff, remote, roff, len);
}

Status Window::quiet(Deadline deadline) { return engine_->quiet(id_, deadline); }

uint64_t Window::issued() const { return engine_->window_issued(id_); }
uint64_t Window::completed() const { return engine_->window_completed(id_); }

const char* stat_op_name(int op) {
  return fabric::op_name(static_cast<fabric::OpKind>(op));
}

}  // namespace xport
