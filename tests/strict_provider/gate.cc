// The gate every data operation of the strict provider passes before it reaches the base:
// a dead or overrun domain, CQ data wider than the NIC carries, injected -FI_EAGAIN, the CQ
// overrun count, FI_MR_ENDPOINT checks of the local descriptors (which are translated to the
// base's), the dead-domain trigger and the injected error completion. Then the operation is posted,
// queued for a late post (STRICT_FI_DELAY_POST_US), or for a receive under STRICT_FI_RX_CQ_DATA
// held by this layer.
#include <cstdio>

#include "strict.hpp"

namespace strict {
namespace {

std::string describe(const Mr* m) {
  char buf[160];
  const void* addr = m->iov.empty() ? nullptr : m->iov[0].iov_base;
  const size_t len = m->iov.empty() ? 0 : m->iov[0].iov_len;
  std::snprintf(buf, sizeof(buf), "MR %p (%zu bytes at %p)", static_cast<const void*>(m), len,
                addr);
  return buf;
}

// Translates one descriptor; on failure fills prov_errno and text.
bool translate(const Endpoint* ep, void* desc, void** out, int* prov_errno, std::string* text) {
  if (desc == nullptr) {
    *out = nullptr;
    return true;
  }
  const auto* m = static_cast<const Mr*>(desc);
  if (m->magic != kMrMagic || m->domain != ep->domain) {
    *prov_errno = kErrMrBadDesc;
    *text = "strict provider: a local descriptor that is no memory registration of this domain";
    return false;
  }
  if (ep->domain->enforce_mr_endpoint) {
    if (!m->enabled) {
      *prov_errno = kErrMrUnbound;
      *text = "strict provider: FI_MR_ENDPOINT violation: " + describe(m) +
              " used before fi_mr_bind + fi_mr_enable";
      return false;
    }
    if (m->ep != ep) {
      *prov_errno = kErrMrOtherEp;
      *text = "strict provider: FI_MR_ENDPOINT violation: " + describe(m) +
              " is bound to another endpoint than the one posting";
      return false;
    }
  }
  *out = m->base != nullptr ? fi_mr_desc(m->base) : nullptr;
  return true;
}

// FI_MR_HMEM: a buffer in GPU memory must come with the descriptor of an FI_HMEM_CUDA
// registration covering it (the NIC cannot find GPU pages through host page tables). False, with
// the text, when it does not.
bool hmem_desc_ok(const Domain* d, const iovec& buf, const void* desc, std::string* text) {
  const Mr* gpu = hmem_overlap(d, buf);
  if (gpu == nullptr) return true;
  const auto* m = static_cast<const Mr*>(desc);
  if (m != nullptr && m->magic == kMrMagic && m->hmem && !m->iov.empty()) {
    const auto a = reinterpret_cast<uintptr_t>(buf.iov_base);
    const auto b = reinterpret_cast<uintptr_t>(m->iov[0].iov_base);
    if (a >= b && a - b <= m->iov[0].iov_len && buf.iov_len <= m->iov[0].iov_len - (a - b))
      return true;
  }
  char line[200];
  std::snprintf(line, sizeof(line),
                "strict provider: FI_MR_HMEM violation: %zu bytes at %p in GPU memory (%s) "
                "posted %s",
                buf.iov_len, buf.iov_base, describe(gpu).c_str(),
                desc == nullptr ? "without a descriptor"
                                : "with a descriptor that is no FI_HMEM_CUDA MR covering them");
  *text = line;
  return false;
}

// Every check of one post, in the order a NIC would refuse it (mu held). Returns 0 to post it,
// kConsumed when an error completion stands in for it, or the negative return of the call.
ssize_t admit(Endpoint* ep, const Request& req, void** out, Admission* adm) {
  Domain* d = ep->domain;
  const Config& cfg = d->cfg;
  totals.posts.fetch_add(1, std::memory_order_relaxed);
  if (d->dead.load()) {
    totals.dead_fails.fetch_add(1, std::memory_order_relaxed);
    return -FI_EIO;
  }
  if (d->overrun) {
    totals.overrun_eio.fetch_add(1, std::memory_order_relaxed);
    return -FI_EIO;  // a CQ of this NIC was overrun: it is in error
  }
  if (req.count > kMaxIov) return -FI_EINVAL;
  // Stricter than hardware, which drops the high bits silently: a bug should be loud.
  if (req.has_data && cfg.cq_data_size == 4 && (req.data >> 32) != 0) {
    totals.cq_data_refused.fetch_add(1, std::memory_order_relaxed);
    return -FI_EINVAL;
  }
  const uint64_t post = d->posts.fetch_add(1) + 1;
  if (cfg.eagain_every > 0 && post % cfg.eagain_every == 0) {
    totals.eagain.fetch_add(1, std::memory_order_relaxed);
    return -FI_EAGAIN;
  }
  const std::shared_ptr<Source>& src = req.op == Op::recv ? ep->rx_src : ep->tx_src;
  Cq* cq = src ? src->cq : nullptr;
  if (req.completes && cq != nullptr) {
    if (!cq->expect(src)) {
      cq->unexpect(src);
      return -FI_EOVERRUN;
    }
    adm->expect = src;
  }

  for (size_t i = 0; i < req.count; ++i) {
    int prov_errno = 0;
    std::string text;
    if (translate(ep, req.desc != nullptr ? req.desc[i] : nullptr, &out[i], &prov_errno, &text))
      continue;
    totals.mr_rejects.fetch_add(1, std::memory_order_relaxed);
    // Strict hardware reports a protection error on the work request, not at the doorbell.
    if (!req.completes || cq == nullptr) {
      refused(*adm, req.ctx);
      return -FI_EINVAL;
    }
    cq->push_error(src, req.ctx, completion_flags(req.op), req.op == Op::recv, FI_EACCES,
                   prov_errno, std::move(text));
    return kConsumed;
  }

  if (d->hmem && req.iov != nullptr && !d->hmem_ranges.empty()) {
    bool gpu_send = false;  // a send whose payload the provider reads from GPU memory
    for (size_t i = 0; i < req.count; ++i) {
      std::string text;
      gpu_send = gpu_send || (req.op == Op::send && hmem_overlap(d, req.iov[i]) != nullptr);
      if (req.inject && hmem_overlap(d, req.iov[i]) != nullptr) {
        totals.hmem_op_rejects.fetch_add(1, std::memory_order_relaxed);
        refused(*adm, req.ctx);
        return -FI_EINVAL;  // the CPU would read GPU memory
      }
      if (hmem_desc_ok(d, req.iov[i], req.desc != nullptr ? req.desc[i] : nullptr, &text))
        continue;
      totals.hmem_op_rejects.fetch_add(1, std::memory_order_relaxed);
      if (!req.completes || cq == nullptr) {
        refused(*adm, req.ctx);
        return -FI_EINVAL;
      }
      cq->push_error(src, req.ctx, completion_flags(req.op), req.op == Op::recv, FI_EACCES,
                     kErrMrHmem, std::move(text));
      return kConsumed;
    }
    if (gpu_send) totals.hmem_sends.fetch_add(1, std::memory_order_relaxed);
  }

  adm->domain = d;
  const uint64_t n = d->ops.fetch_add(1) + 1;
  if (cfg.dead_at > 0 && n > cfg.dead_at) {
    refused(*adm, req.ctx);
    d->kill();
    totals.dead_fails.fetch_add(1, std::memory_order_relaxed);
    return -FI_EIO;
  }
  if (req.completes && cfg.error_at > 0 && (cfg.error_ops & static_cast<unsigned>(req.op)) != 0 &&
      cq != nullptr) {
    const uint64_t k = d->error_ops.fetch_add(1) + 1;
    adm->counted_error = true;
    if (k == cfg.error_at) {
      char text[160];
      std::snprintf(text, sizeof(text),
                    "strict provider: injected error completion on %s #%llu (STRICT_FI_ERROR_AT)",
                    op_name(req.op), static_cast<unsigned long long>(k));
      totals.errors.fetch_add(1, std::memory_order_relaxed);
      cq->push_error(src, req.ctx, completion_flags(req.op), req.op == Op::recv, FI_EIO,
                     kErrInjected, text);
      return kConsumed;
    }
  }
  if (req.completes && cq != nullptr && cq->tracking) {
    cq->track(req.ctx, completion_flags(req.op));
    adm->tracked = cq;
  }
  if (cfg.scribble && req.completes && req.ctx != nullptr) {
    scribble(req.ctx);
    ep->in_flight.insert(req.ctx);
    adm->scribbled = ep;
  }
  return 0;
}

}  // namespace

const Mr* hmem_overlap(const Domain* d, const iovec& buf) {
  if (d->hmem_ranges.empty() || buf.iov_len == 0) return nullptr;
  const auto a = reinterpret_cast<uintptr_t>(buf.iov_base);
  auto it = d->hmem_ranges.upper_bound(a + buf.iov_len - 1);
  if (it == d->hmem_ranges.begin()) return nullptr;
  --it;
  const Mr* m = it->second;
  return it->first + m->iov[0].iov_len > a ? m : nullptr;
}

bool touches_hmem(Domain* d, const iovec& buf) {
  std::lock_guard<std::mutex> g(d->mu);
  if (hmem_overlap(d, buf) == nullptr) return false;
  totals.hmem_op_rejects.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void scribble(void* ctx) {
  static_cast<fi_context2*>(ctx)->internal[7] = reinterpret_cast<void*>(0x5354524943544658ull);
}

void refused(const Admission& adm, void* ctx) {
  if (adm.tracked != nullptr) adm.tracked->untrack(ctx);
  if (adm.scribbled != nullptr) {
    auto it = adm.scribbled->in_flight.find(ctx);
    if (it != adm.scribbled->in_flight.end()) adm.scribbled->in_flight.erase(it);
  }
  if (adm.expect) adm.expect->cq->unexpect(adm.expect);
  if (adm.domain == nullptr) return;
  adm.domain->ops.fetch_sub(1);
  if (adm.counted_error) adm.domain->error_ops.fetch_sub(1);
}

ssize_t submit(fid_ep* e, const Request& req, PostFn post) {
  auto* ep = reinterpret_cast<Endpoint*>(e);
  Domain* d = ep->domain;
  std::lock_guard<std::mutex> g(d->mu);
  if (d->delay_post_us > 0) flush_posts(d);  // later posts drive the earlier ones out
  void* base_desc[kMaxIov] = {};
  Admission adm;
  ssize_t r = admit(ep, req, base_desc, &adm);
  if (r == kConsumed) return 0;
  if (r < 0) return r;
  if (d->delay_post_us > 0) {
    defer_post(ep, req, base_desc, std::move(post), std::move(adm));
    flush_posts(d);
    d->pump_cv.notify_one();
    return 0;
  }
  ssize_t ret = post(ep->base, base_desc);
  if (ret != 0) refused(adm, req.ctx);
  return ret;
}

ssize_t submit_recv(fid_ep* e, const Request& req, const iovec* iov, size_t count, PostFn post) {
  auto* ep = reinterpret_cast<Endpoint*>(e);
  Domain* d = ep->domain;
  std::lock_guard<std::mutex> g(d->mu);
  if (d->delay_post_us > 0) flush_posts(d);
  void* base_desc[kMaxIov] = {};
  Admission adm;
  ssize_t r = admit(ep, req, base_desc, &adm);
  if (r == kConsumed) return 0;
  if (r < 0) return r;
  // Under FI_RX_CQ_DATA the base never sees the application's receives.
  ssize_t ret = d->cfg.rx_cq_data ? rx_post(ep, req.ctx, iov, count) : post(ep->base, base_desc);
  if (ret != 0) refused(adm, req.ctx);
  return ret;
}

}  // namespace strict
