// The MR cache: covering lookups, live-only hits, counted hits and misses.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "memory/mr_cache.hpp"

namespace xport::memory {
namespace {

struct FakeRegistration {
  size_t length;
};

TEST(MrCache, HitsOnlyLiveCoveringRegistrations) {
  std::vector<uint8_t> mem(1 << 16);
  MrCache<FakeRegistration> cache;
  EXPECT_EQ(cache.find(mem.data(), 10), nullptr);
  auto a = std::make_shared<FakeRegistration>(FakeRegistration{4096});
  cache.insert(mem.data(), a);
  EXPECT_EQ(cache.find(mem.data(), 4096), a);
  EXPECT_EQ(cache.find(mem.data() + 100, 100), a);
  EXPECT_EQ(cache.find(mem.data() + 4000, 97), nullptr) << "runs past the end";
  EXPECT_EQ(cache.find(mem.data() + 4096, 1), nullptr);
  auto b = std::make_shared<FakeRegistration>(FakeRegistration{8192});
  cache.insert(mem.data() + 8192, b);
  EXPECT_EQ(cache.find(mem.data() + 9000, 1000), b);
  EXPECT_EQ(cache.hits(), 3u);
  EXPECT_EQ(cache.misses(), 3u);
  a.reset();  // the last owner is gone: never handed out again
  EXPECT_EQ(cache.find(mem.data() + 100, 100), nullptr);
  EXPECT_EQ(cache.size(), 1u) << "expired entries are dropped on lookup";
  cache.erase(mem.data() + 8192, b.get());
  EXPECT_EQ(cache.find(mem.data() + 9000, 1), nullptr);
}

}  // namespace
}  // namespace xport::memory
