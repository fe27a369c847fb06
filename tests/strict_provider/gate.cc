// The gate every data operation of the strict provider passes before it reaches the base:
// a dead domain, injected -FI_EAGAIN, FI_MR_ENDPOINT checks of the local descriptors (which are
// translated to the base's), the dead-domain trigger and the injected error completion.
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

}  // namespace

ssize_t admit(Endpoint* ep, Op op, void* ctx, bool completes, void* const* desc, void** out,
              size_t count, Admission* adm) {
  Domain* d = ep->domain;
  const Config& cfg = d->cfg;
  totals.posts.fetch_add(1, std::memory_order_relaxed);
  if (d->dead.load()) {
    totals.dead_fails.fetch_add(1, std::memory_order_relaxed);
    return -FI_EIO;
  }
  if (count > kMaxIov) return -FI_EINVAL;
  const uint64_t post = d->posts.fetch_add(1) + 1;
  if (cfg.eagain_every > 0 && post % cfg.eagain_every == 0) {
    totals.eagain.fetch_add(1, std::memory_order_relaxed);
    return -FI_EAGAIN;
  }
  Cq* cq = op == Op::recv ? ep->rx_cq : ep->tx_cq;

  for (size_t i = 0; i < count; ++i) {
    int prov_errno = 0;
    std::string text;
    if (translate(ep, desc != nullptr ? desc[i] : nullptr, &out[i], &prov_errno, &text)) continue;
    totals.mr_rejects.fetch_add(1, std::memory_order_relaxed);
    // Strict hardware reports a protection error on the work request, not at the doorbell.
    if (!completes || cq == nullptr) return -FI_EINVAL;
    cq->push_error(ctx, completion_flags(op), FI_EACCES, prov_errno, std::move(text));
    return kConsumed;
  }

  adm->domain = d;
  const uint64_t n = d->ops.fetch_add(1) + 1;
  if (cfg.dead_at > 0 && n > cfg.dead_at) {
    d->kill();
    totals.dead_fails.fetch_add(1, std::memory_order_relaxed);
    return -FI_EIO;
  }
  if (completes && cfg.error_at > 0 && (cfg.error_ops & static_cast<unsigned>(op)) != 0 &&
      cq != nullptr) {
    const uint64_t k = d->error_ops.fetch_add(1) + 1;
    adm->counted_error = true;
    if (k == cfg.error_at) {
      char text[160];
      std::snprintf(text, sizeof(text),
                    "strict provider: injected error completion on %s #%llu (STRICT_FI_ERROR_AT)",
                    op_name(op), static_cast<unsigned long long>(k));
      totals.errors.fetch_add(1, std::memory_order_relaxed);
      cq->push_error(ctx, completion_flags(op), FI_EIO, kErrInjected, text);
      return kConsumed;
    }
  }
  if (completes && cq != nullptr && cq->tracking) {
    cq->track(ctx, completion_flags(op));
    adm->tracked = cq;
  }
  return 0;
}

void refused(const Admission& adm, void* ctx) {
  if (adm.tracked != nullptr) adm.tracked->untrack(ctx);
  if (adm.domain == nullptr) return;
  adm.domain->ops.fetch_sub(1);
  if (adm.counted_error) adm.domain->error_ops.fetch_sub(1);
}

}  // namespace strict
