// Fabric and domain of the strict provider: each opens the base provider's object and hands out a
// wrapper whose operations create the other wrappers (CQ, AV, endpoint, MR).
#include <cstring>

#include "strict.hpp"

namespace strict {

int no_bind(fid*, fid*, uint64_t) { return -FI_ENOSYS; }
int no_control(fid*, int, void*) { return -FI_ENOSYS; }
int no_ops_open(fid*, const char*, uint64_t, void**, void*) { return -FI_ENOSYS; }
int no_tostr(const fid*, char*, size_t) { return -FI_ENOSYS; }
int no_ops_set(fid*, const char*, uint64_t, void*, void*) { return -FI_ENOSYS; }

namespace {

// ---- fabric ----

int fabric_close(fid* f) {
  auto* fab = reinterpret_cast<Fabric*>(f);
  int ret = fi_close(&fab->base->fid);
  if (ret != 0) return ret;
  delete fab;
  return 0;
}

fi_ops fabric_fid_ops = {
    .size = sizeof(fi_ops),
    .close = fabric_close,
    .bind = no_bind,
    .control = no_control,
    .ops_open = no_ops_open,
    .tostr = no_tostr,
    .ops_set = no_ops_set,
};

int fabric_domain(fid_fabric* f, fi_info* info, fid_domain** dom, void* context) {
  return open_domain(reinterpret_cast<Fabric*>(f), info, dom, context);
}

int fabric_domain2(fid_fabric* f, fi_info* info, fid_domain** dom, uint64_t flags, void* context) {
  if (flags != 0) return -FI_EBADFLAGS;
  return fabric_domain(f, info, dom, context);
}

int fabric_passive_ep(fid_fabric*, fi_info*, fid_pep**, void*) {
  return -FI_ENOSYS;  // reliable datagram endpoints only
}

// Event queues and wait sets carry nothing this layer checks: the base's objects are handed out
// as they are, and endpoint binds pass them through.
int fabric_eq_open(fid_fabric* f, fi_eq_attr* attr, fid_eq** eq, void* context) {
  return fi_eq_open(reinterpret_cast<Fabric*>(f)->base, attr, eq, context);
}

int fabric_wait_open(fid_fabric* f, fi_wait_attr* attr, fid_wait** waitset) {
  return fi_wait_open(reinterpret_cast<Fabric*>(f)->base, attr, waitset);
}

// A strict CQ reads several base CQs (one per endpoint) and holds entries of its own, so there
// is no one wait object to block on: callers are told to poll.
int fabric_trywait(fid_fabric* f, fid** fids, int count) {
  for (int i = 0; i < count; ++i)
    if (as_cq(fids[i]) != nullptr) return -FI_EAGAIN;
  return fi_trywait(reinterpret_cast<Fabric*>(f)->base, fids, count);
}

fi_ops_fabric fabric_ops = {
    .size = sizeof(fi_ops_fabric),
    .domain = fabric_domain,
    .passive_ep = fabric_passive_ep,
    .eq_open = fabric_eq_open,
    .wait_open = fabric_wait_open,
    .trywait = fabric_trywait,
    .domain2 = fabric_domain2,
};

// ---- domain ----

int domain_close(fid* f) {
  auto* d = reinterpret_cast<Domain*>(f);
  stop_pump(d);
  int ret = fi_close(&d->base->fid);
  if (ret != 0) {
    d->pump_stop = false;  // still open (-FI_EBUSY): keep delivering
    start_pump(d);
    return ret;
  }
  delete d;
  return 0;
}

int domain_bind(fid* f, fid* bfid, uint64_t flags) {
  return fi_domain_bind(reinterpret_cast<Domain*>(f)->base, bfid, flags);
}

fi_ops domain_fid_ops = {
    .size = sizeof(fi_ops),
    .close = domain_close,
    .bind = domain_bind,
    .control = no_control,
    .ops_open = no_ops_open,
    .tostr = no_tostr,
    .ops_set = no_ops_set,
};

int domain_av_open(fid_domain* d, fi_av_attr* attr, fid_av** av, void* context) {
  return open_av(reinterpret_cast<Domain*>(d), attr, av, context);
}

int domain_cq_open(fid_domain* d, fi_cq_attr* attr, fid_cq** cq, void* context) {
  return open_cq(reinterpret_cast<Domain*>(d), attr, cq, context);
}

int domain_endpoint(fid_domain* d, fi_info* info, fid_ep** ep, void* context) {
  return open_endpoint(reinterpret_cast<Domain*>(d), info, ep, context);
}

int domain_endpoint2(fid_domain* d, fi_info* info, fid_ep** ep, uint64_t flags, void* context) {
  if (flags != 0) return -FI_EBADFLAGS;
  return domain_endpoint(d, info, ep, context);
}

int domain_scalable_ep(fid_domain*, fi_info*, fid_ep**, void*) { return -FI_ENOSYS; }

// Counters are handed out from the base unwrapped (libxport uses none; binds pass through).
int domain_cntr_open(fid_domain* d, fi_cntr_attr* attr, fid_cntr** cntr, void* context) {
  return fi_cntr_open(reinterpret_cast<Domain*>(d)->base, attr, cntr, context);
}

int domain_poll_open(fid_domain*, fi_poll_attr*, fid_poll**) { return -FI_ENOSYS; }
int domain_stx_ctx(fid_domain*, fi_tx_attr*, fid_stx**, void*) { return -FI_ENOSYS; }
int domain_srx_ctx(fid_domain*, fi_rx_attr*, fid_ep**, void*) { return -FI_ENOSYS; }

int domain_query_atomic(fid_domain* d, fi_datatype datatype, fi_op op, fi_atomic_attr* attr,
                        uint64_t flags) {
  auto* dom = reinterpret_cast<Domain*>(d);
  if (dom->cfg.hide_atomic) return -FI_EOPNOTSUPP;
  return fi_query_atomic(dom->base, datatype, op, attr, flags);
}

int domain_query_collective(fid_domain*, fi_collective_op, fi_collective_attr*, uint64_t) {
  return -FI_ENOSYS;
}

fi_ops_domain domain_ops = {
    .size = sizeof(fi_ops_domain),
    .av_open = domain_av_open,
    .cq_open = domain_cq_open,
    .endpoint = domain_endpoint,
    .scalable_ep = domain_scalable_ep,
    .cntr_open = domain_cntr_open,
    .poll_open = domain_poll_open,
    .stx_ctx = domain_stx_ctx,
    .srx_ctx = domain_srx_ctx,
    .query_atomic = domain_query_atomic,
    .query_collective = domain_query_collective,
    .endpoint2 = domain_endpoint2,
};

}  // namespace

int open_fabric(fi_fabric_attr* attr, fid_fabric** out, void* context) {
  // The base is named by the environment, as in getinfo: the fabric attributes only say "strict".
  const Config cfg = Config::from_env();
  fi_fabric_attr battr = *attr;
  battr.prov_name = const_cast<char*>(cfg.base.c_str());
  battr.fabric = nullptr;
  auto* fab = new Fabric();
  fab->base_name = cfg.base;
  int ret = fi_fabric(&battr, &fab->base, context);
  if (ret != 0) {
    delete fab;
    return ret;
  }
  fab->fabric.fid.fclass = FI_CLASS_FABRIC;
  fab->fabric.fid.context = context;
  fab->fabric.fid.ops = &fabric_fid_ops;
  fab->fabric.ops = &fabric_ops;
  fab->fabric.api_version = attr->api_version;
  *out = &fab->fabric;
  return 0;
}

int open_domain(Fabric* fab, fi_info* info, fid_domain** out, void* context) {
  fi_info* binfo = to_base_info(info, fab->base_name);
  if (binfo == nullptr) return -FI_ENOMEM;
  auto* d = new Domain();
  d->fabric = fab;
  d->cfg = Config::from_env();
  d->name = info->domain_attr->name != nullptr ? info->domain_attr->name : "";
  d->enforce_mr_endpoint = (info->domain_attr->mr_mode & FI_MR_ENDPOINT) != 0;
  d->base_prov_key = (info->domain_attr->mr_mode & FI_MR_PROV_KEY) != 0;
  d->base_mr_local = (info->domain_attr->mr_mode & FI_MR_LOCAL) != 0;
  d->source = (info->caps & FI_SOURCE) != 0;
  d->hmem = (info->caps & FI_HMEM) != 0;
  if (d->cfg.delay_domain.empty() || d->cfg.delay_domain == d->name) {
    d->delay_us = d->cfg.delay_us;
    d->delay_post_us = d->cfg.delay_post_us;
  }
  d->auto_progress = info->domain_attr->data_progress == FI_PROGRESS_AUTO;
  d->rng.seed(domain_seed(d->cfg, d->name));
  int ret = fi_domain(fab->base, binfo, &d->base, context);
  fi_freeinfo(binfo);
  if (ret != 0) {
    delete d;
    return ret;
  }
  d->domain.fid.fclass = FI_CLASS_DOMAIN;
  d->domain.fid.context = context;
  d->domain.fid.ops = &domain_fid_ops;
  d->domain.ops = &domain_ops;
  d->domain.mr = &mr_ops;
  start_pump(d);
  *out = &d->domain;
  return 0;
}

void Domain::kill() {
  if (dead.exchange(true)) return;
  // A dead NIC reports nothing more: what was held back goes too, and every context still
  // outstanding (held completions included) completes in error instead.
  for (Cq* cq : cqs) {
    std::erase_if(cq->staged, [](const Entry& e) { return e.admitted; });
    cq->err_seq = 0;
  }
  for (Endpoint* ep : eps) {
    rx_clear(ep, false);
    drop_posts(ep, false);
  }
  for (Cq* cq : cqs) cq->fail_outstanding();
}

}  // namespace strict
