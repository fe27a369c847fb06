// The MR cache: a registration covering a range is reused while any Region holding it lives
// (interval lookup by base address, shared ownership as the refcount, hits and misses counted).
// Only live registrations are reused: a Region promises its memory stays allocated, so a hit
// can never reach pages the caller already freed.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "fabric/counters.hpp"

namespace xport::memory {

template <typename Registration>
class MrCache {
 public:
  // The live registration whose [base, base+length) covers [p, p+len), or nullptr. Strong
  // references taken while probing candidates are dropped only after the walk, and by the
  // caller's `graveyard`: dropping the last one deregisters, which erases from this map.
  std::shared_ptr<Registration> find(const void* p, size_t len,
                                     std::vector<std::shared_ptr<Registration>>& graveyard) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    // Candidates start at or below `a`; walk down the nearest ones (registrations rarely nest
    // deeply, and the walk is bounded).
    auto it = entries_.upper_bound(a);
    for (int steps = 0; it != entries_.begin() && steps < kMaxProbe; ++steps) {
      --it;
      auto live = it->second.lock();
      if (!live) {
        it = entries_.erase(it);
        continue;
      }
      const uintptr_t base = it->first;
      if (a - base <= live->length && len <= live->length - (a - base)) {
        hits_.add();
        return live;
      }
      graveyard.push_back(std::move(live));
    }
    misses_.add();
    return nullptr;
  }

  void insert(const void* base, const std::shared_ptr<Registration>& r) {
    entries_.insert_or_assign(reinterpret_cast<uintptr_t>(base), r);
  }
  // Forgets `r` if it is the entry at `base` (a newer registration at the same base stays).
  void erase(const void* base, const Registration* r) {
    auto it = entries_.find(reinterpret_cast<uintptr_t>(base));
    if (it == entries_.end()) return;
    auto live = it->second.lock();
    if (!live || live.get() == r) entries_.erase(it);
    // `live` (when it is not `r`) is dropped here: it is another, still-owned registration.
  }

  uint64_t hits() const { return hits_.get(); }
  uint64_t misses() const { return misses_.get(); }
  size_t size() const { return entries_.size(); }

 private:
  static constexpr int kMaxProbe = 8;
  std::map<uintptr_t, std::weak_ptr<Registration>> entries_;
  fabric::Counter hits_;
  fabric::Counter misses_;
};

}  // namespace xport::memory
