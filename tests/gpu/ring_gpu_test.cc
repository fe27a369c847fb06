// The proxy ring with producers on a real GPU (kernels in ring_kernels.cu, xport/device.cuh)
// and the host's RingConsumer: descriptors of many threads each taken once and in each thread's
// order through wrap-around and full-ring waits, warp and block scope, a wait on a signal
// nobody sends ending with a timeout the host reads, an abort ending a kernel's wait. Skips
// without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include "../integration/harness.hpp"
#include "../integration/provider_fixture.hpp"
#include "gpu/driver.hpp"
#include "gpu/proxy_ring.hpp"

extern "C" {
int xtest_ring_alloc(uint32_t bytes, void** host, void** device, void** head);
void xtest_ring_free(void* host, void* head);
int xtest_launch_producers(void* device, void* head, uint32_t capacity, int blocks, int threads,
                           int per_thread, uint64_t deadline_cycles);
int xtest_launch_waiter(void* device, void* head, uint32_t capacity, void* word_host,
                        uint64_t value, uint64_t deadline_cycles);
int xtest_launch_scopes(void* device, void* head, uint32_t capacity, int blocks,
                        uint64_t deadline_cycles);
int xtest_finish(int* statuses, int n);
int xtest_running();
int xtest_gpus();
int xtest_launch_proxy_put_signals(xport::gpu_ring::DeviceRing r, int blocks, int threads,
                                   uint64_t slice, uint64_t deadline_cycles);
int xtest_launch_proxy_put_stream(xport::gpu_ring::DeviceRing r, uint64_t size, int count,
                                  uint64_t deadline_cycles);
int xtest_launch_waiter_device_word(xport::gpu_ring::DeviceRing r, const uint64_t* word,
                                    uint64_t value, uint64_t deadline_cycles);
int xtest_launch_ping_pong(xport::gpu_ring::DeviceRing a, const uint64_t* a_word,
                           xport::gpu_ring::DeviceRing b, const uint64_t* b_word, int rounds,
                           uint64_t deadline_cycles);
int xtest_finish_ping_pong(int* statuses, unsigned long long* cycles);
int xtest_launch_words_waiter(const uint64_t* words, int n, uint64_t value,
                              uint64_t deadline_cycles);
}

namespace xport::gpu {
namespace {

using namespace std::chrono_literals;
constexpr uint64_t kSecondOfCycles = 2'000'000'000ull;  // about a second at 2 GHz

class GpuRing : public ::testing::Test {
 protected:
  void SetUp() override {
    if (xtest_gpus() == 0) GTEST_SKIP() << "no GPU";
    ASSERT_EQ(xtest_ring_alloc(gpu_ring::ring_bytes(capacity_) + 64, &host_, &device_, &head_), 0);
    ASSERT_TRUE(init_ring(host_, capacity_).ok());
  }
  void TearDown() override {
    if (host_) xtest_ring_free(host_, head_);
  }
  uint32_t capacity_ = 256;
  void* host_ = nullptr;
  void* device_ = nullptr;
  void* head_ = nullptr;
};

TEST_F(GpuRing, EveryDescriptorOfEveryGpuThreadOnceAndInOrder) {
  const int blocks = 8, threads = 64, per_thread = 50;
  auto c = RingConsumer::attach(host_);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(xtest_launch_producers(device_, head_, capacity_, blocks, threads, per_thread,
                                   30 * kSecondOfCycles), 0);
  std::map<uint16_t, uint64_t> next;
  uint64_t seen = 0, total = uint64_t{blocks} * threads * per_thread;
  gpu_ring::Descriptor out[64];
  auto until = std::chrono::steady_clock::now() + 60s;
  while (seen < total && std::chrono::steady_clock::now() < until) {
    size_t n = c->poll(out, 64);
    for (size_t k = 0; k < n; ++k) {
      const auto& d = out[k];
      ASSERT_EQ(d.op, static_cast<uint8_t>(gpu_ring::Op::put));
      EXPECT_EQ(d.local_offset, next[d.window]) << "thread " << d.window << " out of order";
      EXPECT_EQ(d.remote_offset, uint64_t{d.window} * per_thread + d.local_offset)
          << "a descriptor read before its body was written";
      EXPECT_EQ(d.length, 8u);
      next[d.window] = d.local_offset + 1;
    }
    seen += n;
    c->complete(n);
  }
  ASSERT_EQ(seen, total) << "descriptors missing after 60 s";
  std::vector<int> status(blocks * threads, 99);
  ASSERT_EQ(xtest_finish(status.data(), blocks * threads), 0);
  for (int s : status) EXPECT_EQ(s, 0);
  EXPECT_EQ(c->aborted(), gpu_ring::Abort::none);
}

TEST_F(GpuRing, WarpAndBlockScopeIssueOncePerWarpOrBlock) {
  const int blocks = 4;  // 64 threads: 2 warps
  auto c = RingConsumer::attach(host_);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(xtest_launch_scopes(device_, head_, capacity_, blocks, 30 * kSecondOfCycles), 0);
  std::map<uint16_t, int> per_window;
  gpu_ring::Descriptor out[64];
  auto until = std::chrono::steady_clock::now() + 30s;
  while (xtest_running() == 1 && std::chrono::steady_clock::now() < until) {
    size_t n = c->poll(out, 64);
    for (size_t k = 0; k < n; ++k) ++per_window[out[k].window];
    c->complete(n);  // quiet completes here as a put does (no window behind this ring)
  }
  std::vector<int> status(blocks, 99);
  ASSERT_EQ(xtest_finish(status.data(), blocks), 0);
  for (int s : status) EXPECT_EQ(s, 0);
  EXPECT_EQ(per_window[7], blocks * 2) << "put_warp: one per warp";
  EXPECT_EQ(per_window[8], blocks) << "put_block: one per block";
  EXPECT_EQ(per_window[9], blocks) << "quiet_block: one per block";
  for (uint16_t w = 10; w <= 17; ++w) {
    EXPECT_EQ(per_window[w], w % 2 == 0 ? blocks * 2 : blocks)
        << "window " << w << ": even windows are warp-scope calls, odd ones block-scope";
  }
}

TEST_F(GpuRing, AWaitOnASignalNobodySendsEndsWithATimeoutTheHostReads) {
  auto c = RingConsumer::attach(host_);
  ASSERT_TRUE(c.ok());
  auto* word = static_cast<uint64_t*>(host_) + gpu_ring::ring_bytes(capacity_) / 8;  // spare line
  *word = 5;
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(xtest_launch_waiter(device_, head_, capacity_, word, 6, kSecondOfCycles / 10), 0);
  int status = 99;
  ASSERT_EQ(xtest_finish(&status, 1), 0);
  EXPECT_EQ(status, -2) << "kTimedOut";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);
  EXPECT_EQ(c->aborted(), gpu_ring::Abort::timeout);
}

TEST_F(GpuRing, AnAbortEndsAKernelsWait) {
  auto c = RingConsumer::attach(host_);
  ASSERT_TRUE(c.ok());
  auto* word = static_cast<uint64_t*>(host_) + gpu_ring::ring_bytes(capacity_) / 8;
  *word = 0;
  ASSERT_EQ(xtest_launch_waiter(device_, head_, capacity_, word, 1, 600 * kSecondOfCycles), 0);
  EXPECT_EQ(xtest_running(), 1);
  c->abort(gpu_ring::Abort::stopped);
  int status = 99;
  ASSERT_EQ(xtest_finish(&status, 1), 0);
  EXPECT_EQ(status, -1) << "kAborted";
}

// Kernels issuing put_signals through GpuProxy, executed over a Window on shm: the target's
// bytes and signal checked; then device-initiated put bandwidth against host-initiated puts
// from the same GPU memory ("proxy:" lines).
class GpuProxyKernels : public test::ProviderTest {
 protected:
  void SetUp() override {
    if (xtest_gpus() == 0 || !driver().available()) GTEST_SKIP() << "no GPU";
    void* h;
    void* d;
    void* head;
    ASSERT_EQ(xtest_ring_alloc(4096, &h, &d, &head), 0);  // the launchers' stream and statuses
    scratch_ = h;
    scratch_head_ = head;
    test::ProviderTest::SetUp();
  }
  void TearDown() override {
    test::ProviderTest::TearDown();
    if (scratch_) xtest_ring_free(scratch_, scratch_head_);
  }
  void* scratch_ = nullptr;
  void* scratch_head_ = nullptr;
};

TEST_P(GpuProxyKernels, KernelsPutWithSignalsThroughTheProxy) {
  test::Pair p = test::connect_pair(*dev_, *dev_);
  ASSERT_TRUE(p.send && p.recv);
  auto w = Window::open(*p.send, Deadline::after(20s));
  ASSERT_TRUE(w.ok());
  const int blocks = 4, threads = 32;
  const size_t slice = 4096, n = slice * blocks * threads, big = 64 << 20;
  auto src = driver().alloc_gpu(big, 0);
  ASSERT_TRUE(src.ok());
  std::vector<uint8_t> pattern(n), target(big), signals(64, 0);
  test::fill(pattern.data(), n, 21);
  {
    auto s = driver().open_copy_queue(*driver().classify(*src));
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->copy_to_gpu(*src, pattern.data(), n).ok());
    ASSERT_TRUE((*s)->synchronize().ok());
  }
  auto sreg = dev_->register_memory(*src, big);
  auto treg = dev_->register_memory(target.data(), big);
  auto sigreg = dev_->register_memory(signals.data(), signals.size());
  ASSERT_TRUE(sreg.ok() && treg.ok() && sigreg.ok());
  auto tkey = dev_->import_key(treg->export_key());
  auto skey = dev_->import_key(sigreg->export_key());
  ASSERT_TRUE(tkey.ok() && skey.ok());
  auto proxy = GpuProxy::open(*dev_);
  ASSERT_TRUE(proxy.ok()) << proxy.status().to_string();
  ASSERT_TRUE((*proxy)->add_window(**w).ok() && (*proxy)->add_region(*sreg).ok() &&
              (*proxy)->add_remote(*tkey).ok() && (*proxy)->add_remote(*skey).ok());
  ASSERT_TRUE((*proxy)->start().ok());
  ASSERT_EQ(xtest_launch_proxy_put_signals((*proxy)->ring(), blocks, threads, slice,
                                           30 * kSecondOfCycles), 0);
  std::vector<int> status(blocks, 99);
  ASSERT_EQ(xtest_finish(status.data(), blocks), 0);
  for (int s : status) EXPECT_EQ(s, 0) << (*proxy)->last_error().to_string();
  EXPECT_EQ(test::first_mismatch(target.data(), n, 21), -1);
  uint64_t sig;
  std::memcpy(&sig, signals.data() + 8, 8);
  EXPECT_EQ(sig, uint64_t{blocks} * threads) << "every put_signal's signal applied once";
  // Device- against host-initiated puts of the same GPU memory, twice: the first round of a size
  // also pays for what the staging pool grows then (slabs allocated, touched, registered).
  for (size_t size : {size_t{1} << 20, size_t{1} << 20, size_t{8} << 20, size_t{8} << 20, big, big}) {
    const int count = static_cast<int>(std::max<size_t>(4, (256u << 20) / size));
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(xtest_launch_proxy_put_stream((*proxy)->ring(), size, count, 60 * kSecondOfCycles), 0);
    int st = 99;
    ASSERT_EQ(xtest_finish(&st, 1), 0);
    ASSERT_EQ(st, 0) << (*proxy)->last_error().to_string();
    double dev_gbs = double(size) * count /
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e9;
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < count; ++i) {
      auto t = (*w)->put(*sreg, 0, *tkey, 0, size);
      if (!t.ok() && t.status().code() == Code::again) {  // contexts all in flight: as documented
        ASSERT_TRUE((*w)->quiet(Deadline::after(60s)).ok());
        t = (*w)->put(*sreg, 0, *tkey, 0, size);
      }
      ASSERT_TRUE(t.ok()) << t.status().to_string();
    }
    ASSERT_TRUE((*w)->quiet(Deadline::after(60s)).ok());
    double host_gbs = double(size) * count /
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e9;
    std::printf("proxy: %s put %zu KiB x %d from GPU memory: device-initiated %.2f GB/s, "
                "host-initiated %.2f GB/s (%.2fx)\n", GetParam().provider, size >> 10, count,
                dev_gbs, host_gbs, dev_gbs / host_gbs);
  }
  auto stats = (*proxy)->stats();
  std::printf("proxy: %llu descriptors in %llu batches, at most %llu per pass\n",
              (unsigned long long)stats.descriptors, (unsigned long long)stats.batches,
              (unsigned long long)stats.max_occupancy);
  proxy->reset();
  sreg = Status(Code::closed, "dropped");
  driver().free_gpu(*src);
}

// Kernels put_signal into GPU memory (the target's, staged), the signal word in GPU memory too;
// then a kernel waits on that GPU word for the count and the data is all there.
TEST_P(GpuProxyKernels, KernelsPutIntoGpuMemoryAndAKernelWaitsOnTheSignal) {
  test::Pair p = test::connect_pair(*dev_, *dev_);
  ASSERT_TRUE(p.send && p.recv);
  auto w = Window::open(*p.send, Deadline::after(20s));
  ASSERT_TRUE(w.ok());
  const int blocks = 2, threads = 32;
  const size_t slice = 8192, n = slice * blocks * threads;
  auto src = driver().alloc_gpu(n, 0);
  auto dst = driver().alloc_gpu(n, 0);
  auto sig = driver().alloc_gpu(64, 0);
  ASSERT_TRUE(src.ok() && dst.ok() && sig.ok());
  std::vector<uint8_t> pattern(n), zero(n, 0);
  test::fill(pattern.data(), n, 77);
  auto s = driver().open_copy_queue(*driver().classify(*src));
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->copy_to_gpu(*src, pattern.data(), n).ok());
  ASSERT_TRUE((*s)->copy_to_gpu(*dst, zero.data(), n).ok());
  ASSERT_TRUE((*s)->copy_to_gpu(*sig, zero.data(), 64).ok());
  ASSERT_TRUE((*s)->synchronize().ok());
  {
    auto sreg = dev_->register_memory(*src, n);
    auto dreg = dev_->register_memory(*dst, n);
    auto greg = dev_->register_memory(*sig, 64);
    ASSERT_TRUE(sreg.ok() && dreg.ok() && greg.ok());
    auto dkey = dev_->import_key(dreg->export_key());
    auto gkey = dev_->import_key(greg->export_key());
    ASSERT_TRUE(dkey.ok() && gkey.ok());
    auto proxy = GpuProxy::open(*dev_);
    ASSERT_TRUE(proxy.ok());
    // The kernel names remote 0 (data) and remote 1, word at offset 8 (the signal).
    ASSERT_TRUE((*proxy)->add_window(**w).ok() && (*proxy)->add_region(*sreg).ok() &&
                (*proxy)->add_remote(*dkey).ok() && (*proxy)->add_remote(*gkey).ok());
    ASSERT_TRUE((*proxy)->start().ok());
    ASSERT_EQ(xtest_launch_proxy_put_signals((*proxy)->ring(), blocks, threads, slice,
                                             30 * kSecondOfCycles), 0);
    std::vector<int> status(blocks, 99);
    ASSERT_EQ(xtest_finish(status.data(), blocks), 0);
    for (int st : status) EXPECT_EQ(st, 0) << (*proxy)->last_error().to_string();
    // A kernel waits on the GPU word for every signal.
    const auto* word = reinterpret_cast<const uint64_t*>(static_cast<uint8_t*>(*sig) + 8);
    ASSERT_EQ(xtest_launch_waiter_device_word((*proxy)->ring(), word,
                                              uint64_t{blocks} * threads, 10 * kSecondOfCycles), 0);
    int wst = 99;
    ASSERT_EQ(xtest_finish(&wst, 1), 0);
    EXPECT_EQ(wst, 0) << "the kernel did not see every signal in GPU memory";
    std::vector<uint8_t> back(n);
    ASSERT_TRUE((*s)->copy_to_host(back.data(), *dst, n).ok());
    ASSERT_TRUE((*s)->synchronize().ok());
    EXPECT_EQ(test::first_mismatch(back.data(), n, 77), -1) << "the target's GPU memory";
  }
  driver().free_gpu(*src);
  driver().free_gpu(*dst);
  driver().free_gpu(*sig);
}

// put_signal round trips: two kernels (one per device, each with its proxy) ping-pong 8 bytes
// with the signal words in GPU memory, against two host threads doing the same through the
// same windows ("proxy: ... round trip" lines, docs/benchmarks.md).
TEST_P(GpuProxyKernels, PutSignalRoundTripDeviceAgainstHost) {
  auto other = ctx_->open_device();
  ASSERT_TRUE(other.ok());
  std::unique_ptr<Device> b = std::move(other).value();
  std::atomic<bool> stop{false};
  test::Pair ab, ba;
  {
    std::thread pump([&] { while (!stop) (void)b->progress(); });
    ab = test::connect_pair(*dev_, *b);
    stop = true;
    pump.join();
  }
  ba = test::connect_pair(*b, *dev_);
  ASSERT_TRUE(ab.send && ba.send);
  Result<std::unique_ptr<Window>> wa = Status(Code::internal, "");
  Result<std::unique_ptr<Window>> wb = Status(Code::internal, "");
  {
    stop = false;
    std::thread pump([&] { while (!stop) (void)b->progress(); });
    wa = Window::open(*ab.send, Deadline::after(20s));
    stop = true;
    pump.join();
  }
  {
    stop = false;
    std::thread pump([&] { while (!stop) (void)dev_->progress(); });
    wb = Window::open(*ba.send, Deadline::after(20s));
    stop = true;
    pump.join();
  }
  ASSERT_TRUE(wa.ok() && wb.ok()) << wa.status().to_string() << wb.status().to_string();
  // Each side: 64 bytes of GPU memory: 8 bytes of data at 0, its signal word at 8.
  auto ga = driver().alloc_gpu(64, 0);
  auto gb = driver().alloc_gpu(64, 0);
  ASSERT_TRUE(ga.ok() && gb.ok());
  std::vector<uint8_t> zero(64, 0);
  auto s = driver().open_copy_queue(*driver().classify(*ga));
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->copy_to_gpu(*ga, zero.data(), 64).ok());
  ASSERT_TRUE((*s)->copy_to_gpu(*gb, zero.data(), 64).ok());
  ASSERT_TRUE((*s)->synchronize().ok());
  const int rounds = 1000;
  double device_us = 0, host_us = 0, host_gpu_us = 0;
  {
    auto ra = dev_->register_memory(*ga, 64);
    auto rb = b->register_memory(*gb, 64);
    ASSERT_TRUE(ra.ok() && rb.ok());
    auto ka = b->import_key(ra->export_key());    // a's memory, as b names it
    auto kb = dev_->import_key(rb->export_key());  // b's memory, as a names it
    ASSERT_TRUE(ka.ok() && kb.ok());
    auto pa = GpuProxy::open(*dev_);
    auto pb = GpuProxy::open(*b);
    ASSERT_TRUE(pa.ok() && pb.ok());
    ASSERT_TRUE((*pa)->add_window(**wa).ok() && (*pa)->add_region(*ra).ok() &&
                (*pa)->add_remote(*kb).ok() && (*pa)->add_remote(*kb).ok());
    ASSERT_TRUE((*pb)->add_window(**wb).ok() && (*pb)->add_region(*rb).ok() &&
                (*pb)->add_remote(*ka).ok() && (*pb)->add_remote(*ka).ok());
    ASSERT_TRUE((*pa)->start().ok() && (*pb)->start().ok());
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(xtest_launch_ping_pong((*pa)->ring(), reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(*ga) + 8),
                                     (*pb)->ring(), reinterpret_cast<uint64_t*>(static_cast<uint8_t*>(*gb) + 8),
                                     rounds, 30 * kSecondOfCycles), 0);
    int st[2] = {99, 99};
    unsigned long long cycles = 0;
    ASSERT_EQ(xtest_finish_ping_pong(st, &cycles), 0);
    device_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / rounds;
    EXPECT_EQ(st[0], 0) << (*pa)->last_error().to_string();
    EXPECT_EQ(st[1], 0) << (*pb)->last_error().to_string();
    // The host's turn: the same put_signals (host memory words this time, read by the host).
    std::vector<uint64_t> ha(8, 0), hb(8, 0);
    auto rha = dev_->register_memory(ha.data(), 64);
    auto rhb = b->register_memory(hb.data(), 64);
    ASSERT_TRUE(rha.ok() && rhb.ok());
    auto kha = b->import_key(rha->export_key());
    auto khb = dev_->import_key(rhb->export_key());
    ASSERT_TRUE(kha.ok() && khb.ok());
    // Host threads ping-pong through the windows: a's region ra (its word at 8) and b's rb.
    auto host_round_trip = [&](const Region& la, const RemoteRegion& kb_, const Region& lb,
                               const RemoteRegion& ka_) {
      std::atomic<int> failures{0};
      uint64_t base_a = *(*wa)->read_signal(la, 8), base_b = *(*wb)->read_signal(lb, 8);
      auto t = std::chrono::steady_clock::now();
      std::thread pong([&] {
        for (uint64_t i = 1; i <= rounds; ++i) {
          if (!(*wb)->wait_signal(lb, 8, base_b + i, Deadline::after(20s)).ok() ||
              !(*wb)->put_signal(lb, 0, ka_, 0, 8, ka_, 8, 1).ok()) {
            ++failures;
            return;
          }
        }
      });
      for (uint64_t i = 1; i <= rounds && failures == 0; ++i) {
        if (!(*wa)->put_signal(la, 0, kb_, 0, 8, kb_, 8, 1).ok() ||
            !(*wa)->wait_signal(la, 8, base_a + i, Deadline::after(20s)).ok()) {
          ++failures;
        }
      }
      pong.join();
      EXPECT_EQ(failures.load(), 0);
      return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count() / rounds;
    };
    host_us = host_round_trip(*rha, *khb, *rhb, *kha);
    // Like with like: host threads, the same staged GPU regions and words as the kernels.
    host_gpu_us = host_round_trip(*ra, *kb, *rb, *ka);
    (void)(*wa)->quiet(Deadline::after(20s));
    (void)(*wb)->quiet(Deadline::after(20s));
  }
  std::printf("proxy: %s put_signal round trip, 8 B, %d rounds: device-initiated (GPU words) "
              "%.1f us, host-initiated from GPU memory (the same staged regions and words) %.1f us "
              "(%.2fx), host-initiated from host memory %.1f us (%.2fx)\n", GetParam().provider,
              rounds, device_us, host_gpu_us, device_us / host_gpu_us, host_us, device_us / host_us);
  driver().free_gpu(*ga);
  driver().free_gpu(*gb);
}

// A kernel of 16 blocks, each spinning on its own staged GPU word (as a GIN barrier's CTAs do),
// while the host puts into GPU memory from GPU memory (sources read as progress goes, as GIN's
// windows read them) with a signal on each block's word, then one more signal each: every
// copy these need runs while the kernel runs. A copy queue opened then can wait for the kernel,
// which waits for the copy (cuStreamCreate: one in 64 made while a kernel ran waited until it
// ended, on an H200; nccl-tests' GIN alltoall hung so): the kernel times out instead of seeing
// its words. (Whether a creation waits depends on the driver's state: with copy queues opened
// on demand this passed on one H200; the stand-in driver's tests hold the rule.)
TEST_P(GpuProxyKernels, KernelsSpinningOnStagedWordsSeeBurstsOfSignals) {
  test::Pair p = test::connect_pair(*dev_, *dev_);
  ASSERT_TRUE(p.send && p.recv);
  auto w = Window::open(*p.send, Deadline::after(20s));
  ASSERT_TRUE(w.ok());
  (*w)->set_source_read(SourceRead::until_local);
  constexpr int kBlocks = 16;
  constexpr size_t kSlice = 64 << 10;
  auto words = driver().alloc_gpu(4096, 0);
  auto src = driver().alloc_gpu(kBlocks * kSlice, 0);
  auto dst = driver().alloc_gpu(kBlocks * kSlice, 0);
  ASSERT_TRUE(words.ok() && src.ok() && dst.ok());
  std::vector<uint8_t> zero(4096, 0), pattern(kBlocks * kSlice);
  test::fill(pattern.data(), pattern.size(), 33);
  auto s = driver().open_copy_queue(*driver().classify(*src));
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->copy_to_gpu(*words, zero.data(), zero.size()).ok());
  ASSERT_TRUE((*s)->copy_to_gpu(*src, pattern.data(), pattern.size()).ok());
  ASSERT_TRUE((*s)->synchronize().ok());
  {
    auto wreg = dev_->register_memory(*words, 4096);
    auto sreg = dev_->register_memory(*src, kBlocks * kSlice);
    auto dreg = dev_->register_memory(*dst, kBlocks * kSlice);
    ASSERT_TRUE(wreg.ok() && sreg.ok() && dreg.ok());
    ASSERT_TRUE(wreg->staged()) << "the test is about staged GPU memory";
    auto wkey = dev_->import_key(wreg->export_key());
    auto dkey = dev_->import_key(dreg->export_key());
    ASSERT_TRUE(wkey.ok() && dkey.ok());
    const auto* gpu_words = static_cast<const uint64_t*>(*words);
    for (uint64_t round = 1; round <= 40; ++round) {
      // (half the rounds as the GIN table signals: after the data, not after earlier signals)
      const SignalOrder order = round > 20 ? SignalOrder::after_data : SignalOrder::strong;
      ASSERT_EQ(xtest_launch_words_waiter(gpu_words, kBlocks, 2 * round, 5 * kSecondOfCycles), 0);
      for (int b = 0; b < kBlocks; ++b) {
        auto t = (*w)->put_signal(*sreg, b * kSlice, *dkey, b * kSlice, kSlice, *wkey, 8 * b, 1,
                                  SignalOp::add, order);
        ASSERT_TRUE(t.ok()) << t.status().to_string();
      }
      for (int b = 0; b < kBlocks; ++b) {
        ASSERT_TRUE((*w)->signal(*wkey, 8 * b, 1, SignalOp::add, order).ok());
      }
      Status q = (*w)->quiet(Deadline::after(20s));
      ASSERT_TRUE(q.ok()) << "round " << round << ": " << q.to_string();
      std::vector<int> status(kBlocks, 99);
      ASSERT_EQ(xtest_finish(status.data(), kBlocks), 0);
      for (int b = 0; b < kBlocks; ++b) {
        ASSERT_EQ(status[b], 0) << "round " << round << ", block " << b
                                << ": the kernel's word did not reach " << 2 * round;
      }
    }
    std::vector<uint8_t> back(kBlocks * kSlice);
    ASSERT_TRUE((*s)->copy_to_host(back.data(), *dst, back.size()).ok());
    ASSERT_TRUE((*s)->synchronize().ok());
    EXPECT_EQ(test::first_mismatch(back.data(), back.size(), 33), -1);
  }
  driver().free_gpu(*words);
  driver().free_gpu(*src);
  driver().free_gpu(*dst);
}

INSTANTIATE_TEST_SUITE_P(Providers, GpuProxyKernels,
                         ::testing::Values(test::ProviderParam{"shm", "auto"},
                                           test::ProviderParam{"tcp;ofi_rxm", "manual"}),
                         test::provider_param_name);

}  // namespace
}  // namespace xport::gpu
