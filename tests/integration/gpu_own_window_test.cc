// A window to the device itself (a GPU team's own rank: GIN's alltoall puts to every rank, its
// own included): a put from staged GPU memory into the device's own staged GPU memory copies
// its source straight into the destination's shadow, and only the publishes (each piece's copy
// on to the GPU) and the signal go through the window's stream; no byte is written over the
// fabric (docs/semantics.md, "GPU memory"). With the stand-in CUDA driver
// (tests/unit/gpu/fake_driver.hpp), whose copies run only when asked about.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <vector>

#include "gpu/staging_counters.hpp"
#include "gpu_window_fixture.hpp"

namespace xport {
namespace {

using namespace std::chrono_literals;
using test::Pair;

constexpr int kWriteOp = 2;  // EndpointStats' ops: send, recv, write, read, atomic

class GpuOwnWindow : public test::GpuWindowTest {
 protected:
  void SetUp() override {
    test::GpuWindowTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    open_window(true);
  }
  // A GPU source, a GPU destination and a GPU signal word, all of this device, registered, the
  // destination's and the word's keys imported back.
  struct Own {
    uint8_t* src = nullptr;
    uint8_t* dst = nullptr;
    uint8_t* word = nullptr;
    std::optional<Region> sreg, dreg, wreg;
    std::optional<RemoteRegion> dkey, wkey;
  };
  void own(size_t n, Own& o) {
    o.src = gpu_alloc(n);
    o.dst = gpu_alloc(n);
    o.word = gpu_alloc(64);
    auto sreg = dev_->register_memory(o.src, n);
    auto dreg = dev_->register_memory(o.dst, n);
    auto wreg = dev_->register_memory(o.word, 64);
    ASSERT_TRUE(sreg.ok() && dreg.ok() && wreg.ok());
    auto dkey = dev_->import_key(dreg->export_key());
    auto wkey = dev_->import_key(wreg->export_key());
    ASSERT_TRUE(dkey.ok() && wkey.ok());
    o.sreg = std::move(sreg).value();
    o.dreg = std::move(dreg).value();
    o.wreg = std::move(wreg).value();
    o.dkey = std::move(dkey).value();
    o.wkey = std::move(wkey).value();
  }
  uint64_t written_bytes() const {
    uint64_t n = 0;
    for (const EndpointStats& e : dev_->stats().endpoints) n += e.bytes[kWriteOp];
    return n;
  }
  uint64_t gpu_word(const Own& o) const {
    uint64_t v = 0;
    std::memcpy(&v, o.word, sizeof v);
    return v;
  }
};

// put_signal into the device's own GPU memory, the signal word on its GPU too (GIN's own rank),
// the call's source reused at once (in the call) or once locally complete (until_local, GIN's
// contract): when the signal is on the GPU, every byte is; the put went in pieces, each copied
// on to the GPU, and wrote nothing over the fabric.
TEST_P(GpuOwnWindow, APutSignalToItselfWritesNothingOverTheFabric) {
  const size_t n = 7 * kPiece + 4096;  // 8 pieces, the last one short
  Own o;
  ASSERT_NO_FATAL_FAILURE(own(n, o));
  gpu::StagingCounters& c = gpu::staging_counters(0);
  uint64_t round = 0;
  for (SourceRead read : {SourceRead::in_call, SourceRead::until_local}) {
    w_->set_source_read(read);
    for (size_t len : {size_t{8}, n}) {
      ++round;
      const uint64_t written = written_bytes();
      const uint64_t out_before = c.copies_to_gpu.load();
      test::fill(o.src, len, static_cast<int>(40 + round));
      auto t = w_->put_signal(*o.sreg, 0, *o.dkey, 0, len, *o.wkey, 0, 1);
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      if (read == SourceRead::until_local) {
        ASSERT_TRUE(w_->wait_local(*t, soon()).ok());
      }
      test::fill(o.src, len, 0x55);  // reused as soon as the contract allows
      const auto until = std::chrono::steady_clock::now() + 20s;
      while (gpu_word(o) < round && std::chrono::steady_clock::now() < until) {
        (void)dev_->progress();
      }
      ASSERT_EQ(gpu_word(o), round) << len << " bytes: the signal never reached the GPU word";
      EXPECT_EQ(test::first_mismatch(o.dst, len, static_cast<int>(40 + round)), -1)
          << len << " bytes: the signal came before every byte was on the GPU";
      ASSERT_TRUE(w_->quiet(soon()).ok());
      auto done = w_->check(*t);
      ASSERT_TRUE(done.ok()) << done.status().to_string();
      EXPECT_EQ(*done, TransferState::done);
      EXPECT_EQ(written_bytes() - written, 0u)
          << len << " bytes: a put into the device's own GPU memory was written over the fabric";
      if (len == n) {
        EXPECT_GE(c.copies_to_gpu.load() - out_before, 8u)
            << "the put was not copied on to the GPU piece by piece";
      }
    }
  }
}

// A plain put to itself, then the window's other operations in order: a strong signal issued
// after it is applied only once the put's bytes are on the GPU; a fence before the next put to
// the same range keeps that one behind the first (it goes the ordinary way), and what the GPU
// holds at the end is the last put's.
TEST_P(GpuOwnWindow, PutsToItselfKeepTheWindowsOrder) {
  const size_t n = 4 * kPiece;
  Own o;
  ASSERT_NO_FATAL_FAILURE(own(n, o));
  test::fill(o.src, n, 61);
  ASSERT_TRUE(w_->put(*o.sreg, 0, *o.dkey, 0, n).ok());
  test::fill(o.src, n, 0x55);
  ASSERT_TRUE(w_->signal(*o.wkey, 0, 1).ok());  // strong: after every earlier operation
  const auto until = std::chrono::steady_clock::now() + 20s;
  uint64_t seen = 0;
  while ((std::memcpy(&seen, o.word, sizeof seen), seen) < 1 &&
         std::chrono::steady_clock::now() < until) {
    (void)dev_->progress();
  }
  ASSERT_EQ(seen, 1u);
  EXPECT_EQ(test::first_mismatch(o.dst, n, 61), -1)
      << "a strong signal was applied before the put to itself was on the GPU";

  test::fill(o.src, n, 62);
  ASSERT_TRUE(w_->put(*o.sreg, 0, *o.dkey, 0, n).ok());
  ASSERT_TRUE(w_->fence().ok());
  test::fill(o.src, n, 63);
  ASSERT_TRUE(w_->put(*o.sreg, 0, *o.dkey, 0, n).ok());
  test::fill(o.src, n, 0x55);
  ASSERT_TRUE(w_->quiet(soon()).ok());
  EXPECT_EQ(test::first_mismatch(o.dst, n, 63), -1) << "the fenced put did not land last";
}

// The source's copy fails part way (a GPU gone bad): the put to itself fails naming the copy,
// its signal is not applied, and the window goes on.
TEST_P(GpuOwnWindow, ASourceCopyFailingFailsThePutToItself) {
  const size_t n = 8 * kPiece;
  Own o;
  ASSERT_NO_FATAL_FAILURE(own(n, o));
  uint64_t applied = 0;
  for (SourceRead read : {SourceRead::in_call, SourceRead::until_local}) {
    w_->set_source_read(read);
    test::fill(o.src, n, 81);
    gpu_->fail_to_host_past(gpu_->bytes_to_host() + 3 * kPiece);
    auto t = w_->put_signal(*o.sreg, 0, *o.dkey, 0, n, *o.wkey, 0, 1);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_FALSE(w_->quiet(soon()).ok());
    gpu_->fail_to_host_past(UINT64_MAX);
    auto c = w_->check(*t);
    ASSERT_FALSE(c.ok()) << "a put whose source copy failed was reported done";
    EXPECT_NE(c.status().message().find("staging bytes"), std::string::npos)
        << c.status().to_string();
    EXPECT_EQ(gpu_word(o), applied) << "the signal of a put that did not land whole was applied";
    test::fill(o.src, n, 82);
    auto t2 = w_->put_signal(*o.sreg, 0, *o.dkey, 0, n, *o.wkey, 0, 1);
    ASSERT_TRUE(t2.ok()) << t2.status().to_string();
    ASSERT_TRUE(w_->quiet(soon()).ok()) << "the window does not go on";
    EXPECT_EQ(gpu_word(o), ++applied);
    EXPECT_EQ(test::first_mismatch(o.dst, n, 82), -1);
  }
}

// With XPORT_TIMEOUT_MS short: a source copy that hangs, waited for in the call.
class GpuOwnWindowShortTimeout : public GpuOwnWindow {
 protected:
  std::vector<std::pair<std::string, std::string>> extra_knobs() const override {
    return {{"XPORT_GPU_STAGING_PIECE", "64K"}, {"XPORT_TIMEOUT_MS", "1000"}};
  }
};

// A put to itself whose source copy hangs fails within XPORT_TIMEOUT_MS; the window goes on.
TEST_P(GpuOwnWindowShortTimeout, AHungSourceCopyFailsThePutToItselfInTime) {
  const size_t n = 4 * kPiece;
  Own o;
  ASSERT_NO_FATAL_FAILURE(own(n, o));
  test::fill(o.src, n, 94);
  hung_source_copy_fails_the_put(*o.sreg, o.src, *o.dkey, *o.wkey, n, [&] { return gpu_word(o); });
  EXPECT_EQ(test::first_mismatch(o.dst, n, 94), -1);
}

INSTANTIATE_TEST_SUITE_P(Providers, GpuOwnWindowShortTimeout,
                         ::testing::Values(test::ProviderParam{"shm", "auto"},
                                           test::ProviderParam{"tcp;ofi_rxm", "auto"},
                                           test::ProviderParam{"strict", "auto"}),
                         test::provider_param_name);

INSTANTIATE_TEST_SUITE_P(Providers, GpuOwnWindow,
                         ::testing::Values(test::ProviderParam{"shm", "auto"},
                                           test::ProviderParam{"tcp;ofi_rxm", "auto"},
                                           test::ProviderParam{"tcp;ofi_rxm", "manual"},
                                           test::ProviderParam{"strict", "auto"}),
                         test::provider_param_name);

}  // namespace
}  // namespace xport
