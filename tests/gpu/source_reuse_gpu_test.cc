// A GPU source rewritten right after the call, on a real GPU (device machine; skips without
// one), 1 MiB on shm and tcp;ofi_rxm: a send waiting for its receiver's clear-to-send, then
// cudaMemset of the buffer and a second send from it, delivers the first bytes; the same for a
// put held behind a fence and a second put from the same range. Seen on 2 x H200 and 2 x H100:
// the first message arrived with the second one's bytes. (The stand-in driver's version, every
// operation: tests/integration/gpu_source_test.cc.)
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "../integration/harness.hpp"
#include "../integration/provider_fixture.hpp"
#include "gpu/driver.hpp"

extern "C" int xtest_cuda_memset(void* p, int value, size_t n);

namespace xport {
namespace {

using namespace std::chrono_literals;
using test::Pair;

Deadline soon() { return Deadline::after(60s); }

constexpr size_t kSize = size_t{1} << 20;

// The first byte of [p, p+n) that is not `value`, or -1.
long long not_all(const std::vector<uint8_t>& v, size_t from, size_t n, uint8_t value) {
  for (size_t i = 0; i < n; ++i) {
    if (v[from + i] != value) return static_cast<long long>(i);
  }
  return -1;
}

class GpuSourceReuse : public test::ProviderTest {
 protected:
  void SetUp() override {
    if (!gpu::driver().available()) GTEST_SKIP() << "no GPU: " << gpu::driver().describe();
    test::ProviderTest::SetUp();
  }
  void TearDown() override {
    test::ProviderTest::TearDown();
    for (void* p : allocs_) gpu::driver().free_gpu(p);
  }
  uint8_t* gpu_alloc(size_t n) {
    auto p = gpu::driver().alloc_gpu(n, 0);
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    if (!p.ok()) return nullptr;
    allocs_.push_back(*p);
    return static_cast<uint8_t*>(*p);
  }
  std::vector<void*> allocs_;
};

TEST_P(GpuSourceReuse, ASendBeforeTheReceiverPostsKeepsItsBytesThroughCudaMemset) {
  Pair p = test::connect_pair(*dev_, *dev_);
  ASSERT_TRUE(p.send && p.recv);
  uint8_t* src = gpu_alloc(kSize);
  ASSERT_NE(src, nullptr);
  std::vector<uint8_t> dst(2 * kSize, 0);
  auto sreg = dev_->register_memory(src, kSize);
  auto dreg = dev_->register_memory(dst.data(), dst.size());
  ASSERT_TRUE(sreg.ok() && dreg.ok());
  ASSERT_EQ(sreg->memory_type(), MemoryType::cuda);
  ASSERT_EQ(xtest_cuda_memset(src, 0x11, kSize), 0);
  auto s1 = p.send->isend(src, kSize, *sreg);  // no receive posted: waits for its clear-to-send
  ASSERT_TRUE(s1.ok()) << s1.status().to_string();
  ASSERT_EQ(xtest_cuda_memset(src, 0x22, kSize), 0);  // "may be reused as soon as the call returns"
  auto s2 = p.send->isend(src, kSize, *sreg);
  ASSERT_TRUE(s2.ok()) << s2.status().to_string();
  ASSERT_EQ(xtest_cuda_memset(src, 0x33, kSize), 0);
  auto r1 = p.recv->irecv(dst.data(), kSize, *dreg);
  auto r2 = p.recv->irecv(dst.data() + kSize, kSize, *dreg);
  ASSERT_TRUE(r1.ok() && r2.ok());
  ASSERT_TRUE(p.recv->wait(*r1, soon()).ok());
  ASSERT_TRUE(p.recv->wait(*r2, soon()).ok());
  ASSERT_TRUE(p.send->wait(*s1, soon()).ok());
  ASSERT_TRUE(p.send->wait(*s2, soon()).ok());
  EXPECT_EQ(not_all(dst, 0, kSize, 0x11), -1) << "the first message carries later bytes";
  EXPECT_EQ(not_all(dst, kSize, kSize, 0x22), -1) << "the second message carries later bytes";
}

TEST_P(GpuSourceReuse, AFencedPutThenASecondPutFromTheSameRange) {
  Pair p = test::connect_pair(*dev_, *dev_);
  ASSERT_TRUE(p.send && p.recv);
  auto w = Window::open(*p.send, soon());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  uint8_t* src = gpu_alloc(kSize);
  ASSERT_NE(src, nullptr);
  std::vector<uint8_t> target(3 * kSize, 0), host(64, 1);
  auto sreg = dev_->register_memory(src, kSize);
  auto treg = dev_->register_memory(target.data(), target.size());
  auto hreg = dev_->register_memory(host.data(), host.size());
  ASSERT_TRUE(sreg.ok() && treg.ok() && hreg.ok());
  auto tkey = dev_->import_key(treg->export_key());
  ASSERT_TRUE(tkey.ok());
  ASSERT_TRUE((*w)->put(*hreg, 0, *tkey, 2 * kSize, 64).ok());
  ASSERT_TRUE((*w)->fence().ok());  // the next put is held until the first is delivered
  ASSERT_EQ(xtest_cuda_memset(src, 0x44, kSize), 0);
  ASSERT_TRUE((*w)->put(*sreg, 0, *tkey, 0, kSize).ok());
  ASSERT_EQ(xtest_cuda_memset(src, 0x55, kSize), 0);
  ASSERT_TRUE((*w)->put(*sreg, 0, *tkey, kSize, kSize).ok());
  ASSERT_EQ(xtest_cuda_memset(src, 0x66, kSize), 0);
  ASSERT_TRUE((*w)->quiet(soon()).ok());
  EXPECT_EQ(not_all(target, 0, kSize, 0x44), -1) << "the fenced put sent later bytes";
  EXPECT_EQ(not_all(target, kSize, kSize, 0x55), -1);
}

INSTANTIATE_TEST_SUITE_P(Providers, GpuSourceReuse,
                         ::testing::Values(test::ProviderParam{"shm", "auto"},
                                           test::ProviderParam{"tcp;ofi_rxm", "auto"}),
                         test::provider_param_name);

}  // namespace
}  // namespace xport
