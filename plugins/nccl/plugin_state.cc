// The NCCL plugin's process-wide state: libxport opened by the first init and closed with the
// last finalize, NCCL's logger, libxport errors as NCCL errors, and the live registrations.
#include "plugin_state.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string_view>

#include "lanes_rule.hpp"

namespace xport::nccl {
namespace {

std::string knob_value(const char* name) {
  for (const KnobInfo& k : knob_list()) {
    if (k.name == name) return k.value;
  }
  return "";
}

}  // namespace

Request* CommBase::take(ReqKind kind) {
  std::lock_guard<std::mutex> l(mu);
  if (free.empty()) {
    // NCCL keeps at most NCCL_NET_MAX_REQUESTS (32) outstanding per comm; the pool grows to
    // what is used and is reused from then on.
    if (pool.size() >= 256) return nullptr;
    pool.push_back(std::make_unique<Request>());
    free.push_back(pool.back().get());
  }
  Request* r = free.back();
  free.pop_back();
  r->busy = true;
  r->kind = kind;
  r->comm = this;
  r->count = 1;
  r->next = nullptr;
  r->published.store(false, std::memory_order_relaxed);
  r->error = Status();
  return r;
}

void CommBase::give(Request* r) {
  std::lock_guard<std::mutex> l(mu);
  r->busy = false;
  free.push_back(r);
}

PluginState& PluginState::get() {
  static PluginState* s = new PluginState();  // never destroyed: NCCL may call late at exit
  return *s;
}

ncclResult_t PluginState::acquire(ncclDebugLogger_t logger) {
  std::lock_guard<std::mutex> l(mu_);
  if (logger != nullptr) logger_.store(logger);
  if (refs_.load() > 0) {
    refs_.fetch_add(1);
    return ncclSuccess;
  }
  // libxport's messages go to NCCL's log (warnings as WARN, the rest as INFO).
  set_log_sink([](LogLevel level, std::string_view msg) {
    ncclDebugLogger_t f = PluginState::get().logger_.load();
    const ncclDebugLogLevel l = level <= LogLevel::warn ? NCCL_LOG_WARN : NCCL_LOG_INFO;
    if (f != nullptr) {
      f(l, NCCL_NET, "libxport", 0, "NET/xport : %.*s", static_cast<int>(msg.size()), msg.data());
    } else if (l == NCCL_LOG_WARN) {
      std::fprintf(stderr, "NET/xport : %.*s\n", static_cast<int>(msg.size()), msg.data());
    }
  });
  Status knobs = validate_knobs();
  if (!knobs.ok()) return fail(knobs, "init: knobs", true);
  speed_default_ = std::atoi(knob_value("XPORT_NCCL_SPEED_MBPS").c_str());
  max_recvs_ = std::atoi(knob_value("XPORT_NCCL_MAX_RECVS").c_str());
  if (max_recvs_ < 1 || max_recvs_ > static_cast<int>(kMaxGroupedRecvs)) {
    return fail(ncclInvalidArgument, "init: XPORT_NCCL_MAX_RECVS=%d: 1..%zu", max_recvs_,
                kMaxGroupedRecvs);
  }
  lanes_ = std::atoi(knob_value("XPORT_NCCL_LANES").c_str());
  if (lanes_ < 0 || lanes_ > 16) {
    return fail(ncclInvalidArgument, "init: XPORT_NCCL_LANES=%d: 1..16, or 0 (auto)", lanes_);
  }
  gin_lanes_ = std::atoi(knob_value("XPORT_NCCL_GIN_LANES").c_str());
  if (gin_lanes_ < 0 || gin_lanes_ > 16) {
    return fail(ncclInvalidArgument, "init: XPORT_NCCL_GIN_LANES=%d: 1..16, or 0 (auto)",
                gin_lanes_);
  }
  const long long split = std::atoll(knob_value("XPORT_NCCL_GIN_SPLIT_BYTES").c_str());
  if (split < 4096) {
    return fail(ncclInvalidArgument, "init: XPORT_NCCL_GIN_SPLIT_BYTES=%lld: at least 4096",
                split);
  }
  gin_split_bytes_ = static_cast<size_t>(split);
  const int spin_us = std::atoi(knob_value("XPORT_NCCL_LANE_SPIN_US").c_str());
  if (spin_us < 0 || spin_us > 1000000) {
    return fail(ncclInvalidArgument, "init: XPORT_NCCL_LANE_SPIN_US=%d: 0..1000000", spin_us);
  }
  lane_spin_us_ = spin_us;
  auto ctx = Context::open();
  if (!ctx.ok()) return fail(ctx.status(), "init: opening libxport");
  std::string lanes_why = "XPORT_NCCL_LANES";
  if (lanes_ == 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    const int cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
    const int online = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
    const auto [procs, source] = local_processes();
    LaneChoice c = auto_lanes((*ctx)->provider().caps.provider, cpus, online, procs, source);
    lanes_ = c.lanes;
    lanes_why = std::move(c.why);
  }
  auto nd = std::make_unique<NetDevice>();
  nd->index = 0;
  for (int i = 0; i < lanes_; ++i) {
    auto dev = (*ctx)->open_device();
    if (!dev.ok()) {
      return fail(dev.status(), lanes_ == 1 ? "init: opening the device"
                                            : "init: opening a lane's device");
    }
    auto lane = std::make_unique<Lane>();
    lane->index = i;
    lane->device = std::move(dev).value();
    nd->lanes.push_back(std::move(lane));
  }
  if (lanes_ > 1) {
    for (auto& lane : nd->lanes) lane->start_thread(std::chrono::microseconds(spin_us));
  }
  nd->props = nd->lanes[0]->device->properties();
  nd->name = intern(nd->props.name);
  nd->pci_path = nd->props.pci_path.empty() ? nullptr : intern(nd->props.pci_path);
  devices_.clear();
  devices_.push_back(std::move(nd));
  ctx_ = std::move(ctx).value();
  refs_.store(1);
  const NetDevice& d = *devices_[0];
  log(NCCL_LOG_INFO, __FILE__, __LINE__,
      "NET/xport : libxport %s, provider %s, device 0 '%s' (%u rails, %s, %d lanes: %s)",
      version(), ctx_->provider().caps.provider.c_str(), d.name, d.props.rails,
      d.pci_path == nullptr ? "no PCI path" : d.pci_path, lanes_, lanes_why.c_str());
  return ncclSuccess;
}

void PluginState::release() {
  std::lock_guard<std::mutex> l(mu_);
  if (refs_.load() == 0 || refs_.fetch_sub(1) != 1) return;
  // The last NCCL communicator is gone: libxport closes (devices that still have Regions or
  // communicators NCCL did not close stay alive through them). Connects NCCL never finished
  // are given up first (a handle still naming one finds nothing after this).
  {
    std::lock_guard<std::mutex> c(connects_mu_);
    connects_.clear();
  }
  devices_.clear();
  ctx_.reset();
}

char* PluginState::intern(const std::string& s) {  // (called with mu_ held, from acquire)
  for (std::string& i : interned_) {
    if (i == s) return i.data();
  }
  interned_.push_back(s);
  return interned_.back().data();
}

void PluginState::add(MemHandle* m) {
  std::lock_guard<std::mutex> l(handles_mu_);
  handles_.insert(m);
}

bool PluginState::remove(MemHandle* m) {
  std::lock_guard<std::mutex> l(handles_mu_);
  return handles_.erase(m) == 1;
}

bool PluginState::live(const MemHandle* m) {
  std::lock_guard<std::mutex> l(handles_mu_);
  return handles_.count(m) == 1;
}

uint64_t PluginState::add_connect(std::unique_ptr<PendingNetConnect> c) {
  std::lock_guard<std::mutex> l(connects_mu_);
  if (connect_salt_ == 0) {
    std::random_device rd;
    connect_salt_ = (uint64_t{rd()} << 32 | rd()) | 1;
  }
  uint64_t id = 0;
  do {
    // splitmix64 of a counter: distinct ids, not guessable from one another's neighbours.
    uint64_t z = connect_salt_ + ++connect_count_ * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    id = z ^ (z >> 31);
  } while (id == 0 || connects_.count(id) != 0);
  connects_.emplace(id, std::move(c));
  return id;
}

std::unique_ptr<PendingNetConnect> PluginState::take_connect(uint64_t id) {
  std::lock_guard<std::mutex> l(connects_mu_);
  auto it = connects_.find(id);
  if (it == connects_.end()) return nullptr;
  std::unique_ptr<PendingNetConnect> c = std::move(it->second);
  connects_.erase(it);
  return c;
}

void PluginState::put_connect(uint64_t id, std::unique_ptr<PendingNetConnect> c) {
  std::lock_guard<std::mutex> l(connects_mu_);
  connects_.emplace(id, std::move(c));
}

void PluginState::log(ncclDebugLogLevel level, const char* file, int line, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  ncclDebugLogger_t f = logger_.load();
  if (f != nullptr) {
    f(level, NCCL_NET | NCCL_INIT, file, line, "%s", buf);
  } else if (level == NCCL_LOG_WARN) {
    std::fprintf(stderr, "%s\n", buf);
  }
}

ncclResult_t PluginState::fail(const Status& s, const char* what, bool input_error) {
  ncclResult_t r = ncclInternalError;
  switch (s.code()) {
    case Code::ok: return ncclSuccess;
    case Code::invalid_argument: r = ncclInvalidArgument; break;
    case Code::protocol: r = input_error ? ncclInvalidArgument : ncclRemoteError; break;
    case Code::truncated:
    case Code::unsupported: r = ncclInvalidUsage; break;
    case Code::timeout:
    case Code::peer_lost:
    case Code::closed: r = ncclRemoteError; break;
    case Code::not_found:
    case Code::fabric:
    case Code::resource: r = ncclSystemError; break;
    case Code::again:
    case Code::internal: r = ncclInternalError; break;
  }
  log(NCCL_LOG_WARN, __FILE__, __LINE__, "NET/xport : %s: %s", what, s.to_string().c_str());
  return r;
}

ncclResult_t PluginState::fail(ncclResult_t code, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  log(NCCL_LOG_WARN, __FILE__, __LINE__, "NET/xport : %s", buf);
  return code;
}

}  // namespace xport::nccl
