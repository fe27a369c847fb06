// The host API GPU backends share, and the proxy backend (xport/gpu_host.hpp).
#include "xport/gpu_host.hpp"

#include <cstring>
#include <map>
#include <string>

#include "core/format.hpp"
#include "xport/xport.hpp"

namespace xport {

namespace {
// Team exchanges (a rank number, a region's key) travel in messages of at most this size.
constexpr size_t kExchangeBytes = 4096;
constexpr uint32_t kTagRank = 0x7e01;
constexpr uint32_t kTagKey = 0x7e02;
}  // namespace

struct GpuHost::State {
  std::unique_ptr<Context> context;
  GpuHostDevices layout = GpuHostDevices::per_domain;
  std::vector<std::string> domains;
  std::map<int, std::unique_ptr<Device>> devices;
  std::map<int, std::unique_ptr<Listener>> listeners;
};

GpuTeam::~GpuTeam() {
  windows_.clear();  // windows before their communicators
  send_.clear();
  recv_.clear();
}

Window* GpuTeam::window(int peer) const {
  if (peer < 0 || peer >= size()) return nullptr;
  return windows_[static_cast<size_t>(peer)].get();
}

Result<std::unique_ptr<GpuHost>> GpuHost::init(const ContextOptions& options,
                                               GpuHostDevices devices) {
  auto h = std::unique_ptr<GpuHost>(new GpuHost());
  h->s_ = std::make_unique<State>();
  h->s_->layout = devices;
  XPORT_ASSIGN_OR_RETURN(h->s_->context, Context::open(options));
  if (devices == GpuHostDevices::per_domain) h->s_->domains = h->s_->context->domains();
  if (h->s_->domains.empty()) h->s_->domains.push_back("");  // the Context's own choice
  return h;
}

GpuHost::~GpuHost() {
  if (!s_) return;
  s_->listeners.clear();
  s_->devices.clear();
}

int GpuHost::devices() const { return static_cast<int>(s_->domains.size()); }

Result<Device*> GpuHost::device(int index) {
  if (index < 0 || index >= devices()) {
    return Status(Code::invalid_argument,
                  core::str("GpuHost: device ", index, " does not exist (", devices(), ")"));
  }
  auto it = s_->devices.find(index);
  if (it != s_->devices.end()) return it->second.get();
  DeviceOptions o;
  if (!s_->domains[static_cast<size_t>(index)].empty()) o.rails = {s_->domains[static_cast<size_t>(index)]};
  XPORT_ASSIGN_OR_RETURN(auto d, s_->context->open_device(o));
  Device* out = d.get();
  s_->devices.emplace(index, std::move(d));
  return out;
}

Result<ConnectionHandle> GpuHost::listen(int index) {
  XPORT_ASSIGN_OR_RETURN(Device * d, device(index));
  auto it = s_->listeners.find(index);
  if (it == s_->listeners.end()) {
    XPORT_ASSIGN_OR_RETURN(auto l, d->listen());
    it = s_->listeners.emplace(index, std::move(l)).first;
  }
  return it->second->handle();
}

Result<std::unique_ptr<Listener>> GpuHost::open_listener(int index) {
  XPORT_ASSIGN_OR_RETURN(Device * d, device(index));
  return d->listen();
}

Result<std::unique_ptr<GpuTeam>> GpuHost::connect(int index,
                                                  std::span<const ConnectionHandle> handles,
                                                  int rank, Deadline deadline,
                                                  Listener* own_listener) {
  const int n = static_cast<int>(handles.size());
  if (rank < 0 || rank >= n) {
    return Status(Code::invalid_argument, core::str("GpuHost::connect: rank ", rank, " of ", n));
  }
  XPORT_ASSIGN_OR_RETURN(Device * d, device(index));
  if (own_listener == nullptr && s_->listeners.count(index) == 0) {
    return Status(Code::invalid_argument,
                  core::str("GpuHost::connect: device ", index, " has no listener (listen first)"));
  }
  Listener& listener = own_listener != nullptr ? *own_listener : *s_->listeners[index];
  auto team = std::unique_ptr<GpuTeam>(new GpuTeam());
  team->device_ = d;
  team->rank_ = rank;
  team->send_.resize(static_cast<size_t>(n));
  team->recv_.resize(static_cast<size_t>(n));
  team->windows_.resize(static_cast<size_t>(n));
  team->scratch_bytes_.assign(static_cast<size_t>(n) * kExchangeBytes * 2, 0);
  XPORT_ASSIGN_OR_RETURN(team->scratch_, d->register_memory(team->scratch_bytes_.data(),
                                                             team->scratch_bytes_.size()));
  uint8_t* out_area = team->scratch_bytes_.data();                      // [peer] what we send
  uint8_t* in_area = out_area + static_cast<size_t>(n) * kExchangeBytes;  // [slot] what arrives
  // Connect to every rank (this one too: the loopback carries kernels' operations to their own
  // rank) while accepting theirs; who an accepted comm is comes with its first message (the
  // peer's rank).
  std::vector<std::unique_ptr<PendingConnect>> pending(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) {
    XPORT_ASSIGN_OR_RETURN(pending[static_cast<size_t>(p)],
                           d->start_connect(handles[static_cast<size_t>(p)], deadline));
  }
  std::vector<std::unique_ptr<RecvComm>> accepted;
  int connected = 0;
  while (connected < n || static_cast<int>(accepted.size()) < n) {
    for (int p = 0; p < n; ++p) {
      auto& pc = pending[static_cast<size_t>(p)];
      if (!pc) continue;
      auto c = pc->poll();
      if (!c.ok()) {
        return c.status().with_context(core::str("GpuHost::connect: rank ", rank, " to rank ", p));
      }
      if (!*c) continue;
      team->send_[static_cast<size_t>(p)] = std::move(c).value();
      pc.reset();
      ++connected;
      std::memcpy(out_area + static_cast<size_t>(p) * kExchangeBytes, &rank, sizeof(rank));
    }
    if (static_cast<int>(accepted.size()) < n) {
      XPORT_ASSIGN_OR_RETURN(auto r, listener.try_accept());
      if (r) accepted.push_back(std::move(r));
    }
    if (deadline.expired()) {
      std::string missing;
      for (int p = 0; p < n; ++p) {
        if (pending[static_cast<size_t>(p)]) missing += core::str(missing.empty() ? "" : ", ", "rank ", p);
      }
      return Status(Code::timeout,
                    core::str("GpuHost::connect: rank ", rank, " connected to ", connected,
                              " and accepted ", accepted.size(), " of ", n, " ranks",
                              missing.empty() ? "" : " (no answer from " + missing + ")"));
    }
  }
  // Ranks: send ours on every SendComm, learn each accepted comm's.
  std::vector<Request> sends, recvs;
  for (int p = 0; p < n; ++p) {
    XPORT_ASSIGN_OR_RETURN(Request r, team->send_[static_cast<size_t>(p)]->isend(
                                          out_area + static_cast<size_t>(p) * kExchangeBytes,
                                          sizeof(int), team->scratch_, kTagRank));
    sends.push_back(r);
  }
  for (size_t i = 0; i < accepted.size(); ++i) {
    XPORT_ASSIGN_OR_RETURN(Request r, accepted[i]->irecv(in_area + i * kExchangeBytes, sizeof(int),
                                                         team->scratch_, kTagRank));
    recvs.push_back(r);
  }
  for (size_t i = 0; i < accepted.size(); ++i) {
    XPORT_ASSIGN_OR_RETURN(size_t got, accepted[i]->wait(recvs[i], deadline));
    int peer = -1;
    if (got == sizeof(int)) std::memcpy(&peer, in_area + i * kExchangeBytes, sizeof(int));
    if (peer < 0 || peer >= n || team->recv_[static_cast<size_t>(peer)]) {
      return Status(Code::protocol, core::str("GpuHost::connect: an accepted connection named rank ",
                                              peer, " (team of ", n, ", this rank ", rank, ")"));
    }
    team->recv_[static_cast<size_t>(peer)] = std::move(accepted[i]);
  }
  size_t k = 0;
  for (int p = 0; p < n; ++p) {
    XPORT_RETURN_IF_ERROR(team->send_[static_cast<size_t>(p)]->wait(sends[k++], deadline).status());
  }
  for (int p = 0; p < n; ++p) {
    XPORT_ASSIGN_OR_RETURN(team->windows_[static_cast<size_t>(p)],
                           Window::open(*team->send_[static_cast<size_t>(p)], deadline));
  }
  return team;
}

Result<SymmetricRegion> GpuHost::register_symmetric(GpuTeam& team, void* buf, size_t len,
                                                    Deadline deadline) {
  SymmetricRegion out;
  XPORT_ASSIGN_OR_RETURN(out.local, team.device().register_memory(buf, len));
  const std::vector<uint8_t> mine = out.local.export_key();
  if (mine.size() > kExchangeBytes) {
    return Status(Code::internal, core::str("register_symmetric: a key of ", mine.size(), " bytes"));
  }
  const int n = team.size();
  uint8_t* out_area = team.scratch_bytes_.data();
  uint8_t* in_area = out_area + static_cast<size_t>(n) * kExchangeBytes;
  std::vector<Request> sends(static_cast<size_t>(n)), recvs(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) {
    if (p == team.rank()) continue;
    const size_t at = static_cast<size_t>(p) * kExchangeBytes;
    std::memcpy(out_area + at, mine.data(), mine.size());
    XPORT_ASSIGN_OR_RETURN(recvs[static_cast<size_t>(p)],
                           team.recv_[static_cast<size_t>(p)]->irecv(in_area + at, kExchangeBytes,
                                                                     team.scratch_, kTagKey));
    XPORT_ASSIGN_OR_RETURN(sends[static_cast<size_t>(p)],
                           team.send_[static_cast<size_t>(p)]->isend(out_area + at, mine.size(),
                                                                     team.scratch_, kTagKey));
  }
  out.remote.resize(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) {
    const size_t at = static_cast<size_t>(p) * kExchangeBytes;
    if (p == team.rank()) {
      XPORT_ASSIGN_OR_RETURN(out.remote[static_cast<size_t>(p)], team.device().import_key(mine));
      continue;
    }
    XPORT_ASSIGN_OR_RETURN(size_t got,
                           team.recv_[static_cast<size_t>(p)]->wait(recvs[static_cast<size_t>(p)], deadline));
    auto key = team.device().import_key(std::span<const uint8_t>(in_area + at, got));
    if (!key.ok()) return key.status().with_context(core::str("register_symmetric: rank ", p, "'s key"));
    out.remote[static_cast<size_t>(p)] = std::move(key).value();
    XPORT_RETURN_IF_ERROR(
        team.send_[static_cast<size_t>(p)]->wait(sends[static_cast<size_t>(p)], deadline).status());
  }
  return out;
}

void GpuHost::deregister(SymmetricRegion& region) {
  region.remote.clear();
  region.local = Region();
}

Status GpuHost::progress() {
  for (auto& [i, d] : s_->devices) XPORT_RETURN_IF_ERROR(d->progress());
  return Status::success();
}

// ---- the proxy backend ----

namespace {

class ProxyContext final : public GpuBackendContext {
 public:
  explicit ProxyContext(std::unique_ptr<GpuProxy> p) : proxy_(std::move(p)) {}
  gpu_ring::DeviceRing ring() const override { return proxy_->ring(); }
  Status last_error() const override { return proxy_->last_error(); }

 private:
  std::unique_ptr<GpuProxy> proxy_;
};

class ProxyBackend final : public GpuBackend {
 public:
  GpuBackendProperties properties(const GpuTeam& team) const override {
    GpuBackendProperties p;
    p.kind = GpuBackendKind::proxy;
    p.name = "proxy";
    p.host_thread = true;
    p.gpu_memory_staged = team.device().properties().device_memory;
    p.ring_capacity = GpuProxyOptions{}.capacity;
    return p;
  }
  Result<std::unique_ptr<GpuBackendContext>> create_context(
      GpuTeam& team, std::span<const SymmetricRegion* const> regions,
      const GpuProxyOptions& options) override {
    XPORT_ASSIGN_OR_RETURN(auto proxy, GpuProxy::open(team.device(), options));
    // Windows by peer rank (this rank's own slot: any window, never named by a valid kernel).
    const int n = team.size();
    Window* any = nullptr;
    for (int p = 0; p < n && any == nullptr; ++p) any = team.window(p);
    if (any == nullptr) return Status(Code::invalid_argument, "create_context: a team of one rank");
    for (int p = 0; p < n; ++p) {
      XPORT_RETURN_IF_ERROR(proxy->add_window(team.window(p) ? *team.window(p) : *any).status());
    }
    // Local regions by symmetric index; remote ones at region * team size + peer.
    for (const SymmetricRegion* r : regions) XPORT_RETURN_IF_ERROR(proxy->add_region(r->local).status());
    for (const SymmetricRegion* r : regions) {
      if (static_cast<int>(r->remote.size()) != n) {
        return Status(Code::invalid_argument, "create_context: a symmetric region of another team");
      }
      for (const RemoteRegion& k : r->remote) XPORT_RETURN_IF_ERROR(proxy->add_remote(k).status());
    }
    XPORT_RETURN_IF_ERROR(proxy->start());
    return std::unique_ptr<GpuBackendContext>(new ProxyContext(std::move(proxy)));
  }
};

}  // namespace

Result<std::unique_ptr<GpuBackend>> GpuBackend::open(GpuBackendKind kind) {
  if (kind == GpuBackendKind::direct) {
    return Status(Code::unsupported,
                  "GpuBackend: no direct (GPU-to-NIC) backend is built: it needs a NIC the GPU "
                  "can ring itself (GPUDirect Async / IBGDA); use the proxy backend");
  }
  return std::unique_ptr<GpuBackend>(new ProxyBackend());
}

}  // namespace xport
