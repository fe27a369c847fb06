// Destinations of staged receives and gets, copied out once filled (gpu/staging/arrivals.hpp).
#include "gpu/staging/arrivals.hpp"

#include <utility>

namespace xport::gpu {

void StagedArrivals::expect(uint64_t key, std::vector<Target> targets) {
  auto e = std::make_shared<Entry>();
  e->targets = std::move(targets);
  std::lock_guard<std::mutex> g(mu_);
  entries_[key] = std::move(e);
  count_held();
}

bool StagedArrivals::expects_held(uint64_t key) const {
  std::lock_guard<std::mutex> g(mu_);
  return entries_.count(key) != 0;
}

void StagedArrivals::follow(uint64_t key, uint64_t follower) {
  std::lock_guard<std::mutex> g(mu_);
  followers_[key].push_back(follower);
  count_held();
}

std::vector<uint64_t> StagedArrivals::followers(uint64_t key) const {
  if (empty()) return {};
  std::lock_guard<std::mutex> g(mu_);
  auto it = followers_.find(key);
  return it == followers_.end() ? std::vector<uint64_t>{} : it->second;
}

void StagedArrivals::forget_followers(uint64_t key) {
  if (empty()) return;
  std::lock_guard<std::mutex> g(mu_);
  followers_.erase(key);
  count_held();
}

uint64_t StagedArrivals::last_followed() const {
  if (empty()) return 0;
  std::lock_guard<std::mutex> g(mu_);
  return followers_.empty() ? 0 : followers_.rbegin()->first;
}

void StagedArrivals::forget_followers_through(uint64_t key) {
  if (empty()) return;
  std::lock_guard<std::mutex> g(mu_);
  followers_.erase(followers_.begin(), followers_.upper_bound(key));
  count_held();
}

uint64_t StagedArrivals::last_key() const {
  if (empty()) return 0;
  std::lock_guard<std::mutex> g(mu_);
  return entries_.empty() ? 0 : entries_.rbegin()->first;
}

void StagedArrivals::record(uint64_t key, const Completion& c) {
  std::lock_guard<std::mutex> g(mu_);
  if (auto it = entries_.find(key); it != entries_.end()) it->second->completion = c;
}

std::optional<Completion> StagedArrivals::recorded(uint64_t key) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = entries_.find(key);
  return it == entries_.end() ? std::nullopt : it->second->completion;
}

void StagedArrivals::forget(uint64_t key) {
  std::shared_ptr<Entry> e;  // its copies (if any) wait in their destructors, outside the lock
  std::lock_guard<std::mutex> g(mu_);
  if (auto it = entries_.find(key); it != entries_.end()) {
    e = std::move(it->second);
    entries_.erase(it);
    count_held();
  }
}

Status StagedArrivals::start(Entry& e, std::span<const size_t> sizes) {
  e.started = true;
  // One copy per shadow, of every range of it that arrived.
  std::map<gpu::StagedMemory*, std::vector<std::pair<void*, size_t>>> by_memory;
  std::map<gpu::StagedMemory*, std::shared_ptr<gpu::StagedMemory>> owners;
  for (size_t i = 0; i < e.targets.size(); ++i) {
    size_t n = sizes.empty() ? e.targets[i].capacity
                             : i < sizes.size() ? std::min(sizes[i], e.targets[i].capacity) : 0;
    if (n == 0) continue;
    by_memory[e.targets[i].memory.get()].emplace_back(e.targets[i].dst, n);
    owners[e.targets[i].memory.get()] = e.targets[i].memory;
  }
  for (auto& [m, ranges] : by_memory) {
    XPORT_ASSIGN_OR_RETURN(auto c, m->start_copy_out(ranges));
    e.copies.push_back(std::move(c));
  }
  return Status::success();
}

Result<bool> StagedArrivals::arrived(uint64_t key, std::span<const size_t> sizes) {
  std::shared_ptr<Entry> e;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return true;
    e = it->second;
  }
  // One caller per request at a time is the API's rule; the entry is not shared further.
  if (!e->started) {
    if (Status s = start(*e, sizes); !s.ok()) {
      forget(key);
      return s.with_context("copying staged GPU memory out");
    }
  }
  for (auto& c : e->copies) {
    auto d = c->done();
    if (!d.ok()) {
      forget(key);
      return d.status();
    }
    if (!*d) return false;
  }
  forget(key);
  return true;
}

Status StagedArrivals::arrived_wait(uint64_t key, std::span<const size_t> sizes) {
  std::shared_ptr<Entry> e;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return Status::success();
    e = it->second;
  }
  Status st;
  if (!e->started) st = start(*e, sizes);
  for (auto& c : e->copies) {
    if (st.ok()) st = c->wait();
  }
  forget(key);
  return st;
}

Status StagedArrivals::settle_through(uint64_t key) {
  if (empty()) return Status::success();
  std::vector<std::pair<uint64_t, std::shared_ptr<Entry>>> due;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (auto it = entries_.begin(); it != entries_.end() && it->first <= key; ++it) {
      due.emplace_back(it->first, it->second);
    }
  }
  Status first;
  for (auto& [k, e] : due) {
    Status s = arrived_wait(k, {});  // gets fill their whole range
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

}  // namespace xport::gpu
