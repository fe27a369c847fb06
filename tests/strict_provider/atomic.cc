// Atomic operations of the strict provider: pass-through behind the gate (every local descriptor,
// result and compare buffers included, is checked and translated), refused under
// STRICT_FI_HIDE_ATOMIC. As in msg_rma.cc, each post owns copies of the arrays (and inject
// operands) the caller lends for the call only.
#include <cstring>

#include "strict.hpp"

namespace strict {
namespace {

bool hidden(fid_ep* ep) { return reinterpret_cast<Endpoint*>(ep)->domain->cfg.hide_atomic; }

// Gathers the descriptor arrays of one call into `all` (nullptr arrays stay nullptr entries).
size_t gather(void** all, void* const* a, size_t na, void* const* b, size_t nb, void* const* c,
              size_t nc) {
  if (na + nb + nc > kMaxIov) return kMaxIov + 1;
  size_t n = 0;
  for (size_t i = 0; i < na; ++i) all[n++] = a != nullptr ? a[i] : nullptr;
  for (size_t i = 0; i < nb; ++i) all[n++] = b != nullptr ? b[i] : nullptr;
  for (size_t i = 0; i < nc; ++i) all[n++] = c != nullptr ? c[i] : nullptr;
  return n;
}

size_t datatype_size(fi_datatype dt) {
  switch (dt) {
    case FI_INT8:
    case FI_UINT8:
      return 1;
    case FI_INT16:
    case FI_UINT16:
      return 2;
    case FI_INT32:
    case FI_UINT32:
    case FI_FLOAT:
      return 4;
    case FI_INT64:
    case FI_UINT64:
    case FI_DOUBLE:
    case FI_FLOAT_COMPLEX:
      return 8;
    case FI_DOUBLE_COMPLEX:
    case FI_INT128:
    case FI_UINT128:
      return 16;
    case FI_LONG_DOUBLE:
      return sizeof(long double);
    case FI_LONG_DOUBLE_COMPLEX:
      return 2 * sizeof(long double);
    default:
      return 16;
  }
}

// An fi_ioc array, and with FI_INJECT its operands gathered (reusable by the caller at return).
struct OwnedIoc {
  std::vector<fi_ioc> ioc;
  std::vector<uint8_t> payload;
  size_t elements = 0;
  bool inject = false;
  OwnedIoc() = default;
  OwnedIoc(const fi_ioc* v, size_t n, bool inj, fi_datatype dt)
      : ioc(v != nullptr ? std::vector<fi_ioc>(v, v + n) : std::vector<fi_ioc>()), inject(inj) {
    if (!inject) return;
    const size_t size = datatype_size(dt);
    for (const fi_ioc& x : ioc) {
      const auto* p = static_cast<const uint8_t*>(x.addr);
      payload.insert(payload.end(), p, p + x.count * size);
      elements += x.count;
    }
  }
  const fi_ioc* data(fi_ioc* one) const {
    if (!inject) return ioc.empty() ? nullptr : ioc.data();
    *one = fi_ioc{const_cast<uint8_t*>(payload.data()), elements};
    return one;
  }
  size_t count() const { return inject ? 1 : ioc.size(); }
};

// A fi_msg_atomic with its arrays owned.
struct OwnedAtomicMsg {
  fi_msg_atomic m;
  OwnedIoc iov;
  std::vector<fi_rma_ioc> rma;
  bool had_desc;
  OwnedAtomicMsg(const fi_msg_atomic* msg, bool inject)
      : m(*msg),
        iov(msg->msg_iov, msg->iov_count, inject, msg->datatype),
        rma(msg->rma_iov, msg->rma_iov + msg->rma_iov_count),
        had_desc(msg->desc != nullptr) {}
  fi_msg_atomic view(void** d, fi_ioc* one) const {
    fi_msg_atomic x = m;
    x.msg_iov = iov.data(one);
    x.iov_count = iov.count();
    x.rma_iov = rma.data();
    x.desc = (iov.inject || !had_desc) ? nullptr : d;
    return x;
  }
};

Request atomic_request(void* ctx, void* const* desc, size_t count, fi_addr_t peer) {
  Request r{.op = Op::atomic, .ctx = ctx, .desc = desc, .count = count};
  r.peer = peer;
  return r;
}

Request atomic_msg_request(const fi_msg_atomic* msg, void* const* desc, size_t count,
                           uint64_t flags) {
  Request r = atomic_request(msg->context, desc, count, msg->addr);
  r.has_data = (flags & FI_REMOTE_CQ_DATA) != 0;
  r.data = msg->data;
  return r;
}

ssize_t awrite(fid_ep* ep, const void* buf, size_t count, void* desc, fi_addr_t dest, uint64_t addr,
               uint64_t key, fi_datatype dt, fi_op op, void* ctx) {
  if (hidden(ep)) return -FI_EOPNOTSUPP;
  return submit(ep, atomic_request(ctx, &desc, 1, dest), [=](fid_ep* b, void** d) {
    return fi_atomic(b, buf, count, d[0], dest, addr, key, dt, op, ctx);
  });
}

ssize_t awritev(fid_ep* ep, const fi_ioc* iov, void** desc, size_t count, fi_addr_t dest,
                uint64_t addr, uint64_t key, fi_datatype dt, fi_op op, void* ctx) {
  if (hidden(ep)) return -FI_EOPNOTSUPP;
  OwnedIoc o(iov, count, false, dt);
  const bool had_desc = desc != nullptr;
  return submit(ep, atomic_request(ctx, desc, count, dest), [=](fid_ep* b, void** d) {
    return fi_atomicv(b, o.data(nullptr), had_desc ? d : nullptr, count, dest, addr, key, dt, op,
                      ctx);
  });
}

ssize_t awritemsg(fid_ep* ep, const fi_msg_atomic* msg, uint64_t flags) {
  if (hidden(ep)) return -FI_EOPNOTSUPP;
  OwnedAtomicMsg o(msg, (flags & FI_INJECT) != 0);
  return submit(ep, atomic_msg_request(msg, msg->desc, msg->iov_count, flags),
                [=](fid_ep* b, void** d) {
                  fi_ioc one;
                  fi_msg_atomic x = o.view(d, &one);
                  return fi_atomicmsg(b, &x, flags);
                });
}

ssize_t ainject(fid_ep* ep, const void* buf, size_t count, fi_addr_t dest, uint64_t addr,
                uint64_t key, fi_datatype dt, fi_op op) {
  if (hidden(ep)) return -FI_EOPNOTSUPP;
  const auto* p = static_cast<const uint8_t*>(buf);
  std::vector<uint8_t> copy(p, p + count * datatype_size(dt));
  Request r = atomic_request(nullptr, nullptr, 0, dest);
  r.completes = false;
  return submit(ep, r, [=](fid_ep* b, void**) {
    return fi_inject_atomic(b, copy.data(), count, dest, addr, key, dt, op);
  });
}

ssize_t areadwrite(fid_ep* ep, const void* buf, size_t count, void* desc, void* result,
                   void* result_desc, fi_addr_t dest, uint64_t addr, uint64_t key, fi_datatype dt,
                   fi_op op, void* ctx) {
  if (hidden(ep)) return -FI_EOPNOTSUPP;
  void* all[2] = {desc, result_desc};
  return submit(ep, atomic_request(ctx, all, 2, dest), [=](fid_ep* b, void** d) {
    return fi_fetch_atomic(b, buf, count, d[0], result, d[1], dest, addr, key, dt, op, ctx);
  });
}

ssize_t areadwritev(fid_ep* ep, const fi_ioc* iov, void** desc, size_t count, fi_ioc* resultv,
                    void** result_desc, size_t result_count, fi_addr_t dest, uint64_t addr,
                    uint64_t key, fi_datatype dt, fi_op op, void* ctx) {
  if (hidden(ep)) return -FI_EOPNOTSUPP;
  void* all[kMaxIov];
  size_t n = gather(all, desc, count, result_desc, result_count, nullptr, 0);
  if (n > kMaxIov) return -FI_EINVAL;
  OwnedIoc o(iov, count, false, dt);
  OwnedIoc res(resultv, result_count, false, dt);
  const bool had_desc = desc != nullptr, had_rdesc = result_desc != nullptr;
  return submit(ep, atomic_request(ctx, all, n, dest), [=](fid_ep* b, void** d) {
    return fi_fetch_atomicv(b, o.data(nullptr), had_desc ? d : nullptr, count,
                            const_cast<fi_ioc*>(res.data(nullptr)), had_rdesc ? d + count : nullptr,
                            result_count, dest, addr, key, dt, op, ctx);
  });
}

ssize_t areadwritemsg(fid_ep* ep, const fi_msg_atomic* msg, fi_ioc* resultv, void** result_desc,
                      size_t result_count, uint64_t flags) {
  if (hidden(ep)) return -FI_EOPNOTSUPP;
  void* all[kMaxIov];
  size_t n = gather(all, msg->desc, msg->iov_count, result_desc, result_count, nullptr, 0);
  if (n > kMaxIov) return -FI_EINVAL;
  OwnedAtomicMsg o(msg, (flags & FI_INJECT) != 0);
  OwnedIoc res(resultv, result_count, false, msg->datatype);
  const size_t count = msg->iov_count;
  const bool had_rdesc = result_desc != nullptr;
  return submit(ep, atomic_msg_request(msg, all, n, flags), [=](fid_ep* b, void** d) {
    fi_ioc one;
    fi_msg_atomic x = o.view(d, &one);
    return fi_fetch_atomicmsg(b, &x, const_cast<fi_ioc*>(res.data(nullptr)),
                              had_rdesc ? d + count : nullptr, result_count, flags);
  });
}

ssize_t acompwrite(fid_ep* ep, const void* buf, size_t count, void* desc, const void* compare,
                   void* compare_desc, void* result, void* result_desc, fi_addr_t dest,
                   uint64_t addr, uint64_t key, fi_datatype dt, fi_op op, void* ctx) {
  if (hidden(ep)) return -FI_EOPNOTSUPP;
  void* all[3] = {desc, compare_desc, result_desc};
  return submit(ep, atomic_request(ctx, all, 3, dest), [=](fid_ep* b, void** d) {
    return fi_compare_atomic(b, buf, count, d[0], compare, d[1], result, d[2], dest, addr, key, dt,
                             op, ctx);
  });
}

ssize_t acompwritev(fid_ep* ep, const fi_ioc* iov, void** desc, size_t count,
                    const fi_ioc* comparev, void** compare_desc, size_t compare_count,
                    fi_ioc* resultv, void** result_desc, size_t result_count, fi_addr_t dest,
                    uint64_t addr, uint64_t key, fi_datatype dt, fi_op op, void* ctx) {
  if (hidden(ep)) return -FI_EOPNOTSUPP;
  void* all[kMaxIov];
  size_t n = gather(all, desc, count, compare_desc, compare_count, result_desc, result_count);
  if (n > kMaxIov) return -FI_EINVAL;
  OwnedIoc o(iov, count, false, dt);
  OwnedIoc cmp(comparev, compare_count, false, dt);
  OwnedIoc res(resultv, result_count, false, dt);
  const bool had_desc = desc != nullptr, had_cdesc = compare_desc != nullptr,
             had_rdesc = result_desc != nullptr;
  return submit(ep, atomic_request(ctx, all, n, dest), [=](fid_ep* b, void** d) {
    return fi_compare_atomicv(b, o.data(nullptr), had_desc ? d : nullptr, count, cmp.data(nullptr),
                              had_cdesc ? d + count : nullptr, compare_count,
                              const_cast<fi_ioc*>(res.data(nullptr)),
                              had_rdesc ? d + count + compare_count : nullptr, result_count, dest,
                              addr, key, dt, op, ctx);
  });
}

ssize_t acompwritemsg(fid_ep* ep, const fi_msg_atomic* msg, const fi_ioc* comparev,
                      void** compare_desc, size_t compare_count, fi_ioc* resultv,
                      void** result_desc, size_t result_count, uint64_t flags) {
  if (hidden(ep)) return -FI_EOPNOTSUPP;
  void* all[kMaxIov];
  const size_t count = msg->iov_count;
  size_t n = gather(all, msg->desc, count, compare_desc, compare_count, result_desc, result_count);
  if (n > kMaxIov) return -FI_EINVAL;
  OwnedAtomicMsg o(msg, (flags & FI_INJECT) != 0);
  OwnedIoc cmp(comparev, compare_count, false, msg->datatype);
  OwnedIoc res(resultv, result_count, false, msg->datatype);
  const bool had_cdesc = compare_desc != nullptr, had_rdesc = result_desc != nullptr;
  return submit(ep, atomic_msg_request(msg, all, n, flags), [=](fid_ep* b, void** d) {
    fi_ioc one;
    fi_msg_atomic x = o.view(d, &one);
    return fi_compare_atomicmsg(b, &x, cmp.data(nullptr), had_cdesc ? d + count : nullptr,
                                compare_count, const_cast<fi_ioc*>(res.data(nullptr)),
                                had_rdesc ? d + count + compare_count : nullptr, result_count,
                                flags);
  });
}

int valid(fid_ep* ep, fi_datatype dt, fi_op op, size_t* count, int kind) {
  if (hidden(ep)) return -FI_EOPNOTSUPP;
  fid_ep* b = reinterpret_cast<Endpoint*>(ep)->base;
  switch (kind) {
    case 0:
      return fi_atomicvalid(b, dt, op, count);
    case 1:
      return fi_fetch_atomicvalid(b, dt, op, count);
    default:
      return fi_compare_atomicvalid(b, dt, op, count);
  }
}

}  // namespace

fi_ops_atomic atomic_ops = {
    .size = sizeof(fi_ops_atomic),
    .write = awrite,
    .writev = awritev,
    .writemsg = awritemsg,
    .inject = ainject,
    .readwrite = areadwrite,
    .readwritev = areadwritev,
    .readwritemsg = areadwritemsg,
    .compwrite = acompwrite,
    .compwritev = acompwritev,
    .compwritemsg = acompwritemsg,
    .writevalid = [](fid_ep* ep, fi_datatype dt, fi_op op,
                     size_t* count) { return valid(ep, dt, op, count, 0); },
    .readwritevalid = [](fid_ep* ep, fi_datatype dt, fi_op op,
                         size_t* count) { return valid(ep, dt, op, count, 1); },
    .compwritevalid = [](fid_ep* ep, fi_datatype dt, fi_op op,
                         size_t* count) { return valid(ep, dt, op, count, 2); },
};

}  // namespace strict
