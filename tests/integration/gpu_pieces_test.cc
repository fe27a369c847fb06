// Large puts from or into staged GPU memory go in pieces (XPORT_GPU_STAGING_PIECE): each piece
// posted as its source's copy into staging bytes lands, each copied on to the target's GPU as it
// lands (docs/semantics.md, "GPU memory"). With the stand-in CUDA driver
// (tests/unit/gpu/fake_driver.hpp), whose copies run only when asked about, so a piece posted
// before its bytes are in place would carry the fill the staging bytes held before.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "gpu/staging_counters.hpp"
#include "gpu_window_fixture.hpp"

namespace xport {
namespace {

using namespace std::chrono_literals;
using test::Pair;

class GpuPieces : public test::GpuWindowTest {
 protected:
  void SetUp() override {
    test::GpuWindowTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    open_window(false);
  }
  // A GPU source here, a GPU destination and a host signal word at the peer, registered.
  struct GpuToGpu {
    uint8_t* src = nullptr;
    uint8_t* dst = nullptr;
    std::vector<uint64_t> flags = std::vector<uint64_t>(8, 0);
    std::optional<Region> sreg, dreg, freg;
    std::optional<RemoteRegion> dkey, fkey;
  };
  void gpu_to_gpu(size_t n, GpuToGpu& g) {
    g.src = gpu_alloc(n);
    g.dst = gpu_alloc(n);
    auto sreg = dev_->register_memory(g.src, n);
    auto dreg = peer_->register_memory(g.dst, n);
    auto freg = peer_->register_memory(g.flags.data(), 64);
    ASSERT_TRUE(sreg.ok() && dreg.ok() && freg.ok());
    auto dkey = dev_->import_key(dreg->export_key());
    auto fkey = dev_->import_key(freg->export_key());
    ASSERT_TRUE(dkey.ok() && fkey.ok());
    g.sreg = std::move(sreg).value();
    g.dreg = std::move(dreg).value();
    g.freg = std::move(freg).value();
    g.dkey = std::move(dkey).value();
    g.fkey = std::move(fkey).value();
  }
};

// A put_signal of many pieces, GPU memory at both ends, the source rewritten after every call:
// when the target sees the signal, its GPU holds every byte of that call, and the target copied
// the put on to its GPU piece by piece, not whole.
TEST_P(GpuPieces, APutSignalInPiecesLandsWholeBeforeItsSignal) {
  const size_t n = 13 * kPiece + 4096;  // 14 pieces, the last one short
  GpuToGpu g;
  ASSERT_NO_FATAL_FAILURE(gpu_to_gpu(n, g));
  gpu::StagingCounters& c = gpu::staging_counters(0);
  for (uint64_t round = 1; round <= 4; ++round) {
    const uint64_t out_before = c.copies_to_gpu.load();
    test::fill(g.src, n, static_cast<int>(60 + round));
    auto t = w_->put_signal(*g.sreg, 0, *g.dkey, 0, n, *g.fkey, 0, 1);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    test::fill(g.src, n, 0x55);  // the caller reuses its buffer at once
    const auto until = std::chrono::steady_clock::now() + 20s;
    while (__atomic_load_n(&g.flags[0], __ATOMIC_ACQUIRE) < round &&
           std::chrono::steady_clock::now() < until) {
      (void)dev_->progress();
    }
    ASSERT_EQ(__atomic_load_n(&g.flags[0], __ATOMIC_ACQUIRE), round) << "round " << round;
    EXPECT_EQ(test::first_mismatch(g.dst, n, static_cast<int>(60 + round)), -1)
        << "round " << round << ": the signal came before every piece was on the GPU, or a "
        << "piece went before its bytes were copied in";
    EXPECT_GE(c.copies_to_gpu.load() - out_before, 14u)
        << "the target did not copy the put on piece by piece";
    ASSERT_EQ(check_done(*t), TransferState::done);
  }
  ASSERT_TRUE(w_->quiet(soon()).ok());
}

// Pieces from host memory into the peer's GPU memory, and from GPU memory into the peer's host
// memory, with puts of one piece between them on the same window: all in order, all whole.
TEST_P(GpuPieces, PiecesMixWithWholePutsInOrder) {
  const size_t n = 5 * kPiece;
  uint8_t* gsrc = gpu_alloc(n);
  uint8_t* gdst = gpu_alloc(n);
  std::vector<uint8_t> hsrc(n), hdst(2 * n);
  auto gs = dev_->register_memory(gsrc, n);
  auto hs = dev_->register_memory(hsrc.data(), n);
  auto gd = peer_->register_memory(gdst, n);
  auto hd = peer_->register_memory(hdst.data(), hdst.size());
  ASSERT_TRUE(gs.ok() && hs.ok() && gd.ok() && hd.ok());
  auto gkey = dev_->import_key(gd->export_key());
  auto hkey = dev_->import_key(hd->export_key());
  ASSERT_TRUE(gkey.ok() && hkey.ok());
  test::fill(hsrc.data(), n, 71);
  ASSERT_TRUE(w_->put(*hs, 0, *gkey, 0, n).ok());  // host -> GPU, in pieces
  test::fill(gsrc, n, 72);
  ASSERT_TRUE(w_->put(*gs, 0, *hkey, 0, n).ok());  // GPU -> host, in pieces
  test::fill(gsrc, 4096, 73);
  ASSERT_TRUE(w_->put(*gs, 0, *hkey, n, 4096).ok());  // one piece
  test::fill(gsrc, n, 0x55);
  ASSERT_TRUE(w_->quiet(soon()).ok());
  EXPECT_EQ(test::first_mismatch(gdst, n, 71), -1);
  EXPECT_EQ(test::first_mismatch(hdst.data(), n, 72), -1);
  EXPECT_EQ(test::first_mismatch(hdst.data() + n, 4096, 73), -1);
}

// The copy of a source into staging bytes fails part way (a GPU gone bad), copied in the call
// or as progress goes (SourceRead): the pieces whose bytes landed may have gone, the rest never
// goes, the signal is not applied, and the put's ticket fails naming the copy (check, and
// wait_local for until_local); the window goes on working.
TEST_P(GpuPieces, ASourceCopyFailingPartWayFailsThePutAndItsSignal) {
  const size_t n = 8 * kPiece;
  GpuToGpu g;
  ASSERT_NO_FATAL_FAILURE(gpu_to_gpu(n, g));
  uint64_t applied = 0;
  for (SourceRead read : {SourceRead::in_call, SourceRead::until_local}) {
    const bool later = read == SourceRead::until_local;
    w_->set_source_read(read);
    test::fill(g.src, n, 81);
    gpu_->fail_to_host_past(gpu_->bytes_to_host() + 3 * kPiece);
    auto t = w_->put_signal(*g.sreg, 0, *g.dkey, 0, n, *g.fkey, 0, 1);
    ASSERT_TRUE(t.ok()) << t.status().to_string();  // (issued: part of it may have gone)
    Status local = later ? w_->wait_local(*t, soon()) : Status::success();
    gpu_->fail_to_host_past(UINT64_MAX);
    EXPECT_FALSE(later && local.ok()) << "a put whose source copy failed was locally complete";
    EXPECT_FALSE(w_->quiet(soon()).ok());
    auto c = w_->check(*t);
    ASSERT_FALSE(c.ok()) << "a put whose source copy failed was reported done";
    EXPECT_NE(c.status().message().find("staging bytes"), std::string::npos)
        << c.status().to_string();
    EXPECT_EQ(g.flags[0], applied) << "the signal of a put that did not arrive whole was applied";
    test::fill(g.src, n, 82);
    auto t2 = w_->put_signal(*g.sreg, 0, *g.dkey, 0, n, *g.fkey, 0, 1);
    ASSERT_TRUE(t2.ok()) << t2.status().to_string();
    ASSERT_TRUE(w_->quiet(soon()).ok()) << "the window does not go on";
    EXPECT_EQ(g.flags[0], ++applied);
    EXPECT_EQ(test::first_mismatch(g.dst, n, 82), -1);
  }
}

// SourceRead::until_local (GIN's contract): the call returns without waiting for its source's
// copy (progress runs it), the ticket is locally complete only once the copy is done, and what
// arrives is the buffer as it was until then; puts of one piece and of many, with a signal.
TEST_P(GpuPieces, UntilLocalTheCallLeavesTheCopyToProgress) {
  w_->set_source_read(SourceRead::until_local);
  const size_t n = 8 * kPiece;
  GpuToGpu g;
  ASSERT_NO_FATAL_FAILURE(gpu_to_gpu(n, g));
  uint64_t round = 0;
  for (size_t len : {size_t{8}, size_t{4096}, n}) {
    ++round;
    test::fill(g.src, len, static_cast<int>(90 + round));
    const uint64_t before = gpu_->bytes_to_host();
    auto t = w_->put_signal(*g.sreg, 0, *g.dkey, 0, len, *g.fkey, 0, 1);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_LT(gpu_->bytes_to_host() - before, len)
        << len << " bytes: the call waited for its source's copy";
    ASSERT_TRUE(w_->wait_local(*t, soon()).ok());
    EXPECT_EQ(gpu_->bytes_to_host() - before, len) << "locally complete before its copy ran";
    test::fill(g.src, len, 0x55);  // reused once locally complete, as the contract allows
    ASSERT_TRUE(w_->quiet(soon()).ok());
    EXPECT_EQ(g.flags[0], round);
    EXPECT_EQ(test::first_mismatch(g.dst, len, static_cast<int>(90 + round)), -1)
        << len << " bytes: what arrived is not the buffer as it was until local completion";
  }
}

// With XPORT_TIMEOUT_MS short: a source copy that hangs, waited for in the call.
class GpuPiecesShortTimeout : public GpuPieces {
 protected:
  std::vector<std::pair<std::string, std::string>> extra_knobs() const override {
    return {{"XPORT_GPU_STAGING_PIECE", "64K"}, {"XPORT_TIMEOUT_MS", "1000"}};
  }
};

// A put in pieces whose source copy hangs fails within XPORT_TIMEOUT_MS instead of holding the
// call for ever; the window goes on once the copy engine does.
TEST_P(GpuPiecesShortTimeout, AHungSourceCopyFailsThePutInTime) {
  const size_t n = 4 * kPiece;
  GpuToGpu g;
  ASSERT_NO_FATAL_FAILURE(gpu_to_gpu(n, g));
  test::fill(g.src, n, 93);
  hung_source_copy_fails_the_put(*g.sreg, g.src, *g.dkey, *g.fkey, n, [&] {
    return __atomic_load_n(&g.flags[0], __ATOMIC_ACQUIRE);
  });
  EXPECT_EQ(test::first_mismatch(g.dst, n, 93), -1);
}

INSTANTIATE_TEST_SUITE_P(Providers, GpuPiecesShortTimeout,
                         ::testing::Values(test::ProviderParam{"shm", "auto"},
                                           test::ProviderParam{"tcp;ofi_rxm", "auto"},
                                           test::ProviderParam{"strict", "auto"}),
                         test::provider_param_name);

INSTANTIATE_TEST_SUITE_P(Providers, GpuPieces,
                         ::testing::Values(test::ProviderParam{"shm", "auto"},
                                           test::ProviderParam{"tcp;ofi_rxm", "auto"},
                                           test::ProviderParam{"tcp;ofi_rxm", "manual"},
                                           test::ProviderParam{"strict", "auto"}),
                         test::provider_param_name);

}  // namespace
}  // namespace xport
