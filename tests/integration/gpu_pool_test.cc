// The staging pool of GPU sources (gpu/staging/staging_pool.hpp) through the public API, with the
// stand-in CUDA driver: at its bound (XPORT_GPU_STAGING_POOL) a call answers Code::again with
// nothing issued, an operation larger than the pool can hold is refused by name, the pool grows
// in ordinary host memory beyond its page-locked slab and reuses what operations gave back, and
// the page-locked slab grows with the staged Regions registered.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "../unit/gpu/fake_driver.hpp"
#include "gpu/staging_counters.hpp"
#include "harness.hpp"
#include "provider_fixture.hpp"

namespace xport {
namespace {

using namespace std::chrono_literals;
using test::Pair;

Deadline soon() { return Deadline::after(20s); }

constexpr size_t kMiB = size_t{1} << 20;

class GpuPool : public test::ProviderTest {
 protected:
  uint8_t* gpu_alloc(size_t n) {
    auto p = gpu_->alloc_gpu(n, 0);
    EXPECT_TRUE(p.ok());
    allocs_.push_back(static_cast<uint8_t*>(*p));
    return allocs_.back();
  }
  void TearDown() override {
    test::ProviderTest::TearDown();
    for (uint8_t* p : allocs_) gpu_->free_gpu(p);
  }
  const gpu::StagingCounters& counters() const { return gpu::staging_counters(0); }
  test::FakeGpuScope gpu_;
  std::vector<uint8_t*> allocs_;
};

// A pool of 1 MiB: its page-locked first slab is all of it.
class GpuPoolAtItsBound : public GpuPool {
 protected:
  std::vector<std::pair<std::string, std::string>> extra_knobs() const override {
    return {{"XPORT_GPU_STAGING_POOL", "1M"}};
  }
};

// Two sends waiting for their receiver hold the whole pool: a third answers again, takes no
// sequence number and sends nothing; once they are done it goes. An operation larger than the
// pool is refused by name.
TEST_P(GpuPoolAtItsBound, ACallAtTheBoundAnswersAgainWithNothingIssued) {
  Pair p = test::connect_pair(*dev_, *dev_);
  ASSERT_TRUE(p.send && p.recv);
  const size_t half = kMiB / 2;
  uint8_t* src = gpu_alloc(2 * kMiB);
  std::vector<uint8_t> dst(3 * half);
  auto sreg = dev_->register_memory(src, 2 * kMiB);
  auto dreg = dev_->register_memory(dst.data(), dst.size());
  ASSERT_TRUE(sreg.ok() && dreg.ok());
  EXPECT_EQ(counters().pool_bytes.load(), kMiB) << "the first slab is made at registration";
  EXPECT_EQ(counters().pool_pinned_bytes.load(), kMiB);
  const uint64_t refusals = counters().pool_refusals.load();
  test::fill(src, half, 1);
  auto s1 = p.send->isend(src, half, *sreg);
  test::fill(src, half, 2);
  auto s2 = p.send->isend(src, half, *sreg);
  ASSERT_TRUE(s1.ok() && s2.ok());
  EXPECT_EQ(counters().pool_in_use_bytes.load(), kMiB);
  test::fill(src, half, 3);
  auto s3 = p.send->isend(src, half, *sreg);
  ASSERT_EQ(s3.status().code(), Code::again) << s3.status().to_string();
  EXPECT_NE(s3.status().message().find("XPORT_GPU_STAGING_POOL"), std::string::npos)
      << s3.status().to_string();
  EXPECT_EQ(counters().pool_refusals.load(), refusals + 1);
  // Larger than the pool can ever hold: refused by name, not "again" for ever.
  auto big = p.send->isend(src, 2 * kMiB, *sreg);
  EXPECT_EQ(big.status().code(), Code::resource) << big.status().to_string();
  EXPECT_NE(big.status().message().find("XPORT_GPU_STAGING_POOL"), std::string::npos);
  std::vector<Request> r;
  for (int i = 0; i < 3; ++i) {
    auto q = p.recv->irecv(dst.data() + i * half, half, *dreg);
    ASSERT_TRUE(q.ok()) << q.status().to_string();
    r.push_back(*q);
  }
  ASSERT_TRUE(p.recv->wait(r[0], soon()).ok());
  ASSERT_TRUE(p.recv->wait(r[1], soon()).ok());
  ASSERT_TRUE(p.send->wait(*s1, soon()).ok());
  ASSERT_TRUE(p.send->wait(*s2, soon()).ok());
  EXPECT_EQ(counters().pool_in_use_bytes.load(), 0u) << "done sends keep their staging bytes";
  s3 = p.send->isend(src, half, *sreg);  // the refused call, again: now it goes
  ASSERT_TRUE(s3.ok()) << s3.status().to_string();
  ASSERT_TRUE(p.recv->wait(r[2], soon()).ok());
  ASSERT_TRUE(p.send->wait(*s3, soon()).ok());
  EXPECT_EQ(test::first_mismatch(dst.data(), half, 1), -1);
  EXPECT_EQ(test::first_mismatch(dst.data() + half, half, 2), -1);
  EXPECT_EQ(test::first_mismatch(dst.data() + 2 * half, half, 3), -1)
      << "the refused send took a sequence number or sent something";
  EXPECT_EQ(counters().pool_bytes.load(), kMiB) << "the pool grew past its bound";
}

// A put at the bound: again, nothing issued; a put fits once the window's earlier puts are
// locally complete.
TEST_P(GpuPoolAtItsBound, APutAtTheBoundAnswersAgainWithNothingIssued) {
  Pair p = test::connect_pair(*dev_, *dev_);
  ASSERT_TRUE(p.send && p.recv);
  auto w = Window::open(*p.send, soon());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  uint8_t* src = gpu_alloc(kMiB);
  std::vector<uint8_t> target(3 * kMiB), host(64);
  auto sreg = dev_->register_memory(src, kMiB);
  auto treg = dev_->register_memory(target.data(), target.size());
  auto hreg = dev_->register_memory(host.data(), host.size());
  ASSERT_TRUE(sreg.ok() && treg.ok() && hreg.ok());
  auto tkey = dev_->import_key(treg->export_key());
  ASSERT_TRUE(tkey.ok());
  ASSERT_TRUE((*w)->put(*hreg, 0, *tkey, 2 * kMiB + 64, 64).ok());
  ASSERT_TRUE((*w)->fence().ok());  // what follows is held: its staging bytes stay taken
  test::fill(src, kMiB, 7);
  auto t1 = (*w)->put(*sreg, 0, *tkey, 0, kMiB);
  ASSERT_TRUE(t1.ok()) << t1.status().to_string();
  const uint64_t issued = (*w)->issued();
  auto t2 = (*w)->put(*sreg, 0, *tkey, kMiB, 4096);
  ASSERT_EQ(t2.status().code(), Code::again) << t2.status().to_string();
  EXPECT_EQ((*w)->issued(), issued);
  ASSERT_TRUE((*w)->quiet(soon()).ok());
  EXPECT_EQ(counters().pool_in_use_bytes.load(), 0u);
  t2 = (*w)->put(*sreg, 0, *tkey, kMiB, 4096);
  ASSERT_TRUE(t2.ok()) << t2.status().to_string();
  EXPECT_EQ(*t2, *t1 + 1) << "the refused put took a ticket";
  ASSERT_TRUE((*w)->quiet(soon()).ok());
  EXPECT_EQ(test::first_mismatch(target.data(), kMiB, 7), -1);
  EXPECT_EQ(test::first_mismatch(target.data() + kMiB, 4096, 7), -1);
}

// With the default bound: operations beyond the page-locked first slab grow the pool in
// ordinary host memory (never a page-locked allocation while kernels may run), and later ones
// reuse it.
TEST_P(GpuPool, ThePoolGrowsInHostMemoryAndIsReused) {
  Pair p = test::connect_pair(*dev_, *dev_);
  ASSERT_TRUE(p.send && p.recv);
  auto w = Window::open(*p.send, soon());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const size_t n = 12 * kMiB;  // two of them do not fit the first slab (16 MiB)
  uint8_t* src = gpu_alloc(n);
  std::vector<uint8_t> target(2 * n), host(64);
  auto sreg = dev_->register_memory(src, n);
  auto treg = dev_->register_memory(target.data(), target.size());
  auto hreg = dev_->register_memory(host.data(), host.size());
  ASSERT_TRUE(sreg.ok() && treg.ok() && hreg.ok());
  auto tkey = dev_->import_key(treg->export_key());
  ASSERT_TRUE(tkey.ok());
  const int pinned = gpu_->pinned_live();
  const uint64_t pool = counters().pool_bytes.load();
  const uint64_t pinned_bytes = counters().pool_pinned_bytes.load();
  EXPECT_EQ(pinned_bytes, 16 * kMiB);
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE((*w)->put(*hreg, 0, *tkey, 0, 64).ok());
    ASSERT_TRUE((*w)->fence().ok());  // both puts held, both sets of staging bytes taken
    test::fill(src, n, 10 + round);
    ASSERT_TRUE((*w)->put(*sreg, 0, *tkey, 0, n).ok());
    test::fill(src, n, 20 + round);
    ASSERT_TRUE((*w)->put(*sreg, 0, *tkey, n, n).ok());
    EXPECT_EQ(counters().pool_in_use_bytes.load(), 2 * n);
    ASSERT_TRUE((*w)->quiet(soon()).ok());
    EXPECT_EQ(test::first_mismatch(target.data(), n, 10 + round), -1) << "round " << round;
    EXPECT_EQ(test::first_mismatch(target.data() + n, n, 20 + round), -1) << "round " << round;
    EXPECT_EQ(counters().pool_in_use_bytes.load(), 0u);
    EXPECT_EQ(counters().pool_bytes.load(), pool + n)
        << "round " << round << ": grown once, then reused";
  }
  EXPECT_EQ(counters().pool_pinned_bytes.load(), pinned_bytes)
      << "page-locked memory allocated at run time";
  EXPECT_EQ(gpu_->pinned_live(), pinned);
}

// A staged Region larger than the pool's page-locked slab: registering it makes a page-locked
// slab as long as it (the smaller one, unused, goes), so a put of all of it is copied into
// page-locked bytes; nothing page-locked is allocated, and the pool does not grow, at run time.
// (Seen on 2 x H200: puts of 8 and 64 MiB from GPU memory at 0.6-0.7 x host memory's, their
// sources copied into ordinary host memory beyond the first 16 MiB.)
TEST_P(GpuPool, ALargeRegionGetsPageLockedStagingAtRegistration) {
  Pair p = test::connect_pair(*dev_, *dev_);
  ASSERT_TRUE(p.send && p.recv);
  auto w = Window::open(*p.send, soon());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const size_t n = 40 * kMiB;
  uint8_t* small = gpu_alloc(kMiB);
  uint8_t* src = gpu_alloc(n);
  std::vector<uint8_t> target(n);
  auto small_reg = dev_->register_memory(small, kMiB);
  ASSERT_TRUE(small_reg.ok());
  const uint64_t pinned_before = counters().pool_pinned_bytes.load();
  auto sreg = dev_->register_memory(src, n);
  auto treg = dev_->register_memory(target.data(), n);
  ASSERT_TRUE(sreg.ok() && treg.ok());
  auto tkey = dev_->import_key(treg->export_key());
  ASSERT_TRUE(tkey.ok());
  EXPECT_EQ(counters().pool_pinned_bytes.load(), pinned_before - 16 * kMiB + n)
      << "the page-locked slab did not grow to the Region (or the smaller one stayed)";
  const uint64_t pool = counters().pool_bytes.load();
  const int pinned = gpu_->pinned_live();
  for (int round = 0; round < 2; ++round) {
    test::fill(src, n, 30 + round);
    ASSERT_TRUE((*w)->put(*sreg, 0, *tkey, 0, n).ok());
    test::fill(src, n, 0x55);
    ASSERT_TRUE((*w)->quiet(soon()).ok());
    EXPECT_EQ(test::first_mismatch(target.data(), n, 30 + round), -1) << "round " << round;
  }
  EXPECT_EQ(counters().pool_bytes.load(), pool) << "the pool grew in host memory";
  EXPECT_EQ(gpu_->pinned_live(), pinned) << "page-locked memory allocated at run time";
  auto again = dev_->register_memory(src, n / 2);  // (no larger: nothing changes)
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(counters().pool_pinned_bytes.load(), pinned_before - 16 * kMiB + n);
}

INSTANTIATE_TEST_SUITE_P(Providers, GpuPoolAtItsBound,
                         ::testing::Values(test::ProviderParam{"shm", "auto"},
                                           test::ProviderParam{"tcp;ofi_rxm", "manual"}),
                         test::provider_param_name);
INSTANTIATE_TEST_SUITE_P(Providers, GpuPool,
                         ::testing::Values(test::ProviderParam{"shm", "auto"},
                                           test::ProviderParam{"tcp;ofi_rxm", "manual"}),
                         test::provider_param_name);

}  // namespace
}  // namespace xport
