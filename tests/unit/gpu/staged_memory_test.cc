// gpu::StagedMemory over the fake driver: shadows, copies in and out, chunking, copy queues lent
// and given back, shadows freed.
#include "gpu/staged_memory.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "fake_driver.hpp"

namespace xport::gpu {
namespace {

TEST(StagedMemory, TheShadowStartsAsTheGpuBytes) {
  test::FakeGpuDriver d;
  const size_t n = 3 * 4096;
  auto* dev = static_cast<uint8_t*>(*d.alloc_gpu(n, 0));
  for (size_t i = 0; i < n; ++i) dev[i] = static_cast<uint8_t>(i * 13 + 1);
  auto info = d.classify(dev);
  ASSERT_TRUE(info.ok());
  d.scribble_pinned(0xEE);  // page-locked memory is not zeroed for us
  auto m = StagedMemory::create(d, dev, n, *info);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(std::memcmp((*m)->shadow(), dev, n), 0)
      << "a signal word set on the GPU before registering must read the same in the shadow";
  m->reset();
  d.free_gpu(dev);
}

TEST(StagedMemory, CopiesInAndOutThroughTheShadow) {
  test::FakeGpuDriver d;
  const size_t n = kStagingChunk * 2 + 123;  // more than one chunk
  auto* dev = static_cast<uint8_t*>(*d.alloc_gpu(n, 0));
  for (size_t i = 0; i < n; ++i) dev[i] = static_cast<uint8_t>(i * 7);
  auto info = d.classify(dev);
  ASSERT_TRUE(info.ok());
  ASSERT_EQ(info->kind, MemoryKind::gpu);
  {
    auto m = StagedMemory::create(d, dev, n, *info);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_EQ((*m)->shadow_of(dev + 10), (*m)->shadow() + 10);
    EXPECT_EQ((*m)->shadow_of(dev + n + 1), nullptr);
    ASSERT_TRUE((*m)->copy_in(dev + 5, n - 5).ok());
    EXPECT_EQ(std::memcmp((*m)->shadow() + 5, dev + 5, n - 5), 0);
    EXPECT_EQ((*m)->shadow()[0], 0) << "copied outside the range asked for";
    std::memset((*m)->shadow(), 0x5A, n);
    auto c = (*m)->start_copy_out({{dev + 100, 1000}, {dev + 5000, 10}});
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_NE(dev[100], 0x5A) << "the fake runs copies only when asked";
    bool done = false;
    for (int i = 0; i < 10 && !done; ++i) done = *(*c)->done();
    ASSERT_TRUE(done);
    EXPECT_EQ(dev[100], 0x5A);
    EXPECT_EQ(dev[1099], 0x5A);
    EXPECT_NE(dev[1100], 0x5A);
    EXPECT_EQ(dev[5009], 0x5A);
    EXPECT_EQ((*m)->bytes_out(), 1010u);
    // Out of range: refused, nothing copied.
    EXPECT_EQ((*m)->copy_in(dev + n - 1, 2).code(), Code::invalid_argument);
    EXPECT_EQ((*m)->copy_out(dev - 1, 2).code(), Code::invalid_argument);
    EXPECT_EQ(d.pinned_live(), 2) << "the shadow and its signal scratch words";
  }
  EXPECT_EQ(d.pinned_live(), 0) << "the shadow outlived its StagedMemory";
  d.free_gpu(dev);
}

TEST(StagedMemory, ConcurrentCopiesUseQueuesOfTheirOwn) {
  test::FakeGpuDriver d;
  auto* dev = static_cast<uint8_t*>(*d.alloc_gpu(4096, 0));
  auto m = StagedMemory::create(d, dev, 4096, *d.classify(dev));
  ASSERT_TRUE(m.ok());
  auto a = (*m)->start_copy_out({{dev, 10}});
  auto b = (*m)->start_copy_out({{dev + 10, 10}});
  ASSERT_TRUE(a.ok() && b.ok());
  // (one more, the read-ahead queue of signal words, opened with the shadow)
  EXPECT_EQ(d.queues_opened(), 3) << "two copies in flight share no copy queue";
  ASSERT_TRUE((*a)->wait().ok());
  ASSERT_TRUE((*b)->wait().ok());
  a->reset();
  b->reset();
  auto c = (*m)->start_copy_out({{dev, 10}});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(d.queues_opened(), 3) << "a copy queue given back is lent again";
  c->reset();
  m->reset();
  d.free_gpu(dev);
}

TEST(GpuDriver, TheProcessDriverSeesHostMemoryAsHost) {
  std::vector<uint8_t> host(64);
  auto info = driver().classify(host.data());
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->kind, MemoryKind::host);
  EXPECT_FALSE(driver().describe().empty());
}

}  // namespace
}  // namespace xport::gpu
