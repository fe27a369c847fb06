// A lane's thread: takes the posts NCCL's threads queued, posts them in order, drives the
// device's progress and publishes each request's outcome for test() (docs/nccl.md, "Lanes").
#include "lane.hpp"

#include <span>

#include "plugin_state.hpp"

namespace xport::nccl {

Lane::~Lane() {
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    stopping_.store(true);
    cv_.notify_one();
    thread_.join();
  }
}

void Lane::start_thread(std::chrono::microseconds spin) {
  spin_ = spin;
  thread_ = std::thread([this] { run(); });
}

void Lane::submit(Request* r) {
  Request* head = inbox_.load(std::memory_order_relaxed);
  do {
    r->next = head;
  } while (!inbox_.compare_exchange_weak(head, r));
  // (seq_cst, as the thread's store of sleeping_ and its load of inbox_: one of the two sees
  // the other's, so a post never waits for the sleep's timeout.)
  if (sleeping_.load()) {
    std::lock_guard<std::mutex> l(mu_);
    cv_.notify_one();
  }
}

void Lane::forget(const CommBase* c) {
  std::lock_guard<std::mutex> l(lists_mu_);
  take_inbox();
  for (Request** list : {&pending_, &posted_}) {
    for (Request** p = list; *p != nullptr;) {
      if ((*p)->comm == c) {
        *p = (*p)->next;
      } else {
        p = &(*p)->next;
      }
    }
  }
  pending_tail_ = &pending_;
  while (*pending_tail_ != nullptr) pending_tail_ = &(*pending_tail_)->next;
}

void Lane::take_inbox() {
  Request* r = inbox_.exchange(nullptr, std::memory_order_acquire);
  Request* fifo = nullptr;  // the inbox is newest first
  while (r != nullptr) {
    Request* next = r->next;
    r->next = fifo;
    fifo = r;
    r = next;
  }
  *pending_tail_ = fifo;
  while (*pending_tail_ != nullptr) pending_tail_ = &(*pending_tail_)->next;
}

void Lane::post_pending() {
  while (pending_ != nullptr) {
    Request* r = pending_;
    Request* next = r->next;  // (post() links r into another list)
    // (A post libxport has no room for yet, Code::again, stays first: the comm's later
    // posts, and this pass's others, wait behind it so that each comm's order holds.)
    if (!post(r)) return;
    pending_ = next;
    if (pending_ == nullptr) pending_tail_ = &pending_;
  }
}

bool Lane::post(Request* r) {
  Result<xport::Request> q = Status(Code::internal, "lane: no post");
  switch (r->kind) {
    case ReqKind::send:
      q = static_cast<SendComm*>(r->comm)->comm->isend(r->data[0], r->lens[0], r->regions[0],
                                                       r->tags[0]);
      break;
    case ReqKind::recv: {
      RecvBuffer bufs[kMaxGroupedRecvs];
      for (int i = 0; i < r->count; ++i) {
        bufs[i] = {r->data[i], r->lens[i], &r->regions[i], r->tags[i]};
      }
      q = static_cast<RecvComm*>(r->comm)->comm->irecv(
          std::span<const RecvBuffer>(bufs, static_cast<size_t>(r->count)));
      break;
    }
    case ReqKind::flush:
      q = static_cast<RecvComm*>(r->comm)->comm->iflush(r->data[0], r->lens[0], r->regions[0]);
      break;
  }
  if (!q.ok() && q.status().code() == Code::again) return false;
  for (int i = 0; i < r->count; ++i) r->regions[i] = Region();  // libxport holds its own
  if (!q.ok()) {
    r->error = q.status();
    publish(r);
    return true;
  }
  r->req = *q;
  r->next = posted_;
  posted_ = r;
  return true;
}

void Lane::test_posted() {
  for (Request** p = &posted_; *p != nullptr;) {
    Request* r = *p;
    // (observe: no pass of its own, the loop makes them; the device is this thread's.)
    Result<Completion> c = r->kind == ReqKind::send
                               ? static_cast<SendComm*>(r->comm)->comm->test(r->req,
                                                                             TestMode::observe)
                               : static_cast<RecvComm*>(r->comm)->comm->test(r->req,
                                                                             TestMode::observe);
    if (c.ok() && !c->done) {
      p = &r->next;
      continue;
    }
    *p = r->next;
    if (c.ok()) {
      r->completion = *c;
    } else {
      r->error = c.status();
    }
    publish(r);
  }
}

void Lane::publish(Request* r) {
  r->next = nullptr;
  r->published.store(true, std::memory_order_release);
}

void Lane::run() {
  // Spins while requests are queued or outstanding, and for spin_ after the last one (the next
  // post of NCCL's pipeline is usually that close); then sleeps, woken by submit(), making a
  // progress pass every millisecond all the same (peers' control messages).
  using Clock = std::chrono::steady_clock;
  uint32_t passes = 0;
  bool warned = false;
  bool idle = false;
  Clock::time_point idle_since;
  while (!stopping_.load(std::memory_order_relaxed)) {
    {
      std::lock_guard<std::mutex> l(lists_mu_);
      take_inbox();
      post_pending();
    }
    Status s = device->progress();
    if (!s.ok() && !warned) {  // (the requests that fail report it through test(); once here)
      warned = true;
      PluginState::get().fail(s, "lane progress");
    }
    bool busy = false;
    {
      std::lock_guard<std::mutex> l(lists_mu_);
      test_posted();
      busy = pending_ != nullptr || posted_ != nullptr;
    }
    if (++passes % 256 == 0) std::this_thread::yield();
    if (busy || inbox_.load(std::memory_order_relaxed) != nullptr) {
      idle = false;
      continue;
    }
    const Clock::time_point now = Clock::now();
    if (!idle) {
      idle = true;
      idle_since = now;
    }
    if (now - idle_since < spin_) continue;
    sleeping_.store(true);
    if (inbox_.load() == nullptr) {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait_for(l, std::chrono::milliseconds(1),
                   [this] { return stop_ || inbox_.load() != nullptr; });
    }
    sleeping_.store(false);
  }
}

}  // namespace xport::nccl
