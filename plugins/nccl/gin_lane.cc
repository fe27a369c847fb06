#include "gin_lane.hpp"

#include <sched.h>

#include <deque>
#include <utility>

namespace xport::nccl {

GinLane::GinLane(std::unique_ptr<GpuTeam> team, std::chrono::microseconds spin)
    : team_(std::move(team)), spin_(spin) {
  for (int r = 0; r < team_->size(); ++r) {
    if (Window* w = team_->window(r)) w->set_source_read(SourceRead::until_local);
  }
  thread_ = std::thread([this] { run(); });
}

GinLane::~GinLane() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_.store(true, std::memory_order_release);
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
  for (GinPart& p : inbox_) p.done(Status(Code::closed, "GIN lane closed before the part was posted"));
}

void GinLane::submit(GinPart part) {
  {
    std::lock_guard<std::mutex> l(mu_);
    inbox_.push_back(std::move(part));
    has_inbox_.store(true, std::memory_order_release);
  }
  if (dozing_.load(std::memory_order_acquire)) cv_.notify_one();
}

void GinLane::run() {
  std::deque<GinPart> pending;  // taken from the inbox, not posted yet (oldest first)
  std::vector<GinPart> posted;  // posted, not delivered yet
  std::vector<GinPart> taken;
  auto active = std::chrono::steady_clock::now();  // the last pass with something to do
  while (!stop_.load(std::memory_order_acquire)) {
    if (has_inbox_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> l(mu_);
      taken.swap(inbox_);
      has_inbox_.store(false, std::memory_order_relaxed);
    }
    for (GinPart& p : taken) pending.push_back(std::move(p));
    taken.clear();
    // In order; a window that says "not now" holds the rest until a later pass.
    while (!pending.empty()) {
      GinPart& p = pending.front();
      Result<Ticket> t = team_->window(p.peer)->put(*p.src, p.src_off, *p.dst, p.dst_off, p.size);
      if (!t.ok() && t.status().code() == Code::again) break;
      if (!t.ok()) {
        p.done(t.status().with_context("GIN lane put"));
      } else {
        p.ticket = *t;
        posted.push_back(std::move(p));
      }
      pending.pop_front();
    }
    // Progress: this rank's posts, and the peers' writes to this lane (their CPU copies).
    Result<size_t> read = team_->device().progress_counted();
    Status s = read.ok() ? Status::success() : read.status();
    for (size_t i = 0; i < posted.size();) {
      GinPart& p = posted[i];
      Result<TransferState> st = s.ok() ? team_->window(p.peer)->check(p.ticket) : Result<TransferState>(s);
      if (st.ok() && *st != TransferState::done) {
        ++i;
        continue;
      }
      p.done(st.ok() ? Status::success() : st.status().with_context("GIN lane put"));
      posted[i] = std::move(posted.back());
      posted.pop_back();
    }
    const bool busy = !pending.empty() || !posted.empty();
    if (busy || (read.ok() && *read > 0)) {
      active = std::chrono::steady_clock::now();
      if (!read.ok() || *read == 0) sched_yield();
      continue;
    }
    const auto idle = std::chrono::steady_clock::now() - active;
    if (idle < spin_) {
      sched_yield();
      continue;
    }
    std::unique_lock<std::mutex> l(mu_);
    dozing_.store(true, std::memory_order_release);
    cv_.wait_for(l, idle < kDeepAfter ? kDoze : kDeepDoze, [this] {
      return has_inbox_.load(std::memory_order_acquire) || stop_.load(std::memory_order_acquire);
    });
    dozing_.store(false, std::memory_order_relaxed);
  }
  for (GinPart& p : pending) p.done(Status(Code::closed, "GIN lane closed before the part was posted"));
  for (GinPart& p : posted) p.done(Status(Code::closed, "GIN lane closed before the part was delivered"));
}

}  // namespace xport::nccl
