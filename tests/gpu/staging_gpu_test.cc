// GPU memory through host staging on a real GPU (device machine; skips without one): bytes
// verified in GPU memory for send/recv, grouped receives, puts from and gets into GPU memory,
// on shm and tcp;ofi_rxm; and what staging costs: 64 MiB puts and messages from GPU memory
// against the same from host memory (printed as "staging:" lines, docs/benchmarks.md).
// XPORT_TEST_GPU_SRC / XPORT_TEST_GPU_DST: the GPUs of source and destination (default 0, 0).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "../integration/harness.hpp"
#include "../integration/provider_fixture.hpp"
#include "gpu/driver.hpp"
#include "gpu/staged_memory.hpp"

namespace xport {
namespace {

using namespace std::chrono_literals;
using test::Pair;

Deadline soon() { return Deadline::after(60s); }

int env_gpu(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : 0;
}

class GpuMemory : public test::ProviderTest {
 protected:
  void SetUp() override {
    if (!gpu::driver().available()) GTEST_SKIP() << "no GPU: " << gpu::driver().describe();
    test::ProviderTest::SetUp();
  }
  void TearDown() override {
    test::ProviderTest::TearDown();
    for (void* p : allocs_) gpu::driver().free_gpu(p);
  }
  uint8_t* gpu_alloc(size_t n, int device) {
    auto p = gpu::driver().alloc_gpu(n, device);
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    if (!p.ok()) return nullptr;
    allocs_.push_back(*p);
    return static_cast<uint8_t*>(*p);
  }
  // Host <-> GPU through a stream of the driver (the test's own view of GPU memory).
  void to_gpu(uint8_t* dst, const uint8_t* src, size_t n) {
    auto s = gpu::driver().open_copy_queue(*gpu::driver().classify(dst));
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->copy_to_gpu(dst, src, n).ok());
    ASSERT_TRUE((*s)->synchronize().ok());
  }
  std::vector<uint8_t> from_gpu(const uint8_t* src, size_t n) {
    std::vector<uint8_t> out(n);
    auto s = gpu::driver().open_copy_queue(*gpu::driver().classify(src));
    EXPECT_TRUE(s.ok());
    EXPECT_TRUE((*s)->copy_to_host(out.data(), src, n).ok());
    EXPECT_TRUE((*s)->synchronize().ok());
    return out;
  }
  void fill_gpu(uint8_t* dst, size_t n, uint64_t msg) {
    std::vector<uint8_t> h(n);
    test::fill(h.data(), n, msg);
    to_gpu(dst, h.data(), n);
  }
  std::vector<void*> allocs_;
};

TEST_P(GpuMemory, SendAndReceiveVerifiedInGpuMemory) {
  Pair p = test::connect_pair(*dev_, *dev_);
  ASSERT_TRUE(p.send && p.recv);
  const size_t max = 64 << 20;
  uint8_t* src = gpu_alloc(max, env_gpu("XPORT_TEST_GPU_SRC"));
  uint8_t* dst = gpu_alloc(max, env_gpu("XPORT_TEST_GPU_DST"));
  ASSERT_TRUE(src && dst);
  auto sreg = dev_->register_memory(src, max);
  auto dreg = dev_->register_memory(dst, max);
  ASSERT_TRUE(sreg.ok()) << sreg.status().to_string();
  ASSERT_TRUE(dreg.ok()) << dreg.status().to_string();
  ASSERT_TRUE(sreg->staged());
  uint64_t msg = 0;
  for (size_t n : {size_t{1}, size_t{4096}, size_t{1} << 20, max}) {
    fill_gpu(src, n, ++msg);
    auto r = p.recv->irecv(dst, max, *dreg);
    auto s = p.send->isend(src, n, *sreg);
    ASSERT_TRUE(r.ok() && s.ok()) << r.status().to_string() << s.status().to_string();
    auto got = p.recv->wait(*r, soon());
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(*got, n);
    ASSERT_TRUE(p.send->wait(*s, soon()).ok());
    auto back = from_gpu(dst, n);
    EXPECT_EQ(test::first_mismatch(back.data(), n, msg), -1) << n << " bytes";
  }
  // A grouped receive: GPU and host buffers by tag.
  std::vector<uint8_t> host(8192);
  auto hreg = dev_->register_memory(host.data(), host.size());
  ASSERT_TRUE(hreg.ok());
  RecvBuffer bufs[2] = {{dst, 100000, &*dreg, 7}, {host.data(), host.size(), &*hreg, 8}};
  fill_gpu(src, 100000, 70);
  fill_gpu(src + (1 << 20), 8192, 80);
  auto r = p.recv->irecv(std::span<const RecvBuffer>(bufs, 2));
  auto s1 = p.send->isend(src, 100000, *sreg, 7);
  auto s2 = p.send->isend(src + (1 << 20), 8192, *sreg, 8);
  ASSERT_TRUE(r.ok() && s1.ok() && s2.ok());
  ASSERT_TRUE(p.recv->wait(*r, soon()).ok());
  auto back = from_gpu(dst, 100000);
  EXPECT_EQ(test::first_mismatch(back.data(), 100000, 70), -1);
  EXPECT_EQ(test::first_mismatch(host.data(), 8192, 80), -1);
  ASSERT_TRUE(p.send->wait(*s1, soon()).ok() && p.send->wait(*s2, soon()).ok());
}

TEST_P(GpuMemory, PutsFromAndGetsIntoGpuMemory) {
  Pair p = test::connect_pair(*dev_, *dev_);
  ASSERT_TRUE(p.send && p.recv);
  auto w = Window::open(*p.send, soon());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const size_t n = 8 << 20;
  uint8_t* g = gpu_alloc(n, env_gpu("XPORT_TEST_GPU_SRC"));
  std::vector<uint8_t> target(n);
  auto greg = dev_->register_memory(g, n);
  auto treg = dev_->register_memory(target.data(), n);
  ASSERT_TRUE(greg.ok() && treg.ok());
  auto remote = dev_->import_key(treg->export_key());
  ASSERT_TRUE(remote.ok());
  fill_gpu(g, n, 11);
  ASSERT_TRUE((*w)->put(*greg, 0, *remote, 0, n).ok());
  ASSERT_TRUE((*w)->quiet(soon()).ok());
  EXPECT_EQ(test::first_mismatch(target.data(), n, 11), -1);
  test::fill(target.data(), n, 12);
  auto t = (*w)->get(*greg, 0, *remote, 0, n);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE((*w)->wait_local(*t, soon()).ok());
  auto back = from_gpu(g, n);
  EXPECT_EQ(test::first_mismatch(back.data(), n, 12), -1);
}

// A peer's puts and signals into GPU memory: the target copies them on to its GPU before they
// count as delivered (docs/semantics.md, "GPU memory").
TEST_P(GpuMemory, PutsAndSignalsIntoGpuMemory) {
  Pair p = test::connect_pair(*dev_, *dev_);
  ASSERT_TRUE(p.send && p.recv);
  auto w = Window::open(*p.send, soon());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const size_t n = 8 << 20;
  uint8_t* g = gpu_alloc(n, env_gpu("XPORT_TEST_GPU_DST"));
  std::vector<uint8_t> src(n), flags(64, 0);
  auto greg = dev_->register_memory(g, n);
  auto sreg = dev_->register_memory(src.data(), n);
  auto freg = dev_->register_memory(flags.data(), flags.size());
  ASSERT_TRUE(greg.ok() && sreg.ok() && freg.ok());
  auto gkey = dev_->import_key(greg->export_key());
  auto fkey = dev_->import_key(freg->export_key());
  ASSERT_TRUE(gkey.ok() && fkey.ok());
  test::fill(src.data(), n, 51);
  ASSERT_TRUE((*w)->put(*sreg, 0, *gkey, 0, n).ok());
  ASSERT_TRUE((*w)->quiet(soon()).ok());
  auto back = from_gpu(g, n);
  EXPECT_EQ(test::first_mismatch(back.data(), n, 51), -1);
  for (uint64_t round = 1; round <= 10; ++round) {
    const size_t len = (n / 10) * round;
    test::fill(src.data(), len, 60 + round);
    ASSERT_TRUE((*w)->put_signal(*sreg, 0, *gkey, 0, len, *fkey, 0, 1).ok());
    ASSERT_TRUE((*w)->wait_signal(*freg, 0, round, soon()).ok());
    back = from_gpu(g, len);
    EXPECT_EQ(test::first_mismatch(back.data(), len, 60 + round), -1) << "round " << round;
  }
  ASSERT_TRUE((*w)->signal(*gkey, 64, 9, SignalOp::set).ok());
  ASSERT_TRUE((*w)->quiet(soon()).ok());
  back = from_gpu(g + 64, 8);
  uint64_t word;
  std::memcpy(&word, back.data(), 8);
  EXPECT_EQ(word, 9u) << "a signal into GPU memory";
}

// SignalOrder::after_data as NCCL's GIN barriers would use it, on a real GPU: bursts of adds
// into 16 staged words (one per CTA) around put_signals into staged memory, every count checked
// on the GPU; a lost or doubled update, or an operation never applied, fails it (quiet's
// deadline). Strong signals the same way, for the "signal order:" line (docs/benchmarks.md).
TEST_P(GpuMemory, AfterDataSignalBurstsCountEveryAdd) {
  Pair p = test::connect_pair(*dev_, *dev_);
  ASSERT_TRUE(p.send && p.recv);
  auto w = Window::open(*p.send, soon());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  (*w)->set_source_read(SourceRead::until_local);
  const int gpu = env_gpu("XPORT_TEST_GPU_DST");
  constexpr int kWords = 16;
  constexpr int kIters = 300;
  const size_t chunk = 64 << 10;
  uint8_t* words = gpu_alloc(4096, gpu);
  uint8_t* data = gpu_alloc(chunk, gpu);
  uint8_t* src = gpu_alloc(chunk, gpu);
  std::vector<uint8_t> zero(4096, 0);
  to_gpu(words, zero.data(), zero.size());
  auto wreg = dev_->register_memory(words, 4096);
  auto dreg = dev_->register_memory(data, chunk);
  auto sreg = dev_->register_memory(src, chunk);
  ASSERT_TRUE(wreg.ok() && dreg.ok() && sreg.ok());
  auto wkey = dev_->import_key(wreg->export_key());
  auto dkey = dev_->import_key(dreg->export_key());
  ASSERT_TRUE(wkey.ok() && dkey.ok());
  fill_gpu(src, chunk, 5);
  double us[2] = {0, 0};
  for (int pass = 0; pass < 2; ++pass) {
    const SignalOrder order = pass == 0 ? SignalOrder::after_data : SignalOrder::strong;
    auto t0 = std::chrono::steady_clock::now();
    for (int it = 0; it < kIters; ++it) {
      for (int phase = 0; phase < 2; ++phase) {
        for (int c = 0; c < kWords; ++c) {
          auto t = (*w)->signal(*wkey, 8 * (1 + c), 1, SignalOp::add, order);
          ASSERT_TRUE(t.ok()) << t.status().to_string();
        }
        if (phase == 0) {
          auto t = (*w)->put_signal(*sreg, 0, *dkey, 0, chunk, *wkey, 0, 1, SignalOp::add, order);
          ASSERT_TRUE(t.ok()) << t.status().to_string();
        }
      }
      if (it % 8 == 7) {
        Status q = (*w)->quiet(Deadline::after(20s));
        ASSERT_TRUE(q.ok()) << "iteration " << it << ": " << q.to_string();
      }
    }
    Status q = (*w)->quiet(Deadline::after(20s));
    ASSERT_TRUE(q.ok()) << q.to_string();
    us[pass] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                   .count() / kIters;
    auto back = from_gpu(words, 8 * (1 + kWords));
    uint64_t v[1 + kWords];
    std::memcpy(v, back.data(), sizeof(v));
    EXPECT_EQ(v[0], uint64_t(kIters) * (pass + 1)) << "the put_signals' word";
    for (int c = 0; c < kWords; ++c) {
      EXPECT_EQ(v[1 + c], uint64_t(2 * kIters) * (pass + 1)) << "word " << 1 + c;
    }
  }
  std::printf("signal order: %s, %d iterations of %d signals into 16 staged words and a 64 KiB "
              "put_signal: after_data %.1f us each, strong %.1f us (%.2fx)\n",
              GetParam().provider, kIters, 2 * kWords, us[0], us[1], us[1] / us[0]);
  auto d = from_gpu(data, chunk);
  EXPECT_EQ(test::first_mismatch(d.data(), chunk, 5), -1);
}

// Staging's cost: the same 64 MiB operations from host and from GPU memory, interleaved.
TEST_P(GpuMemory, StagingBandwidthAgainstHostMemory) {
  Pair p = test::connect_pair(*dev_, *dev_);
  ASSERT_TRUE(p.send && p.recv);
  auto w = Window::open(*p.send, soon());
  ASSERT_TRUE(w.ok());
  const size_t n = 64 << 20;
  const int iters = 8, rounds = 3;
  uint8_t* g = gpu_alloc(n, env_gpu("XPORT_TEST_GPU_SRC"));
  uint8_t* gd = gpu_alloc(n, env_gpu("XPORT_TEST_GPU_DST"));
  std::vector<uint8_t> host(n, 1), target(n), hostdst(n);
  auto greg = dev_->register_memory(g, n);
  auto gdreg = dev_->register_memory(gd, n);
  auto hreg = dev_->register_memory(host.data(), n);
  auto treg = dev_->register_memory(target.data(), n);
  auto hdreg = dev_->register_memory(hostdst.data(), n);
  ASSERT_TRUE(greg.ok() && gdreg.ok() && hreg.ok() && treg.ok() && hdreg.ok());
  auto remote = dev_->import_key(treg->export_key());
  ASSERT_TRUE(remote.ok());
  auto put_rate = [&](const Region& src) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) EXPECT_TRUE((*w)->put(src, 0, *remote, 0, n).ok());
    EXPECT_TRUE((*w)->quiet(soon()).ok());
    return double(n) * iters / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e9;
  };
  auto send_rate = [&](const Region& src, const Region& dst) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      auto r = p.recv->irecv(dst.base(), n, dst);
      auto s = p.send->isend(src.base(), n, src);
      EXPECT_TRUE(r.ok() && s.ok());
      EXPECT_TRUE(p.recv->wait(*r, soon()).ok());
      EXPECT_TRUE(p.send->wait(*s, soon()).ok());
    }
    return double(n) * iters / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e9;
  };
  for (int round = 0; round < rounds; ++round) {
    double ph = put_rate(*hreg), pg = put_rate(*greg);
    double sh = send_rate(*hreg, *hdreg), sg = send_rate(*greg, *gdreg);
    std::printf("staging: %s round %d: put 64 MiB host %.2f GB/s, GPU %.2f GB/s (%.2fx); "
                "send/recv 64 MiB host->host %.2f GB/s, GPU->GPU %.2f GB/s (%.2fx)\n",
                GetParam().provider, round, ph, pg, pg / ph, sh, sg, sg / sh);
  }
}

// Where a put_signal round trip through staged GPU memory spends its time: two host threads
// ping-pong 8 bytes through two windows of one device, with each of the three places that can
// be GPU memory (the put's source, its destination, the signal word) in GPU memory alone, then
// all of them ("round trip:" lines, docs/benchmarks.md).
TEST_P(GpuMemory, RoundTripCostOfEachStagedPlace) {
  Pair p1 = test::connect_pair(*dev_, *dev_);
  Pair p2 = test::connect_pair(*dev_, *dev_);
  ASSERT_TRUE(p1.send && p2.send);
  auto wa = Window::open(*p1.send, soon());
  auto wb = Window::open(*p2.send, soon());
  ASSERT_TRUE(wa.ok() && wb.ok());
  const int rounds = 1000;
  // Each side: [0, 8) the source, [64, 72) the destination, [128, 136) the signal word; a side's
  // three places are in three regions, each host or GPU memory.
  struct Side {
    std::vector<Region> regs;
    std::vector<RemoteRegion> keys;
  };
  auto side = [&](bool src_gpu, bool dst_gpu, bool sig_gpu, std::vector<std::vector<uint8_t>>& host) {
    Side s;
    for (bool g : {src_gpu, dst_gpu, sig_gpu}) {
      uint8_t* p = nullptr;
      if (g) {
        p = gpu_alloc(4096, 0);
        std::vector<uint8_t> zero(4096, 0);
        to_gpu(p, zero.data(), 4096);
      } else {
        host.emplace_back(4096, 0);
        p = host.back().data();
      }
      auto r = dev_->register_memory(p, 4096);
      EXPECT_TRUE(r.ok());
      s.keys.push_back(*dev_->import_key(r->export_key()));
      s.regs.push_back(*r);
    }
    return s;
  };
  auto run = [&](bool src_gpu, bool dst_gpu, bool sig_gpu) {
    std::vector<std::vector<uint8_t>> host;
    host.reserve(8);
    Side a = side(src_gpu, dst_gpu, sig_gpu, host), b = side(src_gpu, dst_gpu, sig_gpu, host);
    std::atomic<int> failures{0};
    const Stats before = dev_->stats();
    double issue_us = 0;  // the initiator's time inside put_signal (its copy in, the posts)
    auto t = std::chrono::steady_clock::now();
    std::thread pong([&] {
      for (uint64_t i = 1; i <= rounds; ++i) {
        if (!(*wb)->wait_signal(b.regs[2], 0, i, soon()).ok() ||
            !(*wb)->put_signal(b.regs[0], 0, a.keys[1], 0, 8, a.keys[2], 0, 1).ok()) {
          ++failures;
          return;
        }
      }
    });
    for (uint64_t i = 1; i <= rounds && failures == 0; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      if (!(*wa)->put_signal(a.regs[0], 0, b.keys[1], 0, 8, b.keys[2], 0, 1).ok()) ++failures;
      issue_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      if (!(*wa)->wait_signal(a.regs[2], 0, i, soon()).ok()) ++failures;
    }
    pong.join();
    EXPECT_EQ(failures.load(), 0);
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count() / rounds;
    const Stats after = dev_->stats();
    std::printf("round trip: %s src %d dst %d sig %d: %.1f us, put_signal call %.1f us, per round "
                "trip: ops held %.2f, acks %.2f\n", GetParam().provider, src_gpu, dst_gpu, sig_gpu,
                us, issue_us / rounds, double(after.window_ops_held - before.window_ops_held) / rounds,
                double(after.window_acks_sent - before.window_acks_sent) / rounds);
    EXPECT_TRUE((*wa)->quiet(soon()).ok());
    EXPECT_TRUE((*wb)->quiet(soon()).ok());
    return us;
  };
  const double none = run(false, false, false), src = run(true, false, false),
               dst = run(false, true, false), sig = run(false, false, true),
               all = run(true, true, true);
  std::printf("round trip: %s put_signal 8 B, %d rounds, host threads, GPU memory at: nowhere "
              "%.1f us, source %.1f us, destination %.1f us, signal word %.1f us, all three "
              "%.1f us\n", GetParam().provider, rounds, none, src, dst, sig, all);
}

INSTANTIATE_TEST_SUITE_P(Providers, GpuMemory,
                         ::testing::Values(test::ProviderParam{"shm", "auto"},
                                           test::ProviderParam{"tcp;ofi_rxm", "manual"}),
                         test::provider_param_name);

}  // namespace
}  // namespace xport

namespace xport {
namespace {

// What one small staging copy costs on this GPU (printed as "copy latency:" lines): the floor
// under every put_signal round trip through staged GPU memory (docs/benchmarks.md).
TEST(GpuCopyLatency, SmallCopiesOfTheStagingPath) {
  gpu::Driver& d = gpu::driver();
  if (!d.available()) GTEST_SKIP() << "no GPU: " << d.describe();
  auto mem = d.alloc_gpu(4096, 0);
  ASSERT_TRUE(mem.ok());
  auto info = d.classify(*mem);
  ASSERT_TRUE(info.ok());
  auto staged = gpu::StagedMemory::create(d, *mem, 4096, *info);
  ASSERT_TRUE(staged.ok()) << staged.status().to_string();
  auto* g = static_cast<uint8_t*>(*mem);
  const int n = 2000;
  auto time_us = [&](auto&& body) {
    for (int i = 0; i < 100; ++i) body();  // warm: streams, events
    auto t = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) body();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count() / n;
  };
  const double in = time_us([&] { ASSERT_TRUE((*staged)->copy_in(g, 8).ok()); });
  const double out = time_us([&] {
    auto c = (*staged)->start_copy_out({{g + 8, 8}});
    ASSERT_TRUE(c.ok());
    for (;;) {
      auto done = (*c)->done();
      ASSERT_TRUE(done.ok());
      if (*done) break;
    }
  });
  auto s = d.open_copy_queue(*info);
  ASSERT_TRUE(s.ok());
  uint64_t word = 0;
  const double raw_sync = time_us([&] {
    ASSERT_TRUE((*s)->copy_to_gpu(g + 16, &word, 8).ok());
    ASSERT_TRUE((*s)->synchronize().ok());
  });
  const double raw_mark = time_us([&] {
    ASSERT_TRUE((*s)->copy_to_gpu(g + 16, (*staged)->shadow(), 8).ok());
    auto m = (*s)->mark();
    ASSERT_TRUE(m.ok());
    for (;;) {
      auto r = (*s)->reached(*m);
      ASSERT_TRUE(r.ok());
      if (*r) break;
    }
  });
  std::printf("copy latency: 8 B, %d each: copy_in (GPU->shadow, stream synchronised) %.2f us; "
              "start_copy_out + done() polled %.2f us; pinned HtoD + cuStreamSynchronize %.2f us; "
              "pinned HtoD + event polled %.2f us\n", n, in, out, raw_sync, raw_mark);
  s->reset();
  staged->reset();
  d.free_gpu(*mem);
}

}  // namespace
}  // namespace xport
