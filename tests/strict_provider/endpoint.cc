// Endpoint of the strict provider: a CQ bind opens a base CQ for this endpoint alone (so every
// base completion is known to be this endpoint's), an AV bind translates our wrapper to the
// base's; enable arms the FI_RX_CQ_DATA receive queue, cancel takes back a receive it holds;
// names and options pass through (a shm base's endpoint left unnamed gets a unique name at enable:
// stale regions of killed peers); close refuses (-FI_EBUSY) while MRs are still bound to it, as
// providers that require FI_MR_ENDPOINT do.
#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>

#include "strict.hpp"

namespace strict {
namespace {

// Closes the endpoint's base CQs. What of it is still held in the strict CQs stays readable,
// but no longer counts against their size.
void detach(Endpoint* ep, const std::shared_ptr<Source>& s) {
  Cq* cq = s->cq;
  cq->expected -= s->expected;
  s->expected = 0;
  s->ep = nullptr;
  if (s->base != nullptr) (void)fi_close(&s->base->fid);
  s->base = nullptr;
  std::erase(cq->sources, s);
  (void)ep;
}

int ep_close(fid* f) {
  auto* ep = reinterpret_cast<Endpoint*>(f);
  if (ep->bound_mrs.load() > 0) {
    totals.mr_busy_closes.fetch_add(1, std::memory_order_relaxed);
    return -FI_EBUSY;
  }
  Domain* d = ep->domain;
  {
    std::lock_guard<std::mutex> g(d->mu);
    int ret = fi_close(&ep->base->fid);
    if (ret != 0) return ret;
    // Operations the application posted and nothing will complete any more.
    rx_clear(ep, true);
    drop_posts(ep, true);
    // Cancelling them, a provider may still write into their contexts: they must be alive.
    if (d->cfg.verbose && !ep->in_flight.empty()) {
      std::fprintf(stderr, "strict provider: endpoint closed with %zu operations in flight\n",
                   ep->in_flight.size());
    }
    for (void* ctx : ep->in_flight) scribble(ctx);
    ep->in_flight.clear();
    if (ep->tx_src) detach(ep, ep->tx_src);
    if (ep->rx_src && ep->rx_src != ep->tx_src) detach(ep, ep->rx_src);
    std::erase(d->eps, ep);
  }
  delete ep;
  return 0;
}

// Each binding to a strict CQ gets a base CQ of its own (one per endpoint and CQ, for both
// directions when both are bound to the same CQ).
int bind_cq(Endpoint* ep, Cq* cq, uint64_t flags) {
  const uint64_t dir = flags & (FI_TRANSMIT | FI_RECV);
  if (((dir & FI_TRANSMIT) && ep->tx_src) || ((dir & FI_RECV) && ep->rx_src)) return -FI_EINVAL;
  std::shared_ptr<Source> s;
  if (ep->tx_src && ep->tx_src->cq == cq) s = ep->tx_src;
  if (ep->rx_src && ep->rx_src->cq == cq) s = ep->rx_src;
  const bool fresh = !s;
  if (fresh) {
    s = std::make_shared<Source>();
    s->cq = cq;
    s->ep = ep;
    s->ep_id = ep->id;
    fi_cq_attr attr{};
    attr.format = FI_CQ_FORMAT_DATA;
    attr.size = cq->base_size;
    attr.wait_obj = FI_WAIT_NONE;
    int ret = fi_cq_open(ep->domain->base, &attr, &s->base, nullptr);
    if (ret != 0) return ret;
  }
  int ret = fi_ep_bind(ep->base, &s->base->fid, flags);
  if (ret != 0) {
    if (fresh) (void)fi_close(&s->base->fid);
    return ret;
  }
  s->bind_flags |= dir;
  if (fresh) cq->sources.push_back(s);
  if (dir & FI_TRANSMIT) ep->tx_src = s;
  if (dir & FI_RECV) ep->rx_src = s;
  return 0;
}

int ep_bind(fid* f, fid* bfid, uint64_t flags) {
  auto* ep = reinterpret_cast<Endpoint*>(f);
  if (Cq* cq = as_cq(bfid)) {
    if (cq->domain != ep->domain) return -FI_EINVAL;
    std::lock_guard<std::mutex> g(ep->domain->mu);
    return bind_cq(ep, cq, flags);
  }
  if (Av* av = as_av(bfid)) return fi_ep_bind(ep->base, &av->base->fid, flags);
  switch (bfid->fclass) {
    case FI_CLASS_EQ:
    case FI_CLASS_CNTR:
      return fi_ep_bind(ep->base, bfid, flags);  // handed out by the base unwrapped
    default:
      return -FI_EINVAL;  // a CQ or AV of another provider, or something unbindable
  }
}

// A name for a shm endpoint that no earlier process's region can hold: pid, a random number
// drawn once per process, and a counter.
std::string unique_shm_name() {
  static const uint64_t nonce = [] {
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), 0) != sizeof(v)) {
      v = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    }
    return v;
  }();
  static std::atomic<uint32_t> next{0};
  char buf[64];
  std::snprintf(buf, sizeof(buf), "strict_%d_%llx_%u", static_cast<int>(getpid()),
                static_cast<unsigned long long>(nonce), next.fetch_add(1));
  return buf;
}

int ep_control(fid* f, int command, void* arg) {
  auto* ep = reinterpret_cast<Endpoint*>(f);
  switch (command) {
    case FI_ENABLE: {
      std::lock_guard<std::mutex> g(ep->domain->mu);
      if (!ep->named && ep->domain->fabric->base_name == "shm") {
        // shm names its region "<pid>:<domain>:<endpoint>" by default, and a peer killed by a
        // test leaves its regions behind: once its pid is reused, fi_enable meets the stale
        // region (-FI_EBUSY). A name with a per-process random part never does (libxport names
        // its shm endpoints the same way, but it sees "strict" here, not "shm").
        const std::string name = unique_shm_name();
        int ret = fi_setname(&ep->base->fid, const_cast<char*>(name.c_str()), name.size() + 1);
        if (ret != 0) return ret;
      }
      int ret = fi_control(&ep->base->fid, command, arg);
      if (ret != 0) return ret;
      return ep->domain->cfg.rx_cq_data ? rx_arm(ep) : 0;
    }
    case FI_GETOPSFLAG:
    case FI_SETOPSFLAG:
      return fi_control(&ep->base->fid, command, arg);
    default:
      return -FI_ENOSYS;
  }
}

ssize_t ep_cancel(fid_t f, void* context) {
  auto* ep = reinterpret_cast<Endpoint*>(f);
  std::lock_guard<std::mutex> g(ep->domain->mu);
  // Receives held under FI_RX_CQ_DATA are ours to cancel; the rest is the base's.
  if (ep->rxq && rx_cancel(ep, context)) return 0;
  return fi_cancel(&ep->base->fid, context);
}

fi_ops ep_fid_ops = {
    .size = sizeof(fi_ops),
    .close = ep_close,
    .bind = ep_bind,
    .control = ep_control,
    .ops_open = no_ops_open,
    .tostr = no_tostr,
    .ops_set = no_ops_set,
};

fid_ep* base_of(fid_ep* ep) { return reinterpret_cast<Endpoint*>(ep)->base; }
fid_ep* base_of(fid_t f) { return reinterpret_cast<Endpoint*>(f)->base; }

fi_ops_ep ep_ops = {
    .size = sizeof(fi_ops_ep),
    .cancel = ep_cancel,
    .getopt =
        [](fid_t f, int level, int optname, void* optval, size_t* optlen) {
          return fi_getopt(&base_of(f)->fid, level, optname, optval, optlen);
        },
    .setopt =
        [](fid_t f, int level, int optname, const void* optval, size_t optlen) {
          return fi_setopt(&base_of(f)->fid, level, optname, optval, optlen);
        },
    .tx_ctx = [](fid_ep*, int, fi_tx_attr*, fid_ep**, void*) { return -FI_ENOSYS; },
    .rx_ctx = [](fid_ep*, int, fi_rx_attr*, fid_ep**, void*) { return -FI_ENOSYS; },
    .rx_size_left = [](fid_ep* ep) -> ssize_t {
      fid_ep* b = base_of(ep);
      return b->ops->rx_size_left != nullptr ? b->ops->rx_size_left(b) : -FI_ENOSYS;
    },
    .tx_size_left = [](fid_ep* ep) -> ssize_t {
      fid_ep* b = base_of(ep);
      return b->ops->tx_size_left != nullptr ? b->ops->tx_size_left(b) : -FI_ENOSYS;
    },
};

fi_ops_cm cm_ops = {
    .size = sizeof(fi_ops_cm),
    .setname = [](fid_t f, void* addr, size_t addrlen) {
      int ret = fi_setname(&base_of(f)->fid, addr, addrlen);
      if (ret == 0) reinterpret_cast<Endpoint*>(f)->named = true;
      return ret;
    },
    .getname = [](fid_t f, void* addr,
                  size_t* addrlen) { return fi_getname(&base_of(f)->fid, addr, addrlen); },
    .getpeer = [](fid_ep* ep, void* addr,
                  size_t* addrlen) { return fi_getpeer(base_of(ep), addr, addrlen); },
    // Connection management belongs to FI_EP_MSG, which this provider does not offer.
    .connect = [](fid_ep*, const void*, const void*, size_t) { return -FI_ENOSYS; },
    .listen = [](fid_pep*) { return -FI_ENOSYS; },
    .accept = [](fid_ep*, const void*, size_t) { return -FI_ENOSYS; },
    .reject = [](fid_pep*, fid_t, const void*, size_t) { return -FI_ENOSYS; },
    .shutdown = [](fid_ep*, uint64_t) { return -FI_ENOSYS; },
    .join = [](fid_ep*, const void*, uint64_t, fid_mc**, void*) { return -FI_ENOSYS; },
};

// FI_TAGGED is never advertised; these keep a caller who tries anyway from crashing.
fi_ops_tagged tagged_ops = {
    .size = sizeof(fi_ops_tagged),
    .recv = [](fid_ep*, void*, size_t, void*, fi_addr_t, uint64_t, uint64_t, void*) -> ssize_t {
      return -FI_ENOSYS;
    },
    .recvv = [](fid_ep*, const iovec*, void**, size_t, fi_addr_t, uint64_t, uint64_t,
                void*) -> ssize_t { return -FI_ENOSYS; },
    .recvmsg = [](fid_ep*, const fi_msg_tagged*, uint64_t) -> ssize_t { return -FI_ENOSYS; },
    .send = [](fid_ep*, const void*, size_t, void*, fi_addr_t, uint64_t, void*) -> ssize_t {
      return -FI_ENOSYS;
    },
    .sendv = [](fid_ep*, const iovec*, void**, size_t, fi_addr_t, uint64_t, void*) -> ssize_t {
      return -FI_ENOSYS;
    },
    .sendmsg = [](fid_ep*, const fi_msg_tagged*, uint64_t) -> ssize_t { return -FI_ENOSYS; },
    .inject = [](fid_ep*, const void*, size_t, fi_addr_t, uint64_t) -> ssize_t {
      return -FI_ENOSYS;
    },
    .senddata = [](fid_ep*, const void*, size_t, void*, uint64_t, fi_addr_t, uint64_t,
                   void*) -> ssize_t { return -FI_ENOSYS; },
    .injectdata = [](fid_ep*, const void*, size_t, uint64_t, fi_addr_t, uint64_t) -> ssize_t {
      return -FI_ENOSYS;
    },
};

}  // namespace

Endpoint* as_endpoint(fid* f) {
  return f != nullptr && f->fclass == FI_CLASS_EP && f->ops == &ep_fid_ops
             ? reinterpret_cast<Endpoint*>(f)
             : nullptr;
}

int open_endpoint(Domain* d, fi_info* info, fid_ep** out, void* context) {
  fi_info* binfo = to_base_info(info, d->fabric->base_name);
  if (binfo == nullptr) return -FI_ENOMEM;
  auto* ep = new Endpoint();
  ep->domain = d;
  int ret = fi_endpoint(d->base, binfo, &ep->base, context);
  fi_freeinfo(binfo);
  if (ret != 0) {
    delete ep;
    return ret;
  }
  {
    std::lock_guard<std::mutex> g(d->mu);
    ep->id = d->next_ep_id++;
    d->eps.push_back(ep);
  }
  ep->ep.fid.fclass = FI_CLASS_EP;
  ep->ep.fid.context = context;
  ep->ep.fid.ops = &ep_fid_ops;
  ep->ep.ops = &ep_ops;
  ep->ep.cm = &cm_ops;
  ep->ep.msg = &msg_ops;
  ep->ep.rma = &rma_ops;
  ep->ep.tagged = &tagged_ops;
  ep->ep.atomic = &atomic_ops;  // refuses every call under STRICT_FI_HIDE_ATOMIC
  ep->ep.collective = nullptr;
  *out = &ep->ep;
  return 0;
}

}  // namespace strict
