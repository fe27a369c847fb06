// Raw libfabric set-up (raw_fabric.hpp): each step one or a few libfabric calls, the first
// refusal returned with the call's name.
#include "common/raw_fabric.hpp"

#include <rdma/fi_cm.h>

#include <cstring>

namespace raw_fabric {

Info make_hints(const Hints& h) {
  Info hints(fi_allocinfo());
  if (!hints) return hints;
  hints->caps = h.caps;
  hints->mode = h.mode;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode = h.mr_mode;
  hints->domain_attr->threading = h.threading;
  hints->domain_attr->data_progress = h.data_progress;
  if (h.provider != nullptr) hints->fabric_attr->prov_name = strdup(h.provider);
  return hints;
}

Outcome get_info(const fi_info* hints, Info* list) {
  fi_info* found = nullptr;
  const int ret = fi_getinfo(kApiVersion, nullptr, nullptr, 0, hints, &found);
  list->reset(found);
  return {ret, "fi_getinfo"};
}

Outcome open_domain(Info info, Domain* d) {
  d->info = std::move(info);
  if (int ret = fi_fabric(d->info->fabric_attr, d->fabric.out(), nullptr); ret != 0) {
    return {ret, "fi_fabric"};
  }
  return {fi_domain(d->fabric.get(), d->info.get(), d->domain.out(), nullptr), "fi_domain"};
}

Outcome open_cq(fid_domain* domain, const CqOptions& o, Fid<fid_cq>* cq) {
  fi_cq_attr attr{};
  attr.format = o.format;
  attr.size = o.size;
  attr.wait_obj = o.wait;
  return {fi_cq_open(domain, &attr, cq->out(), nullptr), "fi_cq_open"};
}

Outcome open_av(fid_domain* domain, Fid<fid_av>* av) {
  fi_av_attr attr{};
  attr.type = FI_AV_TABLE;
  return {fi_av_open(domain, &attr, av->out(), nullptr), "fi_av_open"};
}

Outcome open_endpoint(fid_domain* domain, fi_info* info, fid_cq* tx, fid_cq* rx, fid_av* av,
                      Fid<fid_ep>* ep) {
  if (int ret = fi_endpoint(domain, info, ep->out(), nullptr); ret != 0) {
    return {ret, "fi_endpoint"};
  }
  if (tx == rx) {
    if (int ret = fi_ep_bind(ep->get(), &tx->fid, FI_TRANSMIT | FI_RECV); ret != 0) {
      return {ret, "fi_ep_bind cq"};
    }
  } else {
    if (int ret = fi_ep_bind(ep->get(), &tx->fid, FI_TRANSMIT); ret != 0) {
      return {ret, "fi_ep_bind tx cq"};
    }
    if (int ret = fi_ep_bind(ep->get(), &rx->fid, FI_RECV); ret != 0) {
      return {ret, "fi_ep_bind rx cq"};
    }
  }
  if (int ret = fi_ep_bind(ep->get(), &av->fid, 0); ret != 0) return {ret, "fi_ep_bind av"};
  return {fi_enable(ep->get()), "fi_enable"};
}

Outcome register_memory(fid_domain* domain, const fi_info& info, fid_ep* bind_to, void* buf,
                        size_t len, uint64_t access, uint64_t key, Fid<fid_mr>* mr) {
  if (int ret = fi_mr_reg(domain, buf, len, access, 0, key, 0, mr->out(), nullptr); ret != 0) {
    return {ret, "fi_mr_reg"};
  }
  if (bind_to == nullptr || (info.domain_attr->mr_mode & FI_MR_ENDPOINT) == 0) return {};
  if (int ret = fi_mr_bind(mr->get(), &bind_to->fid, 0); ret != 0) return {ret, "fi_mr_bind"};
  return {fi_mr_enable(mr->get()), "fi_mr_enable"};
}

Outcome get_address(fid_ep* ep, Address* a) {
  a->len = sizeof(a->bytes);
  return {fi_getname(&ep->fid, a->bytes, &a->len), "fi_getname"};
}

Outcome insert_address(fid_av* av, const void* address, fi_addr_t* out) {
  return {fi_av_insert(av, address, 1, out, 0, nullptr) == 1 ? 0 : -FI_EINVAL, "fi_av_insert"};
}

}  // namespace raw_fabric
