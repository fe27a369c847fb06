// STRICT_FI_RX_CQ_DATA, as on verbs: every message and every remote write with CQ data consumes
// one receive posted on the target endpoint, in arrival order, and a write's completion carries
// that receive's context. The application's receives never reach the base: this layer keeps
// them in a FIFO and posts its own buffers (kRxSlots x kRxSlotSize per endpoint) to the base. An
// arriving message is copied into the oldest held receive; a write with data is paired with it.
// With no receive held, arrivals wait (the RNR retry model) until one is posted.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "strict.hpp"

namespace strict {

namespace {

// Requested key of the internal buffers where the base does not choose keys: far above the
// small keys applications pick.
constexpr uint64_t kInternalKeyBase = 0x5354520000000000ull;

struct AppRecv {
  void* ctx = nullptr;
  std::vector<iovec> iov;
  size_t size = 0;
};

// Something that came in before a receive was there to take it.
struct Arrival {
  bool write = false;   // a remote write with data; else a message
  bool error = false;   // the base failed our internal receive
  fi_cq_err_entry e{};  // flags, len, data; err fields when `error`
  fi_addr_t src = FI_ADDR_NOTAVAIL;
  std::string text;
  std::vector<uint8_t> bytes;  // a message's payload
};

}  // namespace

struct RxQueue {
  std::unique_ptr<uint8_t[]> slab;  // uninitialized: only what the base writes is read
  fi_context2 slot_ctx[kRxSlots] = {};
  fid_mr* mr = nullptr;
  std::deque<AppRecv> posted;
  std::deque<Arrival> waiting;
  std::vector<size_t> repost;  // slots the base refused (-FI_EAGAIN), retried at the next pull
  // The base endpoint is closed before this is destroyed, so the buffers are no longer posted.
  ~RxQueue() {
    if (mr != nullptr) fi_close(&mr->fid);
  }
};

void RxQueueDelete::operator()(RxQueue* q) const { delete q; }

namespace {

long slot_of(const RxQueue* q, const void* ctx) {
  const auto* c = static_cast<const fi_context2*>(ctx);
  if (c < q->slot_ctx || c >= q->slot_ctx + kRxSlots) return -1;
  return static_cast<long>(c - q->slot_ctx);
}

uint8_t* slot_bytes(RxQueue* q, size_t i) { return q->slab.get() + i * kRxSlotSize; }

void post_slot(Endpoint* ep, size_t i) {
  RxQueue* q = ep->rxq.get();
  void* desc = q->mr != nullptr ? fi_mr_desc(q->mr) : nullptr;
  ssize_t ret =
      fi_recv(ep->base, slot_bytes(q, i), kRxSlotSize, desc, FI_ADDR_UNSPEC, &q->slot_ctx[i]);
  if (ret == 0) return;
  if (ret != -FI_EAGAIN)
    std::fprintf(stderr,
                 "strict provider: FI_RX_CQ_DATA: internal receive refused by the base: %s\n",
                 fi_strerror(static_cast<int>(-ret)));
  q->repost.push_back(i);
}

// Completes the application's receive `r` with what arrived (`bytes`: a message's payload).
void deliver(Endpoint* ep, const AppRecv& r, const Arrival& a, const uint8_t* bytes) {
  Entry en;
  en.admitted = true;
  en.rx = true;
  en.source = ep->rx_src;
  en.src = a.src;
  en.e.op_context = r.ctx;
  en.e.data = a.e.data;
  if (a.error) {
    en.error = true;
    en.e.flags = FI_RECV | FI_MSG;
    en.e.err = a.e.err;
    en.e.prov_errno = a.e.prov_errno;
    en.e.olen = a.e.olen;
    en.text = a.text;
  } else if (a.write) {
    en.e.flags = FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA;
    en.e.len = a.e.len;
    totals.rx_writes.fetch_add(1, std::memory_order_relaxed);
  } else {
    const size_t len = a.e.len;
    size_t copied = 0;
    for (const iovec& v : r.iov) {
      if (copied == len) break;
      const size_t n = std::min(v.iov_len, len - copied);
      if (n > 0) std::memcpy(v.iov_base, bytes + copied, n);
      copied += n;
    }
    en.e.flags = FI_RECV | FI_MSG | (a.e.flags & FI_REMOTE_CQ_DATA);
    en.e.len = copied;
    en.e.buf = r.iov.empty() ? nullptr : r.iov.front().iov_base;
    totals.rx_messages.fetch_add(1, std::memory_order_relaxed);
    if (copied < len) {
      char text[160];
      std::snprintf(text, sizeof(text),
                    "strict provider: a %zu-byte message truncated to the %zu-byte receive "
                    "(FI_ETRUNC)",
                    len, copied);
      en.error = true;
      en.e.err = FI_ETRUNC;
      en.e.olen = len - copied;
      en.e.prov_errno = kErrTruncated;
      en.text = text;
      totals.rx_truncated.fetch_add(1, std::memory_order_relaxed);
    }
  }
  ep->rx_cq()->stage(std::move(en));
}

void match(Endpoint* ep) {
  RxQueue* q = ep->rxq.get();
  while (!q->posted.empty() && !q->waiting.empty()) {
    deliver(ep, q->posted.front(), q->waiting.front(), q->waiting.front().bytes.data());
    q->posted.pop_front();
    q->waiting.pop_front();
  }
}

}  // namespace

int rx_arm(Endpoint* ep) {
  if (ep->rxq || !ep->rx_src) return 0;  // armed already, or no receive side to arm
  Domain* d = ep->domain;
  std::unique_ptr<RxQueue, RxQueueDelete> q(new RxQueue());
  q->slab.reset(new uint8_t[kRxSlots * kRxSlotSize]);
  if (d->base_mr_local) {
    int ret = fi_mr_reg(d->base, q->slab.get(), kRxSlots * kRxSlotSize, FI_RECV, 0,
                        kInternalKeyBase + ep->id, 0, &q->mr, nullptr);
    if (ret != 0) return ret;
  }
  ep->rxq = std::move(q);
  for (size_t i = 0; i < kRxSlots; ++i) post_slot(ep, i);
  return 0;
}

ssize_t rx_post(Endpoint* ep, void* ctx, const iovec* iov, size_t count) {
  if (!ep->rxq) return -FI_EOPBADSTATE;  // not enabled, or no receive CQ bound
  AppRecv r;
  r.ctx = ctx;
  r.iov.assign(iov, iov + count);
  for (const iovec& v : r.iov) r.size += v.iov_len;
  ep->rxq->posted.push_back(std::move(r));
  match(ep);
  return 0;
}

bool rx_route(const std::shared_ptr<Source>& s, const fi_cq_err_entry& e, bool error, fi_addr_t src,
              const std::string& text) {
  Endpoint* ep = s->ep;
  RxQueue* q = ep->rxq.get();
  const long slot = slot_of(q, e.op_context);
  const bool write = slot < 0 && !error && (e.flags & FI_REMOTE_CQ_DATA) &&
                     !(e.flags & (FI_RECV | FI_SEND | FI_WRITE | FI_READ));
  if (slot < 0 && !write) return false;  // the endpoint's own transmits, or not ours
  const auto i = static_cast<size_t>(slot);
  // Our own buffers come back canceled only when the endpoint closes.
  if (slot >= 0 && error && e.err == FI_ECANCELED) return true;

  Arrival a;
  a.write = write;
  a.error = error;
  a.e = e;
  a.src = src;
  a.text = text;
  const bool direct = q->waiting.empty() && !q->posted.empty();
  if (direct) {
    deliver(ep, q->posted.front(), a, slot >= 0 ? slot_bytes(q, i) : nullptr);
    q->posted.pop_front();
  } else {
    if (slot >= 0 && !error) a.bytes.assign(slot_bytes(q, i), slot_bytes(q, i) + e.len);
    q->waiting.push_back(std::move(a));
    totals.rx_waited.fetch_add(1, std::memory_order_relaxed);
  }
  if (slot >= 0) post_slot(ep, i);
  return true;
}

void rx_repost(Endpoint* ep) {
  RxQueue* q = ep->rxq.get();
  if (q->repost.empty()) return;
  std::vector<size_t> again;
  again.swap(q->repost);
  for (size_t i : again) post_slot(ep, i);
}

bool rx_cancel(Endpoint* ep, void* ctx) {
  RxQueue* q = ep->rxq.get();
  auto it = std::find_if(q->posted.begin(), q->posted.end(),
                         [&](const AppRecv& r) { return r.ctx == ctx; });
  if (it == q->posted.end()) return false;
  q->posted.erase(it);
  Entry en;
  en.admitted = true;
  en.rx = true;
  en.source = ep->rx_src;
  en.error = true;
  en.e.op_context = ctx;
  en.e.flags = FI_RECV | FI_MSG;
  en.e.err = FI_ECANCELED;
  en.e.prov_errno = kErrCanceled;
  en.text = "strict provider: receive canceled (fi_cancel)";
  ep->rx_cq()->stage(std::move(en));
  totals.rx_canceled.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void rx_clear(Endpoint* ep, bool closing) {
  RxQueue* q = ep->rxq.get();
  if (q == nullptr) return;
  if (closing && ep->rx_cq() != nullptr && ep->rx_cq()->tracking) {
    for (const AppRecv& r : q->posted) ep->rx_cq()->untrack(r.ctx);
  }
  q->posted.clear();
  q->waiting.clear();
}

}  // namespace strict
