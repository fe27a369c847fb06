// Atomic operations of the strict provider: pass-through behind the gate (every local descriptor,
// result and compare buffers included, is checked and translated), refused under
// STRICT_FI_HIDE_ATOMIC.
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

ssize_t awrite(fid_ep* ep, const void* buf, size_t count, void* desc, fi_addr_t dest, uint64_t addr,
               uint64_t key, fi_datatype dt, fi_op op, void* ctx) {
  if (hidden(ep)) return -FI_EOPNOTSUPP;
  return pass(ep, Op::atomic, ctx, true, &desc, 1, [&](fid_ep* b, void** d) {
    return fi_atomic(b, buf, count, d[0], dest, addr, key, dt, op, ctx);
  });
}

ssize_t awritev(fid_ep* ep, const fi_ioc* iov, void** desc, size_t count, fi_addr_t dest,
                uint64_t addr, uint64_t key, fi_datatype dt, fi_op op, void* ctx) {
  if (hidden(ep)) return -FI_EOPNOTSUPP;
  return pass(ep, Op::atomic, ctx, true, desc, count, [&](fid_ep* b, void** d) {
    return fi_atomicv(b, iov, desc != nullptr ? d : nullptr, count, dest, addr, key, dt, op, ctx);
  });
}

ssize_t awritemsg(fid_ep* ep, const fi_msg_atomic* msg, uint64_t flags) {
  if (hidden(ep)) return -FI_EOPNOTSUPP;
  return pass(ep, Op::atomic, msg->context, true, msg->desc, msg->iov_count,
              [&](fid_ep* b, void** d) {
                fi_msg_atomic m = *msg;
                m.desc = msg->desc != nullptr ? d : nullptr;
                return fi_atomicmsg(b, &m, flags);
              });
}

ssize_t ainject(fid_ep* ep, const void* buf, size_t count, fi_addr_t dest, uint64_t addr,
                uint64_t key, fi_datatype dt, fi_op op) {
  if (hidden(ep)) return -FI_EOPNOTSUPP;
  return pass(ep, Op::atomic, nullptr, false, nullptr, 0, [&](fid_ep* b, void**) {
    return fi_inject_atomic(b, buf, count, dest, addr, key, dt, op);
  });
}

ssize_t areadwrite(fid_ep* ep, const void* buf, size_t count, void* desc, void* result,
                   void* result_desc, fi_addr_t dest, uint64_t addr, uint64_t key, fi_datatype dt,
                   fi_op op, void* ctx) {
  if (hidden(ep)) return -FI_EOPNOTSUPP;
  void* all[2] = {desc, result_desc};
  return pass(ep, Op::atomic, ctx, true, all, 2, [&](fid_ep* b, void** d) {
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
  return pass(ep, Op::atomic, ctx, true, all, n, [&](fid_ep* b, void** d) {
    return fi_fetch_atomicv(b, iov, desc != nullptr ? d : nullptr, count, resultv,
                            result_desc != nullptr ? d + count : nullptr, result_count, dest, addr,
                            key, dt, op, ctx);
  });
}

ssize_t areadwritemsg(fid_ep* ep, const fi_msg_atomic* msg, fi_ioc* resultv, void** result_desc,
                      size_t result_count, uint64_t flags) {
  if (hidden(ep)) return -FI_EOPNOTSUPP;
  void* all[kMaxIov];
  size_t n = gather(all, msg->desc, msg->iov_count, result_desc, result_count, nullptr, 0);
  if (n > kMaxIov) return -FI_EINVAL;
  return pass(ep, Op::atomic, msg->context, true, all, n, [&](fid_ep* b, void** d) {
    fi_msg_atomic m = *msg;
    m.desc = msg->desc != nullptr ? d : nullptr;
    return fi_fetch_atomicmsg(b, &m, resultv, result_desc != nullptr ? d + msg->iov_count : nullptr,
                              result_count, flags);
  });
}

ssize_t acompwrite(fid_ep* ep, const void* buf, size_t count, void* desc, const void* compare,
                   void* compare_desc, void* result, void* result_desc, fi_addr_t dest,
                   uint64_t addr, uint64_t key, fi_datatype dt, fi_op op, void* ctx) {
  if (hidden(ep)) return -FI_EOPNOTSUPP;
  void* all[3] = {desc, compare_desc, result_desc};
  return pass(ep, Op::atomic, ctx, true, all, 3, [&](fid_ep* b, void** d) {
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
  return pass(ep, Op::atomic, ctx, true, all, n, [&](fid_ep* b, void** d) {
    return fi_compare_atomicv(b, iov, desc != nullptr ? d : nullptr, count, comparev,
                              compare_desc != nullptr ? d + count : nullptr, compare_count, resultv,
                              result_desc != nullptr ? d + count + compare_count : nullptr,
                              result_count, dest, addr, key, dt, op, ctx);
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
  return pass(ep, Op::atomic, msg->context, true, all, n, [&](fid_ep* b, void** d) {
    fi_msg_atomic m = *msg;
    m.desc = msg->desc != nullptr ? d : nullptr;
    return fi_compare_atomicmsg(
        b, &m, comparev, compare_desc != nullptr ? d + count : nullptr, compare_count, resultv,
        result_desc != nullptr ? d + count + compare_count : nullptr, result_count, flags);
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
