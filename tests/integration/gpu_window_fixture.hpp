// A window from dev_ over the stand-in CUDA driver (tests/unit/gpu/fake_driver.hpp, whose copies
// run only when asked about), with XPORT_GPU_STAGING_PIECE=64K: the fixture of the tests of puts
// in pieces (gpu_pieces_test.cc) and of puts into the device's own GPU memory
// (gpu_own_window_test.cc). The window leads to another device of the process, progressed by a
// thread of its own, or to dev_ itself (a loopback connection).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "../unit/gpu/fake_driver.hpp"
#include "harness.hpp"
#include "provider_fixture.hpp"

namespace xport::test {

class GpuWindowTest : public ProviderTest {
 protected:
  static constexpr size_t kPiece = 64 * 1024;
  static Deadline soon() { return Deadline::after(std::chrono::seconds(20)); }

  std::vector<std::pair<std::string, std::string>> extra_knobs() const override {
    return {{"XPORT_GPU_STAGING_PIECE", "64K"}};
  }
  // After ProviderTest::SetUp: w_ from dev_ to a device of its own (peer_, its progress on a
  // thread), or with to_itself to dev_ itself. Skips where the provider has no windows.
  void open_window(bool to_itself) {
    if (to_itself) {
      pair_ = connect_pair(*dev_, *dev_);
    } else {
      auto d = ctx_->open_device();
      ASSERT_TRUE(d.ok()) << d.status().to_string();
      peer_ = std::move(d).value();
      pair_ = connect_pair(*dev_, *peer_);
    }
    ASSERT_TRUE(pair_.send && pair_.recv);
    if (peer_) {
      stop_ = false;
      runner_ = std::thread([this] {
        while (!stop_.load()) (void)peer_->progress();
      });
    }
    auto w = Window::open(*pair_.send, soon());
    if (!w.ok() && w.status().code() == Code::unsupported) GTEST_SKIP() << w.status().to_string();
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    w_ = std::move(w).value();
  }
  void TearDown() override {
    w_.reset();
    stop_ = true;
    if (runner_.joinable()) runner_.join();
    pair_ = Pair{};
    peer_.reset();
    ProviderTest::TearDown();
    for (uint8_t* p : allocs_) gpu_->free_gpu(p);
  }
  // n bytes of the stand-in GPU's memory, zeroed, freed when the test ends.
  uint8_t* gpu_alloc(size_t n) {
    auto p = gpu_->alloc_gpu(n, 0);
    EXPECT_TRUE(p.ok());
    allocs_.push_back(static_cast<uint8_t*>(*p));
    std::memset(allocs_.back(), 0, n);
    return allocs_.back();
  }
  // The ticket's state once done, or what it was at the deadline (20 s).
  TransferState check_done(Ticket t) {
    TransferState st = TransferState::pending;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (st != TransferState::done && std::chrono::steady_clock::now() < until) {
      auto c = w_->check(t);
      EXPECT_TRUE(c.ok()) << c.status().to_string();
      if (!c.ok()) break;
      st = *c;
    }
    return st;
  }

  // A put whose source's copy hangs (the stand-in GPU holds it), read in the call: the call
  // returns once XPORT_TIMEOUT_MS has passed (the fixture's knobs set it short), the put fails
  // naming the wait, its signal is not applied, and, the copy released, the window goes on.
  // `signal_word` reads the signal's word (at offset 0 of `sig`).
  template <typename ReadWord>
  void hung_source_copy_fails_the_put(const Region& src, uint8_t* src_gpu, const RemoteRegion& dst,
                                      const RemoteRegion& sig, size_t n, ReadWord signal_word) {
    w_->set_source_read(SourceRead::in_call);
    gpu_->hold_copies_from(src_gpu, n);
    const auto start = std::chrono::steady_clock::now();
    auto t = w_->put_signal(src, 0, dst, 0, n, sig, 0, 1);
    const auto took = std::chrono::steady_clock::now() - start;
    ASSERT_TRUE(t.ok()) << t.status().to_string();  // (issued; what had not gone never goes)
    EXPECT_LT(took, std::chrono::seconds(10)) << "the call waited past XPORT_TIMEOUT_MS";
    EXPECT_FALSE(w_->quiet(soon()).ok());
    auto c = w_->check(*t);
    ASSERT_FALSE(c.ok()) << "a put whose source copy hung was reported done";
    EXPECT_NE(c.status().message().find("XPORT_TIMEOUT_MS"), std::string::npos)
        << c.status().to_string();
    EXPECT_EQ(signal_word(), 0u) << "the signal of a put whose source never arrived was applied";
    gpu_->release_held();
    auto t2 = w_->put_signal(src, 0, dst, 0, n, sig, 0, 1);
    ASSERT_TRUE(t2.ok()) << t2.status().to_string();
    ASSERT_TRUE(w_->quiet(soon()).ok()) << "the window does not go on";
    EXPECT_EQ(signal_word(), 1u);
  }

  FakeGpuScope gpu_;
  std::vector<uint8_t*> allocs_;
  std::unique_ptr<Device> peer_;  // (none when the window leads to dev_ itself)
  Pair pair_;
  std::atomic<bool> stop_{false};
  std::thread runner_;
  std::unique_ptr<Window> w_;
};

}  // namespace xport::test
