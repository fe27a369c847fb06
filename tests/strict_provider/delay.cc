// A slow rail (STRICT_FI_DELAY_POST_US): data operations are queued per endpoint and handed to
// the base 0..N us after they were posted, in their order (per peer), from the domain's CQ reads
// and later posts (and, on a domain with FI_PROGRESS_AUTO, from a thread of its own), so the data
// itself lands late. Also the clock and the seeded draws that the delays and STRICT_FI_REORDER
// share.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "strict.hpp"

namespace strict {

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

uint64_t Domain::draw_us(uint64_t max_us) {
  if (max_us == 0) return 0;
  return std::uniform_int_distribution<uint64_t>(0, max_us)(rng);
}

uint64_t domain_seed(const Config& cfg, const std::string& name) {
  // One base seed per process (STRICT_FI_SEED, else random), domain k of the process drawing
  // from base + k: the printed base replays a run whose domains open in the same order.
  static std::mutex mu;
  static bool chosen = false;
  static uint64_t random_base = 0;
  static uint64_t ordinal = 0;
  std::lock_guard<std::mutex> g(mu);
  if (!chosen) {
    std::random_device rd;
    random_base = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    chosen = true;
  }
  const uint64_t base = cfg.seed_set ? cfg.seed : random_base;
  const uint64_t k = ordinal++;
  if (cfg.verbose && (cfg.reorder || cfg.delay_us > 0 || cfg.delay_post_us > 0)) {
    std::fprintf(stderr,
                 "strict provider: domain #%llu (%s) draws reorder and delays from "
                 "STRICT_FI_SEED=%llu + %llu\n",
                 static_cast<unsigned long long>(k), name.c_str(),
                 static_cast<unsigned long long>(base), static_cast<unsigned long long>(k));
  }
  return base + k;
}

void defer_post(Endpoint* ep, const Request& req, void** base_desc, PostFn post, Admission adm) {
  Domain* d = ep->domain;
  DeferredPost p;
  p.ready_ns = now_ns() + d->draw_us(d->delay_post_us) * 1000;
  // Posts of one endpoint reach the base in the order they were made.
  if (!ep->deferred.empty()) p.ready_ns = std::max(p.ready_ns, ep->deferred.back().ready_ns);
  p.post = std::move(post);
  std::copy(base_desc, base_desc + kMaxIov, p.base_desc);
  p.req = req;
  p.req.desc = nullptr;  // lent by the caller for the call only; base_desc has the translation
  p.adm = std::move(adm);
  ep->deferred.push_back(std::move(p));
  totals.delayed_posts.fetch_add(1, std::memory_order_relaxed);
}

void flush_posts(Domain* d) {
  const uint64_t now = now_ns();
  std::vector<fi_addr_t> busy;  // peers whose oldest due post the base refused in this pass
  for (Endpoint* ep : d->eps) {
    busy.clear();
    // Due posts go in order; one the base refuses (-FI_EAGAIN) holds back the later ones to its
    // peer only, as a stalled peer does not hold up an RDM endpoint's traffic to others.
    for (auto it = ep->deferred.begin(); it != ep->deferred.end() && it->ready_ns <= now;) {
      DeferredPost& p = *it;
      if (std::find(busy.begin(), busy.end(), p.req.peer) != busy.end()) {
        ++it;
        continue;
      }
      const ssize_t ret = p.post(ep->base, p.base_desc);
      if (ret == -FI_EAGAIN) {
        busy.push_back(p.req.peer);
        ++it;
        continue;
      }
      if (ret != 0) {
        // The caller was told it was posted: what the base says now comes as its completion.
        totals.delayed_post_errors.fetch_add(1, std::memory_order_relaxed);
        if (p.adm.tracked != nullptr) p.adm.tracked->untrack(p.req.ctx);
        if (p.req.completes && ep->tx_cq() != nullptr) {
          char text[200];
          std::snprintf(text, sizeof(text),
                        "strict provider: the base refused a delayed %s (STRICT_FI_DELAY_POST_US): "
                        "%s",
                        op_name(p.req.op), fi_strerror(static_cast<int>(-ret)));
          ep->tx_cq()->push_error(ep->tx_src, p.req.ctx, completion_flags(p.req.op), false,
                                  static_cast<int>(-ret), kErrDelayedPost, text);
        }
      }
      it = ep->deferred.erase(it);
    }
  }
}

void start_pump(Domain* d) {
  if (!d->auto_progress || d->delay_post_us == 0) return;
  d->pump = std::thread([d] {
    std::unique_lock<std::mutex> lock(d->mu);
    while (!d->pump_stop) {
      flush_posts(d);
      // Until the next post is due (at most 1 ms, so new posts are seen), or a post wakes us.
      uint64_t next = UINT64_MAX;
      for (const Endpoint* ep : d->eps)
        if (!ep->deferred.empty()) next = std::min(next, ep->deferred.front().ready_ns);
      const uint64_t now = now_ns();
      const uint64_t wait_ns = next <= now ? 20000 : std::min<uint64_t>(next - now, 1000000);
      d->pump_cv.wait_for(lock, std::chrono::nanoseconds(wait_ns));
    }
  });
}

void stop_pump(Domain* d) {
  if (!d->pump.joinable()) return;
  {
    std::lock_guard<std::mutex> g(d->mu);
    d->pump_stop = true;
  }
  d->pump_cv.notify_all();
  d->pump.join();
}

void drop_posts(Endpoint* ep, bool closing) {
  if (closing) {
    for (const DeferredPost& p : ep->deferred)
      if (p.adm.tracked != nullptr) p.adm.tracked->untrack(p.req.ctx);
  }
  ep->deferred.clear();
}

}  // namespace strict
