// Staged GPU registrations with the stand-in CUDA driver (tests/unit/gpu/fake_driver.hpp: its
// "GPU memory" is host memory): overlapping staged registrations share one shadow.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
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

class GpuSources : public test::ProviderTest {
 protected:
  uint8_t* gpu_alloc(size_t n) {
    auto p = gpu_->alloc_device(n, 0);
    EXPECT_TRUE(p.ok());
    allocs_.push_back(static_cast<uint8_t*>(*p));
    return allocs_.back();
  }
  void TearDown() override {
    pair_ = Pair{};
    peer_.reset();
    test::ProviderTest::TearDown();
    for (uint8_t* p : allocs_) gpu_->free_device(p);
  }
  // A window from dev_ to a second device of this process that nothing progresses until the
  // test says so: what dev_ sends it is neither acknowledged nor applied meanwhile.
  std::unique_ptr<Window> window_to_idle_peer() {
    auto d = ctx_->open_device();
    EXPECT_TRUE(d.ok()) << d.status().to_string();
    if (!d.ok()) return nullptr;
    peer_ = std::move(d).value();
    pair_ = test::connect_pair(*dev_, *peer_);
    if (!pair_.send) return nullptr;
    auto busy = progress_peer();  // (the peer answers the window's stream request)
    auto w = Window::open(*pair_.send, soon());
    EXPECT_TRUE(w.ok()) << w.status().to_string();
    return w.ok() ? std::move(w).value() : nullptr;
  }
  // Drives the idle peer's progress on a thread until the returned object goes.
  std::shared_ptr<void> progress_peer() {
    struct Runner {
      std::atomic<bool> stop{false};
      std::thread t;
      ~Runner() {
        stop = true;
        t.join();
      }
    };
    auto r = std::make_shared<Runner>();
    Device* d = peer_.get();
    r->t = std::thread([d, raw = r.get()] {
      while (!raw->stop.load()) (void)d->progress();
    });
    return r;
  }
  test::FakeGpuScope gpu_;
  std::vector<uint8_t*> allocs_;
  std::unique_ptr<Device> peer_;
  Pair pair_;
};

// ---- overlapping staged registrations ----

// Region B and a sub-range S of it share B's shadow: a peer's signal through B's key is seen by
// wait_signal on S, and S pins nothing more. (Seen: S had a shadow of its own, the signal
// updated only B's, and pinned memory was doubled.)
TEST_P(GpuSources, ARegionInsideAStagedRegionSharesItsShadow) {
  Pair p = test::connect_pair(*dev_, *dev_);
  ASSERT_TRUE(p.send && p.recv);
  auto w = Window::open(*p.send, soon());
  if (!w.ok() && w.status().code() == Code::unsupported) GTEST_SKIP() << w.status().to_string();
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const size_t n = 64 * 1024, sub = 8192, at = 16384;
  uint8_t* g = gpu_alloc(n);
  std::memset(g, 0, n);
  const gpu::StagingCounters& c = gpu::staging_counters(0);
  const uint64_t shadow_bytes = c.shadow_bytes.load();
  auto b = dev_->register_memory(g, n);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  const int pinned = gpu_->pinned_live();
  const uint64_t registered = dev_->stats().registered_bytes;
  auto s = dev_->register_memory(g + at, sub);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_TRUE(s->staged());
  EXPECT_EQ(gpu_->pinned_live(), pinned) << "the sub-range got page-locked memory of its own";
  EXPECT_EQ(c.shadow_bytes.load() - shadow_bytes, n) << "pinned bytes doubled";
  EXPECT_EQ(dev_->stats().registered_bytes, registered) << "the sub-range was registered again";
  auto bkey = dev_->import_key(b->export_key());
  ASSERT_TRUE(bkey.ok());
  ASSERT_TRUE((*w)->signal(*bkey, at + 64, 9, SignalOp::set).ok());
  Status seen = (*w)->wait_signal(*s, 64, 9, Deadline::after(3s));
  EXPECT_TRUE(seen.ok()) << "a signal through B's key is not seen through S: " << seen.to_string();
  ASSERT_TRUE((*w)->quiet(soon()).ok());
  uint64_t word;
  std::memcpy(&word, g + at + 64, 8);
  EXPECT_EQ(word, 9u);
  // A signal through S's key lands at S's word on the GPU, and B sees it.
  auto skey = dev_->import_key(s->export_key());
  ASSERT_TRUE(skey.ok());
  ASSERT_TRUE((*w)->signal(*skey, 128, 4, SignalOp::set).ok());
  ASSERT_TRUE((*w)->quiet(soon()).ok());
  std::memcpy(&word, g + at + 128, 8);
  EXPECT_EQ(word, 4u) << "a signal through S's key missed its GPU word";
  auto via_b = (*w)->read_signal(*b, at + 128);
  ASSERT_TRUE(via_b.ok());
  EXPECT_EQ(*via_b, 4u);
  // The shadow goes with the last Region of it.
  b = Status(Code::closed, "dropped");
  EXPECT_EQ(c.shadow_bytes.load() - shadow_bytes, n) << "S still uses the shadow";
  s = Status(Code::closed, "dropped");
  EXPECT_EQ(c.shadow_bytes.load(), shadow_bytes) << "the shadow outlived its Regions";
}

// The same across two devices of a process: a registration of a sub-range on another device
// shares the shadow, and a peer's signal through that device's key reaches the right GPU word.
TEST_P(GpuSources, ASubRangeRegisteredOnAnotherDeviceSharesTheShadow) {
  auto w = window_to_idle_peer();
  ASSERT_TRUE(w);
  const size_t n = 64 * 1024, sub = 8192, at = 16384;
  uint8_t* g = gpu_alloc(n);
  std::memset(g, 0, n);
  auto b = dev_->register_memory(g, n);
  ASSERT_TRUE(b.ok());
  const gpu::StagingCounters& c = gpu::staging_counters(0);
  const uint64_t shadows = c.shadows.load(), shadow_bytes = c.shadow_bytes.load();
  auto s = peer_->register_memory(g + at, sub);  // the window's target
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(c.shadows.load(), shadows) << "the sub-range got a shadow of its own";
  EXPECT_EQ(c.shadow_bytes.load(), shadow_bytes);
  auto skey = dev_->import_key(s->export_key());
  ASSERT_TRUE(skey.ok());
  ASSERT_TRUE(w->signal(*skey, 64, 6, SignalOp::set).ok());
  {
    auto peer = progress_peer();
    ASSERT_TRUE(w->quiet(soon()).ok());
  }
  uint64_t word;
  std::memcpy(&word, g + at + 64, 8);
  EXPECT_EQ(word, 6u) << "the signal missed its GPU word";
  std::memcpy(&word, g + 64, 8);
  EXPECT_EQ(word, 0u) << "the signal landed at the shadow's start";
  auto via_b = w->read_signal(*b, at + 64);
  ASSERT_TRUE(via_b.ok());
  EXPECT_EQ(*via_b, 6u);
}

// A registration that overlaps a staged range without lying inside it cannot share its shadow:
// refused by name, nothing pinned.
TEST_P(GpuSources, ARegionOverlappingAStagedRangeIsRefusedByName) {
  const size_t n = 64 * 1024;
  uint8_t* g = gpu_alloc(n);
  auto s = dev_->register_memory(g + 8192, 8192);
  ASSERT_TRUE(s.ok());
  const int pinned = gpu_->pinned_live();
  auto b = dev_->register_memory(g, n);
  EXPECT_EQ(b.status().code(), Code::invalid_argument) << b.status().to_string();
  EXPECT_NE(b.status().message().find("overlaps"), std::string::npos) << b.status().to_string();
  auto part = dev_->register_memory(g + 12288, 8192);
  EXPECT_EQ(part.status().code(), Code::invalid_argument) << part.status().to_string();
  EXPECT_EQ(gpu_->pinned_live(), pinned);
  s = Status(Code::closed, "dropped");
  auto again = dev_->register_memory(g, n);  // the sub-range's shadow is gone: fine now
  EXPECT_TRUE(again.ok()) << again.status().to_string();
}

INSTANTIATE_TEST_SUITE_P(Providers, GpuSources,
                         ::testing::Values(test::ProviderParam{"shm", "auto"},
                                           test::ProviderParam{"tcp;ofi_rxm", "auto"},
                                           test::ProviderParam{"tcp;ofi_rxm", "manual"}),
                         test::provider_param_name);

}  // namespace
}  // namespace xport
