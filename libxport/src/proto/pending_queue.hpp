// The queue of posts the provider refused (-FI_EAGAIN), or that found no bounce buffer or no CQ
// room: every part keeps its own of this one type, and progress offers them again (nothing
// spins inside a call). Ordered (first queued, first offered; a post kept goes behind the others
// in the same order), bounded (a pass offers each post queued before it began once; each part
// gives a post up after XPORT_EAGAIN_TIMEOUT_MS from `since`), counted (Stats::deferred_posts).
// A ring that grows to the most ever queued and then allocates nothing.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace xport::proto {

template <typename T>
class PendingQueue {
 public:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    T post{};
    Clock::time_point since{};  // when the provider first refused it (none: not yet asked)
  };

  // `deferred`: the count of posts queued (nullptr: not counted, as reposted receive buffers).
  explicit PendingQueue(uint64_t* deferred = nullptr) : deferred_(deferred) {}

  bool empty() const { return count_ == 0; }
  size_t size() const { return count_; }
  // Entries the ring holds before it grows again.
  size_t capacity() const { return ring_.size(); }

  // Queues a post behind the others (`count`: one more deferred post).
  void push(T post, Clock::time_point since = {}, bool count = true) {
    if (count && deferred_ != nullptr) ++*deferred_;
    push_entry(Entry{std::move(post), since});
  }

  // A progress pass: every post queued when it begins is offered to attempt(Entry&) once, in
  // order. attempt returns true to keep the post (it goes behind the others, order kept), false
  // once done with it (posted, failed or dropped). Posts queued meanwhile (attempt may queue
  // more, here or elsewhere) wait for the next pass.
  template <typename F>
  void retry(F&& attempt) {
    for (size_t n = count_; n > 0 && count_ > 0; --n) {
      Entry e = pop_front();
      if (attempt(e)) push_entry(std::move(e));
    }
  }

  // Drops every post for which drop(Entry&) is true (drop acts on it before it goes: its owner
  // is failed, its buffer given back); the others stay in order.
  template <typename P>
  void drop_if(P&& drop) {
    for (size_t n = count_; n > 0 && count_ > 0; --n) {
      Entry e = pop_front();
      if (!drop(e)) push_entry(std::move(e));
    }
  }

  template <typename P>
  bool any_of(P&& pred) const {
    for (size_t i = 0; i < count_; ++i) {
      if (pred(ring_[(head_ + i) & mask_])) return true;
    }
    return false;
  }

  void clear() {
    while (count_ > 0) pop_front();
  }

 private:
  Entry pop_front() {
    Entry e = std::move(ring_[head_]);
    ring_[head_] = Entry{};
    head_ = (head_ + 1) & mask_;
    --count_;
    return e;
  }
  void push_entry(Entry&& e) {
    if (count_ == ring_.size()) grow();
    ring_[(head_ + count_) & mask_] = std::move(e);
    ++count_;
  }
  void grow() {
    std::vector<Entry> bigger(ring_.empty() ? 16 : ring_.size() * 2);
    for (size_t i = 0; i < count_; ++i) bigger[i] = std::move(ring_[(head_ + i) & mask_]);
    ring_ = std::move(bigger);
    mask_ = ring_.size() - 1;
    head_ = 0;
  }
  std::vector<Entry> ring_;  // a power of two long
  size_t mask_ = 0;
  size_t head_ = 0;
  size_t count_ = 0;
  uint64_t* deferred_;
};

}  // namespace xport::proto
