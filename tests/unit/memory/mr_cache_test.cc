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
  std::vector<std::shared_ptr<FakeRegistration>> dropped;
  EXPECT_EQ(cache.find(mem.data(), 10, dropped), nullptr);
  auto a = std::make_shared<FakeRegistration>(FakeRegistration{4096});
  cache.insert(mem.data(), a);
  EXPECT_EQ(cache.find(mem.data(), 4096, dropped), a);
  EXPECT_EQ(cache.find(mem.data() + 100, 100, dropped), a);
  EXPECT_EQ(cache.find(mem.data() + 4000, 97, dropped), nullptr) << "runs past the end";
  EXPECT_EQ(cache.find(mem.data() + 4096, 1, dropped), nullptr);
  auto b = std::make_shared<FakeRegistration>(FakeRegistration{8192});
  cache.insert(mem.data() + 8192, b);
  EXPECT_EQ(cache.find(mem.data() + 9000, 1000, dropped), b);
  EXPECT_EQ(cache.hits(), 3u);
  EXPECT_EQ(cache.misses(), 3u);
  dropped.clear();  // the lookups' references to candidates they passed over
  a.reset();  // the last owner is gone: never handed out again
  EXPECT_EQ(cache.find(mem.data() + 100, 100, dropped), nullptr);
  EXPECT_EQ(cache.size(), 1u) << "expired entries are dropped on lookup";
  cache.erase(mem.data() + 8192, b.get());
  EXPECT_EQ(cache.find(mem.data() + 9000, 1, dropped), nullptr);
}

}  // namespace
}  // namespace xport::memory
