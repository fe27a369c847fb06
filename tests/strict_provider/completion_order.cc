// Which held completion a strict CQ hands out next. Entries are taken from the endpoints' own
// base CQs (through the FI_RX_CQ_DATA receive queue where that mode is on) and held here: each
// one waits out its delay (STRICT_FI_DELAY_US), then they leave in the order they were taken, or
// under STRICT_FI_REORDER in a random order in which only each endpoint's receive completions
// (messages and remote writes with data) keep theirs.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "strict.hpp"

namespace strict {
namespace {

constexpr size_t kPullBatch = 16;   // entries asked of one base CQ at a time
constexpr size_t kPullRounds = 64;  // rounds over the endpoints per read, at most
// STRICT_FI_REORDER shuffles among the oldest entries only, so none waits for ever.
constexpr size_t kReorderWindow = 128;

// A completion of the receive side: its order within the endpoint is kept.
bool is_rx(uint64_t flags) {
  if (flags & (FI_RECV | FI_REMOTE_WRITE | FI_REMOTE_READ)) return true;
  return (flags & FI_REMOTE_CQ_DATA) && !(flags & (FI_SEND | FI_WRITE | FI_READ));
}

// The target side of a remote write with data (not a received message): a new entry that no
// posted operation accounts for.
bool is_remote_write_data(uint64_t flags) {
  return (flags & FI_REMOTE_CQ_DATA) && !(flags & (FI_RECV | FI_SEND | FI_WRITE | FI_READ));
}

void take(const std::shared_ptr<Source>& s, fi_cq_err_entry& e, bool error, fi_addr_t src,
          std::string text) {
  Endpoint* ep = s->ep;
  if (ep != nullptr && ep->rxq && (s->bind_flags & FI_RECV) && rx_route(s, e, error, src, text))
    return;
  Entry en;
  en.e = e;
  en.error = error;
  en.src = src;
  en.admitted = true;
  en.rx = is_rx(e.flags);
  en.source = s;
  en.text = std::move(text);
  if (!error && is_remote_write_data(e.flags)) (void)s->cq->expect(s);
  s->cq->stage(std::move(en));
}

// Takes one error entry of a base CQ, its text formatted while the base's err_data is valid.
void take_error(const std::shared_ptr<Source>& s) {
  fi_cq_err_entry e{};
  if (fi_cq_readerr(s->base, &e, 0) != 1) return;
  char buf[256] = {0};
  const char* t = fi_cq_strerror(s->base, e.prov_errno, e.err_data, buf, sizeof(buf));
  std::string text = t != nullptr ? t : fi_strerror(e.err);
  e.err_data = nullptr;
  e.err_data_size = 0;
  take(s, e, true, FI_ADDR_NOTAVAIL, std::move(text));
}

}  // namespace

void Cq::pull() {
  for (const auto& s : sources)
    if (s->ep != nullptr && s->ep->rxq) rx_repost(s->ep);
  fi_cq_data_entry buf[kPullBatch];
  fi_addr_t src[kPullBatch + 1];  // +1: some bases write one past the entries read
  bool more = true;
  for (size_t round = 0; more && round < kPullRounds; ++round) {
    more = false;
    // Round by round over the endpoints, so that one busy endpoint does not hold back others.
    for (size_t k = 0; k < sources.size(); ++k) {
      std::shared_ptr<Source> s = sources[k];
      ssize_t n = domain->source ? fi_cq_readfrom(s->base, buf, kPullBatch, src)
                                 : fi_cq_read(s->base, buf, kPullBatch);
      if (n == -FI_EAVAIL) {
        take_error(s);
        more = true;
        continue;
      }
      for (ssize_t i = 0; i < n; ++i) {
        fi_cq_err_entry e{};
        e.op_context = buf[i].op_context;
        e.flags = buf[i].flags;
        e.len = buf[i].len;
        e.buf = buf[i].buf;
        e.data = buf[i].data;
        take(s, e, false, domain->source ? src[i] : FI_ADDR_NOTAVAIL, std::string());
      }
      if (n == static_cast<ssize_t>(kPullBatch)) more = true;
    }
  }
}

void Cq::stage(Entry e) {
  e.seq = next_seq++;
  e.ready_ns = now_ns();
  if (domain->delay_us > 0) {
    const uint64_t us = domain->draw_us(domain->delay_us);
    e.ready_ns += us * 1000;
    if (us > 0) totals.delayed_completions.fetch_add(1, std::memory_order_relaxed);
  }
  if (e.rx && e.source) {
    // A receive completion never becomes readable before an earlier one of its endpoint.
    e.ready_ns = std::max(e.ready_ns, e.source->last_rx_ready);
    e.source->last_rx_ready = e.ready_ns;
  }
  staged.push_back(std::move(e));
}

long Cq::choose(uint64_t now, bool errors_only) {
  if (staged.empty()) return -1;
  if (!domain->cfg.reorder) {
    const Entry& head = staged.front();
    if (head.ready_ns > now || (errors_only && !head.error)) return -1;
    return 0;
  }
  // Eligible: ready, and for a receive completion, the oldest held one of its endpoint.
  long eligible[kReorderWindow];
  size_t n = 0;
  uint64_t rx_seen[kReorderWindow];
  size_t seen = 0;
  const size_t window = std::min(staged.size(), kReorderWindow);
  for (size_t i = 0; i < window; ++i) {
    const Entry& x = staged[i];
    bool first_rx = true;
    if (x.rx && x.source) {
      const uint64_t id = x.source->ep_id;
      first_rx = std::find(rx_seen, rx_seen + seen, id) == rx_seen + seen;
      if (first_rx) rx_seen[seen++] = id;
    }
    if (x.ready_ns <= now && first_rx && (!errors_only || x.error))
      eligible[n++] = static_cast<long>(i);
  }
  if (n == 0) return -1;
  const long pick = eligible[std::uniform_int_distribution<size_t>(0, n - 1)(domain->rng)];
  if (pick != 0) totals.reordered.fetch_add(1, std::memory_order_relaxed);
  return pick;
}

Entry Cq::take_out(size_t i) {
  Entry e = std::move(staged[i]);
  staged.erase(staged.begin() + static_cast<long>(i));
  if (tracking && e.admitted && e.e.op_context != nullptr) untrack(e.e.op_context);
  if (e.source && e.e.op_context != nullptr && e.source->ep != nullptr &&
      domain->cfg.scribble) {
    // Delivered: the provider writes its last into the context and lets it go.
    auto& live = e.source->ep->in_flight;
    auto it = live.find(e.e.op_context);
    if (it != live.end()) {
      scribble(e.e.op_context);
      live.erase(it);
    }
  }
  if (e.source) unexpect(e.source);
  return e;
}

void Cq::push_error(const std::shared_ptr<Source>& s, void* ctx, uint64_t flags, bool rx, int err,
                    int prov_errno, std::string text) {
  Entry e;
  e.e.op_context = ctx;
  e.e.flags = flags;
  e.e.err = err;
  e.e.prov_errno = prov_errno;
  e.error = true;
  e.rx = rx;
  e.source = s;
  e.text = std::move(text);
  stage(std::move(e));
}

void Cq::track(void* ctx, uint64_t flags) { outstanding.emplace(ctx, flags); }

void Cq::untrack(void* ctx) {
  auto it = outstanding.find(ctx);
  if (it != outstanding.end()) outstanding.erase(it);
}

void Cq::fail_outstanding() {
  for (const auto& [ctx, flags] : outstanding) {
    Entry e;
    e.e.op_context = ctx;
    e.e.flags = flags;
    e.e.err = FI_EIO;
    e.e.prov_errno = kErrDeadDomain;
    e.error = true;
    e.text =
        "strict provider: the domain died (STRICT_FI_DEAD_DOMAIN_AT) with this operation "
        "outstanding";
    stage(std::move(e));
    totals.dead_fails.fetch_add(1, std::memory_order_relaxed);
  }
  outstanding.clear();
}

// ---- STRICT_FI_CQ_OVERRUN ----

bool Cq::expect(const std::shared_ptr<Source>& s) {
  ++s->expected;
  ++expected;
  uint64_t peak = totals.cq_peak.load(std::memory_order_relaxed);
  while (static_cast<uint64_t>(expected) > peak &&
         !totals.cq_peak.compare_exchange_weak(peak, static_cast<uint64_t>(expected))) {
  }
  if (!domain->cfg.cq_overrun || overrun || expected <= static_cast<int64_t>(size)) return true;
  set_overrun();
  return false;
}

void Cq::unexpect(const std::shared_ptr<Source>& s) {
  // A closed endpoint's share was taken off at close; entries of it read later count nothing.
  if (s->expected <= 0) return;
  --s->expected;
  --expected;
}

void Cq::set_overrun() {
  char text[200];
  std::snprintf(text, sizeof(text),
                "strict provider: CQ overrun: %lld completions can be outstanding on a CQ of size "
                "%zu (STRICT_FI_CQ_OVERRUN)",
                static_cast<long long>(expected), size);
  overrun = true;
  overrun_text = text;
  domain->overrun = true;
  totals.overruns.fetch_add(1, std::memory_order_relaxed);
  if (domain->cfg.verbose) std::fprintf(stderr, "%s\n", text);
}

}  // namespace strict
