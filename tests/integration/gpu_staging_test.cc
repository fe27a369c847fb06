// GPU memory through host staging, on every provider, with the fake CUDA driver standing in for
// a GPU (tests/unit/gpu/fake_driver.hpp: its copies run only once asked about, so a request
// reported done before its copy out finished shows stale bytes). The same paths run on real
// GPUs in tests/gpu/ (device machine).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "../unit/gpu/fake_driver.hpp"
#include "harness.hpp"
#include "provider_fixture.hpp"

namespace xport {
namespace {

using namespace std::chrono_literals;
using test::Pair;

Deadline soon() { return Deadline::after(20s); }

// check() until the ticket is done or 20 s have passed (check drives progress itself).
TransferState check_until_done(Window& w, Ticket t) {
  TransferState st = TransferState::pending;
  auto until = std::chrono::steady_clock::now() + 20s;
  while (st != TransferState::done && std::chrono::steady_clock::now() < until) {
    auto c = w.check(t);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    if (!c.ok()) break;
    st = *c;
  }
  return st;
}

class GpuStaging : public test::ProviderTest {
 protected:
  // "GPU memory" of the fake driver, freed at the end of the test.
  uint8_t* gpu_alloc(size_t n) {
    auto p = gpu_->alloc_gpu(n, 0);
    EXPECT_TRUE(p.ok());
    allocs_.push_back(static_cast<uint8_t*>(*p));
    return allocs_.back();
  }
  // A window over a pair of this device's communicators to itself, in window_ (the test is
  // skipped where the provider has none): ASSERT_NO_FATAL_FAILURE(open_window()), then return
  // if IsSkipped().
  void open_window() {
    pair_ = test::connect_pair(*dev_, *dev_);
    ASSERT_TRUE(pair_.send && pair_.recv);
    auto w = Window::open(*pair_.send, soon());
    if (!w.ok() && w.status().code() == Code::unsupported) GTEST_SKIP() << w.status().to_string();
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    window_ = std::move(w).value();
  }
  // Zeroed "GPU memory" of n bytes (as a caller zeroes its signal words with cudaMemset; the
  // stand-in's "GPU" is host memory), registered, and its key as a peer imports it.
  struct GpuWords {
    uint8_t* gpu = nullptr;
    Region region;
    RemoteRegion key;
  };
  void gpu_words(size_t n, GpuWords& out) {
    out.gpu = gpu_alloc(n);
    std::memset(out.gpu, 0, n);
    auto r = dev_->register_memory(out.gpu, n);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    auto k = dev_->import_key(r->export_key());
    ASSERT_TRUE(k.ok()) << k.status().to_string();
    out.region = std::move(r).value();
    out.key = std::move(k).value();
  }
  void TearDown() override {
    window_.reset();
    pair_ = Pair{};
    test::ProviderTest::TearDown();
    for (uint8_t* p : allocs_) gpu_->free_gpu(p);
  }
  test::FakeGpuScope gpu_;
  std::vector<uint8_t*> allocs_;
  Pair pair_;
  std::unique_ptr<Window> window_;
};

TEST_P(GpuStaging, SendAndReceiveBetweenGpuBuffers) {
  Pair p = test::connect_pair(*dev_, *dev_);
  ASSERT_TRUE(p.send && p.recv);
  const size_t max = 1 << 20;
  uint8_t* src = gpu_alloc(max);
  uint8_t* dst = gpu_alloc(max);
  auto sreg = dev_->register_memory(src, max);
  auto dreg = dev_->register_memory(dst, max);
  ASSERT_TRUE(sreg.ok()) << sreg.status().to_string();
  ASSERT_TRUE(dreg.ok()) << dreg.status().to_string();
  EXPECT_EQ(sreg->memory_type(), MemoryType::cuda);
  EXPECT_TRUE(sreg->staged());
  EXPECT_EQ(sreg->base(), src) << "a staged Region still names the caller's GPU memory";
  uint64_t msg = 0;
  for (size_t n : {size_t{1}, size_t{4096}, size_t{100000}, max}) {
    ++msg;
    test::fill(src, n, msg);
    std::memset(dst, 0, max);
    auto r = p.recv->irecv(dst, max, *dreg);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    auto s = p.send->isend(src, n, *sreg);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    // The sender's GPU buffer may be reused once isend returned the request done... only then:
    auto sent = p.send->wait(*s, soon());
    ASSERT_TRUE(sent.ok()) << sent.status().to_string();
    Completion c;
    auto until = std::chrono::steady_clock::now() + 20s;
    while (!c.done && std::chrono::steady_clock::now() < until) {
      auto t = p.recv->test(*r);
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      c = *t;
    }
    ASSERT_TRUE(c.done) << n << " bytes: the receive did not complete";
    EXPECT_EQ(c.bytes, n);
    EXPECT_EQ(test::first_mismatch(dst, n, msg), -1)
        << n << " bytes: the GPU buffer does not hold the message when test() says done";
    if (n < max) {
      EXPECT_EQ(dst[n], 0) << "copied past the message";
    }
  }
  // wait() takes the same path.
  test::fill(src, 5000, 99);
  auto r = p.recv->irecv(dst, max, *dreg);
  auto s = p.send->isend(src, 5000, *sreg);
  ASSERT_TRUE(r.ok() && s.ok());
  auto got = p.recv->wait(*r, soon());
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, 5000u);
  EXPECT_EQ(test::first_mismatch(dst, 5000, 99), -1);
  ASSERT_TRUE(p.send->wait(*s, soon()).ok());
  EXPECT_GT(gpu_->bytes_to_host(), 0u);
  EXPECT_GT(gpu_->bytes_to_gpu(), 0u);
}

TEST_P(GpuStaging, HostToGpuAndGpuToHostAndGroupedReceives) {
  Pair p = test::connect_pair(*dev_, *dev_);
  ASSERT_TRUE(p.send && p.recv);
  const size_t n = 64 * 1024;
  uint8_t* gpu = gpu_alloc(4 * n);
  std::vector<uint8_t> host(4 * n);
  auto greg = dev_->register_memory(gpu, 4 * n);
  auto hreg = dev_->register_memory(host.data(), host.size());
  ASSERT_TRUE(greg.ok() && hreg.ok());
  EXPECT_EQ(hreg->memory_type(), MemoryType::host);
  // Grouped receive: two buffers in GPU memory, one in host memory, tags 1..3.
  RecvBuffer bufs[3] = {{gpu, n, &*greg, 1}, {host.data(), n, &*hreg, 2}, {gpu + n, n, &*greg, 3}};
  auto r = p.recv->irecv(std::span<const RecvBuffer>(bufs, 3));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  test::fill(host.data() + n, 300, 1);         // host -> GPU buffer 0 (tag 1)
  test::fill(gpu + 2 * n, 9000, 2);            // GPU -> host buffer (tag 2)
  test::fill(gpu + 3 * n, n, 3);               // GPU -> GPU buffer 2 (tag 3)
  auto s1 = p.send->isend(host.data() + n, 300, *hreg, 1);
  auto s2 = p.send->isend(gpu + 2 * n, 9000, *greg, 2);
  auto s3 = p.send->isend(gpu + 3 * n, n, *greg, 3);
  ASSERT_TRUE(s1.ok() && s2.ok() && s3.ok());
  Completion c;
  auto until = std::chrono::steady_clock::now() + 20s;
  while (!c.done && std::chrono::steady_clock::now() < until) c = *p.recv->test(*r);
  ASSERT_TRUE(c.done);
  EXPECT_EQ(c.count, 3u);
  EXPECT_EQ(c.sizes[0], 300u);
  EXPECT_EQ(c.sizes[1], 9000u);
  EXPECT_EQ(c.sizes[2], n);
  EXPECT_EQ(test::first_mismatch(gpu, 300, 1), -1);
  EXPECT_EQ(test::first_mismatch(host.data(), 9000, 2), -1);
  EXPECT_EQ(test::first_mismatch(gpu + n, n, 3), -1);
  for (auto& s : {s1, s2, s3}) ASSERT_TRUE(p.send->wait(*s, soon()).ok());
}

TEST_P(GpuStaging, PutsFromGpuAndGetsIntoGpu) {
  ASSERT_NO_FATAL_FAILURE(open_window());
  if (IsSkipped()) return;
  auto* w = &window_;
  const size_t n = 256 * 1024;
  uint8_t* gpu = gpu_alloc(n);
  std::vector<uint8_t> target(n);
  auto greg = dev_->register_memory(gpu, n);
  auto treg = dev_->register_memory(target.data(), n);
  ASSERT_TRUE(greg.ok() && treg.ok());
  auto remote = dev_->import_key(treg->export_key());
  ASSERT_TRUE(remote.ok()) << remote.status().to_string();
  // put from GPU memory: delivered by quiet.
  test::fill(gpu, n, 5);
  auto t = (*w)->put(*greg, 0, *remote, 0, n);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_TRUE((*w)->quiet(soon()).ok());
  EXPECT_EQ(test::first_mismatch(target.data(), n, 5), -1) << "the put sent stale shadow bytes";
  // get into GPU memory: in place once wait_local returns.
  test::fill(target.data(), n, 6);
  std::memset(gpu, 0, n);
  t = (*w)->get(*greg, 0, *remote, 0, n);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_TRUE((*w)->wait_local(*t, soon()).ok());
  EXPECT_EQ(test::first_mismatch(gpu, n, 6), -1) << "wait_local returned before the copy out";
  // ... once quiet returns.
  test::fill(target.data(), n, 7);
  t = (*w)->get(*greg, 0, *remote, 0, n);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE((*w)->quiet(soon()).ok());
  EXPECT_EQ(test::first_mismatch(gpu, n, 7), -1) << "quiet returned before the copy out";
  // ... once check() says done (a transfer with a put from and a get into GPU memory).
  test::fill(target.data(), n / 2, 8);
  test::fill(gpu + n / 2, n / 2, 9);
  std::vector<TransferItem> items = {
      {TransferItem::Kind::get, &*greg, 0, &*remote, 0, n / 2},
      {TransferItem::Kind::put, &*greg, n / 2, &*remote, n / 2, n / 2}};
  t = (*w)->post(items);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(check_until_done(**w, *t), TransferState::done);
  EXPECT_EQ(test::first_mismatch(gpu, n / 2, 8), -1) << "check() said done before the copy out";
  EXPECT_EQ(test::first_mismatch(target.data() + n / 2, n / 2, 9), -1);
}

TEST_P(GpuStaging, BadGpuMemoryIsRefusedByName) {
  void* managed = gpu_->alloc_managed(4096);
  auto m = dev_->register_memory(managed, 4096);
  EXPECT_EQ(m.status().code(), Code::invalid_argument);
  EXPECT_NE(m.status().message().find("managed"), std::string::npos) << m.status().to_string();
  gpu_->free_gpu(managed);
  uint8_t* g = gpu_alloc(4096);
  auto past = dev_->register_memory(g + 1024, 4096);
  EXPECT_EQ(past.status().code(), Code::invalid_argument);
  EXPECT_NE(past.status().message().find("runs past its GPU allocation"), std::string::npos)
      << past.status().to_string();
  auto reg = dev_->register_memory(g, 4096);
  ASSERT_TRUE(reg.ok());
  // A send from outside the region is refused as for host memory.
  Pair p = test::connect_pair(*dev_, *dev_);
  ASSERT_TRUE(p.send);
  EXPECT_EQ(p.send->isend(g + 4000, 200, *reg).status().code(), Code::invalid_argument);
  // A peer's staged region: gets and atomics on it are refused before anything is sent.
  auto w = Window::open(*p.send, soon());
  if (!w.ok()) return;  // (windows over this provider: the window tests say why)
  auto key = dev_->import_key(reg->export_key());
  ASSERT_TRUE(key.ok()) << key.status().to_string();
  std::vector<uint8_t> host(4096);
  auto hreg = dev_->register_memory(host.data(), host.size());
  ASSERT_TRUE(hreg.ok());
  auto get = (*w)->get(*hreg, 0, *key, 0, 64);
  EXPECT_EQ(get.status().code(), Code::unsupported) << get.status().to_string();
  uint64_t old = 0;
  EXPECT_EQ((*w)->atomic(AtomicOp::fetch_add, *key, 0, 1, 0, &old).status().code(),
            Code::unsupported);
  EXPECT_EQ((*w)->issued(), 0u) << "something was sent for a refused operation";
}

// A peer's puts and signals into GPU memory it stages: the target copies each range on to its
// GPU before the put counts as delivered and before a signal behind it is applied.
TEST_P(GpuStaging, PutsAndSignalsIntoAPeersGpuMemory) {
  ASSERT_NO_FATAL_FAILURE(open_window());
  if (IsSkipped()) return;
  auto* w = &window_;
  const size_t n = 256 * 1024;
  uint8_t* gpu = gpu_alloc(n);  // the target's GPU memory
  std::vector<uint8_t> src(n), flags(64, 0);
  auto greg = dev_->register_memory(gpu, n);
  auto sreg = dev_->register_memory(src.data(), n);
  auto freg = dev_->register_memory(flags.data(), flags.size());
  ASSERT_TRUE(greg.ok() && sreg.ok() && freg.ok());
  auto gkey = dev_->import_key(greg->export_key());
  auto fkey = dev_->import_key(freg->export_key());
  ASSERT_TRUE(gkey.ok()) << gkey.status().to_string();
  ASSERT_TRUE(fkey.ok());
  // put: in GPU memory once quiet returns.
  test::fill(src.data(), n, 31);
  ASSERT_TRUE((*w)->put(*sreg, 0, *gkey, 0, n).ok());
  ASSERT_TRUE((*w)->quiet(soon()).ok());
  EXPECT_EQ(test::first_mismatch(gpu, n, 31), -1) << "quiet returned before the target's GPU had the put";
  // put_signal (weak asked for) with the signal in host memory: the data is on the GPU when the
  // target sees the signal.
  for (uint64_t round = 1; round <= 20; ++round) {
    const size_t len = 1000 * round;
    test::fill(src.data(), len, 100 + round);
    auto t = (*w)->put_signal(*sreg, 0, *gkey, 0, len, *fkey, 0, 1, SignalOp::add,
                              SignalOrder::weak);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    ASSERT_TRUE((*w)->wait_signal(*freg, 0, round, soon()).ok());
    EXPECT_EQ(test::first_mismatch(gpu, len, 100 + round), -1)
        << "round " << round << ": the signal came before the data reached the GPU";
  }
  ASSERT_TRUE((*w)->quiet(soon()).ok());
  // A signal into a word in GPU memory: the GPU word holds it once quiet returns.
  ASSERT_TRUE((*w)->signal(*gkey, 64, 7, SignalOp::set).ok());
  ASSERT_TRUE((*w)->signal(*gkey, 64, 5, SignalOp::add).ok());
  ASSERT_TRUE((*w)->quiet(soon()).ok());
  uint64_t word;
  std::memcpy(&word, gpu + 64, 8);
  EXPECT_EQ(word, 12u) << "the GPU word does not hold the signals";
  // A transfer putting into GPU memory: check() says done once the copy is on the GPU.
  test::fill(src.data(), n, 41);
  std::vector<TransferItem> items = {{TransferItem::Kind::put, &*sreg, 0, &*gkey, 0, n / 2},
                                     {TransferItem::Kind::put, &*sreg, n / 2, &*gkey, n / 2, n / 2}};
  auto t = (*w)->post(items);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(check_until_done(**w, *t), TransferState::done);
  EXPECT_EQ(test::first_mismatch(gpu, n, 41), -1) << "check() said done before the GPU had it";
  EXPECT_EQ((*w)->post(items, {1, 2, 3}).status().code(), Code::unsupported)
      << "a notification after puts into staged memory";
}

// A kernel that resets a signal word in staged GPU memory (NCCL's ncclGin::resetSignal writes 0
// there itself): the next signal adds to what the GPU holds, not to the shadow's stale value.
// (Seen: the word was applied in the shadow and copied over the GPU's, so after a reset to 0 an
// add of 3 left 8 there.) Many adds in flight on one word all count.
TEST_P(GpuStaging, AKernelsResetOfASignalWordIsSeenByTheNextSignal) {
  ASSERT_NO_FATAL_FAILURE(open_window());
  if (IsSkipped()) return;
  auto* w = &window_;
  GpuWords words;
  ASSERT_NO_FATAL_FAILURE(gpu_words(4096, words));
  uint8_t* gpu = words.gpu;
  Region* greg = &words.region;
  RemoteRegion* gkey = &words.key;
  auto gpu_word = [&] {
    uint64_t v;
    std::memcpy(&v, gpu + 64, 8);
    return v;
  };
  ASSERT_TRUE((*w)->signal(*gkey, 64, 5, SignalOp::add).ok());
  ASSERT_TRUE((*w)->quiet(soon()).ok());
  ASSERT_EQ(gpu_word(), 5u);
  std::memset(gpu + 64, 0, 8);  // the kernel's reset (the stand-in's "GPU" is host memory)
  ASSERT_TRUE((*w)->signal(*gkey, 64, 3, SignalOp::add).ok());
  ASSERT_TRUE((*w)->quiet(soon()).ok());
  EXPECT_EQ(gpu_word(), 3u) << "the reset on the GPU was overwritten by the shadow's value";
  auto host_view = (*w)->read_signal(*greg, 64);
  ASSERT_TRUE(host_view.ok());
  EXPECT_EQ(*host_view, 3u) << "the host's view (the shadow word) lags the GPU's";
  // 200 adds in flight on the word (the stand-in's copies lag): every one counts, once.
  for (int i = 0; i < 200; ++i) ASSERT_TRUE((*w)->signal(*gkey, 64, 1, SignalOp::add).ok());
  ASSERT_TRUE((*w)->signal(*gkey, 72, 9, SignalOp::set).ok());
  ASSERT_TRUE((*w)->quiet(soon()).ok());
  EXPECT_EQ(gpu_word(), 203u);
  uint64_t other;
  std::memcpy(&other, gpu + 72, 8);
  EXPECT_EQ(other, 9u);
  // put_signals into the same GPU memory: each signal waits for its put's copy on to the GPU
  // (it arrives before its turn, its word read ahead), then adds to what the GPU holds.
  std::vector<uint8_t> src(512);
  auto sreg = dev_->register_memory(src.data(), src.size());
  ASSERT_TRUE(sreg.ok());
  std::memset(gpu + 80, 0, 8);  // the kernel's reset of another word
  for (uint64_t round = 1; round <= 20; ++round) {
    test::fill(src.data(), src.size(), 500 + round);
    ASSERT_TRUE((*w)->put_signal(*sreg, 0, *gkey, 1024, src.size(), *gkey, 80, 2).ok());
    ASSERT_TRUE((*w)->quiet(soon()).ok());
    EXPECT_EQ(test::first_mismatch(gpu + 1024, src.size(), 500 + round), -1) << "round " << round;
    uint64_t v;
    std::memcpy(&v, gpu + 80, 8);
    ASSERT_EQ(v, 2 * round) << "round " << round;
    if (round == 10) {
      std::memset(gpu + 80, 0, 8);  // reset again mid-way: the next add starts from 0
      for (uint64_t r = 11; r <= 20; ++r) {
        test::fill(src.data(), src.size(), 500 + r);
        ASSERT_TRUE((*w)->put_signal(*sreg, 0, *gkey, 1024, src.size(), *gkey, 80, 2).ok());
        ASSERT_TRUE((*w)->quiet(soon()).ok());
        std::memcpy(&v, gpu + 80, 8);
        ASSERT_EQ(v, 2 * (r - 10)) << "after the second reset, round " << r;
      }
      break;
    }
  }
}

// Many put_signals in flight into GPU memory, their signals on one GPU word (as a kernel's
// threads each put a slice and signal the same word): every signal waits behind its put's copy
// on to the GPU, reads the word ahead, and all of them count.
TEST_P(GpuStaging, ManyPutSignalsInFlightOnOneGpuWordAllCount) {
  ASSERT_NO_FATAL_FAILURE(open_window());
  if (IsSkipped()) return;
  auto* w = &window_;
  constexpr int kPuts = 64;
  constexpr size_t kSlice = 8192;
  uint8_t* gpu = gpu_alloc(kPuts * kSlice);
  uint8_t* sig = gpu_alloc(64);
  std::memset(gpu, 0, kPuts * kSlice);
  std::memset(sig, 0, 64);
  std::vector<uint8_t> src(kPuts * kSlice);
  test::fill(src.data(), src.size(), 77);
  auto sreg = dev_->register_memory(src.data(), src.size());
  auto dreg = dev_->register_memory(gpu, kPuts * kSlice);
  auto greg = dev_->register_memory(sig, 64);
  ASSERT_TRUE(sreg.ok() && dreg.ok() && greg.ok());
  auto dkey = dev_->import_key(dreg->export_key());
  auto gkey = dev_->import_key(greg->export_key());
  ASSERT_TRUE(dkey.ok() && gkey.ok());
  // Nothing page-locked is allocated nor a copy queue opened while signals are applied (a
  // kernel spinning on the word runs meanwhile, and either may wait for it: seen on H200s, a
  // 30 s stall when early reads allocated their scratch word and copy queues on first use).
  const int pinned_before = gpu_->pinned_live();
  gpu_->kernels_running(true);
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < kPuts; ++i) {
      auto t = (*w)->put_signal(*sreg, i * kSlice, *dkey, i * kSlice, kSlice, *gkey, 8, 1);
      ASSERT_TRUE(t.ok()) << t.status().to_string();
    }
    ASSERT_TRUE((*w)->quiet(soon()).ok()) << "round " << round;
    uint64_t v;
    std::memcpy(&v, sig + 8, 8);
    EXPECT_EQ(v, uint64_t{kPuts} * (round + 1)) << "round " << round;
  }
  EXPECT_EQ(test::first_mismatch(gpu, kPuts * kSlice, 77), -1);
  gpu_->kernels_running(false);
  EXPECT_EQ(gpu_->pinned_live(), pinned_before) << "page-locked memory allocated by signals";
  EXPECT_EQ(gpu_->queues_opened_while_kernels_run(), 0) << "a copy queue opened mid-kernel";
}

// While kernels run, nothing opens a copy queue (creating a CUDA stream then can wait for the
// kernels to end; a kernel spinning until a signal lands would never end: nccl-tests' GIN
// alltoall hung so on H200s): puts from GPU memory into GPU memory, signals into 16 GPU words
// and gets into GPU memory, many of each in flight at once (sources read in the call and as
// progress goes), all land and count.
TEST_P(GpuStaging, ManyCopiesInFlightWhileKernelsRunOpenNoCopyQueue) {
  ASSERT_NO_FATAL_FAILURE(open_window());
  if (IsSkipped()) return;
  auto* w = &window_;
  constexpr int kOps = 32;
  constexpr int kWords = 16;
  constexpr size_t kSlice = 16384;
  uint8_t* src = gpu_alloc(kOps * kSlice);
  uint8_t* dst = gpu_alloc(kOps * kSlice);
  uint8_t* back = gpu_alloc(kOps * kSlice);
  uint8_t* sig = gpu_alloc(kWords * 8);
  std::vector<uint8_t> host(kOps * kSlice);  // (gets come from host memory: docs/semantics.md)
  std::memset(dst, 0, kOps * kSlice);
  std::memset(sig, 0, kWords * 8);
  auto hreg = dev_->register_memory(host.data(), host.size());
  auto sreg = dev_->register_memory(src, kOps * kSlice);
  auto dreg = dev_->register_memory(dst, kOps * kSlice);
  auto breg = dev_->register_memory(back, kOps * kSlice);
  auto greg = dev_->register_memory(sig, kWords * 8);
  ASSERT_TRUE(hreg.ok() && sreg.ok() && dreg.ok() && breg.ok() && greg.ok());
  auto hkey = dev_->import_key(hreg->export_key());
  auto dkey = dev_->import_key(dreg->export_key());
  auto gkey = dev_->import_key(greg->export_key());
  ASSERT_TRUE(hkey.ok() && dkey.ok() && gkey.ok());
  gpu_->kernels_running(true);
  for (int round = 1; round <= 4; ++round) {
    // (until_local, as GIN reads: the sources' copies run as progress goes, all at once)
    (*w)->set_source_read(round % 2 == 0 ? SourceRead::in_call : SourceRead::until_local);
    test::fill(src, kOps * kSlice, 40 + round);
    test::fill(host.data(), kOps * kSlice, 50 + round);
    for (int i = 0; i < kOps; ++i) {
      auto t = (*w)->put_signal(*sreg, i * kSlice, *dkey, i * kSlice, kSlice, *gkey,
                                (i % kWords) * 8, 1);
      ASSERT_TRUE(t.ok()) << t.status().to_string();
    }
    for (int i = 0; i < kWords; ++i) {
      ASSERT_TRUE((*w)->signal(*gkey, i * 8, 1, SignalOp::add).ok());
    }
    ASSERT_TRUE((*w)->quiet(soon()).ok()) << "round " << round;
    for (int i = 0; i < kOps; ++i) {
      auto t = (*w)->get(*breg, i * kSlice, *hkey, i * kSlice, kSlice);
      ASSERT_TRUE(t.ok()) << t.status().to_string();
    }
    ASSERT_TRUE((*w)->quiet(soon()).ok()) << "round " << round;
    EXPECT_EQ(test::first_mismatch(dst, kOps * kSlice, 40 + round), -1) << "round " << round;
    EXPECT_EQ(test::first_mismatch(back, kOps * kSlice, 50 + round), -1) << "round " << round;
    for (int i = 0; i < kWords; ++i) {
      uint64_t v;
      std::memcpy(&v, sig + 8 * i, 8);
      EXPECT_EQ(v, uint64_t(kOps / kWords + 1) * round) << "word " << i << ", round " << round;
    }
  }
  gpu_->kernels_running(false);
  EXPECT_EQ(gpu_->queues_opened_while_kernels_run(), 0) << "a copy queue opened mid-kernel";
}

// SignalOrder::after_data (NCCL GIN's signals): a signal into staged GPU memory is applied while
// an earlier signal to another word is still copying on the target's GPU (NCCL's barriers send
// one per CTA: 16 in a row, each two copies, one after the other before), but never before an
// earlier put's data is on the GPU; a strong one waits for both. The stand-in driver holds the
// copies into a word or a range (a slow copy) until released. (Also over the strict provider:
// 4-byte CQ data, reordering, delayed posts.)
class GpuSignalOrder : public GpuStaging {};

TEST_P(GpuSignalOrder, ASignalAfterDataOverlapsEarlierSignalsButNotEarlierPuts) {
  ASSERT_NO_FATAL_FAILURE(open_window());
  if (IsSkipped()) return;
  auto* w = &window_;
  uint8_t* gpu = gpu_alloc(8192);
  std::memset(gpu, 0, 8192);
  auto greg = dev_->register_memory(gpu, 8192);
  std::vector<uint8_t> src(4096);
  auto sreg = dev_->register_memory(src.data(), src.size());
  ASSERT_TRUE(greg.ok() && sreg.ok());
  auto gkey = dev_->import_key(greg->export_key());
  ASSERT_TRUE(gkey.ok());
  auto word = [&](size_t off) {
    uint64_t v;
    std::memcpy(&v, gpu + off, 8);
    return v;
  };
  // Progress until `done()` or 20 s; or, for what must not happen, a fixed number of passes
  // (what it waits for is held: no amount of time lets it happen).
  auto progress_until = [&](auto done, int passes) {
    auto until = std::chrono::steady_clock::now() + 20s;
    for (int i = 0; !done() && (passes == 0 || i < passes) &&
                    std::chrono::steady_clock::now() < until; ++i) {
      EXPECT_TRUE((*w)->check(1).ok());
    }
    return done();
  };
  // A: strong, into word 0, whose copy back to the GPU is held.
  gpu_->hold_copies_into(gpu, 8);
  ASSERT_TRUE((*w)->signal(*gkey, 0, 1).ok());
  // B, after_data, into word 64: applied on the GPU while A still copies.
  ASSERT_TRUE((*w)->signal(*gkey, 64, 2, SignalOp::add, SignalOrder::after_data).ok());
  EXPECT_TRUE(progress_until([&] { return word(64) == 2; }, 0))
      << "an after_data signal waited for an earlier signal's copy to another word";
  // C, strong, into word 128: waits for A.
  ASSERT_TRUE((*w)->signal(*gkey, 128, 3).ok());
  EXPECT_FALSE(progress_until([&] { return word(128) != 0; }, 2000))
      << "a strong signal was applied before an earlier signal had finished";
  EXPECT_EQ(word(0), 0u);
  gpu_->release_held();
  EXPECT_TRUE(progress_until([&] { return word(0) == 1 && word(128) == 3; }, 0));
  ASSERT_TRUE((*w)->quiet(soon()).ok());
  // A put's data held on its way to the GPU: an after_data signal behind it waits.
  gpu_->hold_copies_into(gpu + 4096, 4096);
  test::fill(src.data(), src.size(), 77);
  ASSERT_TRUE((*w)->put(*sreg, 0, *gkey, 4096, src.size()).ok());
  ASSERT_TRUE((*w)->signal(*gkey, 192, 4, SignalOp::add, SignalOrder::after_data).ok());
  EXPECT_FALSE(progress_until([&] { return word(192) != 0; }, 2000))
      << "an after_data signal was applied before an earlier put's data reached the GPU";
  gpu_->release_held();
  EXPECT_TRUE(progress_until([&] { return word(192) == 4; }, 0));
  EXPECT_EQ(test::first_mismatch(gpu + 4096, 4096, 77), -1);
  // The same as a put_signal: its own data first.
  gpu_->hold_copies_into(gpu + 4096, 4096);
  test::fill(src.data(), src.size(), 78);
  ASSERT_TRUE((*w)->put_signal(*sreg, 0, *gkey, 4096, src.size(), *gkey, 256, 5, SignalOp::add,
                               SignalOrder::after_data).ok());
  EXPECT_FALSE(progress_until([&] { return word(256) != 0; }, 2000))
      << "an after_data put_signal's signal came before its data reached the GPU";
  gpu_->release_held();
  EXPECT_TRUE(progress_until([&] { return word(256) == 5; }, 0));
  EXPECT_EQ(test::first_mismatch(gpu + 4096, 4096, 78), -1);
  ASSERT_TRUE((*w)->quiet(soon()).ok());
}

// NCCL's GIN barrier, as nccl-tests' alltoall -D 3 runs it: one after_data signal per CTA into
// 16 words of staged GPU memory, all sent at once (shm delivers them in one burst) while the
// kernel that waits on them runs. Their updates overlap; none may open a copy queue (a CUDA
// stream made while the kernel spins waits for it to end: the hang seen on H200s when each
// update opened one). The stand-in driver's copies into the words are held, as a real GPU's
// take microseconds while the burst lands.
TEST_P(GpuSignalOrder, AfterDataBurstOpensNoCopyQueueWhileSignalsApply) {
  ASSERT_NO_FATAL_FAILURE(open_window());
  if (IsSkipped()) return;
  auto* w = &window_;
  constexpr int kWords = 16;
  GpuWords words;
  ASSERT_NO_FATAL_FAILURE(gpu_words(4096, words));
  uint8_t* gpu = words.gpu;
  RemoteRegion* gkey = &words.key;
  gpu_->kernels_running(true);
  for (int round = 0; round < 3; ++round) {
    gpu_->hold_copies_into(gpu, 4096);
    for (int c = 0; c < kWords; ++c) {
      ASSERT_TRUE((*w)->signal(*gkey, 8 * (1 + c), 1, SignalOp::add, SignalOrder::after_data).ok());
    }
    for (int i = 0; i < 2000; ++i) (void)(*w)->quiet(Deadline::now());  // (progress)
    gpu_->release_held();
    ASSERT_TRUE((*w)->quiet(soon()).ok()) << "round " << round;
    for (int c = 0; c < kWords; ++c) {
      uint64_t v;
      std::memcpy(&v, gpu + 8 * (1 + c), 8);
      EXPECT_EQ(v, uint64_t(round + 1)) << "word " << 1 + c;
    }
  }
  gpu_->kernels_running(false);
  EXPECT_EQ(gpu_->queues_opened_while_kernels_run(), 0) << "a copy queue opened mid-kernel";
}

// A signal into staged GPU memory whose copy on to the GPU cannot start: the initiator is told,
// and the signal is applied once. (Seen: the target applied it to the shadow, answered the
// error, then applied it again as if it were host memory: the word held twice the value.)
TEST_P(GpuStaging, ASignalWhoseCopyCannotStartFailsAndIsAppliedOnce) {
  ASSERT_NO_FATAL_FAILURE(open_window());
  if (IsSkipped()) return;
  auto* w = &window_;
  GpuWords words;
  ASSERT_NO_FATAL_FAILURE(gpu_words(4096, words));
  Region* greg = &words.region;
  RemoteRegion* gkey = &words.key;
  gpu_->fail_copies_to_gpu(true);
  ASSERT_TRUE((*w)->signal(*gkey, 64, 5, SignalOp::add).ok());
  Status q = (*w)->quiet(soon());
  gpu_->fail_copies_to_gpu(false);
  EXPECT_FALSE(q.ok()) << "a signal that never reached GPU memory was reported applied";
  auto word = (*w)->read_signal(*greg, 64);  // the target's shadow word
  ASSERT_TRUE(word.ok());
  EXPECT_EQ(*word, 5u) << "the signal was applied more than once";
}

TEST_P(GpuStaging, ShadowsGoWithTheirLastRegionAndAreShared) {
  uint8_t* g = gpu_alloc(1 << 16);
  {
    auto a = dev_->register_memory(g, 1 << 16);
    auto b = dev_->register_memory(g, 1 << 16);
    ASSERT_TRUE(a.ok() && b.ok());
    // (a shadow is two page-locked allocations: its bytes and its signal scratch words; the
    // device's staging pool of GPU sources makes one more, its first slab, with the first)
    EXPECT_EQ(gpu_->pinned_live(), 3) << "two registrations of one GPU range share a shadow";
    Region copy = *a;
    a = Status(Code::closed, "dropped");
    b = Status(Code::closed, "dropped");
    EXPECT_EQ(gpu_->pinned_live(), 3) << "a copy of the Region keeps its shadow";
  }
  dev_.reset();  // the registrations' owner: nothing holds the shadow any more
  EXPECT_EQ(gpu_->pinned_live(), 0) << "a shadow outlived every Region and registration";
}

TEST_P(GpuStaging, DevicePropertiesSayGpuMemoryIsTaken) {
  EXPECT_TRUE(dev_->properties().device_memory);
}

INSTANTIATE_TEST_SUITE_P(Providers, GpuStaging, test::all_providers(), test::provider_param_name);
// (run by the gpu-staging-strict test: tests/strict_provider/meson.build picks which)
INSTANTIATE_TEST_SUITE_P(Strict, GpuStaging,
                         ::testing::Values(test::ProviderParam{"strict", "auto"}),
                         test::provider_param_name);
INSTANTIATE_TEST_SUITE_P(Providers, GpuSignalOrder,
                         ::testing::Values(test::ProviderParam{"shm", "auto"},
                                           test::ProviderParam{"tcp;ofi_rxm", "auto"},
                                           test::ProviderParam{"tcp;ofi_rxm", "manual"},
                                           test::ProviderParam{"strict", "auto"}),
                         test::provider_param_name);

}  // namespace
}  // namespace xport
