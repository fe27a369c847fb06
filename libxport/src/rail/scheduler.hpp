// The rail scheduler (design.md §2): which rails carry traffic towards a peer (in service here,
// not reported down at the peer's end), round-robin over them, and the error when none does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "rail/rail.hpp"
#include "xport/status.hpp"

namespace xport::rail {

class Scheduler {
 public:
  explicit Scheduler(const std::vector<std::unique_ptr<Rail>>& rails) : rails_(rails) {}

  // `down`: the rails the peer reported out of service at its end, a bit per rail index (0: no
  // peer, or none down).
  bool usable(size_t rail, uint32_t down) const {
    return rails_[rail]->in_service() && (down & (1u << rail)) == 0;
  }
  // Round-robin over the first `n` rails: the next usable one after `cursor` (any when none is:
  // the caller has checked healthy() first where that matters).
  size_t pick(size_t n, uint32_t& cursor, uint32_t down) const {
    for (size_t tries = 0; tries < n; ++tries) {
      const size_t i = cursor++ % n;
      if (usable(i, down)) return i;
    }
    return cursor++ % n;
  }
  // The usable rails among the first `limit`, written to `out` (room for `limit`) without
  // allocating (hot path); 0 when none is.
  uint32_t healthy(size_t limit, uint32_t* out, uint32_t down) const {
    uint32_t n = 0;
    for (uint32_t i = 0; i < limit; ++i)
      if (usable(i, down)) out[n++] = i;
    return n;
  }
  // The error when no rail among the first `limit` is usable, naming each one's reason (cold
  // path).
  Status none_usable(size_t limit, const char* what) const;

 private:
  const std::vector<std::unique_ptr<Rail>>& rails_;
};

}  // namespace xport::rail
