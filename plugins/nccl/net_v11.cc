// libnccl-net-xport.so: NCCL's net plugin table (ABI v11, abi/net_v11.h) over libxport's public
// API. Every entry checks what NCCL hands it, never blocks (connect and accept are polled),
// and turns libxport errors into NCCL's codes with a message in NCCL's log; nothing aborts.
// NCCL calls from several proxy threads: libxport serialises each device, the plugin's own
// tables have their locks.
#include <algorithm>
#include <cstring>
#include <new>
#include <type_traits>

#include "plugin_state.hpp"

namespace xport::nccl {
namespace {

static_assert(offsetof(ncclNetProperties_v11_t, ptrSupport) == 24);
static_assert(offsetof(ncclNetProperties_v11_t, latency) == 44);
static_assert(offsetof(ncclNetProperties_v11_t, vProps) == 64);
static_assert(offsetof(ncclNetProperties_v11_t, maxP2pBytes) == 88);
static_assert(sizeof(ncclNetProperties_v11_t) == 112);
static_assert(offsetof(ncclNet_v11_t, listen) == 4 * sizeof(void*));
static_assert(offsetof(ncclNet_v11_t, isend) == 10 * sizeof(void*));
static_assert(offsetof(ncclNet_v11_t, finalize) == 20 * sizeof(void*));
static_assert(sizeof(ncclNet_v11_t) == 22 * sizeof(void*));

// NCCL's 128-byte handle: libxport's handle (at most kHandleBytes, zero-padded), then the
// plugin's record of a connect in progress (NCCL calls connect again with the same buffer
// until it gets a comm). The record names the attempt by an id the plugin looks up in its
// own table (PluginState::take_connect), with a hash of the handle it was started from:
// nothing read from the handle's bytes is ever called through.
constexpr size_t kHandleBytes = NCCL_NET_HANDLE_MAXSIZE - 24;
struct ConnectStage {
  uint64_t magic;
  uint64_t id;     // PluginState's connect table
  uint64_t check;  // handle_check() of the first kHandleBytes
};
constexpr uint64_t kStageMagic = 0x4547415453525058ull;  // "XPRSTAGE"
static_assert(kHandleBytes + sizeof(ConnectStage) == NCCL_NET_HANDLE_MAXSIZE);

// FNV-1a of the libxport handle: a record copied onto another handle does not match.
uint64_t handle_check(const uint8_t* bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < kHandleBytes; ++i) h = (h ^ bytes[i]) * 0x100000001b3ull;
  return h;
}

PluginState& state() { return PluginState::get(); }

ncclResult_t no_init(const char* what) {
  return state().fail(ncclInvalidUsage, "%s: called before init (or after the last finalize)",
                      what);
}


// A registration NCCL hands back: live, and of the device (and lane) of the comm it is used on.
MemHandle* mem_of(void* p, const CommBase* c, const char* what, ncclResult_t* err) {
  NetDevice* dev = c->dev;
  auto* m = static_cast<MemHandle*>(p);
  if (m == nullptr) {
    *err = state().fail(ncclInvalidArgument, "%s: NULL mhandle", what);
    return nullptr;
  }
  if (!state().live(m)) {
    *err = state().fail(ncclInvalidArgument, "%s: mhandle %p is not a registration of this plugin "
                        "(deregistered, or from another network)", what, p);
    return nullptr;
  }
  if (m->dev != dev) {
    *err = state().fail(ncclInvalidArgument, "%s: mhandle %p was registered on device %d, the comm "
                        "is on device %d", what, p, m->dev->index, dev->index);
    return nullptr;
  }
  if (m->lane != c->lane) {
    *err = state().fail(ncclInvalidArgument, "%s: mhandle %p was registered through a comm on lane "
                        "%d, this comm is on lane %d (XPORT_NCCL_LANES: registrations are per "
                        "comm)", what, p, m->lane->index, c->lane->index);
    return nullptr;
  }
  return m;
}

// A buffer a lane's thread would post outside its registration: refused in NCCL's call, as
// libxport would refuse it there (the lane's thread can no longer tell NCCL).
ncclResult_t outside(const char* call, int index, const void* data, size_t size,
                     const MemHandle& m) {
  return state().fail(ncclInvalidArgument, "%s: buffer %d [%p, +%zu) is not inside its "
                      "registration [%p, +%zu)", call, index, data, size, m.region.base(),
                      m.region.length());
}

ncclResult_t x_init(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config,
                    ncclDebugLogger_t logFunction, ncclProfilerCallback_t) {
  if (ctx == nullptr) return state().fail(ncclInvalidArgument, "init: NULL context pointer");
  *ctx = nullptr;
  ncclResult_t r = state().acquire(logFunction);
  if (r != ncclSuccess) return r;
  auto* c = new (std::nothrow) NetContext();
  if (c == nullptr) {
    state().release();
    return state().fail(ncclSystemError, "init: out of memory");
  }
  c->comm_id = commId;
  if (config != nullptr) c->traffic_class = config->trafficClass;
  *ctx = c;
  return ncclSuccess;
}

ncclResult_t x_finalize(void* ctx) {
  auto* c = static_cast<NetContext*>(ctx);
  if (c == nullptr || c->magic != NetContext::kMagic) return ncclSuccess;  // init failed
  c->magic = 0;
  delete c;
  state().release();
  return ncclSuccess;
}

ncclResult_t x_devices(int* ndev) {
  if (ndev == nullptr) return state().fail(ncclInvalidArgument, "devices: NULL ndev");
  if (!state().ready()) return no_init("devices");
  *ndev = state().device_count();
  return ncclSuccess;
}

ncclResult_t x_get_properties(int dev, ncclNetProperties_v11_t* props) {
  if (props == nullptr) return state().fail(ncclInvalidArgument, "getProperties: NULL props");
  if (!state().ready()) return no_init("getProperties");
  NetDevice* d = state().device(dev);
  if (d == nullptr) return state().fail(ncclInvalidArgument, "getProperties: no device %d", dev);
  std::memset(props, 0, sizeof(*props));
  const DeviceProperties& p = d->props;
  props->name = d->name;
  props->pciPath = d->pci_path;
  props->guid = p.guid;
  props->ptrSupport = NCCL_PTR_HOST;  // NCCL stages GPU data through host buffers
  // Lanes are devices of their own: a registration serves the comms of its lane only.
  props->regIsGlobal = p.registration_is_global && d->lanes.size() == 1 ? 1 : 0;
  props->forceFlush = 0;
  // XPORT_NCCL_SPEED_MBPS when set, else the link rate of the rails; where the node reports
  // none (loopback, shm), 10 Gbit/s as NCCL's own socket transport assumes.
  int speed = static_cast<int>(p.link_bits_per_s / 1000000);
  if (state().speed_mbps_default() > 0) speed = state().speed_mbps_default();
  if (speed <= 0) speed = 10000;
  props->speed = speed;
  props->port = 1;
  props->latency = 0;  // not measured
  props->maxComms = static_cast<int>(p.max_comms);
  // 1 unless XPORT_NCCL_MAX_RECVS says more (docs/nccl.md, "Known gap"); irecv takes up to 8
  // buffers either way.
  props->maxRecvs = std::min(state().max_recvs(), static_cast<int>(p.max_grouped_recvs));
  props->netDeviceType = NCCL_NET_DEVICE_HOST;
  props->netDeviceVersion = 0;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  // test() reports sizes as int: at most 1 GiB per message (NCCL's MAX_NET_SIZE).
  const size_t cap = size_t{1} << 30;
  props->maxP2pBytes = std::min<size_t>(p.max_message_bytes, cap);
  props->maxCollBytes = props->maxP2pBytes;
  props->maxMultiRequestSize = 1;
  return ncclSuccess;
}

ncclResult_t x_listen(void* ctx, int dev, void* handle, void** listenComm) {
  if (handle == nullptr || listenComm == nullptr) {
    return state().fail(ncclInvalidArgument, "listen: NULL handle or listenComm");
  }
  *listenComm = nullptr;
  (void)ctx;
  if (!state().ready()) return no_init("listen");
  NetDevice* d = state().device(dev);
  if (d == nullptr) return state().fail(ncclInvalidArgument, "listen: no device %d", dev);
  Lane* lane = d->pick_lane();
  auto l = lane->device->listen();
  if (!l.ok()) return state().fail(l.status(), "listen");
  const ConnectionHandle& h = (*l)->handle();
  if (h.size() > kHandleBytes) {
    return state().fail(ncclInternalError, "listen: libxport's handle is %zu bytes, NCCL's handle "
                        "leaves %zu", h.size(), kHandleBytes);
  }
  auto* lc = new (std::nothrow) ListenComm();
  if (lc == nullptr) return state().fail(ncclSystemError, "listen: out of memory");
  lc->dev = d;
  lc->lane = lane;
  lc->listener = std::move(l).value();
  std::memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  std::memcpy(handle, h.data(), h.size());
  *listenComm = lc;
  return ncclSuccess;
}

ncclResult_t x_connect(void* ctx, int dev, void* handle, void** sendComm,
                       ncclNetDeviceHandle_v11_t**) {
  if (handle == nullptr || sendComm == nullptr) {
    return state().fail(ncclInvalidArgument, "connect: NULL handle or sendComm");
  }
  *sendComm = nullptr;
  (void)ctx;
  if (!state().ready()) return no_init("connect");
  NetDevice* d = state().device(dev);
  if (d == nullptr) return state().fail(ncclInvalidArgument, "connect: no device %d", dev);
  auto* bytes = static_cast<uint8_t*>(handle);
  ConnectStage stage;
  std::memcpy(&stage, bytes + kHandleBytes, sizeof(stage));
  const uint64_t check = handle_check(bytes);
  if (stage.magic != kStageMagic) {
    // The first call: start connecting (the listener's process answers from its progress), from
    // the next lane (any lane reaches any of the listener's).
    auto c = std::make_unique<PendingNetConnect>();
    c->dev = d;
    c->lane = d->pick_lane();
    c->check = check;
    auto p = c->lane->device->start_connect(std::span<const uint8_t>(bytes, kHandleBytes));
    if (!p.ok()) return state().fail(p.status(), "connect: the handle", true);
    c->pending = std::move(p).value();
    stage.magic = kStageMagic;
    stage.id = state().add_connect(std::move(c));
    stage.check = check;
    std::memcpy(bytes + kHandleBytes, &stage, sizeof(stage));
  }
  std::unique_ptr<PendingNetConnect> c = state().take_connect(stage.id);
  if (c == nullptr) {
    return state().fail(ncclInvalidArgument, "connect: the handle names connection attempt "
                        "%016llx, which this plugin is not making (a forged or stale handle, "
                        "or one whose connect already returned)",
                        static_cast<unsigned long long>(stage.id));
  }
  if (c->check != check || stage.check != check || c->dev != d) {
    state().put_connect(stage.id, std::move(c));  // (the attempt itself goes on)
    return state().fail(ncclInvalidArgument, "connect: the handle's connection attempt %016llx "
                        "was started from another handle or device (the record was copied?)",
                        static_cast<unsigned long long>(stage.id));
  }
  auto s = c->pending->poll();
  if (s.ok() && !*s) {
    state().put_connect(stage.id, std::move(c));
    return ncclSuccess;  // NCCL calls again
  }
  std::memset(bytes + kHandleBytes, 0, sizeof(stage));
  if (!s.ok()) return state().fail(s.status(), "connect");
  auto* sc = new (std::nothrow) SendComm();
  if (sc == nullptr) return state().fail(ncclSystemError, "connect: out of memory");
  sc->magic = SendComm::kMagic;
  sc->dev = d;
  sc->lane = c->lane;
  sc->comm = std::move(s).value();
  *sendComm = sc;
  return ncclSuccess;
}

ncclResult_t x_accept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v11_t**) {
  if (recvComm == nullptr) return state().fail(ncclInvalidArgument, "accept: NULL recvComm");
  *recvComm = nullptr;
  auto* lc = static_cast<ListenComm*>(listenComm);
  if (lc == nullptr || lc->magic != ListenComm::kMagic) {
    return state().fail(ncclInvalidArgument, "accept: %p is not a listen comm", listenComm);
  }
  auto r = lc->listener->try_accept();
  if (!r.ok()) return state().fail(r.status(), "accept");
  if (!*r) return ncclSuccess;  // NCCL calls again
  auto* rc = new (std::nothrow) RecvComm();
  if (rc == nullptr) return state().fail(ncclSystemError, "accept: out of memory");
  rc->magic = RecvComm::kMagic;
  rc->dev = lc->dev;
  rc->lane = lc->lane;
  rc->comm = std::move(r).value();
  *recvComm = rc;
  return ncclSuccess;
}

CommBase* comm_of(void* comm) {
  if (auto* s = checked<SendComm>(comm)) return s;
  if (auto* r = checked<RecvComm>(comm)) return r;
  return nullptr;
}

ncclResult_t x_reg_mr(void* comm, void* data, size_t size, int type, void** mhandle) {
  if (mhandle == nullptr) return state().fail(ncclInvalidArgument, "regMr: NULL mhandle pointer");
  *mhandle = nullptr;
  CommBase* c = comm_of(comm);
  if (c == nullptr) return state().fail(ncclInvalidArgument, "regMr: %p is not a comm", comm);
  if (type != NCCL_PTR_HOST) {
    return state().fail(ncclInvalidUsage, "regMr: memory type %d: this plugin registers host "
                        "memory only (ptrSupport NCCL_PTR_HOST)", type);
  }
  auto reg = c->lane->device->register_memory(data, size);
  if (!reg.ok()) return state().fail(reg.status(), "regMr", true);
  auto* m = new (std::nothrow) MemHandle();
  if (m == nullptr) return state().fail(ncclSystemError, "regMr: out of memory");
  m->dev = c->dev;
  m->lane = c->lane;
  m->region = std::move(reg).value();
  state().add(m);
  *mhandle = m;
  return ncclSuccess;
}

ncclResult_t x_reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t, int,
                             void** mhandle) {
  return x_reg_mr(comm, data, size, type, mhandle);
}

ncclResult_t x_dereg_mr(void* comm, void* mhandle) {
  CommBase* c = comm_of(comm);
  if (c == nullptr) return state().fail(ncclInvalidArgument, "deregMr: %p is not a comm", comm);
  ncclResult_t err = ncclSuccess;
  MemHandle* m = mem_of(mhandle, c, "deregMr", &err);
  if (m == nullptr) return err;
  state().remove(m);
  m->magic = 0;
  delete m;  // the Region goes; operations still using it keep their own reference
  return ncclSuccess;
}

ncclResult_t x_isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void*,
                     void** request) {
  if (request == nullptr) return state().fail(ncclInvalidArgument, "isend: NULL request pointer");
  *request = nullptr;
  SendComm* c = checked<SendComm>(sendComm);
  if (c == nullptr) return state().fail(ncclInvalidArgument, "isend: %p is not a send comm", sendComm);
  ncclResult_t err = ncclSuccess;
  MemHandle* m = mem_of(mhandle, c, "isend", &err);
  if (m == nullptr) return err;
  Request* r = c->take(ReqKind::send);
  if (r == nullptr) return ncclSuccess;  // too many outstanding: NCCL calls again
  if (c->lane->driven()) {
    // The lane's thread posts it and moves its bytes; this thread only queues it (docs/nccl.md,
    // "Lanes"). What libxport would refuse in the call is refused here.
    if (!m->region.contains(data, size)) {
      c->give(r);
      return outside("isend", 0, data, size, *m);
    }
    r->data[0] = const_cast<void*>(data);
    r->lens[0] = size;
    r->tags[0] = static_cast<uint32_t>(tag);
    r->regions[0] = m->region;
    c->lane->submit(r);
    *request = r;
    return ncclSuccess;
  }
  auto q = c->comm->isend(data, size, m->region, static_cast<uint32_t>(tag));
  if (!q.ok()) {
    c->give(r);
    if (q.status().code() == Code::again) return ncclSuccess;  // NCCL calls again
    return state().fail(q.status(), "isend", q.status().code() == Code::invalid_argument);
  }
  r->req = *q;
  *request = r;
  return ncclSuccess;
}

ncclResult_t x_irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                     void**, void** request) {
  if (request == nullptr) return state().fail(ncclInvalidArgument, "irecv: NULL request pointer");
  // (*request may be NCCL_NET_OPTIONAL_RECV_COMPLETION: completion is reported anyway.)
  *request = nullptr;
  RecvComm* c = checked<RecvComm>(recvComm);
  if (c == nullptr) return state().fail(ncclInvalidArgument, "irecv: %p is not a recv comm", recvComm);
  if (n < 1 || n > static_cast<int>(kMaxGroupedRecvs) || data == nullptr || sizes == nullptr ||
      mhandles == nullptr) {
    return state().fail(ncclInvalidArgument, "irecv: %d buffers (1..%zu, with data, sizes and "
                        "mhandles)", n, kMaxGroupedRecvs);
  }
  MemHandle* ms[kMaxGroupedRecvs];
  for (int i = 0; i < n; ++i) {
    ncclResult_t err = ncclSuccess;
    ms[i] = mem_of(mhandles[i], c, "irecv", &err);
    if (ms[i] == nullptr) return err;
    if (c->lane->driven() && !ms[i]->region.contains(data[i], sizes[i])) {
      return outside("irecv", i, data[i], sizes[i], *ms[i]);
    }
  }
  Request* r = c->take(ReqKind::recv);
  if (r == nullptr) return ncclSuccess;
  r->count = n;
  if (c->lane->driven()) {  // the lane's thread posts it (isend says why)
    for (int i = 0; i < n; ++i) {
      r->data[i] = data[i];
      r->lens[i] = sizes[i];
      r->tags[i] = tags != nullptr ? static_cast<uint32_t>(tags[i]) : 0;
      r->regions[i] = ms[i]->region;
    }
    c->lane->submit(r);
    *request = r;
    return ncclSuccess;
  }
  RecvBuffer bufs[kMaxGroupedRecvs];
  for (int i = 0; i < n; ++i) {
    bufs[i] = {data[i], sizes[i], &ms[i]->region,
               tags != nullptr ? static_cast<uint32_t>(tags[i]) : 0};
  }
  auto q = c->comm->irecv(std::span<const RecvBuffer>(bufs, static_cast<size_t>(n)));
  if (!q.ok()) {
    c->give(r);
    if (q.status().code() == Code::again) return ncclSuccess;
    return state().fail(q.status(), "irecv", q.status().code() == Code::invalid_argument);
  }
  r->req = *q;
  *request = r;
  return ncclSuccess;
}

ncclResult_t x_iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                      void** request) {
  if (request == nullptr) return state().fail(ncclInvalidArgument, "iflush: NULL request pointer");
  *request = nullptr;
  RecvComm* c = checked<RecvComm>(recvComm);
  if (c == nullptr) return state().fail(ncclInvalidArgument, "iflush: %p is not a recv comm", recvComm);
  if (n < 1 || n > static_cast<int>(kMaxGroupedRecvs) || data == nullptr || sizes == nullptr ||
      mhandles == nullptr) {
    return state().fail(ncclInvalidArgument, "iflush: %d buffers", n);
  }
  // One read per rail orders every earlier write on it: the last non-empty buffer is enough.
  int last = -1;
  for (int i = 0; i < n; ++i) {
    if (sizes[i] > 0) last = i;
  }
  if (last < 0) return ncclSuccess;  // nothing received: nothing to flush
  ncclResult_t err = ncclSuccess;
  MemHandle* m = mem_of(mhandles[last], c, "iflush", &err);
  if (m == nullptr) return err;
  Request* r = c->take(ReqKind::flush);
  if (r == nullptr) {
    // (A NULL request would tell NCCL there is nothing to flush.)
    return state().fail(ncclInternalError, "iflush: too many requests outstanding on the comm");
  }
  if (c->lane->driven()) {  // the lane's thread posts it (isend says why)
    if (!m->region.contains(data[last], static_cast<size_t>(sizes[last]))) {
      c->give(r);
      return outside("iflush", last, data[last], static_cast<size_t>(sizes[last]), *m);
    }
    r->data[0] = data[last];
    r->lens[0] = static_cast<size_t>(sizes[last]);
    r->regions[0] = m->region;
    c->lane->submit(r);
    *request = r;
    return ncclSuccess;
  }
  auto q = c->comm->iflush(data[last], static_cast<size_t>(sizes[last]), m->region);
  if (!q.ok()) {
    c->give(r);
    return state().fail(q.status(), "iflush", q.status().code() == Code::invalid_argument);
  }
  r->req = *q;
  *request = r;
  return ncclSuccess;
}

ncclResult_t x_test(void* request, int* done, int* sizes) {
  if (done == nullptr) return state().fail(ncclInvalidArgument, "test: NULL done");
  *done = 0;
  auto* r = static_cast<Request*>(request);
  if (r == nullptr || r->magic != Request::kMagic || !r->busy) {
    return state().fail(ncclInvalidArgument, "test: %p is not an outstanding request", request);
  }
  Result<Completion> c = Status(Code::internal, "");
  if (r->comm->lane->driven()) {
    // The lane's thread posted and tested it: this thread only reads what it published.
    if (!r->published.load(std::memory_order_acquire)) return ncclSuccess;
    if (r->error.ok()) {
      c = r->completion;
    } else {
      c = r->error;
    }
  } else if (r->kind == ReqKind::send) {
    c = static_cast<SendComm*>(r->comm)->comm->test(r->req);
  } else {
    c = static_cast<RecvComm*>(r->comm)->comm->test(r->req);
  }
  if (c.ok() && !c->done) return ncclSuccess;
  CommBase* comm = r->comm;
  const ReqKind kind = r->kind;
  const int count = r->count;
  comm->give(r);
  if (!c.ok()) {
    return state().fail(c.status(), kind == ReqKind::send   ? "test (send)"
                                    : kind == ReqKind::recv ? "test (receive)"
                                                            : "test (flush)");
  }
  *done = 1;
  if (sizes != nullptr) {
    if (kind == ReqKind::recv) {
      for (int i = 0; i < count; ++i) sizes[i] = static_cast<int>(c->sizes[i]);
    } else {
      sizes[0] = static_cast<int>(c->bytes);
    }
  }
  return ncclSuccess;
}

template <typename Comm>
ncclResult_t close_comm(void* p, const char* what) {
  Comm* c = checked<Comm>(p);
  if (c == nullptr) return state().fail(ncclInvalidArgument, "%s: %p is not such a comm", what, p);
  c->magic = 0;
  if constexpr (!std::is_same_v<Comm, ListenComm>) {
    // Requests NCCL leaves outstanding end with the comm: its lane's thread lets go of them.
    if (c->lane->driven()) c->lane->forget(c);
  }
  delete c;  // libxport closes the communicator (docs/semantics.md, "Closing")
  return ncclSuccess;
}

ncclResult_t x_close_send(void* c) { return close_comm<SendComm>(c, "closeSend"); }
ncclResult_t x_close_recv(void* c) { return close_comm<RecvComm>(c, "closeRecv"); }
ncclResult_t x_close_listen(void* c) { return close_comm<ListenComm>(c, "closeListen"); }

}  // namespace
}  // namespace xport::nccl

// Exported with ncclGinPlugin_v11 (gin_v11.cc), and nothing else (plugins/nccl/exports.map).
// Not const: NCCL takes it as a plain ncclNet_v11_t*.
extern "C" {
__attribute__((visibility("default"))) ncclNet_v11_t ncclNetPlugin_v11 = {
    "xport",
    xport::nccl::x_init,
    xport::nccl::x_devices,
    xport::nccl::x_get_properties,
    xport::nccl::x_listen,
    xport::nccl::x_connect,
    xport::nccl::x_accept,
    xport::nccl::x_reg_mr,
    xport::nccl::x_reg_mr_dmabuf,
    xport::nccl::x_dereg_mr,
    xport::nccl::x_isend,
    xport::nccl::x_irecv,
    xport::nccl::x_iflush,
    xport::nccl::x_test,
    xport::nccl::x_close_send,
    xport::nccl::x_close_recv,
    xport::nccl::x_close_listen,
    nullptr,  // getDeviceMr: no device offload
    nullptr,  // irecvConsumed
    nullptr,  // makeVDevice: no virtual NICs
    xport::nccl::x_finalize,
    nullptr,  // setNetAttr
};
}
