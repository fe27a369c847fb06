// Endpoint of the strict provider: binds translate our CQ/AV wrappers to the base's, enable,
// names, options and cancel pass through, and close refuses (-FI_EBUSY) while MRs are still bound
// to it, as providers that require FI_MR_ENDPOINT do.
#include "strict.hpp"

namespace strict {
namespace {

int ep_close(fid* f) {
  auto* ep = reinterpret_cast<Endpoint*>(f);
  if (ep->bound_mrs.load() > 0) {
    totals.mr_busy_closes.fetch_add(1, std::memory_order_relaxed);
    return -FI_EBUSY;
  }
  int ret = fi_close(&ep->base->fid);
  if (ret != 0) return ret;
  delete ep;
  return 0;
}

int ep_bind(fid* f, fid* bfid, uint64_t flags) {
  auto* ep = reinterpret_cast<Endpoint*>(f);
  if (Cq* cq = as_cq(bfid)) {
    if (cq->domain != ep->domain) return -FI_EINVAL;
    int ret = fi_ep_bind(ep->base, &cq->base->fid, flags);
    if (ret != 0) return ret;
    if (flags & FI_TRANSMIT) ep->tx_cq = cq;
    if (flags & FI_RECV) ep->rx_cq = cq;
    return 0;
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

int ep_control(fid* f, int command, void* arg) {
  auto* ep = reinterpret_cast<Endpoint*>(f);
  switch (command) {
    case FI_ENABLE:
    case FI_GETOPSFLAG:
    case FI_SETOPSFLAG:
      return fi_control(&ep->base->fid, command, arg);
    default:
      return -FI_ENOSYS;
  }
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
    .cancel = [](fid_t f, void* context) { return fi_cancel(&base_of(f)->fid, context); },
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
    .setname = [](fid_t f, void* addr,
                  size_t addrlen) { return fi_setname(&base_of(f)->fid, addr, addrlen); },
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
