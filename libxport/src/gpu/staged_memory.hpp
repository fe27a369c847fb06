// GPU memory the provider cannot register (no FI_HMEM, no DMA-BUF): a page-locked host shadow
// of the same size is registered in its place, and data moves between the GPU range and its
// shadow by copies on copy queues (non-blocking CUDA streams): the lanes every shadow of the GPU
// shares (gpu/copy_lanes.hpp: none is opened while kernels may run), chunked so that large
// copies of several threads interleave. Sources are copied in before an operation is posted;
// destinations are copied out once the provider has filled the shadow (docs/semantics.md, "GPU
// memory").
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "gpu/copy_lanes.hpp"
#include "gpu/driver.hpp"

namespace xport::gpu {

class StagedMemory;

// How a signal word in staged GPU memory changes (StagedMemory::start_word_update).
enum class WordOp : uint8_t { add, set };

// Copies out in flight, on one of their GPU's lanes; or a signal word's update on the
// GPU, which goes through its phases as done() is polled.
class StagedCopy {
 public:
  StagedCopy(std::shared_ptr<StagedMemory> owner, std::shared_ptr<CopyQueue> queue, uint64_t mark);
  ~StagedCopy();
  StagedCopy(const StagedCopy&) = delete;
  StagedCopy& operator=(const StagedCopy&) = delete;
  // Never blocks.
  Result<bool> done();
  // A signal word's update (begun: it holds its place in the word's line), not a copy out.
  bool word_update() const { return word_ != nullptr; }
  // Blocks until done.
  Status wait();
  // A word update started held (start_word_update's `held`): it now takes its turn on the word
  // and applies its operation.
  void release();

 private:
  friend class StagedMemory;
  // A word update: waits for its turn on the word, reads the GPU word into the shadow (add),
  // applies the operation to the shadow word, writes it back to the GPU. A held one reads the
  // GPU word ahead into a scratch word (early_*), outside the word's line; at its turn that value
  // serves if no other update of the word finished since the read was enqueued.
  enum class Phase : uint8_t { copy, early_reading, early_read, turn, reading, read, writing };
  StagedCopy(std::shared_ptr<StagedMemory> owner, uint8_t* word, WordOp op, uint64_t operand);
  Result<bool> advance();
  void give_back();
  std::shared_ptr<StagedMemory> owner_;
  std::shared_ptr<CopyQueue> queue_;  // the lane it copies on (word updates: from their turn)
  uint64_t mark_ = 0;
  bool done_ = false;
  Phase phase_ = Phase::copy;
  bool written_ = false;  // the result's copy back to the GPU is enqueued
  bool held_ = false;     // read the GPU word, but apply nothing before release()
  int scratch_ = -1;      // the early read's pinned word (StagedMemory's scratch slots)
  uint64_t read_version_ = 0;  // the word's version when the early read was enqueued
  uint8_t* word_ = nullptr;  // GPU address (word updates)
  WordOp op_ = WordOp::add;
  uint64_t operand_ = 0;
};

// A source's copy into host bytes of its own (an operation's staging bytes), enqueued piece by
// piece with a mark after each, so that the operation can post each piece as it lands: how much
// of it, from its start, is in place. On one of its GPU's lanes.
class StagedCopyIn {
 public:
  StagedCopyIn(std::shared_ptr<StagedMemory> owner, std::shared_ptr<CopyQueue> queue,
               std::vector<std::pair<uint64_t, size_t>> marks, size_t length);
  // Dropped before the copy is done: with keep_until_done, hands `keep` and its copy's last mark
  // to its StagedMemory, which lets go of them once the copy is done (never waits: it may be
  // dropped under the engine's lock, a stream failing); without, waits for what is still
  // copying (the bytes it writes may be given back after it).
  ~StagedCopyIn();
  StagedCopyIn(const StagedCopyIn&) = delete;
  StagedCopyIn& operator=(const StagedCopyIn&) = delete;
  // Bytes in place from the start: every piece whose mark was reached. Never blocks.
  Result<size_t> ready();
  size_t length() const { return length_; }
  // Blocks until every piece is in place.
  Status wait();
  // What owns the bytes it writes into (an operation's staging bytes): held until the copy is
  // done, however early this is dropped.
  void keep_until_done(std::shared_ptr<void> keep) { keep_ = std::move(keep); }

 private:
  void finish(bool ok);
  std::shared_ptr<StagedMemory> owner_;
  std::shared_ptr<CopyQueue> queue_;
  std::vector<std::pair<uint64_t, size_t>> marks_;  // (mark, bytes in place once reached)
  size_t next_ = 0;
  size_t ready_ = 0;
  size_t length_ = 0;
  Status error_;  // the copy failed: every later call says so
  std::shared_ptr<void> keep_;
};

class StagedMemory : public std::enable_shared_from_this<StagedMemory> {
 public:
  // A shadow for the GPU range [base, base+length) that `info` describes.
  static Result<std::shared_ptr<StagedMemory>> create(Driver& driver, void* base, size_t length,
                                                      const PointerInfo& info);
  ~StagedMemory();
  StagedMemory(const StagedMemory&) = delete;
  StagedMemory& operator=(const StagedMemory&) = delete;

  uint8_t* gpu_base() const { return base_; }
  size_t length() const { return length_; }
  uint8_t* shadow() const { return shadow_; }
  int gpu() const { return info_.gpu; }  // its CUDA device ordinal
  // The shadow's address for the GPU address p, or nullptr when p is outside the range.
  uint8_t* shadow_of(const void* p) const;
  bool contains(const void* p, size_t n) const;

  // The GPU address for the shadow address s, or nullptr when s is outside the shadow.
  uint8_t* gpu_of(const void* s) const;
  // (gpu_of's former name, still called by proto/signal.cc: goes once proto moves to gpu_of)
  uint8_t* device_of(const void* s) const { return gpu_of(s); }

  // GPU -> shadow for [p, p+n); done when it returns.
  Status copy_in(const void* p, size_t n);
  // GPU [p, p+n) -> host memory at dst (an operation's own staging bytes); done when it returns.
  Status copy_in_to(void* dst, const void* p, size_t n);
  // The same, started in pieces of `piece` bytes (0: one); the StagedCopyIn says how much of it
  // is in place as the pieces land.
  Result<std::unique_ptr<StagedCopyIn>> start_copy_in_to(void* dst, const void* p, size_t n,
                                                         size_t piece);
  // shadow -> GPU for [p, p+n); done when it returns.
  Status copy_out(void* p, size_t n);
  // shadow -> GPU for each range, started; the StagedCopy says when they are done.
  Result<std::unique_ptr<StagedCopy>> start_copy_out(const std::vector<std::pair<void*, size_t>>& ranges);
  // A signal word's update on the GPU at `word` (8 bytes, inside the range): add reads the GPU
  // word first (so a kernel's own write to it, a reset, is seen), then the shadow word gets the
  // result and is copied back. Updates of one word run one after the other, in the order
  // started; the StagedCopy says when the GPU holds the result. Never blocks. `held`: the update
  // takes its turn and reads the word now, but applies nothing until release() (a signal that
  // arrived before its turn to apply: its read overlaps what it waits for).
  Result<std::unique_ptr<StagedCopy>> start_word_update(void* word, WordOp op, uint64_t operand,
                                                        bool held = false);

  uint64_t bytes_in() const { return bytes_in_; }
  uint64_t bytes_out() const { return bytes_out_; }

 private:
  friend class StagedCopy;
  friend class StagedCopyIn;
  StagedMemory(Driver& driver, uint8_t* base, size_t length, const PointerInfo& info,
               uint8_t* shadow);
  // The lane the next copy goes on (CopyLanes::next); lets go of what drained.
  std::shared_ptr<CopyQueue> lane();
  // A copy dropped before it was done (StagedCopyIn): `keep` (what it writes into) is held until
  // `mark` of `q` is reached. Never waits.
  void drain_later(std::shared_ptr<CopyQueue> q, uint64_t mark, std::shared_ptr<void> keep);
  // A copy on `q` failed (CopyLanes::failed).
  void lane_failed(const std::shared_ptr<CopyQueue>& q) { lanes_->failed(q); }
  // Word updates in their order per word: joining the line, whose turn it is, and leaving it
  // (a finished update bumps the word's version).
  void join_turn(const StagedCopy* c);
  bool my_turn(const StagedCopy* c);
  void leave_turn(const StagedCopy* c, bool wrote);
  uint64_t word_version(const uint8_t* word);
  // Pinned scratch words for early reads: a slot, or -1 when all are taken.
  int take_scratch();
  void give_scratch(int slot);
  uint64_t* scratch_word(int slot) const { return scratch_ + slot; }
  // Early reads go on a copy queue of their own (CopyLanes::ahead; nothing is allocated or
  // created while kernels may be running: page-locked allocations can wait for them).
  Result<uint64_t> read_ahead(uint64_t* dst, const uint8_t* word);
  Result<bool> read_ahead_reached(uint64_t mark);

  Driver& driver_;
  uint8_t* base_;
  size_t length_;
  PointerInfo info_;
  uint8_t* shadow_;
  std::shared_ptr<CopyLanes> lanes_;  // this GPU's, shared with its other shadows
  std::mutex mu_;  // guards draining_ only: no copy runs or waits under it
  struct Draining {
    std::shared_ptr<CopyQueue> queue;
    uint64_t mark;
    std::shared_ptr<void> keep;
  };
  std::vector<Draining> draining_;
  std::mutex words_mu_;  // guards word_turns_, word_versions_ and the scratch slots
  std::map<const uint8_t*, std::deque<const StagedCopy*>> word_turns_;
  std::map<const uint8_t*, uint64_t> word_versions_;
  uint64_t* scratch_ = nullptr;  // kScratchWords pinned words, allocated with the shadow
  std::vector<int> scratch_free_;
  static constexpr int kScratchWords = 256;
  std::atomic<uint64_t> bytes_in_{0};
  std::atomic<uint64_t> bytes_out_{0};
};

// Copies are enqueued in chunks of this size (so one large copy does not hold a copy engine
// away from the others for its whole length).
inline constexpr size_t kStagingChunk = size_t{4} << 20;

}  // namespace xport::gpu
