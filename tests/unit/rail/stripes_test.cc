// Striping plans (rail/stripes.hpp): the stripe count a message gets, and stripes that cover it
// exactly, aligned and non-empty.
#include <gtest/gtest.h>

#include <random>

#include "rail/stripes.hpp"

namespace xport::rail {
namespace {

constexpr uint32_t kRails = 32;  // the most rails a message names (proto's kMaxRails)

TEST(StripePlan, CoversTheMessageExactlyWithAlignedNonEmptyStripes) {
  StripePlan p;
  p.threshold = 256 * 1024;
  p.min = 64 * 1024;
  p.align = 4096;
  EXPECT_EQ(stripe_count(p, 100, 4), 1u);
  EXPECT_EQ(stripe_count(p, 256 * 1024, 1), 1u) << "one rail: never striped";
  EXPECT_EQ(stripe_count(p, 256 * 1024, 8), 4u) << "at least XPORT_STRIPE_MIN per stripe";
  EXPECT_EQ(stripe_count(p, 4 << 20, 4), 4u);
  p.max_rails = 2;
  EXPECT_EQ(stripe_count(p, 4 << 20, 4), 2u);
  p.max_rails = 0;
  std::mt19937_64 rng(5);
  for (int t = 0; t < 2000; ++t) {
    const uint64_t len = p.threshold + rng() % (64ull << 20);
    const uint32_t rails = 1 + rng() % kRails;
    const uint32_t n = stripe_count(p, len, rails);
    ASSERT_GE(n, 1u);
    ASSERT_LE(n, rails);
    ASSERT_EQ(stripe_offset(p, len, n, 0), 0u);
    ASSERT_EQ(stripe_offset(p, len, n, n), len);
    for (uint32_t i = 0; i < n; ++i) {
      const uint64_t a = stripe_offset(p, len, n, i), b = stripe_offset(p, len, n, i + 1);
      ASSERT_LT(a, b) << "stripe " << i << " of " << n << " for " << len << " bytes is empty";
      if (i > 0) {
        ASSERT_EQ(a % p.align, 0u);
      }
    }
  }
}

}  // namespace
}  // namespace xport::rail
