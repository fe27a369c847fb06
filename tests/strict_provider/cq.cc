// Completion queue of the strict provider: the base CQ's entries pass through untouched (the
// caller's op_context included); error completions this layer makes are delivered first, with
// their text in err_data for fi_cq_strerror. After a dead domain nothing more comes from the base.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "strict.hpp"

namespace strict {
namespace {

int cq_close(fid* f) {
  auto* cq = reinterpret_cast<Cq*>(f);
  {
    std::lock_guard<std::mutex> g(cq->domain->lock);
    auto& v = cq->domain->cqs;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (*it == cq) {
        v.erase(it);
        break;
      }
    }
  }
  int ret = fi_close(&cq->base->fid);
  if (ret != 0) {
    std::lock_guard<std::mutex> g(cq->domain->lock);
    cq->domain->cqs.push_back(cq);
    return ret;
  }
  delete cq;
  return 0;
}

int cq_control(fid* f, int command, void* arg) {
  // FI_GETWAIT and friends answer for the base CQ, which is where completions wait.
  return fi_control(&reinterpret_cast<Cq*>(f)->base->fid, command, arg);
}

fi_ops cq_fid_ops = {
    .size = sizeof(fi_ops),
    .close = cq_close,
    .bind = no_bind,
    .control = cq_control,
    .ops_open = no_ops_open,
    .tostr = no_tostr,
    .ops_set = no_ops_set,
};

// Before reading the base: injected errors first, nothing at all from a dead domain.
ssize_t before_read(Cq* cq) {
  if (cq->domain->dead.load()) {
    std::lock_guard<std::mutex> g(cq->lock);
    return cq->injected.empty() ? -FI_EAGAIN : -FI_EAVAIL;
  }
  bool pending;
  {
    std::lock_guard<std::mutex> g(cq->lock);
    pending = !cq->injected.empty();
  }
  if (!pending) return 0;
  // Manual-progress bases advance only when their CQ is read: keep them moving while the
  // caller drains our errors, without taking any of their entries.
  (void)fi_cq_read(cq->base, nullptr, 0);
  return -FI_EAVAIL;
}

void after_read(Cq* cq, const void* buf, ssize_t n) {
  if (n <= 0 || !cq->tracking) return;
  const auto* p = static_cast<const uint8_t*>(buf);
  for (ssize_t i = 0; i < n; ++i) {
    void* ctx = nullptr;
    std::memcpy(&ctx, p + static_cast<size_t>(i) * cq->entry_size,
                sizeof(ctx));  // op_context leads every format
    cq->untrack(ctx);
  }
}

ssize_t cq_read(fid_cq* c, void* buf, size_t count) {
  auto* cq = reinterpret_cast<Cq*>(c);
  if (ssize_t r = before_read(cq); r != 0) return r;
  ssize_t n = fi_cq_read(cq->base, buf, count);
  after_read(cq, buf, n);
  return n;
}

ssize_t cq_readfrom(fid_cq* c, void* buf, size_t count, fi_addr_t* src) {
  auto* cq = reinterpret_cast<Cq*>(c);
  if (ssize_t r = before_read(cq); r != 0) return r;
  ssize_t n = fi_cq_readfrom(cq->base, buf, count, src);
  after_read(cq, buf, n);
  return n;
}

ssize_t cq_sread(fid_cq* c, void* buf, size_t count, const void* cond, int timeout) {
  auto* cq = reinterpret_cast<Cq*>(c);
  if (ssize_t r = before_read(cq); r != 0) return r;
  ssize_t n = fi_cq_sread(cq->base, buf, count, cond, timeout);
  after_read(cq, buf, n);
  return n;
}

ssize_t cq_sreadfrom(fid_cq* c, void* buf, size_t count, fi_addr_t* src, const void* cond,
                     int timeout) {
  auto* cq = reinterpret_cast<Cq*>(c);
  if (ssize_t r = before_read(cq); r != 0) return r;
  ssize_t n = fi_cq_sreadfrom(cq->base, buf, count, src, cond, timeout);
  after_read(cq, buf, n);
  return n;
}

ssize_t cq_readerr(fid_cq* c, fi_cq_err_entry* buf, uint64_t flags) {
  auto* cq = reinterpret_cast<Cq*>(c);
  {
    std::lock_guard<std::mutex> g(cq->lock);
    if (!cq->injected.empty()) {
      InjectedError e = std::move(cq->injected.front());
      cq->injected.pop_front();
      cq->current_text = std::move(e.text);
      // The caller's err_data buffer (err_data_size > 0) gets a copy; otherwise ours is lent.
      void* user_data = buf->err_data;
      size_t user_size = buf->err_data_size;
      *buf = e.entry;
      if (user_size > 0 && user_data != nullptr) {
        size_t n = std::min(user_size, cq->current_text.size() + 1);
        std::memcpy(user_data, cq->current_text.c_str(), n);
        static_cast<char*>(user_data)[n - 1] = '\0';
        buf->err_data = user_data;
        buf->err_data_size = n;
      } else {
        buf->err_data = cq->current_text.data();
        buf->err_data_size = cq->current_text.size() + 1;
      }
      return 1;
    }
  }
  if (cq->domain->dead.load()) return -FI_EAGAIN;
  ssize_t n = fi_cq_readerr(cq->base, buf, flags);
  if (n > 0 && cq->tracking) cq->untrack(buf->op_context);
  return n;
}

int cq_signal(fid_cq* c) { return fi_cq_signal(reinterpret_cast<Cq*>(c)->base); }

const char* cq_strerror(fid_cq* c, int prov_errno, const void* err_data, char* buf, size_t len) {
  auto* cq = reinterpret_cast<Cq*>(c);
  if (!is_strict_error(prov_errno)) {
    return fi_cq_strerror(cq->base, prov_errno, err_data, buf, len);
  }
  const char* text =
      err_data != nullptr ? static_cast<const char*>(err_data) : "strict provider: injected error";
  if (buf != nullptr && len > 0) {
    std::snprintf(buf, len, "%s", text);
    return buf;
  }
  return text;
}

fi_ops_cq cq_ops = {
    .size = sizeof(fi_ops_cq),
    .read = cq_read,
    .readfrom = cq_readfrom,
    .readerr = cq_readerr,
    .sread = cq_sread,
    .sreadfrom = cq_sreadfrom,
    .signal = cq_signal,
    .strerror = cq_strerror,
};

size_t entry_size(fi_cq_format format) {
  switch (format) {
    case FI_CQ_FORMAT_MSG:
      return sizeof(fi_cq_msg_entry);
    case FI_CQ_FORMAT_DATA:
      return sizeof(fi_cq_data_entry);
    case FI_CQ_FORMAT_TAGGED:
      return sizeof(fi_cq_tagged_entry);
    default:
      return sizeof(fi_cq_entry);
  }
}

}  // namespace

Cq* as_cq(fid* f) {
  return f != nullptr && f->fclass == FI_CLASS_CQ && f->ops == &cq_fid_ops
             ? reinterpret_cast<Cq*>(f)
             : nullptr;
}

int open_cq(Domain* d, fi_cq_attr* attr, fid_cq** out, void* context) {
  fi_cq_attr battr = *attr;
  // The entry size must be known to find each entry's op_context: unspecified means context.
  if (battr.format == FI_CQ_FORMAT_UNSPEC) battr.format = FI_CQ_FORMAT_CONTEXT;
  auto* cq = new Cq();
  cq->domain = d;
  cq->entry_size = entry_size(battr.format);
  cq->tracking = d->cfg.dead_at > 0;
  int ret = fi_cq_open(d->base, &battr, &cq->base, context);
  if (ret != 0) {
    delete cq;
    return ret;
  }
  cq->cq.fid.fclass = FI_CLASS_CQ;
  cq->cq.fid.context = context;
  cq->cq.fid.ops = &cq_fid_ops;
  cq->cq.ops = &cq_ops;
  {
    std::lock_guard<std::mutex> g(d->lock);
    d->cqs.push_back(cq);
  }
  *out = &cq->cq;
  return 0;
}

void Cq::push_error(void* ctx, uint64_t flags, int err, int prov_errno, std::string text) {
  InjectedError e{};
  e.entry.op_context = ctx;
  e.entry.flags = flags;
  e.entry.err = err;
  e.entry.prov_errno = prov_errno;
  e.text = std::move(text);
  std::lock_guard<std::mutex> g(lock);
  injected.push_back(std::move(e));
}

void Cq::track(void* ctx, uint64_t flags) {
  std::lock_guard<std::mutex> g(lock);
  outstanding.emplace(ctx, flags);
}

void Cq::untrack(void* ctx) {
  std::lock_guard<std::mutex> g(lock);
  auto it = outstanding.find(ctx);
  if (it != outstanding.end()) outstanding.erase(it);
}

void Cq::fail_outstanding() {
  std::lock_guard<std::mutex> g(lock);
  for (const auto& [ctx, flags] : outstanding) {
    InjectedError e{};
    e.entry.op_context = ctx;
    e.entry.flags = flags;
    e.entry.err = FI_EIO;
    e.entry.prov_errno = kErrDeadDomain;
    e.text =
        "strict provider: the domain died (STRICT_FI_DEAD_DOMAIN_AT) with this operation "
        "outstanding";
    injected.push_back(std::move(e));
    totals.dead_fails.fetch_add(1, std::memory_order_relaxed);
  }
  outstanding.clear();
}

}  // namespace strict
