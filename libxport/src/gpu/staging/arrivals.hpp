// GPU memory in the operations: staged destinations (receives, gets) are copied out of their
// host shadow once the engine reports them filled, before the request or ticket is reported
// done; staged sources are copied in first (gpu/staging/staging_pool.hpp); where registered
// GPU memory goes: gpu/staging/placement.hpp (docs/semantics.md, "GPU memory").
#pragma once

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include <optional>

#include "gpu/staged_memory.hpp"
#include "xport/comm.hpp"
#include "xport/status.hpp"

namespace xport::gpu {

// Destinations of staged receives and gets waiting for the engine, then for their copies out,
// keyed by request sequence or window ticket. Thread-safe; no copy waits under its lock.
class StagedArrivals {
 public:
  struct Target {
    std::shared_ptr<gpu::StagedMemory> memory;
    void* dst = nullptr;  // GPU address
    size_t capacity = 0;  // the buffer's length (the copy is of what arrived, at most this)
  };
  void expect(uint64_t key, std::vector<Target> targets);
  bool expects(uint64_t key) const { return !empty() && expects_held(key); }
  uint64_t last_key() const;  // the largest key expected now (0: none)
  // The engine's completion of a receive, kept while its copies run (the engine reports a
  // request done once).
  void record(uint64_t key, const Completion& c);
  std::optional<Completion> recorded(uint64_t key) const;
  // The engine reports `key` done with sizes[i] bytes in target i (empty: every target whole):
  // copies start (once), and the answer says whether they are finished. Never blocks.
  Result<bool> arrived(uint64_t key, std::span<const size_t> sizes);
  // The same, blocking until the copies are finished.
  Status arrived_wait(uint64_t key, std::span<const size_t> sizes);
  // Every key at or below `key` that arrived: copied out, blocking (a window's quiet).
  Status settle_through(uint64_t key);
  void forget(uint64_t key);

  // Window tickets that must complete with `key` (publishes of puts into a peer's staged GPU
  // memory, and signals behind them).
  void follow(uint64_t key, uint64_t follower);
  std::vector<uint64_t> followers(uint64_t key) const;
  void forget_followers(uint64_t key);
  uint64_t last_followed() const;  // the largest key with followers (0: none)
  void forget_followers_through(uint64_t key);  // a quiet covered them

 private:
  struct Entry {
    std::vector<Target> targets;
    std::vector<std::unique_ptr<gpu::StagedCopy>> copies;
    bool started = false;
    std::optional<Completion> completion;
  };
  Status start(Entry& e, std::span<const size_t> sizes);
  bool expects_held(uint64_t key) const;  // (expects(), under the lock)
  // Entries and followers held (written under mu_ after every change): most requests and
  // tickets never touch staged memory, and their calls (every wait, test, check and quiet)
  // answer from this word without the lock. A key expected by another thread is seen once
  // that thread's expect() happened before the call, as with the lock.
  bool empty() const { return held_.load(std::memory_order_acquire) == 0; }
  void count_held() { held_.store(entries_.size() + followers_.size(), std::memory_order_release); }
  mutable std::mutex mu_;
  std::map<uint64_t, std::shared_ptr<Entry>> entries_;
  std::map<uint64_t, std::vector<uint64_t>> followers_;
  std::atomic<size_t> held_{0};
};

}  // namespace xport::gpu
