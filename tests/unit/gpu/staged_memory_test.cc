// gpu::StagedMemory over the fake driver: shadows, copies in and out, chunking, copy queues lent
// and given back, shadows freed.
#include "gpu/staged_memory.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
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

// Every copy queue a shadow uses is its GPU's lanes (and the read-ahead queue of signal words),
// opened with the first shadow there: copies in flight share them, however many, and each
// lands whole; none is opened later, when kernels may run (creating a CUDA stream can wait for
// them), nor by later shadows of the same GPU while one lives.
TEST(StagedMemory, CopiesShareTheLanesOpenedWithTheShadow) {
  test::FakeGpuDriver d;
  constexpr size_t n = 64 * 1024;
  auto* dev = static_cast<uint8_t*>(*d.alloc_gpu(n, 0));
  auto m = StagedMemory::create(d, dev, n, *d.classify(dev));
  ASSERT_TRUE(m.ok());
  const int opened = d.queues_opened();
  EXPECT_GE(opened, 2);
  EXPECT_LE(opened, 8) << "copy queues a shadow opens up front";
  d.kernels_running(true);
  {
    auto* other_gpu = static_cast<uint8_t*>(*d.alloc_gpu(4096, 0));
    auto other = StagedMemory::create(d, other_gpu, 4096, *d.classify(other_gpu));
    ASSERT_TRUE(other.ok());
    EXPECT_EQ(d.queues_opened(), opened) << "a second shadow of the GPU opened copy queues";
    other->reset();
    d.free_gpu(other_gpu);
  }
  std::vector<std::unique_ptr<StagedCopy>> outs;
  for (int i = 0; i < 32; ++i) {
    std::memset((*m)->shadow() + i * 1024, i + 1, 1024);
    auto c = (*m)->start_copy_out({{dev + i * 1024, 1024}});
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    outs.push_back(std::move(c).value());
  }
  std::vector<std::vector<uint8_t>> ins(16, std::vector<uint8_t>(1024));
  std::vector<std::unique_ptr<StagedCopyIn>> in_copies;
  for (int i = 0; i < 16; ++i) {
    auto c = (*m)->start_copy_in_to(ins[i].data(), dev + 40 * 1024 + i * 1024, 1024, 256);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    in_copies.push_back(std::move(c).value());
  }
  std::memset(dev + 60 * 1024, 0, 16 * 8);
  std::vector<std::unique_ptr<StagedCopy>> words;
  for (int i = 0; i < 32; ++i) {
    auto c = (*m)->start_word_update(dev + 60 * 1024 + (i % 16) * 8, WordOp::add, 1);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    words.push_back(std::move(c).value());
  }
  for (auto& c : outs) ASSERT_TRUE(c->wait().ok());
  for (auto& c : in_copies) ASSERT_TRUE(c->wait().ok());
  for (auto& c : words) ASSERT_TRUE(c->wait().ok());
  d.kernels_running(false);
  EXPECT_EQ(d.queues_opened_while_kernels_run(), 0) << "a copy queue opened while kernels run";
  EXPECT_EQ(d.queues_opened(), opened);
  for (int i = 0; i < 32; ++i) {
    const std::vector<uint8_t> want(1024, static_cast<uint8_t>(i + 1));
    EXPECT_EQ(std::memcmp(dev + i * 1024, want.data(), 1024), 0) << "copy out " << i;
  }
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(std::memcmp(ins[i].data(), dev + 40 * 1024 + i * 1024, 1024), 0) << i;
    uint64_t v;
    std::memcpy(&v, dev + 60 * 1024 + i * 8, 8);
    EXPECT_EQ(v, 2u) << "word " << i;
  }
  outs.clear();
  in_copies.clear();
  words.clear();
  m->reset();
  d.free_gpu(dev);
}

// A copy in dropped before it is done (an operation failed with its stream, under the engine's
// lock): the drop does not wait for the copy, and what owns the bytes it writes into (an
// operation's staging bytes) is held until the copy is done, then let go.
TEST(StagedMemory, ACopyInDroppedEarlyHoldsItsBytesUntilDoneWithoutWaiting) {
  test::FakeGpuDriver d;
  constexpr size_t n = 4096;
  auto* dev = static_cast<uint8_t*>(*d.alloc_gpu(n, 0));
  auto m = StagedMemory::create(d, dev, n, *d.classify(dev));
  ASSERT_TRUE(m.ok());
  for (size_t i = 0; i < n; ++i) dev[i] = static_cast<uint8_t>(i * 7);
  std::vector<uint8_t> bytes(n, 0);
  auto keep = std::make_shared<int>(0);
  std::weak_ptr<int> held = keep;
  d.hold_copies_into(bytes.data(), n);  // (a copy that takes long)
  auto c = (*m)->start_copy_in_to(bytes.data(), dev, n, 1024);
  ASSERT_TRUE(c.ok());
  (*c)->keep_until_done(std::move(keep));
  const uint64_t copied = d.bytes_to_host();
  c->reset();
  EXPECT_EQ(d.bytes_to_host(), copied) << "dropping the copy waited for it";
  EXPECT_FALSE(held.expired()) << "the bytes were let go while the copy still writes them";
  d.release_held();
  for (int i = 0; i < 10 && !held.expired(); ++i) {
    auto o = (*m)->start_copy_out({{dev, 8}});  // (a copy's start lets go of what drained)
    ASSERT_TRUE(o.ok());
    ASSERT_TRUE((*o)->wait().ok());
  }
  EXPECT_TRUE(held.expired()) << "the bytes were never let go";
  EXPECT_EQ(std::memcmp(bytes.data(), dev, n), 0);
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
