// Completion queue of the strict provider, as the application sees it: entries come from the
// endpoints' own base CQs (completion_order.cc decides which held entry leaves next) and are
// written in the application's format with the caller's op_context untouched. Every error entry
// carries its text in err_data for fi_cq_strerror. After a dead domain nothing more comes from the
// base; after an overrun (STRICT_FI_CQ_OVERRUN) every read fails with -FI_EOVERRUN.
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "strict.hpp"

namespace strict {
namespace {

int cq_close(fid* f) {
  auto* cq = reinterpret_cast<Cq*>(f);
  Domain* d = cq->domain;
  {
    std::lock_guard<std::mutex> g(d->mu);
    if (!cq->sources.empty()) return -FI_EBUSY;  // endpoints are still bound to it
    std::erase(d->cqs, cq);
  }
  delete cq;
  return 0;
}

// There is no one base wait object behind a strict CQ (each endpoint has its own base CQ).
int cq_control(fid*, int, void*) { return -FI_ENOSYS; }

fi_ops cq_fid_ops = {
    .size = sizeof(fi_ops),
    .close = cq_close,
    .bind = no_bind,
    .control = cq_control,
    .ops_open = no_ops_open,
    .tostr = no_tostr,
    .ops_set = no_ops_set,
};

// A remote write with data on a 4-byte NIC: its initiator (this provider) carried the write's
// length in the high word, because the bases report len = 0 for remote writes where hardware
// (verbs' byte_len, efa) reports the bytes written.
bool narrow_remote_write(const Cq* cq, const fi_cq_err_entry& e) {
  return cq->domain->cfg.cq_data_size == 4 && (e.flags & FI_REMOTE_CQ_DATA) &&
         (e.flags & FI_REMOTE_WRITE);
}

// The CQ data the target may see: the low 32 bits only on a 4-byte NIC, whatever the base
// carried.
uint64_t visible_data(const Cq* cq, const fi_cq_err_entry& e) {
  if (cq->domain->cfg.cq_data_size != 4) return e.data;
  if ((e.flags & FI_REMOTE_CQ_DATA) && (e.data >> 32) != 0 && !narrow_remote_write(cq, e))
    totals.cq_data_masked.fetch_add(1, std::memory_order_relaxed);
  return e.data & 0xffffffffull;
}

// The length the target sees: a 4-byte NIC reports a remote write's bytes as hardware does.
size_t visible_len(const Cq* cq, const fi_cq_err_entry& e) {
  if (narrow_remote_write(cq, e) && e.len == 0) return static_cast<size_t>(e.data >> 32);
  return e.len;
}

void write_entry(const Cq* cq, void* buf, size_t i, const Entry& en) {
  auto* out = static_cast<uint8_t*>(buf) + i * cq->entry_size;
  const fi_cq_err_entry& e = en.e;
  switch (cq->format) {
    case FI_CQ_FORMAT_MSG: {
      fi_cq_msg_entry m{e.op_context, e.flags, visible_len(cq, e)};
      std::memcpy(out, &m, sizeof(m));
      break;
    }
    case FI_CQ_FORMAT_DATA: {
      fi_cq_data_entry m{e.op_context, e.flags, visible_len(cq, e), e.buf, visible_data(cq, e)};
      std::memcpy(out, &m, sizeof(m));
      break;
    }
    case FI_CQ_FORMAT_TAGGED: {
      fi_cq_tagged_entry m{e.op_context, e.flags, visible_len(cq, e), e.buf,
                           visible_data(cq, e), 0};
      std::memcpy(out, &m, sizeof(m));
      break;
    }
    default: {
      fi_cq_entry m{e.op_context};
      std::memcpy(out, &m, sizeof(m));
      break;
    }
  }
}

// Fills the caller's error entry; the text goes into the caller's err_data buffer when it gave
// one (err_data_size > 0), otherwise ours is lent until the next fi_cq_readerr.
void write_error(Cq* cq, fi_cq_err_entry* buf, const fi_cq_err_entry& e, std::string text) {
  cq->current_text = std::move(text);
  void* user_data = buf->err_data;
  const size_t user_size = buf->err_data_size;
  *buf = e;
  buf->data = visible_data(cq, e);
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
}

// Drives the domain (due delayed posts, the endpoints' base CQs) unless it is dead or overrun.
void progress(Cq* cq) {
  Domain* d = cq->domain;
  if (d->dead.load() || cq->overrun) return;
  if (d->delay_post_us > 0) flush_posts(d);
  cq->pull();
}

ssize_t read_common(Cq* cq, void* buf, size_t count, fi_addr_t* src) {
  std::lock_guard<std::mutex> g(cq->domain->mu);
  // STRICT_FI_CQ_FAIL_AT: a device error takes the CQ down (a read that fails, not an error
  // entry); what was outstanding on it is never reported.
  const Config& cfg = cq->domain->cfg;
  if (cfg.cq_fail_at != 0 && (cfg.fault_domain.empty() || cfg.fault_domain == cq->domain->name) &&
      ++cq->reads >= cfg.cq_fail_at) {
    cq->failed = true;
  }
  if (cq->failed) return -FI_EIO;
  progress(cq);
  if (cq->overrun) return -FI_EOVERRUN;
  if (cq->err_seq != 0) return -FI_EAVAIL;  // announced and not yet taken with fi_cq_readerr
  if (count == 0) return cq->staged.empty() ? -FI_EAGAIN : 0;
  const uint64_t now = now_ns();
  size_t n = 0;
  while (n < count) {
    const long i = cq->choose(now, false);
    if (i < 0) break;
    if (cq->staged[static_cast<size_t>(i)].error) {
      if (n > 0) break;
      cq->err_seq = cq->staged[static_cast<size_t>(i)].seq;
      return -FI_EAVAIL;
    }
    Entry e = cq->take_out(static_cast<size_t>(i));
    write_entry(cq, buf, n, e);
    if (src != nullptr) src[n] = e.src;
    ++n;
  }
  return n > 0 ? static_cast<ssize_t>(n) : -FI_EAGAIN;
}

ssize_t sread_common(Cq* cq, void* buf, size_t count, fi_addr_t* src, int timeout) {
  // No wait object to block on: poll (without holding the domain) until something comes, the
  // time is up, or fi_cq_signal wakes the caller, as libfabric's util CQ answers.
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    ssize_t r = read_common(cq, buf, count, src);
    if (r != -FI_EAGAIN) return r;
    if (cq->signaled.exchange(false)) return -FI_ECANCELED;
    if (timeout >= 0 &&
        std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(timeout))
      return -FI_ETIMEDOUT;
    sched_yield();
  }
}

ssize_t cq_read(fid_cq* c, void* buf, size_t count) {
  return read_common(reinterpret_cast<Cq*>(c), buf, count, nullptr);
}

ssize_t cq_readfrom(fid_cq* c, void* buf, size_t count, fi_addr_t* src) {
  return read_common(reinterpret_cast<Cq*>(c), buf, count, src);
}

ssize_t cq_sread(fid_cq* c, void* buf, size_t count, const void*, int timeout) {
  return sread_common(reinterpret_cast<Cq*>(c), buf, count, nullptr, timeout);
}

ssize_t cq_sreadfrom(fid_cq* c, void* buf, size_t count, fi_addr_t* src, const void*, int timeout) {
  return sread_common(reinterpret_cast<Cq*>(c), buf, count, src, timeout);
}

ssize_t cq_readerr(fid_cq* c, fi_cq_err_entry* buf, uint64_t) {
  auto* cq = reinterpret_cast<Cq*>(c);
  std::lock_guard<std::mutex> g(cq->domain->mu);
  if (cq->overrun) {
    // The overrun is reported once; the CQ stays unusable.
    if (cq->overrun_reported) return -FI_EOVERRUN;
    cq->overrun_reported = true;
    fi_cq_err_entry e{};
    e.err = FI_EOVERRUN;
    e.prov_errno = kErrOverrun;
    write_error(cq, buf, e, cq->overrun_text);
    return 1;
  }
  long i = -1;
  if (cq->err_seq != 0) {
    for (size_t k = 0; k < cq->staged.size(); ++k)
      if (cq->staged[k].seq == cq->err_seq) i = static_cast<long>(k);
    cq->err_seq = 0;
  }
  if (i < 0) i = cq->choose(now_ns(), true);
  if (i < 0) return -FI_EAGAIN;
  Entry e = cq->take_out(static_cast<size_t>(i));
  write_error(cq, buf, e.e, std::move(e.text));
  return 1;
}

int cq_signal(fid_cq* c) {
  reinterpret_cast<Cq*>(c)->signaled.store(true);
  return 0;
}

const char* cq_strerror(fid_cq* c, int prov_errno, const void* err_data, char* buf, size_t len) {
  auto* cq = reinterpret_cast<Cq*>(c);
  // Every error entry this CQ hands out carries its text (the base's own strerror included).
  const char* text = static_cast<const char*>(err_data);
  if (text == nullptr && is_strict_error(prov_errno)) text = "strict provider: injected error";
  if (text != nullptr) {
    if (buf == nullptr || len == 0) return text;
    std::snprintf(buf, len, "%s", text);
    return buf;
  }
  // A base error whose text the caller did not keep: any endpoint's base CQ can say.
  std::lock_guard<std::mutex> g(cq->domain->mu);
  if (cq->sources.empty()) return fi_strerror(prov_errno);
  return fi_cq_strerror(cq->sources.front()->base, prov_errno, nullptr, buf, len);
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
  switch (attr->wait_obj) {
    case FI_WAIT_NONE:
    case FI_WAIT_UNSPEC:
    case FI_WAIT_YIELD:
      break;  // fi_cq_sread polls
    default:
      return -FI_ENOSYS;  // no file descriptor or wait set to hand out
  }
  switch (attr->format) {
    case FI_CQ_FORMAT_UNSPEC:
    case FI_CQ_FORMAT_CONTEXT:
    case FI_CQ_FORMAT_MSG:
    case FI_CQ_FORMAT_DATA:
    case FI_CQ_FORMAT_TAGGED:
      break;
    default:
      return -FI_EINVAL;
  }
  auto* cq = new Cq();
  cq->domain = d;
  cq->format = attr->format == FI_CQ_FORMAT_UNSPEC ? FI_CQ_FORMAT_CONTEXT : attr->format;
  cq->entry_size = entry_size(cq->format);
  cq->size = attr->size != 0 ? attr->size : kDefaultCqSize;
  // Endpoints' base CQs are drained at every read; they only need room between two reads.
  cq->base_size = std::max(cq->size, kDefaultCqSize);
  cq->tracking = d->cfg.dead_at > 0;
  cq->cq.fid.fclass = FI_CLASS_CQ;
  cq->cq.fid.context = context;
  cq->cq.fid.ops = &cq_fid_ops;
  cq->cq.ops = &cq_ops;
  {
    std::lock_guard<std::mutex> g(d->mu);
    d->cqs.push_back(cq);
  }
  *out = &cq->cq;
  return 0;
}

}  // namespace strict
