// Window::open_all: one device opens windows to many peers at once (every request sent before
// the first answer is awaited); each window works, and a target that cannot be opened fails its
// own result only. The targets are devices of this process, driven by a thread of their own.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "provider_fixture.hpp"
#include "xport/xport.hpp"

namespace xport {
namespace {

using namespace std::chrono_literals;

class WindowsOpen : public test::ProviderTest {
 protected:
  void TearDown() override {
    stop_ = true;
    if (driver_.joinable()) driver_.join();
    targets_.clear();
    test::ProviderTest::TearDown();
  }

  struct Target {
    std::unique_ptr<Device> dev;
    std::vector<uint8_t> mem = std::vector<uint8_t>(64, 0);
    std::optional<Region> region;
  };
  std::vector<Target> targets_;
  std::thread driver_;
  std::atomic<bool> stop_{false};
};

TEST_P(WindowsOpen, ManyAtOnceFromOneDeviceEachWorksAndABadOneFailsAlone) {
  constexpr size_t kTargets = 48;
  constexpr size_t kGone = 7;  // its device closes before the opens
  targets_.resize(kTargets);
  std::vector<std::vector<uint8_t>> blobs(kTargets);
  for (size_t t = 0; t < kTargets; ++t) {
    auto d = ctx_->open_device();
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    targets_[t].dev = std::move(d).value();
    auto r = targets_[t].dev->register_memory(targets_[t].mem.data(), targets_[t].mem.size());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    targets_[t].region.emplace(std::move(r).value());
    blobs[t] = targets_[t].region->export_key();
  }
  std::vector<RemoteRegion> keys;
  for (size_t t = 0; t < kTargets; ++t) {
    auto k = dev_->import_key(blobs[t]);
    ASSERT_TRUE(k.ok()) << k.status().to_string();
    keys.push_back(std::move(k).value());
  }
  targets_[kGone].region.reset();
  targets_[kGone].dev.reset();
  driver_ = std::thread([&] {
    while (!stop_.load(std::memory_order_relaxed)) {
      for (auto& t : targets_) {
        if (t.dev) (void)t.dev->progress();
      }
    }
  });
  std::vector<const RemoteRegion*> asked;
  for (const auto& k : keys) asked.push_back(&k);
  asked.push_back(nullptr);  // not a key: its own error, nothing else disturbed
  auto windows = Window::open_all(*dev_, asked, Deadline::after(5s));
  ASSERT_EQ(windows.size(), kTargets + 1);
  EXPECT_FALSE(windows[kTargets].ok());
  EXPECT_EQ(windows[kTargets].status().code(), Code::invalid_argument);
  EXPECT_FALSE(windows[kGone].ok()) << "a closed device's window opened";
  std::vector<uint8_t> src(8);
  auto local = dev_->register_memory(src.data(), src.size());
  ASSERT_TRUE(local.ok()) << local.status().to_string();
  for (size_t t = 0; t < kTargets; ++t) {
    if (t == kGone) continue;
    ASSERT_TRUE(windows[t].ok()) << "target " << t << ": " << windows[t].status().to_string();
    const uint64_t v = 1000 + t;
    std::memcpy(src.data(), &v, 8);
    auto put = (*windows[t])->put(*local, 0, keys[t], 0, 8);
    ASSERT_TRUE(put.ok()) << put.status().to_string();
    ASSERT_TRUE((*windows[t])->quiet(Deadline::after(20s)).ok()) << "target " << t;
    uint64_t got = 0;
    std::memcpy(&got, targets_[t].mem.data(), 8);
    EXPECT_EQ(got, v) << "target " << t;
  }
  windows.clear();
}

INSTANTIATE_TEST_SUITE_P(Providers, WindowsOpen,
                         ::testing::Values(test::ProviderParam{"shm", "auto"},
                                           test::ProviderParam{"tcp;ofi_rxm", "auto"}),
                         test::provider_param_name);

}  // namespace
}  // namespace xport
