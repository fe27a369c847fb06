// Node checks of xport-probe: libfabric, knobs, topology, provider, capabilities, progress,
// links, locked memory and registration. Each reads through libxport's public API only.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "checks.hpp"

extern char** environ;

namespace probe {
namespace {

using xport::topology::Distance;

Outcome make(std::string name, Verdict v, std::string reason, std::string rail = "") {
  Outcome o;
  o.check.name = std::move(name);
  o.check.rail = std::move(rail);
  o.check.status = v;
  o.check.reason = std::move(reason);
  return o;
}

std::string join(const std::vector<std::string>& items, const char* sep = ", ") {
  std::string o;
  for (const auto& s : items) o += (o.empty() ? "" : sep) + s;
  return o;
}

// CAP_IPC_LOCK (bit 14 of CapEff): RLIMIT_MEMLOCK does not bind a process that holds it.
bool has_ipc_lock() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    unsigned long long caps = std::strtoull(line.c_str() + 7, nullptr, 16);
    return (caps >> 14) & 1;
  }
  return false;
}

// The best distance of a GPU's planned rails; nullopt when it has none.
std::optional<Distance> best_distance(const xport::topology::GpuRails& g) {
  std::optional<Distance> best;
  for (const auto& r : g.rails) {
    if (!best || r.path.distance < *best) best = r.path.distance;
  }
  return best;
}

}  // namespace

std::optional<size_t> parse_size(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str() || errno == ERANGE) return std::nullopt;
  std::string suf(end);
  int shift = suf.empty() || suf == "B"                  ? 0
              : suf == "K" || suf == "k" || suf == "KiB" ? 10
              : suf == "M" || suf == "MiB"               ? 20
              : suf == "G" || suf == "GiB"               ? 30
                                                         : -1;
  if (shift < 0 || v > (~0ull >> shift)) return std::nullopt;
  return static_cast<size_t>(v << shift);
}

std::string knob_value(const std::string& name) {
  for (const auto& k : xport::knob_list()) {
    if (k.name == name) return k.value;
  }
  return "";
}

Outcome check_libfabric() {
  xport::FabricInfo f = xport::fabric_info();
  Outcome o = f.providers.empty()
                  ? make("libfabric", Verdict::fail,
                         "libfabric " + f.runtime_version + " lists no provider" +
                             (std::getenv("FI_PROVIDER")
                                  ? " (FI_PROVIDER=" + std::string(std::getenv("FI_PROVIDER")) + ")"
                                  : ""))
                  : make("libfabric", Verdict::pass,
                         "libfabric " + f.runtime_version + " (built with " + f.build_version +
                             ", API " + f.api_version + "); providers: " + join(f.providers));
  o.check.details.str("runtime_version", f.runtime_version)
      .str("build_version", f.build_version)
      .str("api_version", f.api_version)
      .raw("providers", json_strings(f.providers));
  if (const char* p = std::getenv("FI_PROVIDER")) o.check.details.str("fi_provider", p);
  return o;
}

Outcome check_knobs(bool telemetry_set_by_probe) {
  std::vector<std::string> rejected, from_env, unknown;
  std::vector<KnobRow> rows;
  std::set<std::string> known;
  for (const auto& k : xport::knob_list()) {
    known.insert(k.name);
    KnobRow row{k.name, k.value, k.source, k.error};
    if (k.name == "XPORT_TELEMETRY" && telemetry_set_by_probe) {
      // The job's value, not the probe's own (publication off for the probe's devices).
      row.value = k.default_value;
      row.source = "default";
    }
    if (!k.error.empty()) rejected.push_back(k.name + "=" + k.error);
    if (row.source == "environment") from_env.push_back(k.name);
    rows.push_back(row);
  }
  // (Words and ranges are the library's: knob_list() names every value it refuses.)
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "XPORT_", 6) != 0) continue;
    std::string name(*e, std::strcspn(*e, "="));
    if (!known.count(name)) unknown.push_back(name);
  }
  Outcome o;
  if (!rejected.empty()) {
    // Unknown names too: the table shows the reason alone (the JSON has both lists).
    o = make("knobs", Verdict::fail,
             "rejected: " + join(rejected, "; ") +
                 (unknown.empty() ? "" : "; unknown (ignored, a typo?): " + join(unknown)));
  } else if (!unknown.empty()) {
    o = make("knobs", Verdict::warn, "unknown (ignored, a typo?): " + join(unknown));
  } else {
    o = make("knobs", Verdict::pass,
             std::to_string(rows.size()) + " knobs, " + std::to_string(from_env.size()) +
                 " from the environment" + (from_env.empty() ? "" : ": " + join(from_env)));
  }
  o.check.details.integer("count", static_cast<int64_t>(rows.size()))
      .raw("from_environment", json_strings(from_env))
      .raw("rejected", json_strings(rejected))
      .raw("unknown", json_strings(unknown))
      .boolean("telemetry_off_for_probe", telemetry_set_by_probe);
  o.knobs = std::move(rows);
  return o;
}

Outcome check_topology() {
  using namespace xport::topology;
  auto topo = discover(xport::provider_nics());
  if (!topo.ok()) return make("topology", Verdict::fail, topo.status().to_string());
  auto p = plan(*topo);
  if (!p.ok()) return make("topology", Verdict::fail, p.status().to_string());
  std::vector<std::string> far, gpus_json, nics;
  for (const GpuRails& g : p->gpus) {
    const Gpu& gpu = topo->gpus[g.gpu];
    std::vector<std::string> rails_json;
    for (const Rail& r : g.rails) {
      JsonObject rj;
      rj.str("nic", topo->nics[r.nic].name).str("distance", to_string(r.path.distance));
      rails_json.push_back(rj.render());
    }
    auto best = best_distance(g);
    if (!best || *best == Distance::sys) far.push_back(gpu.pci.to_string());
    JsonObject gj;
    gj.str("pci", gpu.pci.to_string()).raw("rails", json_array(rails_json));
    gpus_json.push_back(gj.render());
  }
  for (const Nic& n : topo->nics) nics.push_back(n.name);
  const size_t ng = topo->gpus.size(), nn = topo->nics.size();
  const std::string counts = std::to_string(ng) + " GPUs, " + std::to_string(nn) + " RDMA NICs";
  Outcome o;
  if (ng == 0) {
    o = make("topology", Verdict::warn,
             counts + ": no GPU on this node, the NIC plan is empty (fine for a host-only job)");
  } else if (nn == 0) {
    o = make("topology", Verdict::warn, counts + ": no RDMA-capable NIC, GPUs have no rail");
  } else if (!far.empty()) {
    o = make(
        "topology", Verdict::warn,
        counts + "; no NIC closer than SYS for GPU " + join(far) + " (traffic crosses sockets)");
  } else {
    o = make("topology", Verdict::pass, counts + "; every GPU has a NIC closer than SYS");
  }
  o.check.details.integer("gpus", static_cast<int64_t>(ng))
      .integer("nics", static_cast<int64_t>(nn))
      .raw("nic_names", json_strings(nics))
      .raw("plan", json_array(gpus_json))
      .raw("gpus_without_near_nic", json_strings(far))
      .str("explanation", p->explanation)
      .raw("notes", json_strings(topo->notes));
  o.topo = std::make_shared<const Topology>(std::move(topo).value());
  o.plan = std::make_shared<const Plan>(std::move(p).value());
  return o;
}

Outcome check_provider(const std::string& provider,
                       std::shared_ptr<const xport::topology::Topology> topo) {
  xport::ContextOptions co;
  co.provider = provider;  // empty: XPORT_PROVIDER, else the best (peers on other hosts)
  auto ctx = xport::Context::open(co);
  if (!ctx.ok()) {
    Outcome o = make("provider", Verdict::fail, ctx.status().to_string());
    o.check.details.str("requested", provider.empty() ? knob_value("XPORT_PROVIDER") : provider);
    return o;
  }
  const xport::ProviderReport& rep = (*ctx)->provider();
  Verdict v = Verdict::pass;
  std::string reason = rep.caps.provider + " on " + rep.caps.domain + ": " + rep.reason;
  static const std::set<std::string> kSoftware = {"tcp;ofi_rxm", "tcp", "sockets", "shm", "udp"};
  if (topo && !topo->nics.empty() && kSoftware.count(rep.caps.provider)) {
    v = Verdict::warn;  // RDMA hardware is there but libfabric offers no provider for it
    reason = rep.caps.provider + " although the node has RDMA NICs (" + topo->nics[0].name +
             "...): is the hardware provider missing? " + rep.reason;
  }
  Outcome o = make("provider", v, reason);
  o.check.details.str("provider", rep.caps.provider)
      .str("domain", rep.caps.domain)
      .str("fabric", rep.caps.fabric)
      .str("endpoint_type", rep.caps.endpoint_type)
      .str("why", rep.reason)
      .raw("candidates", json_strings(rep.candidates))
      .raw("domains", json_strings((*ctx)->domains()));
  o.ctx = std::shared_ptr<xport::Context>(std::move(ctx).value());
  return o;
}

Outcome check_capabilities(std::shared_ptr<xport::Context> ctx,
                           std::shared_ptr<const xport::topology::Topology> topo) {
  const xport::Capabilities& c = ctx->provider().caps;
  const bool gpus = topo && !topo->gpus.empty();
  std::vector<std::string> missing;
  if (!c.rma) missing.push_back("RMA");
  if (c.remote_cq_data_size < 4) missing.push_back("4 bytes of remote CQ data");
  // 4-byte CQ data (efa, verbs) carries a message's stripe count: at most 16 stripes.
  const std::string cq_data =
      std::to_string(c.remote_cq_data_size) + " B" +
      (c.remote_cq_data_size == 4 ? " (a message is striped over at most 16 rails)" : "");
  // libxport's windows have no atomics yet: only the provider's capability is reported.
  std::string text = std::string("RMA ") + (c.rma ? "yes" : "no") + "; remote CQ data " +
                     cq_data + "; provider atomics " + (c.atomics ? "yes" : "no") + "; FI_HMEM " +
                     (c.hmem ? "yes"
                      : gpus ? "no"
                             : "no (not needed: no GPU)");
  Verdict v = Verdict::pass;
  if (!missing.empty()) {
    v = Verdict::fail;
    text = c.provider + " lacks " + join(missing) + ": " + text;
  } else if (gpus && !c.hmem) {
    v = Verdict::warn;
    text += ": GPU memory cannot be registered with " + c.provider;
  }
  Outcome o = make("capabilities", v, text);
  o.check.details.boolean("rma", c.rma)
      .integer("remote_cq_data_bytes", static_cast<int64_t>(c.remote_cq_data_size))
      .boolean("provider_atomics", c.atomics)
      .boolean("hmem", c.hmem)
      .boolean("fence", c.fence)
      .raw("mr_mode", json_strings(c.mr_mode))
      .raw("inject_bytes", std::to_string(c.inject_size))
      .raw("max_msg_bytes", std::to_string(c.max_msg_size));  // SIZE_MAX: no limit
  return o;
}

Outcome check_progress(std::shared_ptr<xport::Context> ctx) {
  const xport::ProviderReport& rep = ctx->provider();
  const xport::Capabilities& c = rep.caps;
  std::string text =
      "data " + c.data_progress + ", control " + c.control_progress + ", " + c.threading;
  if (rep.progress_fallback) {
    text += " (auto not offered: libxport drives progress inside its calls)";
  } else if (rep.progress_native_manual) {
    text += " (the provider's own progress: libxport drives it inside its calls)";
  } else if (c.data_progress == "manual") {
    text += " (XPORT_PROGRESS=manual)";
  }
  Outcome o = make("progress", Verdict::pass, text);
  o.check.details.str("data_progress", c.data_progress)
      .str("control_progress", c.control_progress)
      .str("threading", c.threading)
      .boolean("fallback", rep.progress_fallback)
      .boolean("native_manual", rep.progress_native_manual);
  return o;
}

Outcome check_link(const std::string& rail) {
  xport::topology::RailLink l = xport::topology::rail_link(rail);
  std::ostringstream rate;
  if (l.rate_gbps > 0)
    rate << l.rate_gbps << " Gb/s";
  else
    rate << "rate not reported";
  Outcome o;
  if (l.kind.empty()) {
    o = make("link", Verdict::skip,
             "'" + rail + "' is neither a network interface nor an RDMA device: no link to read",
             rail);
  } else if (!l.up()) {
    o = make("link", Verdict::fail, l.device + " " + l.kind + " link is " + l.state, rail);
  } else if (l.state == "unknown") {
    o = make("link", Verdict::pass,
             l.device + " operstate unknown (loopback and virtual interfaces report no carrier), " +
                 rate.str(),
             rail);
  } else {
    o = make("link", Verdict::pass, l.device + " " + l.state + ", " + rate.str(), rail);
  }
  std::vector<std::string> ports;
  for (const auto& p : l.ports) {
    JsonObject pj;
    pj.integer("port", p.number).str("state", p.state).num("rate_gbps", p.rate_gbps);
    ports.push_back(pj.render());
  }
  o.check.details.str("kind", l.kind)
      .str("device", l.device)
      .str("state", l.state)
      .num("rate_gbps", l.rate_gbps)
      .raw("ports", json_array(ports));
  return o;
}

Outcome check_memlock(size_t devices, size_t rails_per_device, const std::string& provider) {
  rlimit lim{};
  getrlimit(RLIMIT_MEMLOCK, &lim);
  const uint64_t per_rail = xport::device_registered_bytes(1, provider);
  const uint64_t need = devices * rails_per_device * per_rail;
  const bool unlimited = lim.rlim_cur == RLIM_INFINITY;
  const bool cap = has_ipc_lock();
  const std::string limit = unlimited ? "unlimited" : human_bytes(lim.rlim_cur);
  const std::string what = human_bytes(need) + " that libxport registers for " +
                           std::to_string(devices) + " device(s) x " +
                           std::to_string(rails_per_device) + " rail(s) (" +
                           human_bytes(per_rail) +
                           " per rail: bounce, flush and atomic buffers)";
  Outcome o;
  if (cap) {
    o = make(
        "memlock", Verdict::pass,
        "unlimited for this process: CAP_IPC_LOCK (RLIMIT_MEMLOCK " + limit + " does not bind it)");
  } else if (unlimited) {
    o = make("memlock", Verdict::pass, "RLIMIT_MEMLOCK unlimited");
  } else if (lim.rlim_cur < need) {
    o = make("memlock", Verdict::fail,
             "RLIMIT_MEMLOCK " + limit + " < " + what +
                 ": registration fails on providers that pin memory; raise it (ulimit -l "
                 "unlimited, LimitMEMLOCK=infinity)");
  } else if (lim.rlim_cur - need < (uint64_t{1} << 30)) {
    o = make("memlock", Verdict::warn,
             "RLIMIT_MEMLOCK " + limit + " covers the " + what + " but leaves " +
                 human_bytes(lim.rlim_cur - need) + " for the job's registered host buffers");
  } else {
    o = make("memlock", Verdict::pass, "RLIMIT_MEMLOCK " + limit + " >= " + what);
  }
  o.check.details.raw("limit_bytes", unlimited ? "null" : std::to_string(lim.rlim_cur))
      .boolean("cap_ipc_lock", cap)
      .integer("needed_bytes", static_cast<int64_t>(need))
      .integer("bytes_per_rail", static_cast<int64_t>(per_rail))
      .integer("devices", static_cast<int64_t>(devices))
      .integer("rails_per_device", static_cast<int64_t>(rails_per_device));
  return o;
}

Outcome check_host_registration(std::shared_ptr<xport::Context> ctx, std::vector<std::string> rails,
                                xport::Deadline deadline) {
  xport::DeviceOptions d;
  d.rails = std::move(rails);
  auto dev = ctx->open_device(d);
  if (!dev.ok()) return make("host-registration", Verdict::fail, dev.status().to_string());
  constexpr size_t kBytes = 1 << 20;
  std::vector<uint8_t> buf(kBytes + 4096);
  void* aligned =
      reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(buf.data()) + 4095) & ~uintptr_t{4095});
  const auto t0 = std::chrono::steady_clock::now();
  auto reg = (*dev)->register_memory(aligned, kBytes);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!reg.ok()) return make("host-registration", Verdict::fail, reg.status().to_string());
  const std::string on = join((*dev)->rails());
  if (deadline.expired()) {
    return make("host-registration", Verdict::fail,
                "registration took " + std::to_string(ms) + " ms");
  }
  char text[160];
  std::snprintf(text, sizeof(text), "1 MiB host buffer registered on %s in %.3f ms", on.c_str(),
                ms);
  Outcome o = make("host-registration", Verdict::pass, text);
  o.check.details.integer("bytes", kBytes)
      .num("milliseconds", ms)
      .raw("rails", json_strings((*dev)->rails()));
  return o;
}

Outcome check_gpu_registration(std::shared_ptr<const xport::topology::Topology> topo,
                               std::shared_ptr<xport::Context> ctx) {
  namespace fs = std::filesystem;
  const bool peermem =
      fs::exists("/sys/module/nvidia_peermem") || fs::exists("/sys/module/nv_peer_mem");
  const bool hmem = ctx && ctx->provider().caps.hmem;
  // The path register_memory takes for GPU memory under this Context: registered by the
  // provider (FI_HMEM_CUDA) only where XPORT_GPU_MEMORY=hmem got FI_HMEM granted, else staged
  // through registered host shadows (auto's choice too).
  const bool by_provider = ctx && ctx->provider().caps.hmem_enabled;
  const std::string path =
      by_provider ? "registered by the provider (FI_HMEM_CUDA, XPORT_GPU_MEMORY=hmem)"
                  : "staged through registered host shadows";
  Outcome o;
  if (!topo || topo->gpus.empty()) {
    o = make("gpu-registration", Verdict::skip,
             topo ? "no GPU on this node (GPU memory would be " + path + ")"
                  : "topology unknown (see the topology check)");
  } else {
    // What the node offers and which path GPU memory takes; no GPU buffer is registered here.
    o = make("gpu-registration", Verdict::warn,
             std::to_string(topo->gpus.size()) + " GPUs: GPU memory is " + path +
                 "; not tested by this check; FI_HMEM " + (hmem ? "offered" : "not offered") +
                 ", peer memory " + (peermem ? "loaded" : "not loaded"));
  }
  o.check.details.boolean("gpu_memory_support", true)
      .str("gpu_memory_path", by_provider ? "hmem" : "staged")
      .boolean("fi_hmem", hmem)
      .boolean("peer_memory_module", peermem);
  return o;
}

}  // namespace probe
