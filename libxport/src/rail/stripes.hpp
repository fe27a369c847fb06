// Striping, the large-message half of the rail scheduler (design.md §2): how many stripes a
// message gets over a peer's rails and where each begins. Both ends compute the same plan.
#pragma once

#include <cstdint>

namespace xport::rail {

// The striping plan both sides compute from a message length and the sender's parameters.
struct StripePlan {
  uint64_t threshold = 256 * 1024;
  uint64_t min = 64 * 1024;
  uint32_t align = 4096;
  uint32_t max_rails = 0;
};
// Number of stripes of a `len`-byte message over `rails` rails (1 when not striped).
uint32_t stripe_count(const StripePlan& p, uint64_t len, uint32_t rails);
// Offset of stripe `i` of `n` (stripe i spans [offset(i), offset(i+1)); offset(n) = len).
uint64_t stripe_offset(const StripePlan& p, uint64_t len, uint32_t n, uint32_t i);

}  // namespace xport::rail
