// Host shadows of GPU memory and the copies between them (gpu/staged_memory.hpp).
#include "gpu/staged_memory.hpp"

#include <algorithm>
#include <atomic>

#include "core/format.hpp"
#include "gpu/staging_counters.hpp"

namespace xport::gpu {

StagedCopy::StagedCopy(std::shared_ptr<StagedMemory> owner, std::shared_ptr<CopyQueue> queue,
                       uint64_t mark)
    : owner_(std::move(owner)), queue_(std::move(queue)), mark_(mark) {}

StagedCopy::StagedCopy(std::shared_ptr<StagedMemory> owner, uint8_t* word, WordOp op,
                       uint64_t operand)
    : owner_(std::move(owner)), phase_(Phase::turn), word_(word), op_(op), operand_(operand) {}

StagedCopy::~StagedCopy() {
  // Nobody waited: the queue may still be copying into memory its user is about to drop.
  if (queue_ && !done_) (void)queue_->synchronize();
  give_back();
  if (scratch_ >= 0) owner_->give_scratch(scratch_);
  if (word_ != nullptr && !done_) owner_->leave_turn(this, false);
}

void StagedCopy::give_back() { queue_.reset(); }

Result<bool> StagedCopy::done() {
  if (done_) return true;
  if (word_ != nullptr) return advance();
  auto reached = queue_->reached(mark_);
  if (!reached.ok()) {
    staging_counters(owner_->gpu()).copy_errors.fetch_add(1, std::memory_order_relaxed);
    owner_->lane_failed(queue_);
    return reached.status();
  }
  const bool d = *reached;
  if (d) {
    done_ = true;
    give_back();
  }
  return d;
}

Result<bool> StagedCopy::advance() {
  StagingCounters& c = staging_counters(owner_->gpu());
  auto finish = [&](bool wrote) {
    done_ = true;
    give_back();
    if (scratch_ >= 0) owner_->give_scratch(scratch_);
    scratch_ = -1;
    owner_->leave_turn(this, wrote);
  };
  auto fail = [&](const Status& s) -> Result<bool> {
    c.copy_errors.fetch_add(1, std::memory_order_relaxed);
    if (queue_) {
      (void)queue_->synchronize();
      owner_->lane_failed(queue_);
    }
    finish(false);  // (leaves the line: the next update of the word goes on)
    return s;
  };
  auto read_into = [&](uint64_t* dst) -> Status {
    Status st = queue_->copy_to_host(dst, word_, sizeof(uint64_t));
    auto m = st.ok() ? queue_->mark() : Result<uint64_t>(st);
    if (!m.ok()) return m.status();
    mark_ = *m;
    c.copies_to_host.fetch_add(1, std::memory_order_relaxed);
    c.to_host_bytes.fetch_add(sizeof(uint64_t), std::memory_order_relaxed);
    return Status::success();
  };
  uint8_t* shadow = owner_->shadow_of(word_);
  std::atomic_ref<uint64_t> w(*reinterpret_cast<uint64_t*>(shadow));
  if (phase_ == Phase::early_reading) {
    auto r = owner_->read_ahead_reached(mark_);
    if (!r.ok()) {
      owner_->give_scratch(scratch_);  // (read in turn instead)
      scratch_ = -1;
      phase_ = Phase::early_read;
    } else if (!*r) {
      return false;
    } else {
      phase_ = Phase::early_read;
    }
  }
  if (phase_ == Phase::early_read) {
    if (held_ || !owner_->my_turn(this)) return false;
    if (op_ == WordOp::set) {
      phase_ = Phase::read;
    } else if (scratch_ >= 0 && owner_->word_version(word_) == read_version_) {
      // Nothing wrote the word since the read was enqueued: its value serves.
      w.store(*owner_->scratch_word(scratch_), std::memory_order_release);
      phase_ = Phase::read;
    } else {
      phase_ = Phase::turn;  // read again, in turn
    }
  }
  if (phase_ == Phase::turn) {
    if (!owner_->my_turn(this)) return false;
    if (!queue_) queue_ = owner_->lane();
    if (op_ == WordOp::add) {
      // The GPU's word, not the shadow's: a kernel may have written it (reset) since.
      Status st = read_into(reinterpret_cast<uint64_t*>(shadow));
      if (!st.ok()) return fail(st);
      phase_ = Phase::reading;
    } else {
      phase_ = Phase::read;  // (nothing to read)
    }
  }
  if (phase_ == Phase::reading) {
    auto r = queue_->reached(mark_);
    if (!r.ok()) return fail(r.status());
    if (!*r) return false;
    phase_ = Phase::read;
  }
  if (phase_ == Phase::read) {
    if (op_ == WordOp::add) {
      w.fetch_add(operand_, std::memory_order_acq_rel);
    } else {
      w.store(operand_, std::memory_order_release);
    }
    phase_ = Phase::writing;
  }
  if (phase_ == Phase::writing && !written_) {
    if (!queue_) queue_ = owner_->lane();  // (a held set: nothing was read, no lane yet)
    Status st = queue_->copy_to_gpu(word_, shadow, sizeof(uint64_t));
    auto m = st.ok() ? queue_->mark() : Result<uint64_t>(st);
    if (!m.ok()) return fail(m.status());
    mark_ = *m;
    written_ = true;
    c.copies_to_gpu.fetch_add(1, std::memory_order_relaxed);
    c.to_gpu_bytes.fetch_add(sizeof(uint64_t), std::memory_order_relaxed);
  }
  auto r = queue_->reached(mark_);
  if (!r.ok()) return fail(r.status());
  if (!*r) return false;
  finish(true);
  return true;
}

void StagedCopy::release() {
  if (!held_) return;
  held_ = false;
  owner_->join_turn(this);
}

Status StagedCopy::wait() {
  if (word_ != nullptr) {
    // (used by tests and closing paths only: polls the phases)
    if (held_) return Status(Code::internal, "waiting for a held signal word update");
    for (;;) {
      auto d = advance();
      if (!d.ok()) return d.status();
      if (*d) return Status::success();
    }
  }
  if (done_) return Status::success();
  if (Status s = queue_->synchronize(); !s.ok()) {
    staging_counters(owner_->gpu()).copy_errors.fetch_add(1, std::memory_order_relaxed);
    owner_->lane_failed(queue_);
    return s;
  }
  done_ = true;
  give_back();
  return Status::success();
}

StagedMemory::StagedMemory(Driver& driver, uint8_t* base, size_t length, const PointerInfo& info,
                           uint8_t* shadow)
    : driver_(driver), base_(base), length_(length), info_(info), shadow_(shadow) {
  StagingCounters& c = staging_counters(info_.gpu);
  c.used.store(true, std::memory_order_relaxed);
  c.shadows.fetch_add(1, std::memory_order_relaxed);
  c.shadow_bytes.fetch_add(length_, std::memory_order_relaxed);
}

Result<std::shared_ptr<StagedMemory>> StagedMemory::create(Driver& driver, void* base,
                                                           size_t length,
                                                           const PointerInfo& info) {
  XPORT_ASSIGN_OR_RETURN(void* shadow, driver.alloc_pinned(length));
  auto out = std::shared_ptr<StagedMemory>(new StagedMemory(
      driver, static_cast<uint8_t*>(base), length, info, static_cast<uint8_t*>(shadow)));
  // The copy queues it will use (its GPU's lanes, opened with the first shadow there): a GPU
  // that cannot give them fails the registration, not a transfer, and none is opened while
  // kernels may run (opening one can wait for them, and they may wait for the copy). The same
  // for what signal words' early reads write into (scratch words).
  XPORT_ASSIGN_OR_RETURN(out->lanes_, CopyLanes::of(driver, info));
  XPORT_ASSIGN_OR_RETURN(void* scratch, driver.alloc_pinned(kScratchWords * sizeof(uint64_t)));
  out->scratch_ = static_cast<uint64_t*>(scratch);
  for (int i = kScratchWords - 1; i >= 0; --i) out->scratch_free_.push_back(i);
  // The shadow starts as the GPU bytes: signals are applied to shadow words and copied on, so a
  // word the caller set on the GPU before registering (cudaMemset to 0) must read the same
  // here, not whatever the page-locked pages held.
  XPORT_RETURN_IF_ERROR(out->copy_in(base, length));
  return out;
}

StagedMemory::~StagedMemory() {
  for (auto& d : draining_) (void)d.queue->synchronize();
  draining_.clear();
  // (early reads into the scratch words: none may still run when they go)
  if (lanes_) (void)lanes_->ahead().synchronize();
  if (scratch_ != nullptr) driver_.free_pinned(scratch_);
  driver_.free_pinned(shadow_);
  StagingCounters& c = staging_counters(info_.gpu);
  c.shadows.fetch_sub(1, std::memory_order_relaxed);
  c.shadow_bytes.fetch_sub(length_, std::memory_order_relaxed);
}

uint8_t* StagedMemory::shadow_of(const void* p) const {
  const auto* q = static_cast<const uint8_t*>(p);
  if (q < base_ || q > base_ + length_) return nullptr;
  return shadow_ + (q - base_);
}

uint8_t* StagedMemory::gpu_of(const void* s) const {
  const auto* q = static_cast<const uint8_t*>(s);
  if (q < shadow_ || q > shadow_ + length_) return nullptr;
  return base_ + (q - shadow_);
}

bool StagedMemory::contains(const void* p, size_t n) const {
  const auto* q = static_cast<const uint8_t*>(p);
  return q >= base_ && n <= length_ && static_cast<size_t>(q - base_) <= length_ - n;
}

std::shared_ptr<CopyQueue> StagedMemory::lane() {
  std::vector<std::shared_ptr<void>> drained;  // (let go of outside mu_)
  std::lock_guard<std::mutex> g(mu_);
  for (size_t i = 0; i < draining_.size();) {
    auto r = draining_[i].queue->reached(draining_[i].mark);
    if (r.ok() && !*r) {
      ++i;
      continue;
    }
    // Done, or failed (a failed copy writes nothing more).
    drained.push_back(std::move(draining_[i].keep));
    draining_[i] = std::move(draining_.back());
    draining_.pop_back();
  }
  return lanes_->next();
}

void StagedMemory::drain_later(std::shared_ptr<CopyQueue> q, uint64_t mark,
                               std::shared_ptr<void> keep) {
  std::lock_guard<std::mutex> g(mu_);
  draining_.push_back({std::move(q), mark, std::move(keep)});
}

void StagedMemory::join_turn(const StagedCopy* c) {
  std::lock_guard<std::mutex> g(words_mu_);
  word_turns_[c->word_].push_back(c);
}

uint64_t StagedMemory::word_version(const uint8_t* word) {
  std::lock_guard<std::mutex> g(words_mu_);
  auto it = word_versions_.find(word);
  return it == word_versions_.end() ? 0 : it->second;
}

int StagedMemory::take_scratch() {
  std::lock_guard<std::mutex> g(words_mu_);
  if (scratch_free_.empty()) return -1;
  const int slot = scratch_free_.back();
  scratch_free_.pop_back();
  return slot;
}

Result<uint64_t> StagedMemory::read_ahead(uint64_t* dst, const uint8_t* word) {
  XPORT_RETURN_IF_ERROR(lanes_->ahead().copy_to_host(dst, word, sizeof(uint64_t)));
  return lanes_->ahead().mark();
}

Result<bool> StagedMemory::read_ahead_reached(uint64_t mark) {
  return lanes_->ahead().reached(mark);
}

void StagedMemory::give_scratch(int slot) {
  std::lock_guard<std::mutex> g(words_mu_);
  scratch_free_.push_back(slot);
}

bool StagedMemory::my_turn(const StagedCopy* c) {
  std::lock_guard<std::mutex> g(words_mu_);
  auto it = word_turns_.find(c->word_);
  return it != word_turns_.end() && !it->second.empty() && it->second.front() == c;
}

void StagedMemory::leave_turn(const StagedCopy* c, bool wrote) {
  std::lock_guard<std::mutex> g(words_mu_);
  if (wrote) ++word_versions_[c->word_];
  auto it = word_turns_.find(c->word_);
  if (it == word_turns_.end()) return;
  auto& q = it->second;
  q.erase(std::remove(q.begin(), q.end(), c), q.end());
  if (q.empty()) word_turns_.erase(it);
}

namespace {
Status out_of_range(const char* what, const void* p, size_t n, const StagedMemory& m) {
  return core::error(Code::invalid_argument, what, ": [", p, ", +", n,
                     ") is not inside the GPU region [", static_cast<const void*>(m.gpu_base()),
                     ", +", m.length(), ")");
}
}  // namespace

Status StagedMemory::copy_in(const void* p, size_t n) {
  if (!contains(p, n)) return out_of_range("staging copy in", p, n, *this);
  return copy_in_to(shadow_of(p), p, n);
}

Status StagedMemory::copy_in_to(void* dst, const void* p, size_t n) {
  if (!contains(p, n)) return out_of_range("staging copy in", p, n, *this);
  if (n == 0) return Status::success();
  XPORT_ASSIGN_OR_RETURN(auto c, start_copy_in_to(dst, p, n, 0));
  return c->wait();
}

Result<std::unique_ptr<StagedCopyIn>> StagedMemory::start_copy_in_to(void* dst, const void* p,
                                                                      size_t n, size_t piece) {
  if (!contains(p, n)) return out_of_range("staging copy in", p, n, *this);
  if (piece == 0 || piece > n) piece = std::max<size_t>(n, 1);
  std::shared_ptr<CopyQueue> s = lane();
  std::vector<std::pair<uint64_t, size_t>> marks;
  Status st;
  for (size_t off = 0; off < n && st.ok(); off += piece) {
    const size_t end = std::min(n, off + piece);
    for (size_t at = off; at < end && st.ok(); at += kStagingChunk) {
      const size_t len = std::min(kStagingChunk, end - at);
      st = s->copy_to_host(static_cast<uint8_t*>(dst) + at, static_cast<const uint8_t*>(p) + at,
                           len);
    }
    if (!st.ok()) break;
    auto m = s->mark();
    if (!m.ok()) {
      st = m.status();
      break;
    }
    marks.emplace_back(*m, end);
  }
  if (!st.ok()) {
    (void)s->synchronize();  // (what was enqueued must not write into bytes given back)
    staging_counters(info_.gpu).copy_errors.fetch_add(1, std::memory_order_relaxed);
    return st;
  }
  return std::make_unique<StagedCopyIn>(shared_from_this(), std::move(s), std::move(marks), n);
}

StagedCopyIn::StagedCopyIn(std::shared_ptr<StagedMemory> owner, std::shared_ptr<CopyQueue> queue,
                           std::vector<std::pair<uint64_t, size_t>> marks, size_t length)
    : owner_(std::move(owner)), queue_(std::move(queue)), marks_(std::move(marks)),
      length_(length) {
  if (marks_.empty()) finish(true);  // (nothing to copy)
}

StagedCopyIn::~StagedCopyIn() {
  if (!queue_) return;  // (done, or failed: nothing copies any more)
  if (keep_ && !marks_.empty()) {
    owner_->drain_later(std::move(queue_), marks_.back().first, std::move(keep_));
    return;
  }
  (void)queue_->synchronize();
}

void StagedCopyIn::finish(bool ok) {
  StagingCounters& c = staging_counters(owner_->gpu());
  if (!ok) {
    owner_->lane_failed(queue_);  // (a queue whose copy failed is not used again)
    queue_.reset();
    c.copy_errors.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  queue_.reset();
  ready_ = length_;
  owner_->bytes_in_.fetch_add(length_, std::memory_order_relaxed);
  c.to_host_bytes.fetch_add(length_, std::memory_order_relaxed);
  c.copies_to_host.fetch_add(1, std::memory_order_relaxed);
}

Result<size_t> StagedCopyIn::ready() {
  if (!error_.ok()) return error_;
  while (queue_ && next_ < marks_.size()) {
    auto r = queue_->reached(marks_[next_].first);
    if (!r.ok()) {
      (void)queue_->synchronize();
      finish(false);
      error_ = r.status();
      return error_;
    }
    if (!*r) break;
    ready_ = marks_[next_].second;
    if (++next_ == marks_.size()) finish(true);
  }
  return ready_;
}

Status StagedCopyIn::wait() {
  if (!queue_) return error_;
  Status st = queue_->synchronize();
  if (!st.ok()) {
    finish(false);
    error_ = st;
    return st;
  }
  next_ = marks_.size();
  finish(true);
  return Status::success();
}

Status StagedMemory::copy_out(void* p, size_t n) {
  XPORT_ASSIGN_OR_RETURN(auto c, start_copy_out({{p, n}}));
  return c->wait();
}

Result<std::unique_ptr<StagedCopy>> StagedMemory::start_copy_out(
    const std::vector<std::pair<void*, size_t>>& ranges) {
  for (const auto& [p, n] : ranges) {
    if (!contains(p, n)) return out_of_range("staging copy out", p, n, *this);
  }
  std::shared_ptr<CopyQueue> s = lane();
  Status st;
  uint64_t total = 0;
  for (const auto& [p, n] : ranges) {
    for (size_t off = 0; off < n && st.ok(); off += kStagingChunk) {
      size_t len = std::min(kStagingChunk, n - off);
      st = s->copy_to_gpu(static_cast<uint8_t*>(p) + off, shadow_of(p) + off, len);
    }
    total += n;
  }
  Result<uint64_t> mark = st.ok() ? s->mark() : Result<uint64_t>(st);
  StagingCounters& c = staging_counters(info_.gpu);
  if (!mark.ok()) {
    (void)s->synchronize();
    c.copy_errors.fetch_add(1, std::memory_order_relaxed);
    return mark.status();
  }
  bytes_out_.fetch_add(total, std::memory_order_relaxed);
  c.to_gpu_bytes.fetch_add(total, std::memory_order_relaxed);
  c.copies_to_gpu.fetch_add(1, std::memory_order_relaxed);
  return std::make_unique<StagedCopy>(shared_from_this(), std::move(s), *mark);
}

Result<std::unique_ptr<StagedCopy>> StagedMemory::start_word_update(void* word, WordOp op,
                                                                    uint64_t operand, bool held) {
  if (!contains(word, sizeof(uint64_t))) return out_of_range("signal word update", word, 8, *this);
  auto c = std::unique_ptr<StagedCopy>(
      new StagedCopy(shared_from_this(), static_cast<uint8_t*>(word), op, operand));
  if (held) {
    // Out of the word's line until released: reads the GPU word ahead (adds), into a scratch
    // word (the shadow word belongs to whichever update has the turn).
    c->held_ = true;
    c->phase_ = StagedCopy::Phase::early_read;
    if (op == WordOp::add) {
      c->scratch_ = take_scratch();
      if (c->scratch_ >= 0) {
        c->read_version_ = word_version(c->word_);
        auto m = read_ahead(scratch_word(c->scratch_), c->word_);
        if (m.ok()) {
          c->mark_ = *m;
          c->phase_ = StagedCopy::Phase::early_reading;
          StagingCounters& k = staging_counters(info_.gpu);
          k.copies_to_host.fetch_add(1, std::memory_order_relaxed);
          k.to_host_bytes.fetch_add(sizeof(uint64_t), std::memory_order_relaxed);
        } else {
          give_scratch(c->scratch_);
          c->scratch_ = -1;
        }
      }
      // (no early read: the update reads in its turn, as an unheld one does)
    }
    return c;
  }
  {
    std::lock_guard<std::mutex> g(words_mu_);
    word_turns_[c->word_].push_back(c.get());
  }
  // Its first phase now where it is its turn (a copy that cannot start fails here).
  auto d = c->advance();
  if (!d.ok()) return d.status();
  return c;
}

}  // namespace xport::gpu
