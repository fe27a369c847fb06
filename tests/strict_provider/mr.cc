// Memory registration of the strict provider. Under FI_MR_ENDPOINT a registration is only
// recorded at fi_mr_reg; the base registers it at fi_mr_enable, after fi_mr_bind to one of our
// endpoints. So an unbound MR has no base registration at all: its descriptor fails in the gate
// and its key is unknown to the base, which refuses remote access with it as hardware would.
// STRICT_FI_HMEM: FI_HMEM_CUDA registrations are recorded as GPU memory (the gate checks every
// operation on it) and registered with the base as the host memory they are in tests.
#include <cstdio>
#include <cstring>

#include "strict.hpp"

namespace strict {
namespace {

int base_register(Mr* m) {
  fi_mr_attr attr = m->attr;
  if (m->hmem) {
    attr.iface = FI_HMEM_SYSTEM;
    attr.device.reserved = 0;
  }
  int ret = fi_mr_regattr(m->domain->base, &attr, m->flags, &m->base);
  if (ret != 0) {
    m->base = nullptr;
    return ret;
  }
  m->mr.key = fi_mr_key(m->base);
  return 0;
}

int mr_close(fid* f) {
  auto* m = reinterpret_cast<Mr*>(f);
  if (m->base != nullptr) {
    int ret = fi_close(&m->base->fid);
    if (ret != 0) return ret;
  }
  if (m->ep != nullptr) m->ep->bound_mrs.fetch_sub(1);
  if (m->hmem && !m->iov.empty()) {
    std::lock_guard<std::mutex> g(m->domain->mu);
    auto it = m->domain->hmem_ranges.find(reinterpret_cast<uintptr_t>(m->iov[0].iov_base));
    if (it != m->domain->hmem_ranges.end() && it->second == m) m->domain->hmem_ranges.erase(it);
  }
  m->magic = 0;  // a descriptor used after close no longer passes the gate
  delete m;
  return 0;
}

int mr_bind(fid* f, fid* bfid, uint64_t) {
  auto* m = reinterpret_cast<Mr*>(f);
  Endpoint* ep = as_endpoint(bfid);
  if (ep == nullptr || ep->domain != m->domain) return -FI_EINVAL;
  if (m->ep != nullptr || m->enabled) return -FI_EOPBADSTATE;  // bound once, before enable
  m->ep = ep;
  ep->bound_mrs.fetch_add(1);
  return 0;
}

int mr_control(fid* f, int command, void*) {
  auto* m = reinterpret_cast<Mr*>(f);
  if (command != FI_ENABLE) return -FI_ENOSYS;
  if (m->enabled) return 0;
  if (m->domain->enforce_mr_endpoint) {
    if (m->ep == nullptr) return -FI_EOPBADSTATE;  // FI_MR_ENDPOINT: bind comes first
    int ret = base_register(m);
    if (ret != 0) return ret;
  }
  m->enabled = true;
  return 0;
}

fi_ops mr_fid_ops = {
    .size = sizeof(fi_ops),
    .close = mr_close,
    .bind = mr_bind,
    .control = mr_control,
    .ops_open = no_ops_open,
    .tostr = no_tostr,
    .ops_set = no_ops_set,
};

int regattr(fid* f, const fi_mr_attr* attr, uint64_t flags, fid_mr** out) {
  if (f == nullptr || f->fclass != FI_CLASS_DOMAIN || attr == nullptr || out == nullptr)
    return -FI_EINVAL;
  if (attr->iov_count > 0 && attr->mr_iov == nullptr) return -FI_EINVAL;
  auto* d = reinterpret_cast<Domain*>(f);
  // A provider without FI_HMEM (or a domain opened without it) registers host memory only.
  if (attr->iface != FI_HMEM_SYSTEM && (!d->hmem || attr->iface != FI_HMEM_CUDA)) {
    totals.hmem_refused.fetch_add(1, std::memory_order_relaxed);
    if (d->cfg.verbose) {
      std::fprintf(stderr, "strict provider: registration with iface %d refused (%s)\n",
                   static_cast<int>(attr->iface),
                   d->hmem ? "only FI_HMEM_CUDA is offered" : "FI_HMEM was not granted");
    }
    return -FI_EOPNOTSUPP;
  }
  if (attr->iface == FI_HMEM_CUDA && attr->iov_count != 1) return -FI_EINVAL;
  auto* m = new Mr();
  m->hmem = attr->iface == FI_HMEM_CUDA;
  m->magic = kMrMagic;
  m->domain = d;
  m->iov.assign(attr->mr_iov, attr->mr_iov + attr->iov_count);
  m->attr = *attr;
  m->attr.mr_iov = m->iov.data();
  if (attr->auth_key_size > 0 && attr->auth_key != nullptr) {
    m->auth_key.assign(attr->auth_key, attr->auth_key + attr->auth_key_size);
    m->attr.auth_key = m->auth_key.data();
  }
  m->flags = flags;
  m->mr.fid.fclass = FI_CLASS_MR;
  m->mr.fid.context = attr->context;
  m->mr.fid.ops = &mr_fid_ops;
  m->mr.mem_desc = m;  // the gate recognises and translates it
  if (d->enforce_mr_endpoint) {
    m->mr.key = d->base_prov_key ? FI_KEY_NOTAVAIL : attr->requested_key;
  } else {
    int ret = base_register(m);
    if (ret != 0) {
      delete m;
      return ret;
    }
    m->enabled = true;
  }
  if (m->hmem) {
    totals.hmem_registrations.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> g(d->mu);
    d->hmem_ranges[reinterpret_cast<uintptr_t>(m->iov[0].iov_base)] = m;
  }
  *out = &m->mr;
  return 0;
}

int regv(fid* f, const iovec* iov, size_t count, uint64_t access, uint64_t offset,
         uint64_t requested_key, uint64_t flags, fid_mr** mr, void* context) {
  fi_mr_attr attr{};
  attr.mr_iov = iov;
  attr.iov_count = count;
  attr.access = access;
  attr.offset = offset;
  attr.requested_key = requested_key;
  attr.context = context;
  attr.iface = FI_HMEM_SYSTEM;
  return regattr(f, &attr, flags, mr);
}

int reg(fid* f, const void* buf, size_t len, uint64_t access, uint64_t offset,
        uint64_t requested_key, uint64_t flags, fid_mr** mr, void* context) {
  iovec iov{const_cast<void*>(buf), len};
  return regv(f, &iov, 1, access, offset, requested_key, flags, mr, context);
}

}  // namespace

fi_ops_mr mr_ops = {
    .size = sizeof(fi_ops_mr),
    .reg = reg,
    .regv = regv,
    .regattr = regattr,
};

}  // namespace strict
