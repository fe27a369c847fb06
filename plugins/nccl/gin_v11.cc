// libnccl-net-xport.so's GIN table (ABI v11, abi/gin_v11.h): NCCL's GPU-initiated networking
// of the proxy type over libxport's GPU host API (xport/gpu_host.hpp, the one the GPU layer's
// proxy backend uses). NCCL's own GIN progress thread reads the kernels' descriptors and calls
// iput / iputSignal / test / ginProgress here; each NCCL GIN context is a GpuTeam (a window to
// every rank, this one's own included), each symmetric registration a SymmetricRegion (GPU
// memory staged through host shadows where the provider cannot register it). A signal is a
// strong put_signal / signal of libxport's windows: applied at the target only once its put's
// data and every earlier operation to that peer are in the target's memory, GPU memory
// included (docs/nccl.md, "GIN"). Operations a window cannot take yet (Code::again) wait in a
// per-peer queue, in order, and are issued by later calls; nothing blocks for the network.
// Puts from staged GPU memory read their source until local completion
// (SourceRead::until_local): iput does not wait for the copy into staging bytes.
// A failed operation: NCCL's proxy ignores test()'s return code and reads only the error flag
// iput / iputSignal's return sets, so test() reports the failed request done (logged once, its
// error returned for callers that read it) and every later iput / iputSignal of the comm fails.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "abi/gin_v11.h"
#include "gin_lane.hpp"
#include "plugin_state.hpp"
#include "xport/gpu_host.hpp"

// The net table (net_v11.cc): GIN devices report its figures.
extern "C" ncclNet_v11_t ncclNetPlugin_v11;

namespace xport::nccl {
namespace {

static_assert(offsetof(ncclGin_v11_t, connect) == 5 * sizeof(void*));
static_assert(offsetof(ncclGin_v11_t, regMrSym) == 7 * sizeof(void*));
static_assert(offsetof(ncclGin_v11_t, iput) == 13 * sizeof(void*));
static_assert(offsetof(ncclGin_v11_t, test) == 15 * sizeof(void*));
static_assert(offsetof(ncclGin_v11_t, finalize) == 18 * sizeof(void*));
static_assert(sizeof(ncclGin_v11_t) == 19 * sizeof(void*));
static_assert(sizeof(ncclNetDeviceHandle_v11_t) == 32);

PluginState& state() { return PluginState::get(); }

// NCCL sizes each rank's descriptor queue as NCCL_NET_MAX_REQUESTS x maxRecvs.
constexpr int kGinMaxRecvs = 8;

// init()'s context: one per NCCL communicator (rank). Its GpuHost, opened by its first listen,
// is the rank's own: the GPUs one process drives (nccl-tests -g N) each progress their GIN
// comms on libxport devices of their own, instead of taking turns on one device's lock.
struct GinContext {
  static constexpr uint64_t kMagic = 0x5854434e49475058ull;  // "XPGINCTX"
  uint64_t magic = kMagic;
  uint64_t comm_id = 0;
  std::mutex mu;
  std::shared_ptr<GpuHost> host;  // guarded by mu
};

struct GinListen {
  static constexpr uint64_t kMagic = 0x4e53494c4e494758ull;  // "XGINLISN"
  uint64_t magic = kMagic;
  std::shared_ptr<GpuHost> host;  // its context's, which the comms it connects use
  std::unique_ptr<Listener> listener;
};

struct GinComm;

// What regMrSym hands NCCL, as mhandle and as gin handle alike.
struct GinMem {
  static constexpr uint64_t kMagic = 0x4d4d59534e494758ull;  // "XGINSYMM"
  uint64_t magic = kMagic;
  GinComm* comm = nullptr;
  uint8_t* base = nullptr;
  size_t size = 0;
  SymmetricRegion region;
  std::vector<SymmetricRegion> lanes;  // [lane - 1]: the same buffer on the comm's other lanes
};

struct GinRequest {
  static constexpr uint64_t kMagic = 0x5145524e49475058ull;  // "XPGINREQ"
  uint64_t magic = kMagic;
  bool busy = false;
  bool issued = false;
  int peer = 0;
  Ticket ticket = 0;
  Ticket data_ticket = 0;  // a split put with a signal: its lane-0 part, put before the signal
  Status error;  // issued from the queue and refused by its window: test() reports it
  // A split put: parts on the comm's other lanes not delivered yet, and the first of their
  // failures (written under the comm's mu by the lanes' threads; read once parts_left is 0).
  std::atomic<int> parts_left{0};
  Status part_error;
};

// One operation as NCCL gave it, kept while its window says "not now".
struct GinOp {
  GinRequest* req = nullptr;
  int peer = 0;
  std::shared_ptr<GinMem> src, dst, sig;  // (kept alive while queued)
  uint64_t src_off = 0, dst_off = 0, sig_off = 0;
  size_t size = 0;
  bool has_signal = false;
  uint64_t value = 0;
  bool split = false;        // its parts beyond the first are on the other lanes
  bool data_posted = false;  // split, with a signal: its first part went (a put of its own)
};

struct GinComm {
  static constexpr uint64_t kMagic = 0x4c4f434e49475058ull;  // "XPGINCOL"
  uint64_t magic = kMagic;
  std::shared_ptr<GpuHost> host;  // (declared first: it goes last, after the teams)
  std::unique_ptr<GpuTeam> team;
  int rank = 0;
  int nranks = 0;
  std::mutex mu;  // guards mems, the request pool, error
  std::map<const void*, std::shared_ptr<GinMem>> mems;
  std::vector<std::unique_ptr<GinRequest>> pool;
  std::vector<GinRequest*> free;
  Status error;   // the first failed operation: every later iput / iputSignal fails with it
  // Issuing is serialised (operations to a peer leave in NCCL's order); the queues are guarded
  // by it. Never held across a wait for the network or for a copy (sources are copied as
  // progress goes: SourceRead::until_local).
  std::mutex issue_mu;
  std::vector<std::deque<GinOp>> waiting;  // [peer]
  size_t queued = 0;
  // Lanes 1.. (lane 0 is `team`): puts of split_bytes or more to another rank are split over
  // them. debt[peer]: parts handed to those lanes and not delivered yet; an operation with a
  // signal to the peer waits until it is 0 (the signal covers every earlier put, on any lane).
  std::vector<std::unique_ptr<GinLane>> lanes;
  std::unique_ptr<std::atomic<int64_t>[]> debt;
  std::atomic<bool> part_failed{false};  // a part failed: no signal goes after it
  size_t split_bytes = 0;
  uint64_t split_puts = 0;  // (guarded by issue_mu) reported at close
};

// Auto GIN lanes (XPORT_NCCL_GIN_LANES=0): as many as the net table's lanes (where the provider
// copies with the CPU, one per 4 CPUs of the process's share: lanes_rule.cc), at most this many,
// and only for comms of at most kAutoLanesRanks ranks (one node's GPUs): lanes multiply a comm's
// endpoints and per-peer state, and with more ranks each put is a smaller share.
constexpr int kAutoLanesMax = 4;
constexpr int kAutoLanesRanks = 8;

// The lanes the GpuHost offers (a lane's device opens when a comm first uses it).
int max_gin_lanes() {
  const int knob = state().gin_lanes();
  return knob > 0 ? knob : std::clamp(state().lanes(), 1, kAutoLanesMax);
}

// The GIN side's process-wide state: a GpuHost opened by the first init, closed with the last
// finalize, for devices / getProperties (PluginState, shared with the net table, keeps the
// logger and checks the knobs); comms live on their context's own host (GinContext).
class GinState {
 public:
  static GinState& get() {
    static GinState* s = new GinState();  // never destroyed: NCCL may call late at exit
    return *s;
  }
  ncclResult_t acquire(ncclDebugLogger_t logger) {
    ncclResult_t r = state().acquire(logger);
    if (r != ncclSuccess) return r;
    std::lock_guard<std::mutex> l(mu_);
    if (refs_ == 0) {
      auto h = GpuHost::init({}, GpuHostDevices::one, GpuHostLanes{max_gin_lanes()});
      if (!h.ok()) {
        state().release();
        return state().fail(h.status(), "GIN init: opening libxport");
      }
      host_ = std::shared_ptr<GpuHost>(std::move(h).value());
    }
    ++refs_;
    return ncclSuccess;
  }
  void release() {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (refs_ > 0 && --refs_ == 0) host_.reset();
    }
    state().release();
  }
  GpuHost* host() {
    std::lock_guard<std::mutex> l(mu_);
    return host_.get();
  }
  std::shared_ptr<GpuHost> shared_host() {
    std::lock_guard<std::mutex> l(mu_);
    return host_;
  }

 private:
  std::mutex mu_;
  int refs_ = 0;
  std::shared_ptr<GpuHost> host_;
};

GinState& gin() { return GinState::get(); }

// The GpuHost a listen on `ctx` uses: the context's own (opened now if it has none yet), or the
// process-wide one for a context the plugin does not know.
Result<std::shared_ptr<GpuHost>> host_for(void* ctx) {
  GinContext* c = checked<GinContext>(ctx);
  if (c == nullptr) {
    std::shared_ptr<GpuHost> h = gin().shared_host();
    if (h == nullptr) return Status(Code::closed, "no GIN init");
    return h;
  }
  std::lock_guard<std::mutex> l(c->mu);
  if (c->host == nullptr) {
    XPORT_ASSIGN_OR_RETURN(auto h, GpuHost::init({}, GpuHostDevices::one,
                                                 GpuHostLanes{max_gin_lanes()}));
    c->host = std::shared_ptr<GpuHost>(std::move(h));
  }
  return c->host;
}

ncclResult_t no_init(const char* what) {
  return state().fail(ncclInvalidUsage, "GIN %s: called before init (or after the last finalize)",
                      what);
}

// A registration of this comm, by the pointer NCCL hands back; null (and why in *err) if not.
std::shared_ptr<GinMem> mem_of(GinComm& c, void* p, const char* what, const char* role,
                               ncclResult_t* err) {
  if (p == nullptr) {
    *err = state().fail(ncclInvalidArgument, "GIN %s: NULL %s mhandle", what, role);
    return nullptr;
  }
  std::lock_guard<std::mutex> l(c.mu);
  auto it = c.mems.find(p);
  if (it == c.mems.end()) {
    *err = state().fail(ncclInvalidArgument, "GIN %s: %s mhandle %p is not a live registration "
                        "of this GIN comm (deregistered, or of another comm)", what, role, p);
    return nullptr;
  }
  return it->second;
}

GinRequest* take_request(GinComm& c) {
  std::lock_guard<std::mutex> l(c.mu);
  if (c.free.empty()) {
    c.pool.push_back(std::make_unique<GinRequest>());
    c.free.push_back(c.pool.back().get());
  }
  GinRequest* r = c.free.back();
  c.free.pop_back();
  r->busy = true;
  r->issued = false;
  r->ticket = 0;
  r->data_ticket = 0;
  r->error = Status();
  r->parts_left.store(0, std::memory_order_relaxed);
  r->part_error = Status();
  return r;
}

void give_request(GinComm& c, GinRequest* r) {
  std::lock_guard<std::mutex> l(c.mu);
  r->busy = false;
  c.free.push_back(r);
}

void record_error(GinComm& c, const Status& s) {
  std::lock_guard<std::mutex> l(c.mu);
  if (c.error.ok()) c.error = s;
}

enum class Posted { ok, later, failed };

// Hands op's parts beyond the first to the other lanes (op keeps the first). Called with
// issue_mu held, once per op.
void split(GinComm& c, GinOp& op) {
  const size_t lanes = c.lanes.size() + 1;
  const size_t chunk = ((op.size + lanes - 1) / lanes + 63) / 64 * 64;
  auto keep = std::make_shared<std::pair<std::shared_ptr<GinMem>, std::shared_ptr<GinMem>>>(
      op.src, op.dst);
  GinRequest* r = op.req;
  std::atomic<int64_t>* debt = &c.debt[static_cast<size_t>(op.peer)];
  GinComm* comm = &c;
  for (size_t k = 1, at = chunk; k < lanes && at < op.size; ++k, at += chunk) {
    GinPart p;
    p.peer = op.peer;
    p.src = &op.src->lanes[k - 1].local;
    p.src_off = op.src_off + at;
    p.dst = &op.dst->lanes[k - 1].remote[static_cast<size_t>(op.peer)];
    p.dst_off = op.dst_off + at;
    p.size = std::min(chunk, op.size - at);
    p.keep = keep;
    // Runs on the lane's thread: the request is touched last (test() may then release it).
    p.done = [comm, r, debt](const Status& s) {
      if (!s.ok()) {
        std::lock_guard<std::mutex> l(comm->mu);
        if (r->part_error.ok()) r->part_error = s;
        if (comm->error.ok()) comm->error = s;
        comm->part_failed.store(true, std::memory_order_release);
      }
      debt->fetch_sub(1, std::memory_order_release);
      r->parts_left.fetch_sub(1, std::memory_order_release);
    };
    debt->fetch_add(1, std::memory_order_relaxed);
    r->parts_left.fetch_add(1, std::memory_order_relaxed);
    c.lanes[k - 1]->submit(std::move(p));
  }
  op.size = std::min(chunk, op.size);
  op.split = true;
  ++c.split_puts;
}

// Posts op on its window: ok when it went; later when the window said "not now"
// (Code::again); failed when it refused (op.req->error, and the comm's error: the next iput
// fails). Called with issue_mu held.
Posted post(GinComm& c, GinOp& op) {
  Window* w = c.team->window(op.peer);
  Result<Ticket> t = Status(Code::internal, "no operation");
  if (!op.split && !c.lanes.empty() && op.size >= c.split_bytes && op.peer != c.rank) {
    split(c, op);
  }
  if (op.split && op.has_signal && !op.data_posted) {
    // The first part goes now, as a put of its own; the signal follows it (strong, on this
    // lane) once the other lanes' parts are delivered.
    t = w->put(op.src->region.local, op.src_off, op.dst->region.remote[op.peer], op.dst_off,
               op.size);
    if (!t.ok() && t.status().code() == Code::again) return Posted::later;
    if (!t.ok()) {
      op.req->issued = true;
      op.req->error = t.status().with_context("GIN iputSignal");
      record_error(c, op.req->error);
      return Posted::failed;
    }
    op.req->data_ticket = *t;
    op.data_posted = true;
  }
  if (op.has_signal && c.debt[static_cast<size_t>(op.peer)].load(std::memory_order_acquire) != 0) {
    return Posted::later;  // earlier parts on other lanes are still on their way
  }
  if (op.has_signal && c.part_failed.load(std::memory_order_acquire)) {
    // A signal covers every earlier put: after a part that failed, it must not be applied.
    op.req->issued = true;
    op.req->error = Status(Code::closed, "a part of an earlier put failed on another lane; the "
                           "signal was not sent").with_context("GIN iputSignal");
    record_error(c, op.req->error);
    return Posted::failed;
  }
  if (op.split && op.has_signal) {
    t = w->signal(op.sig->region.remote[op.peer], op.sig_off, op.value);
  } else if (!op.has_signal) {
    t = w->put(op.src->region.local, op.src_off, op.dst->region.remote[op.peer], op.dst_off,
               op.size);
  } else if (op.size == 0) {
    t = w->signal(op.sig->region.remote[op.peer], op.sig_off, op.value);
  } else {
    t = w->put_signal(op.src->region.local, op.src_off, op.dst->region.remote[op.peer],
                      op.dst_off, op.size, op.sig->region.remote[op.peer], op.sig_off, op.value);
  }
  if (!t.ok() && t.status().code() == Code::again) return Posted::later;
  op.req->issued = true;
  if (!t.ok()) {
    op.req->error = t.status().with_context(op.has_signal ? "GIN iputSignal" : "GIN iput");
    record_error(c, op.req->error);
    op.req->ticket = 0;
    return Posted::failed;
  }
  op.req->ticket = *t;
  return Posted::ok;
}

// Issues what waits, oldest first per peer, until a window says "not now" again.
void drain(GinComm& c) {
  std::lock_guard<std::mutex> l(c.issue_mu);
  if (c.queued == 0) return;
  for (auto& q : c.waiting) {
    while (!q.empty() && post(c, q.front()) != Posted::later) {  // (failed: test() says so)
      q.pop_front();
      --c.queued;
    }
  }
}

ncclResult_t x_init(void** ctx, uint64_t commId, ncclDebugLogger_t logFunction) {
  if (ctx == nullptr) return state().fail(ncclInvalidArgument, "GIN init: NULL context pointer");
  *ctx = nullptr;
  ncclResult_t r = gin().acquire(logFunction);
  if (r != ncclSuccess) return r;
  auto* c = new (std::nothrow) GinContext();
  if (c == nullptr) {
    gin().release();
    return state().fail(ncclSystemError, "GIN init: out of memory");
  }
  c->comm_id = commId;
  *ctx = c;
  return ncclSuccess;
}

ncclResult_t x_finalize(void* ctx) {
  auto* c = checked<GinContext>(ctx);
  if (c == nullptr) return ncclSuccess;  // NULL (or an init that failed): nothing to finalize
  c->magic = 0;
  delete c;
  gin().release();
  return ncclSuccess;
}

ncclResult_t x_devices(int* ndev) {
  if (ndev == nullptr) return state().fail(ncclInvalidArgument, "GIN devices: NULL ndev");
  GpuHost* h = gin().host();
  if (h == nullptr) return no_init("devices");
  *ndev = h->devices();
  return ncclSuccess;
}

ncclResult_t x_get_properties(int dev, ncclNetProperties_v11_t* props) {
  if (props == nullptr) return state().fail(ncclInvalidArgument, "GIN getProperties: NULL props");
  GpuHost* h = gin().host();
  if (h == nullptr) return no_init("getProperties");
  if (dev < 0 || dev >= h->devices()) {
    return state().fail(ncclInvalidArgument, "GIN getProperties: device %d of %d", dev,
                        h->devices());
  }
  auto d = h->device(dev);
  if (!d.ok()) return state().fail(d.status(), "GIN getProperties", true);
  // The net table's figures for the same device (its numbering is the net table's: device 0,
  // every planned rail), then what makes it a GIN device of the proxy type.
  ncclNetProperties_v11_t net{};
  ncclResult_t r = ncclNetPlugin_v11.getProperties(dev, &net);
  if (r != ncclSuccess) return r;
  *props = net;
  const DeviceProperties p = (*d)->properties();
  props->ptrSupport = NCCL_PTR_HOST | (p.device_memory ? NCCL_PTR_CUDA : 0);
  props->regIsGlobal = 0;  // regMrSym is per GIN comm (a collective)
  props->maxRecvs = kGinMaxRecvs;
  props->netDeviceType = NCCL_NET_DEVICE_GIN_PROXY;
  props->netDeviceVersion = NCCL_GIN_PROXY_VERSION;
  return ncclSuccess;
}

ncclResult_t x_listen(void* ctx, int dev, void* handle, void** listenComm) {
  if (handle == nullptr || listenComm == nullptr) {
    return state().fail(ncclInvalidArgument, "GIN listen: NULL handle or listenComm");
  }
  *listenComm = nullptr;
  if (gin().host() == nullptr) return no_init("listen");
  auto host = host_for(ctx);
  if (!host.ok()) return state().fail(host.status(), "GIN listen: opening libxport");
  GpuHost* h = host->get();
  if (dev < 0 || dev >= h->devices()) {
    return state().fail(ncclInvalidArgument, "GIN listen: device %d of %d", dev, h->devices());
  }
  auto l = h->open_listener(dev);
  if (!l.ok()) return state().fail(l.status(), "GIN listen", true);
  const ConnectionHandle& bytes = (*l)->handle();
  if (bytes.size() > NCCL_NET_HANDLE_MAXSIZE) {
    return state().fail(ncclInternalError, "GIN listen: libxport's handle is %zu bytes, NCCL's "
                        "holds %d", bytes.size(), NCCL_NET_HANDLE_MAXSIZE);
  }
  auto* lc = new (std::nothrow) GinListen();
  if (lc == nullptr) return state().fail(ncclSystemError, "GIN listen: out of memory");
  lc->listener = std::move(l).value();
  lc->host = std::move(host).value();
  std::memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  std::memcpy(handle, bytes.data(), bytes.size());
  *listenComm = lc;
  return ncclSuccess;
}

ncclResult_t x_close_listen(void* listenComm) {
  GinListen* l = checked<GinListen>(listenComm);
  if (l == nullptr) {
    return state().fail(ncclInvalidArgument, "GIN closeListen: %p is not a GIN listener",
                        listenComm);
  }
  l->magic = 0;
  delete l;
  return ncclSuccess;
}

// Collective, after lane 0's team formed: the lanes every rank has (XPORT_NCCL_GIN_LANES, or
// the auto choice for a comm of this size; the fewest any rank asked for), each a team on the
// host's next lane device, its handles gathered over lane 0's team.
Result<std::vector<std::unique_ptr<GinLane>>> connect_lanes(GpuHost& h, GpuTeam& team,
                                                            Deadline deadline) {
  std::vector<std::unique_ptr<GinLane>> out;
  const bool auto_lanes = state().gin_lanes() == 0;
  const uint8_t mine =
      static_cast<uint8_t>(auto_lanes && team.size() > kAutoLanesRanks ? 1 : h.lanes());
  XPORT_ASSIGN_OR_RETURN(auto counts, GpuHost::all_gather(team, {&mine, 1}, deadline));
  int lanes = mine;
  for (const auto& b : counts) {
    if (b.size() != 1) return Status(Code::internal, "a rank's lane count is malformed");
    lanes = std::min<int>(lanes, b[0]);
  }
  for (int k = 1; k < lanes; ++k) {
    const int index = k * h.devices();  // lane k of device 0
    XPORT_ASSIGN_OR_RETURN(auto listener, h.open_listener(index));
    XPORT_ASSIGN_OR_RETURN(auto handles, GpuHost::all_gather(team, listener->handle(), deadline));
    std::vector<ConnectionHandle> hs(handles.begin(), handles.end());
    XPORT_ASSIGN_OR_RETURN(auto lane_team,
                           h.connect(index, hs, team.rank(), deadline, listener.get()));
    out.push_back(std::make_unique<GinLane>(std::move(lane_team),
                                            std::chrono::microseconds(state().lane_spin_us())));
  }
  return out;
}

ncclResult_t x_connect(void* ctx, void* handles[], int nranks, int rank, void* listenComm,
                       void** collComm) {
  (void)ctx;
  if (collComm == nullptr) return state().fail(ncclInvalidArgument, "GIN connect: NULL collComm");
  *collComm = nullptr;
  GinListen* l = checked<GinListen>(listenComm);
  if (l == nullptr) {
    return state().fail(ncclInvalidArgument, "GIN connect: %p is not a GIN listener", listenComm);
  }
  if (handles == nullptr || nranks < 1 || rank < 0 || rank >= nranks) {
    return state().fail(ncclInvalidArgument, "GIN connect: rank %d of %d (handles %p)", rank,
                        nranks, static_cast<void*>(handles));
  }
  if (gin().host() == nullptr) return no_init("connect");
  GpuHost* h = l->host.get();  // the listener's context's
  std::vector<ConnectionHandle> hs(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) {
    if (handles[r] == nullptr) {
      return state().fail(ncclInvalidArgument, "GIN connect: rank %d's handle is NULL", r);
    }
    const auto* b = static_cast<const uint8_t*>(handles[r]);
    hs[static_cast<size_t>(r)].assign(b, b + NCCL_NET_HANDLE_MAXSIZE);
  }
  // Blocking, as NCCL's GIN connect is: every rank connects to every rank (itself included).
  const Deadline deadline = Deadline::from_knob();
  auto team = h->connect(0, hs, rank, deadline, l->listener.get());
  if (!team.ok()) return state().fail(team.status(), "GIN connect");
  auto lanes = connect_lanes(*h, **team, deadline);
  if (!lanes.ok()) return state().fail(lanes.status(), "GIN connect: the comm's lanes");
  auto* c = new (std::nothrow) GinComm();
  if (c == nullptr) return state().fail(ncclSystemError, "GIN connect: out of memory");
  c->host = l->host;
  c->team = std::move(team).value();
  c->lanes = std::move(lanes).value();
  c->split_bytes = state().gin_split_bytes();
  c->debt = std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(nranks));
  XNCCL_INFO("GIN connect: rank %d of %d on libxport device %p, %zu lane(s)%s (puts from %zu "
             "bytes split over them)", rank, nranks, static_cast<void*>(&c->team->device()),
             c->lanes.size() + 1, state().gin_lanes() == 0 ? ", XPORT_NCCL_GIN_LANES auto" : "",
             c->split_bytes);
  // GIN's contract: a kernel reuses a put's source only once told it is locally complete
  // (NCCL counts its counters at test()'s done), so staged GPU sources are copied as progress
  // goes, not in iput: NCCL's proxy thread is not held for the copy.
  for (int r = 0; r < nranks; ++r) {
    if (Window* w = c->team->window(r)) w->set_source_read(SourceRead::until_local);
  }
  c->rank = rank;
  c->nranks = nranks;
  c->waiting.resize(static_cast<size_t>(nranks));
  *collComm = c;
  return ncclSuccess;
}

ncclResult_t x_create_context(void*, int, int, void**, ncclNetDeviceHandle_v11_t**) {
  return state().fail(ncclInvalidUsage, "GIN createContext: the xport GIN device is of the proxy "
                      "type: NCCL's proxy makes the device context");
}

ncclResult_t x_destroy_context(void*) { return ncclSuccess; }

ncclResult_t reg_sym(void* collComm, void* data, size_t size, int type, void** mhandle,
                     void** ginHandle, const char* what) {
  if (mhandle == nullptr || ginHandle == nullptr) {
    return state().fail(ncclInvalidArgument, "%s: NULL mhandle or ginHandle", what);
  }
  *mhandle = nullptr;
  *ginHandle = nullptr;
  GinComm* c = checked<GinComm>(collComm);
  if (c == nullptr) return state().fail(ncclInvalidArgument, "%s: %p is not a GIN comm", what, collComm);
  if (data == nullptr || size == 0) {
    return state().fail(ncclInvalidArgument, "%s: empty buffer (%p, %zu bytes)", what, data, size);
  }
  if (type != NCCL_PTR_HOST && type != NCCL_PTR_CUDA) {
    return state().fail(ncclInvalidArgument, "%s: pointer type %d (host %d or CUDA %d)", what,
                        type, NCCL_PTR_HOST, NCCL_PTR_CUDA);
  }
  if (gin().host() == nullptr) return no_init(what);
  GpuHost* h = c->host.get();
  const Deadline deadline = Deadline::from_knob();
  auto reg = h->register_symmetric(*c->team, data, size, deadline);
  if (!reg.ok()) return state().fail(reg.status(), what, true);
  auto m = std::make_shared<GinMem>();
  m->comm = c;
  m->base = static_cast<uint8_t*>(data);
  m->size = size;
  m->region = std::move(reg).value();
  for (auto& lane : c->lanes) {
    auto r = h->register_symmetric(lane->team(), data, size, deadline);
    if (!r.ok()) return state().fail(r.status().with_context("on a lane"), what, true);
    m->lanes.push_back(std::move(r).value());
  }
  {
    std::lock_guard<std::mutex> l(c->mu);
    c->mems[m.get()] = m;
  }
  *mhandle = m.get();
  *ginHandle = m.get();
  return ncclSuccess;
}

ncclResult_t x_reg_mr_sym(void* collComm, void* data, size_t size, int type, uint64_t,
                          void** mhandle, void** ginHandle) {
  return reg_sym(collComm, data, size, type, mhandle, ginHandle, "GIN regMrSym");
}

// libfabric 1.17 takes no dma-buf (docs/semantics.md, "GPU memory"): the range is registered
// by address, as regMrSym does (getProperties never offers NCCL_PTR_DMABUF).
ncclResult_t x_reg_mr_sym_dmabuf(void* collComm, void* data, size_t size, int type, uint64_t,
                                 int, uint64_t, void** mhandle, void** ginHandle) {
  return reg_sym(collComm, data, size, type, mhandle, ginHandle, "GIN regMrSymDmaBuf");
}

ncclResult_t x_dereg_mr_sym(void* collComm, void* mhandle) {
  GinComm* c = checked<GinComm>(collComm);
  if (c == nullptr) {
    return state().fail(ncclInvalidArgument, "GIN deregMrSym: %p is not a GIN comm", collComm);
  }
  std::shared_ptr<GinMem> m;
  {
    std::lock_guard<std::mutex> l(c->mu);
    auto it = c->mems.find(mhandle);
    if (it == c->mems.end()) {
      return state().fail(ncclInvalidArgument, "GIN deregMrSym: %p is not a live registration "
                          "of this GIN comm", mhandle);
    }
    m = std::move(it->second);
    c->mems.erase(it);
  }
  m->magic = 0;
  // Local only (NCCL deregisters on every rank); operations still queued keep it alive.
  return ncclSuccess;
}

ncclResult_t start(void* collComm, uint64_t srcOff, void* srcMhandle, size_t size,
                   uint64_t dstOff, void* dstMhandle, uint32_t rank, bool has_signal,
                   uint64_t signalOff, void* signalMhandle, uint64_t value, void** request,
                   const char* what) {
  if (request == nullptr) return state().fail(ncclInvalidArgument, "%s: NULL request", what);
  *request = nullptr;
  GinComm* c = checked<GinComm>(collComm);
  if (c == nullptr) return state().fail(ncclInvalidArgument, "%s: %p is not a GIN comm", what, collComm);
  if (rank >= static_cast<uint32_t>(c->nranks)) {
    return state().fail(ncclInvalidArgument, "%s: rank %u of %d", what, rank, c->nranks);
  }
  {
    // NCCL's only channel for a failure (its proxy ignores test()'s return code): the next
    // iput / iputSignal fails, which sets the GIN context's error flag.
    std::lock_guard<std::mutex> l(c->mu);
    if (!c->error.ok()) {
      return state().fail(c->error, "GIN: an earlier operation of this comm failed");
    }
  }
  ncclResult_t err = ncclSuccess;
  GinOp op;
  op.peer = static_cast<int>(rank);
  op.size = size;
  op.src_off = srcOff;
  op.dst_off = dstOff;
  op.has_signal = has_signal;
  op.value = value;
  op.sig_off = signalOff;
  if (size > 0 || !has_signal) {
    if (!(op.src = mem_of(*c, srcMhandle, what, "source", &err))) return err;
    if (!(op.dst = mem_of(*c, dstMhandle, what, "destination", &err))) return err;
    if (srcOff > op.src->size || op.src->size - srcOff < size) {
      return state().fail(ncclInvalidArgument, "%s: source [%lu, +%zu) is outside its %zu-byte "
                          "registration", what, static_cast<unsigned long>(srcOff), size,
                          op.src->size);
    }
    if (dstOff > op.dst->size || op.dst->size - dstOff < size) {
      return state().fail(ncclInvalidArgument, "%s: destination [%lu, +%zu) is outside its "
                          "%zu-byte registration", what, static_cast<unsigned long>(dstOff),
                          size, op.dst->size);
    }
  }
  if (has_signal) {
    if (!(op.sig = mem_of(*c, signalMhandle, what, "signal", &err))) return err;
    if (signalOff % 8 != 0 || signalOff > op.sig->size || op.sig->size - signalOff < 8) {
      return state().fail(ncclInvalidArgument, "%s: signal word at %lu is not an 8-byte aligned "
                          "word of its %zu-byte registration", what,
                          static_cast<unsigned long>(signalOff), op.sig->size);
    }
  }
  op.req = take_request(*c);
  op.req->peer = op.peer;
  if (size == 0 && !has_signal) {
    op.req->issued = true;  // nothing to move: done at once
  } else {
    std::lock_guard<std::mutex> l(c->issue_mu);
    auto& q = c->waiting[rank];
    // Behind what waits for this peer already (NCCL's order is the wire's), else now.
    const Posted p = q.empty() ? post(*c, op) : Posted::later;
    if (p == Posted::later) {
      q.push_back(std::move(op));
      ++c->queued;
      *request = q.back().req;
      return ncclSuccess;
    }
    if (p == Posted::failed) {  // refused now: this call says so (NCCL's channel)
      Status why = std::move(op.req->error);
      // (parts already on other lanes report to the request: it stays out of the pool, with
      // the failed comm, until the comm closes)
      if (op.req->parts_left.load(std::memory_order_acquire) == 0) give_request(*c, op.req);
      return state().fail(why, what);
    }
  }
  *request = op.req;
  return ncclSuccess;
}

ncclResult_t x_iput(void* collComm, uint64_t srcOff, void* srcMhandle, size_t size,
                    uint64_t dstOff, void* dstMhandle, uint32_t rank, void** request) {
  return start(collComm, srcOff, srcMhandle, size, dstOff, dstMhandle, rank, false, 0, nullptr,
               0, request, "GIN iput");
}

ncclResult_t x_iput_signal(void* collComm, uint64_t srcOff, void* srcMhandle, size_t size,
                           uint64_t dstOff, void* dstMhandle, uint32_t rank, uint64_t signalOff,
                           void* signalMhandle, uint64_t signalValue, uint32_t signalOp,
                           void** request) {
  uint64_t value = 0;
  switch (signalOp) {
    case NCCL_NET_SIGNAL_OP_INC: value = 1; break;
    case NCCL_NET_SIGNAL_OP_ADD: value = signalValue; break;
    default:
      return state().fail(ncclInvalidArgument, "GIN iputSignal: signal op %u (INC %d or ADD %d)",
                          signalOp, NCCL_NET_SIGNAL_OP_INC, NCCL_NET_SIGNAL_OP_ADD);
  }
  return start(collComm, srcOff, srcMhandle, size, dstOff, dstMhandle, rank, true, signalOff,
               signalMhandle, value, request, "GIN iputSignal");
}

ncclResult_t x_test(void* collComm, void* request, int* done) {
  if (done == nullptr) return state().fail(ncclInvalidArgument, "GIN test: NULL done");
  *done = 0;
  GinComm* c = checked<GinComm>(collComm);
  if (c == nullptr) return state().fail(ncclInvalidArgument, "GIN test: %p is not a GIN comm", collComm);
  auto* r = checked<GinRequest>(request);
  if (r == nullptr || !r->busy) {
    return state().fail(ncclInvalidArgument, "GIN test: %p is not a live GIN request", request);
  }
  if (!r->issued) {
    drain(*c);
    if (!r->issued) {
      Status p = c->team->device().progress();
      if (!p.ok()) return state().fail(p, "GIN test");
      return ncclSuccess;
    }
  }
  // Parts on other lanes: their threads report them, part_error written before the decrement
  // that took parts_left to 0 (so read here without the lock).
  if (r->parts_left.load(std::memory_order_acquire) != 0) return ncclSuccess;
  Status failed = std::move(r->error);  // (refused when issued from the queue)
  if (failed.ok()) failed = r->part_error;
  if (failed.ok() && r->data_ticket != 0) {
    auto s = c->team->window(r->peer)->check(r->data_ticket);
    if (s.ok() && *s != TransferState::done) return ncclSuccess;
    if (!s.ok()) {
      failed = s.status();
      record_error(*c, failed);
    }
    r->data_ticket = 0;
  }
  if (failed.ok() && r->ticket != 0) {
    // Done = delivered (puts) or applied (signals) at the target: NCCL counts its counters then.
    auto s = c->team->window(r->peer)->check(r->ticket);
    if (s.ok() && *s != TransferState::done) return ncclSuccess;
    if (!s.ok()) {
      failed = s.status();
      record_error(*c, failed);  // the next iput / iputSignal fails: NCCL's channel
    }
  }
  // Done, failed or not: NCCL tests a request until *done and ignores the return code, so a
  // failed one is done too (its WARN logged here, once: the request is released).
  give_request(*c, r);
  *done = 1;
  if (!failed.ok()) return state().fail(failed, "GIN test: the operation failed");
  return ncclSuccess;
}

ncclResult_t x_gin_progress(void* collComm) {
  GinComm* c = checked<GinComm>(collComm);
  if (c == nullptr) {
    return state().fail(ncclInvalidArgument, "GIN ginProgress: %p is not a GIN comm", collComm);
  }
  drain(*c);
  Status s = c->team->device().progress();
  if (!s.ok()) return state().fail(s, "GIN ginProgress");
  return ncclSuccess;
}

ncclResult_t x_query_last_error(void* ginCtx, bool* hasError) {
  if (hasError == nullptr) return state().fail(ncclInvalidArgument, "GIN queryLastError: NULL");
  *hasError = false;
  if (GinComm* c = checked<GinComm>(ginCtx)) {
    std::lock_guard<std::mutex> l(c->mu);
    *hasError = !c->error.ok();
  }
  return ncclSuccess;
}

ncclResult_t x_close_coll(void* collComm) {
  GinComm* c = checked<GinComm>(collComm);
  if (c == nullptr) {
    return state().fail(ncclInvalidArgument, "GIN closeColl: %p is not a GIN comm", collComm);
  }
  c->magic = 0;
  if (!c->lanes.empty()) {
    XNCCL_INFO("GIN closeColl: %llu puts were split over %zu lanes",
               static_cast<unsigned long long>(c->split_puts), c->lanes.size() + 1);
  }
  c->lanes.clear();  // their threads stop first: parts report to requests and registrations
  {
    std::lock_guard<std::mutex> l(c->issue_mu);
    c->waiting.clear();  // NCCL closes after its kernels and flushes: nothing should wait
  }
  for (auto& [p, m] : c->mems) m->magic = 0;
  c->mems.clear();
  delete c;  // the windows, then the team's communicators
  return ncclSuccess;
}

}  // namespace
}  // namespace xport::nccl

// Exported beside ncclNetPlugin_v11 (plugins/nccl/exports.map): NCCL 2.28.9 looks it up in the
// same library.
extern "C" {
__attribute__((visibility("default"))) ncclGin_v11_t ncclGinPlugin_v11 = {
    "xport",
    xport::nccl::x_init,
    xport::nccl::x_devices,
    xport::nccl::x_get_properties,
    xport::nccl::x_listen,
    xport::nccl::x_connect,
    xport::nccl::x_create_context,
    xport::nccl::x_reg_mr_sym,
    xport::nccl::x_reg_mr_sym_dmabuf,
    xport::nccl::x_dereg_mr_sym,
    xport::nccl::x_destroy_context,
    xport::nccl::x_close_coll,
    xport::nccl::x_close_listen,
    xport::nccl::x_iput,
    xport::nccl::x_iput_signal,
    xport::nccl::x_test,
    xport::nccl::x_gin_progress,
    xport::nccl::x_query_last_error,
    xport::nccl::x_finalize,
};
}
