// Context (xport/context.hpp): the provider chosen for the process, every domain it offers, and
// the Devices opened over them; provider_nics() for topology discovery.
#include "xport/context.hpp"

#include "api/shm_cleanup.hpp"
#include "api/telemetry_hook.hpp"
#include "core/knob.hpp"
#include "core/log.hpp"
#include "fabric/link.hpp"
#include "fabric/provider.hpp"
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

}  // namespace xport
