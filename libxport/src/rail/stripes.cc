// Striping a message over rails: the stripe count and each stripe's offset (stripes.hpp).
#include "rail/stripes.hpp"

namespace xport::rail {

uint32_t stripe_count(const StripePlan& p, uint64_t len, uint32_t rails) {
  if (rails <= 1 || len < p.threshold || p.min == 0) return 1;
  uint64_t n = len / p.min;
  if (p.max_rails != 0 && n > p.max_rails) n = p.max_rails;
  if (n > rails) n = rails;
  return n < 1 ? 1 : static_cast<uint32_t>(n);
}

uint64_t stripe_offset(const StripePlan& p, uint64_t len, uint32_t n, uint32_t i) {
  if (i >= n) return len;
  if (i == 0) return 0;
  // Even shares, boundaries rounded down to the alignment (no overflow: len < 2^32 * n).
  const unsigned __int128 raw = static_cast<unsigned __int128>(len) * i / n;
  const uint64_t off = static_cast<uint64_t>(raw) & ~(static_cast<uint64_t>(p.align) - 1);
  return off;
}

}  // namespace xport::rail
