// The host API GPU backends share, and the proxy backend (xport/gpu_host.hpp).
#include "xport/gpu_host.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "gpu/host/team_hello.hpp"
#include "proto/connections/shared.hpp"
#include "core/format.hpp"
#include "core/log.hpp"
#include "xport/xport.hpp"

namespace xport {

namespace {
// Team exchanges (a region's key) travel in messages of at most this size.
constexpr size_t kExchangeBytes = 4096;
constexpr uint32_t kTagKey = 0x7e02;
// Connections accepted on a shared listener for teams not forming yet (or not heard from yet),
// kept for them: this many, and twice the largest team this host was asked to form (every rank
// of a team forming here and of one forming next may be waiting at once); beyond that, strangers
// are closed at once. (The device's communicator table, XPORT_MAX_COMMS, bounds them too.)
constexpr size_t kMaxParked = 256;

// A connection the listener refused because its backlog (XPORT_LISTEN_BACKLOG) was full: every
// rank asks every other at once, and a listener whose device progresses in a thread of its own
// may admit more between two of its owner's takes than it holds waiting.
bool refused_for_backlog(const Status& s) {
  return s.code() == Code::peer_lost &&
         s.message().find(proto::conn::reject_text(proto::conn::kBacklogFull)) !=
             std::string::npos;
}
}  // namespace

struct GpuHost::State {
  std::unique_ptr<Context> context;
  GpuHostDevices layout = GpuHostDevices::per_domain;
  std::vector<std::string> domains;
  int lanes = 1;
  std::mutex mu;  // guards what follows: teams may form from several threads at once
  std::map<int, std::unique_ptr<Device>> devices;
  std::map<int, std::unique_ptr<Listener>> listeners;
  // Teams begun, by digest of their handles and the rank the caller forms them as: ranks of one
  // team in one process (NCCL's one process driving several GPUs) count apart, so each derives
  // the same ordinal as every other rank.
  std::map<std::pair<uint64_t, int>, uint64_t> formed;
  // Accepted on a listen(index) listener, for a team other than the one that accepted them (or
  // not heard from yet), and how many may wait (kMaxParked).
  std::vector<std::unique_ptr<gpu::TeamArrival>> parked;
  size_t parked_room = kMaxParked;
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
                                               GpuHostDevices devices, GpuHostLanes lanes) {
  if (lanes.count < 1 || lanes.count > 16) {
    return Status(Code::invalid_argument,
                  core::str("GpuHost::init: ", lanes.count, " lanes (1..16)"));
  }
  auto h = std::unique_ptr<GpuHost>(new GpuHost());
  h->s_ = std::make_unique<State>();
  h->s_->layout = devices;
  h->s_->lanes = lanes.count;
  XPORT_ASSIGN_OR_RETURN(h->s_->context, Context::open(options));
  if (devices == GpuHostDevices::per_domain) h->s_->domains = h->s_->context->domains();
  if (h->s_->domains.empty()) h->s_->domains.push_back("");  // the Context's own choice
  return h;
}

GpuHost::~GpuHost() {
  if (!s_) return;
  s_->parked.clear();
  s_->listeners.clear();
  s_->devices.clear();
}

int GpuHost::devices() const { return static_cast<int>(s_->domains.size()); }

int GpuHost::lanes() const { return s_->lanes; }

Result<Device*> GpuHost::device(int index) {
  if (index < 0 || index >= devices() * lanes()) {
    return Status(Code::invalid_argument,
                  core::str("GpuHost: device ", index, " does not exist (", devices(), " x ",
                            lanes(), " lanes)"));
  }
  std::lock_guard<std::mutex> l(s_->mu);
  auto it = s_->devices.find(index);
  if (it != s_->devices.end()) return it->second.get();
  DeviceOptions o;
  const std::string& domain = s_->domains[static_cast<size_t>(index % devices())];
  if (!domain.empty()) o.rails = {domain};
  XPORT_ASSIGN_OR_RETURN(auto d, s_->context->open_device(o));
  Device* out = d.get();
  s_->devices.emplace(index, std::move(d));
  return out;
}

Result<ConnectionHandle> GpuHost::listen(int index) {
  XPORT_ASSIGN_OR_RETURN(Device * d, device(index));
  std::lock_guard<std::mutex> l(s_->mu);
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
  Listener* shared = nullptr;
  uint64_t nonce = 0;
  {
    std::lock_guard<std::mutex> l(s_->mu);
    if (own_listener == nullptr) {
      auto it = s_->listeners.find(index);
      if (it == s_->listeners.end()) {
        return Status(Code::invalid_argument, core::str("GpuHost::connect: device ", index,
                                                        " has no listener (listen first)"));
      }
      shared = it->second.get();
    }
    // Every rank derives the same nonce: the handles in rank order, and how many teams this
    // host began with them before as this rank (ranks form their teams in the same order).
    const uint64_t digest = gpu::team_digest(handles);
    nonce = gpu::team_nonce(digest, s_->formed[{digest, rank}]++);
    s_->parked_room = std::max(s_->parked_room, kMaxParked + 2 * static_cast<size_t>(n));
  }
  Listener& listener = own_listener != nullptr ? *own_listener : *shared;
  auto team = std::unique_ptr<GpuTeam>(new GpuTeam());
  team->device_ = d;
  team->rank_ = rank;
  team->send_.resize(static_cast<size_t>(n));
  team->recv_.resize(static_cast<size_t>(n));
  team->windows_.resize(static_cast<size_t>(n));
  team->scratch_bytes_.assign(static_cast<size_t>(n) * kExchangeBytes * 2, 0);
  XPORT_ASSIGN_OR_RETURN(team->scratch_, d->register_memory(team->scratch_bytes_.data(),
                                                             team->scratch_bytes_.size()));
  uint8_t* out_area = team->scratch_bytes_.data();  // [peer] what we send
  // Connect to every rank (this one too: the loopback carries kernels' operations to their own
  // rank) while accepting theirs. Each connection's first message names the team (its nonce)
  // and the rank: an accepted connection is taken only with this team's nonce and a rank not
  // taken yet; one of another team forming on the same shared listener is kept for it, one of
  // no team (a stranger, a malformed or missing hello) is closed.
  std::vector<std::unique_ptr<PendingConnect>> pending(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) {
    XPORT_ASSIGN_OR_RETURN(pending[static_cast<size_t>(p)],
                           d->start_connect(handles[static_cast<size_t>(p)], deadline));
  }
  std::vector<Request> sends(static_cast<size_t>(n));
  std::vector<std::unique_ptr<gpu::TeamArrival>> arrivals;  // accepted here, or taken from parked
  int connected = 0;
  int claimed = 0;
  size_t refused = 0;
  size_t asked_again = 0;
  auto park_or_close = [&](std::unique_ptr<gpu::TeamArrival> a) {
    if (shared == nullptr) return;  // closed as it goes
    {
      std::lock_guard<std::mutex> l(s_->mu);
      if (s_->parked.size() < s_->parked_room) s_->parked.push_back(std::move(a));
    }
    // (one that found no room is closed here, outside the host's lock)
  };
  auto fail = [&](Status why) {
    for (auto& a : arrivals) {
      if (a && !a->heard) park_or_close(std::move(a));  // may be another team's
    }
    return why;
  };
  // Every connection the transport accepted, taken after each progress pass: a pass admits up
  // to a CQ batch (XPORT_CQ_BATCH), and the listener refuses requests past its backlog
  // (XPORT_LISTEN_BACKLOG), which a team of more ranks than that would overrun in a round of polls.
  auto take_accepted = [&]() -> Status {
    while (claimed < n) {
      auto r = listener.try_accept();
      if (!r.ok()) return r.status().with_context("GpuHost::connect: accept");
      if (!*r) return Status::success();
      auto a = gpu::TeamArrival::start(*d, std::move(r).value(), &listener);
      if (!a.ok()) return a.status().with_context("GpuHost::connect: accept");
      arrivals.push_back(std::move(a).value());
    }
    return Status::success();
  };
  while (connected < n || claimed < n) {
    for (int p = 0; p < n; ++p) {
      auto& pc = pending[static_cast<size_t>(p)];
      if (!pc) continue;
      auto c = pc->poll();
      if (!c.ok() && refused_for_backlog(c.status()) && !deadline.expired()) {
        // Asked again: the rank's listener admitted more at once than it holds waiting.
        ++asked_again;
        auto again = d->start_connect(handles[static_cast<size_t>(p)], deadline);
        if (again.ok()) {
          pc = std::move(again).value();
          continue;
        }
        c = again.status();
      }
      if (!c.ok()) {
        return fail(c.status().with_context(core::str("GpuHost::connect: rank ", rank,
                                                      " to rank ", p)));
      }
      if (Status t = take_accepted(); !t.ok()) return fail(std::move(t));
      if (!*c) continue;
      team->send_[static_cast<size_t>(p)] = std::move(c).value();
      pc.reset();
      ++connected;
      // Our hello goes at once: the peer tells its connections apart by it.
      uint8_t* at = out_area + static_cast<size_t>(p) * kExchangeBytes;
      gpu::encode_team_hello(gpu::TeamHello{nonce, static_cast<uint32_t>(rank),
                                            static_cast<uint32_t>(n)}, at);
      auto r = team->send_[static_cast<size_t>(p)]->isend(at, gpu::kTeamHelloBytes,
                                                          team->scratch_, gpu::kTagTeamHello);
      if (!r.ok()) return fail(r.status().with_context("GpuHost::connect: the team's hello"));
      sends[static_cast<size_t>(p)] = *r;
    }
    // Connections of a shared listener kept by other teams' calls: ours are taken.
    if (shared != nullptr) {
      std::lock_guard<std::mutex> l(s_->mu);
      for (auto& a : s_->parked) {
        if (a->listener == shared) arrivals.push_back(std::move(a));
      }
      std::erase(s_->parked, nullptr);
    }
    if (Status t = take_accepted(); !t.ok()) return fail(std::move(t));
    for (auto& a : arrivals) {
      if (!a || a->claimed) continue;
      if (!a->heard) a->listen_once();
      if (!a->heard) continue;
      const gpu::TeamHello& h = a->hello;
      std::string why;
      if (!a->valid) {
        why = a->failure;
      } else if (h.nonce != nonce) {
        if (shared != nullptr) {
          park_or_close(std::move(a));  // another team's, forming on the same listener
          continue;
        }
        why = "the hello of another team (this team accepts on a listener of its own)";
      } else if (h.size != static_cast<uint32_t>(n) || h.rank >= h.size) {
        why = core::str("a hello naming rank ", h.rank, " of ", h.size, " (a team of ", n, ")");
      } else if (team->recv_[h.rank]) {
        why = core::str("a second connection naming rank ", h.rank);
      } else {
        team->recv_[h.rank] = std::move(a->comm);
        a->claimed = true;
        ++claimed;
        continue;
      }
      // A stranger: no hello, a malformed one, or a rank taken already.
      ++refused;
      XPORT_LOG(info, "GpuHost::connect: rank ", rank, " refused a connection: ", why);
      a.reset();
    }
    // Not heard from yet: back to the shared listener's pool, where the team it belongs to
    // (this one, or one forming in another thread) looks at it again.
    if (shared != nullptr) {
      for (auto& a : arrivals) {
        if (a && !a->claimed && !a->heard) park_or_close(std::move(a));
      }
    }
    std::erase_if(arrivals, [](const auto& a) { return !a || a->claimed; });
    if (deadline.expired()) {
      std::string missing;
      for (int p = 0; p < n; ++p) {
        if (pending[static_cast<size_t>(p)]) missing += core::str(missing.empty() ? "" : ", ", "rank ", p);
      }
      std::string unheard;
      for (int p = 0; p < n; ++p) {
        if (!team->recv_[static_cast<size_t>(p)]) {
          unheard += core::str(unheard.empty() ? "" : ", ", "rank ", p);
        }
      }
      return fail(Status(
          Code::timeout,
          core::str("GpuHost::connect: rank ", rank, " connected to ", connected, " and heard from ",
                    claimed, " of ", n, " ranks", missing.empty() ? "" : " (no answer from " + missing + ")",
                    unheard.empty() ? "" : " (no connection from " + unheard + ")",
                    refused == 0 ? "" : core::str(", refused ", refused, " stranger(s)"))));
    }
  }
  if (asked_again > 0) {
    XPORT_LOG(info, "GpuHost::connect: rank ", rank, " asked ", asked_again, " time(s) again "
              "after a listener's full backlog (XPORT_LISTEN_BACKLOG)");
  }
  // Accepted on a listener of the team's own and unheard when the team was complete:
  // strangers' (closed).
  arrivals.clear();
  for (int p = 0; p < n; ++p) {
    XPORT_RETURN_IF_ERROR(
        team->send_[static_cast<size_t>(p)]->wait(sends[static_cast<size_t>(p)], deadline).status());
  }
  // Every rank's window requests go at once (one round trip for the team, not n).
  std::vector<const SendComm*> comms;
  for (const auto& s : team->send_) comms.push_back(s.get());
  auto windows = Window::open_all(comms, deadline);
  for (int p = 0; p < n; ++p) {
    auto& w = windows[static_cast<size_t>(p)];
    if (!w.ok()) return w.status().with_context(core::str("GpuHost::connect: window to rank ", p));
    team->windows_[static_cast<size_t>(p)] = std::move(w).value();
  }
  return team;
}

Result<std::vector<std::vector<uint8_t>>> GpuHost::all_gather(GpuTeam& team,
                                                              std::span<const uint8_t> mine,
                                                              Deadline deadline) {
  if (mine.size() > kExchangeBytes) {
    return Status(Code::invalid_argument, core::str("GpuHost::all_gather: ", mine.size(),
                                                    " bytes (at most ", kExchangeBytes, ")"));
  }
  const int n = team.size();
  uint8_t* out_area = team.scratch_bytes_.data();
  uint8_t* in_area = out_area + static_cast<size_t>(n) * kExchangeBytes;
  std::vector<Request> sends(static_cast<size_t>(n)), recvs(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) {
    if (p == team.rank()) continue;
    const size_t at = static_cast<size_t>(p) * kExchangeBytes;
    if (!mine.empty()) std::memcpy(out_area + at, mine.data(), mine.size());
    XPORT_ASSIGN_OR_RETURN(recvs[static_cast<size_t>(p)],
                           team.recv_[static_cast<size_t>(p)]->irecv(in_area + at, kExchangeBytes,
                                                                     team.scratch_, kTagKey));
    XPORT_ASSIGN_OR_RETURN(sends[static_cast<size_t>(p)],
                           team.send_[static_cast<size_t>(p)]->isend(out_area + at, mine.size(),
                                                                     team.scratch_, kTagKey));
  }
  std::vector<std::vector<uint8_t>> out(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) {
    const size_t at = static_cast<size_t>(p) * kExchangeBytes;
    if (p == team.rank()) {
      out[static_cast<size_t>(p)].assign(mine.begin(), mine.end());
      continue;
    }
    XPORT_ASSIGN_OR_RETURN(size_t got,
                           team.recv_[static_cast<size_t>(p)]->wait(recvs[static_cast<size_t>(p)], deadline));
    out[static_cast<size_t>(p)].assign(in_area + at, in_area + at + got);
    XPORT_RETURN_IF_ERROR(
        team.send_[static_cast<size_t>(p)]->wait(sends[static_cast<size_t>(p)], deadline).status());
  }
  return out;
}

Result<SymmetricRegion> GpuHost::register_symmetric(GpuTeam& team, void* buf, size_t len,
                                                    Deadline deadline) {
  SymmetricRegion out;
  XPORT_ASSIGN_OR_RETURN(out.local, team.device().register_memory(buf, len));
  const std::vector<uint8_t> mine = out.local.export_key();
  if (mine.size() > kExchangeBytes) {
    return Status(Code::internal, core::str("register_symmetric: a key of ", mine.size(), " bytes"));
  }
  XPORT_ASSIGN_OR_RETURN(auto keys, all_gather(team, mine, deadline));
  const int n = team.size();
  out.remote.resize(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) {
    auto key = team.device().import_key(keys[static_cast<size_t>(p)]);
    if (!key.ok()) return key.status().with_context(core::str("register_symmetric: rank ", p, "'s key"));
    out.remote[static_cast<size_t>(p)] = std::move(key).value();
  }
  return out;
}

void GpuHost::deregister(SymmetricRegion& region) {
  region.remote.clear();
  region.local = Region();
}

Status GpuHost::progress() {
  std::lock_guard<std::mutex> l(s_->mu);  // (a device opened by another thread meanwhile)
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
