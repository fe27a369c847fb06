// GPU sources keep the bytes of their call, and operations into a peer's staged GPU memory are
// issued whole or not at all, with the stand-in CUDA driver (tests/unit/gpu/fake_driver.hpp:
// its "GPU memory" is host memory, so a test overwrites a source after the call the way
// cudaMemset would). Overlapping staged registrations share one shadow. The same cases on real
// GPUs: tests/gpu/source_reuse_gpu_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "../unit/gpu/fake_driver.hpp"
#include "gpu/proxy_ring.hpp"
#include "gpu/staging_counters.hpp"
#include "harness.hpp"
#include "proto/one_sided/window.hpp"
#include "provider_fixture.hpp"

namespace xport {
namespace {

using namespace std::chrono_literals;
using test::Pair;

Deadline soon() { return Deadline::after(20s); }

class GpuSources : public test::ProviderTest {
 protected:
  uint8_t* gpu_alloc(size_t n) {
    auto p = gpu_->alloc_gpu(n, 0);
    EXPECT_TRUE(p.ok());
    allocs_.push_back(static_cast<uint8_t*>(*p));
    return allocs_.back();
  }
  void TearDown() override {
    pair_ = Pair{};
    peer_.reset();
    test::ProviderTest::TearDown();
    for (uint8_t* p : allocs_) gpu_->free_gpu(p);
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

// ---- a GPU source may be rewritten as soon as the call returns ----

// A rendezvous send waits for the receiver's clear-to-send; the caller rewrites its GPU buffer
// (docs/semantics.md: "the GPU source may be reused as soon as the call returns") and sends
// again. Seen on 2 x H200 and 2 x H100: the first message arrived with the second one's bytes.
TEST_P(GpuSources, ASendWaitingForItsReceiverKeepsTheBytesOfItsCall) {
  Pair p = test::connect_pair(*dev_, *dev_);
  ASSERT_TRUE(p.send && p.recv);
  const size_t n = 1 << 20;  // rendezvous
  uint8_t* src = gpu_alloc(n);
  std::vector<uint8_t> dst1(n), dst2(n);
  auto sreg = dev_->register_memory(src, n);
  auto r1reg = dev_->register_memory(dst1.data(), n);
  auto r2reg = dev_->register_memory(dst2.data(), n);
  ASSERT_TRUE(sreg.ok() && r1reg.ok() && r2reg.ok());
  test::fill(src, n, 1);
  auto s1 = p.send->isend(src, n, *sreg);
  ASSERT_TRUE(s1.ok()) << s1.status().to_string();
  test::fill(src, n, 2);  // the caller's cudaMemset, right after the call
  auto s2 = p.send->isend(src, n, *sreg);
  ASSERT_TRUE(s2.ok()) << s2.status().to_string();
  test::fill(src, n, 3);  // and again: neither message may carry these
  auto r1 = p.recv->irecv(dst1.data(), n, *r1reg);
  auto r2 = p.recv->irecv(dst2.data(), n, *r2reg);
  ASSERT_TRUE(r1.ok() && r2.ok());
  ASSERT_TRUE(p.recv->wait(*r1, soon()).ok());
  ASSERT_TRUE(p.recv->wait(*r2, soon()).ok());
  ASSERT_TRUE(p.send->wait(*s1, soon()).ok());
  ASSERT_TRUE(p.send->wait(*s2, soon()).ok());
  EXPECT_EQ(test::first_mismatch(dst1.data(), n, 1), -1) << "the first message carries later bytes";
  EXPECT_EQ(test::first_mismatch(dst2.data(), n, 2), -1)
      << "the second message carries later bytes";
}

// A put held behind a fence (the target has not acknowledged what came before), then a second
// put from the same GPU range with new bytes: the first delivers the bytes of its call.
TEST_P(GpuSources, AFencedPutKeepsTheBytesOfItsCall) {
  Pair p = test::connect_pair(*dev_, *dev_);
  ASSERT_TRUE(p.send && p.recv);
  auto w = Window::open(*p.send, soon());
  if (!w.ok() && w.status().code() == Code::unsupported) GTEST_SKIP() << w.status().to_string();
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const size_t n = 1 << 20;
  uint8_t* src = gpu_alloc(n);
  std::vector<uint8_t> target(3 * n), host(64);
  auto sreg = dev_->register_memory(src, n);
  auto treg = dev_->register_memory(target.data(), target.size());
  auto hreg = dev_->register_memory(host.data(), host.size());
  ASSERT_TRUE(sreg.ok() && treg.ok() && hreg.ok());
  auto tkey = dev_->import_key(treg->export_key());
  ASSERT_TRUE(tkey.ok());
  ASSERT_TRUE((*w)->put(*hreg, 0, *tkey, 2 * n, 64).ok());
  ASSERT_TRUE((*w)->fence().ok());
  test::fill(src, n, 11);
  ASSERT_TRUE((*w)->put(*sreg, 0, *tkey, 0, n).ok());  // held until the first is delivered
  test::fill(src, n, 12);
  ASSERT_TRUE((*w)->put(*sreg, 0, *tkey, n, n).ok());
  test::fill(src, n, 13);
  ASSERT_TRUE((*w)->quiet(soon()).ok());
  EXPECT_EQ(test::first_mismatch(target.data(), n, 11), -1) << "the fenced put sent later bytes";
  EXPECT_EQ(test::first_mismatch(target.data() + n, n, 12), -1);
}

// The same with put_signal and put_signal_counter: the signal comes after the call's bytes.
TEST_P(GpuSources, FencedPutSignalsKeepTheBytesOfTheirCalls) {
  Pair p = test::connect_pair(*dev_, *dev_);
  ASSERT_TRUE(p.send && p.recv);
  auto w = Window::open(*p.send, soon());
  if (!w.ok() && w.status().code() == Code::unsupported) GTEST_SKIP() << w.status().to_string();
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const size_t n = 256 * 1024;
  uint8_t* src = gpu_alloc(n);
  std::vector<uint8_t> target(3 * n);
  std::vector<uint64_t> words(8, 0);
  auto sreg = dev_->register_memory(src, n);
  auto treg = dev_->register_memory(target.data(), target.size());
  auto wreg = dev_->register_memory(words.data(), 64);
  ASSERT_TRUE(sreg.ok() && treg.ok() && wreg.ok());
  auto tkey = dev_->import_key(treg->export_key());
  auto wkey = dev_->import_key(wreg->export_key());
  ASSERT_TRUE(tkey.ok() && wkey.ok());
  ASSERT_TRUE((*w)->signal(*wkey, 0, 1).ok());
  ASSERT_TRUE((*w)->fence().ok());
  test::fill(src, n, 21);
  ASSERT_TRUE((*w)->put_signal(*sreg, 0, *tkey, 0, n, *wkey, 8, 1).ok());
  test::fill(src, n, 22);
  ASSERT_TRUE((*w)->put_signal_counter(*sreg, 0, *tkey, n, n, *wkey, 8, 1, *wreg, 16).ok());
  test::fill(src, n, 23);
  ASSERT_TRUE((*w)->put(*sreg, 0, *tkey, 2 * n, n).ok());
  ASSERT_TRUE((*w)->quiet(soon()).ok());
  EXPECT_EQ(test::first_mismatch(target.data(), n, 21), -1) << "put_signal sent later bytes";
  EXPECT_EQ(test::first_mismatch(target.data() + n, n, 22), -1)
      << "put_signal_counter sent later bytes";
  EXPECT_EQ(test::first_mismatch(target.data() + 2 * n, n, 23), -1);
  EXPECT_EQ(words[1], 2u);
}

// A transfer's puts held behind a fence keep the bytes of its call.
TEST_P(GpuSources, AFencedTransferKeepsTheBytesOfItsCall) {
  Pair p = test::connect_pair(*dev_, *dev_);
  ASSERT_TRUE(p.send && p.recv);
  auto w = Window::open(*p.send, soon());
  if (!w.ok() && w.status().code() == Code::unsupported) GTEST_SKIP() << w.status().to_string();
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const size_t n = 128 * 1024;
  uint8_t* src = gpu_alloc(2 * n);
  std::vector<uint8_t> target(4 * n), host(64);
  auto sreg = dev_->register_memory(src, 2 * n);
  auto treg = dev_->register_memory(target.data(), target.size());
  auto hreg = dev_->register_memory(host.data(), host.size());
  ASSERT_TRUE(sreg.ok() && treg.ok() && hreg.ok());
  auto tkey = dev_->import_key(treg->export_key());
  ASSERT_TRUE(tkey.ok());
  ASSERT_TRUE((*w)->put(*hreg, 0, *tkey, 0, 64).ok());
  ASSERT_TRUE((*w)->fence().ok());
  test::fill(src, 2 * n, 31);
  std::vector<TransferItem> first = {{TransferItem::Kind::put, &*sreg, 0, &*tkey, 0, n},
                                     {TransferItem::Kind::put, &*sreg, n, &*tkey, n, n}};
  auto t1 = (*w)->post(first);
  ASSERT_TRUE(t1.ok()) << t1.status().to_string();
  test::fill(src, 2 * n, 32);
  std::vector<TransferItem> second = {{TransferItem::Kind::put, &*sreg, 0, &*tkey, 2 * n, 2 * n}};
  auto t2 = (*w)->post(second);
  ASSERT_TRUE(t2.ok()) << t2.status().to_string();
  test::fill(src, 2 * n, 33);
  ASSERT_TRUE((*w)->quiet(soon()).ok());
  EXPECT_EQ(test::first_mismatch(target.data(), 2 * n, 31), -1)
      << "the fenced transfer sent later bytes";
  EXPECT_EQ(test::first_mismatch(target.data() + 2 * n, 2 * n, 32), -1);
}

// The GPU proxy's puts: the descriptor's source is copied when the proxy executes it; the
// kernel (here a CPU thread) rewrites the range after that and puts again while the first put
// is held behind a fence.
TEST_P(GpuSources, TheProxysPutsKeepTheBytesOfTheirExecution) {
  auto w = window_to_idle_peer();
  ASSERT_TRUE(w);
  const size_t n = 256 * 1024;
  uint8_t* src = gpu_alloc(n);
  std::vector<uint8_t> target(3 * n), host(64);
  auto sreg = dev_->register_memory(src, n);
  auto hreg = dev_->register_memory(host.data(), host.size());
  auto treg = peer_->register_memory(target.data(), target.size());
  ASSERT_TRUE(sreg.ok() && hreg.ok() && treg.ok());
  auto tkey = dev_->import_key(treg->export_key());
  ASSERT_TRUE(tkey.ok()) << tkey.status().to_string();
  // The peer acknowledges nothing yet: everything after the fence is held.
  ASSERT_TRUE(w->put(*hreg, 0, *tkey, 2 * n, 64).ok());
  ASSERT_TRUE(w->fence().ok());
  auto proxy = GpuProxy::open(*dev_);
  ASSERT_TRUE(proxy.ok()) << proxy.status().to_string();
  ASSERT_TRUE((*proxy)->add_window(*w).ok() && (*proxy)->add_region(*sreg).ok() &&
              (*proxy)->add_remote(*tkey).ok());
  ASSERT_TRUE((*proxy)->start().ok());
  auto producer = gpu::RingProducer::attach((*proxy)->ring().header);
  ASSERT_TRUE(producer.ok());
  auto executed = [&](uint64_t k) {
    const auto until = std::chrono::steady_clock::now() + 20s;
    while ((*proxy)->stats().descriptors < k && std::chrono::steady_clock::now() < until) {
      std::this_thread::yield();
    }
    return (*proxy)->stats().descriptors >= k;
  };
  gpu_ring::Descriptor d{};
  d.op = static_cast<uint8_t>(gpu_ring::Op::put);
  d.length = n;
  test::fill(src, n, 41);
  ASSERT_TRUE(producer->push(d, soon()).ok());
  ASSERT_TRUE(executed(1)) << (*proxy)->last_error().to_string();
  test::fill(src, n, 42);  // the kernel's next write, after the proxy took its descriptor
  d.remote_offset = n;
  auto last = producer->push(d, soon());
  ASSERT_TRUE(last.ok());
  ASSERT_TRUE(executed(2)) << (*proxy)->last_error().to_string();
  test::fill(src, n, 43);
  {
    auto peer = progress_peer();
    ASSERT_TRUE(producer->wait_completed(*last, soon()).ok()) << (*proxy)->last_error().to_string();
  }
  proxy->reset();
  EXPECT_EQ(test::first_mismatch(target.data(), n, 41), -1) << "the held put sent later bytes";
  EXPECT_EQ(test::first_mismatch(target.data() + n, n, 42), -1);
}

// ---- operations into a peer's staged GPU memory are issued whole or not at all ----

// Fills the window's tickets (the peer acknowledges nothing) with signals to a host word until
// `left` remain; the last ticket taken.
Ticket fill_tickets(Window& w, const RemoteRegion& word, size_t left) {
  Ticket last = 0;
  for (size_t i = 0; i + left < proto::Windows::kMaxTickets; ++i) {
    auto t = w.signal(word, 0, 1);
    EXPECT_TRUE(t.ok()) << i << ": " << t.status().to_string();
    if (!t.ok()) break;
    last = *t;
  }
  return last;
}

// A put into a peer's staged GPU memory is a put and its publish: when the window can take the
// put but not the publish (its tickets nearly all taken), nothing goes and the call says again.
// (Seen: the put went out, the caller heard "again", and a retry sent it a second time.)
TEST_P(GpuSources, APutIntoStagedMemoryIsIssuedWholeOrNotAtAll) {
  auto w = window_to_idle_peer();
  ASSERT_TRUE(w);
  const size_t n = 64 * 1024;
  uint8_t* gpu = gpu_alloc(n);  // the peer's GPU memory
  std::vector<uint8_t> src(n);
  std::vector<uint64_t> words(8, 0);
  auto greg = peer_->register_memory(gpu, n);
  auto wreg = peer_->register_memory(words.data(), 64);
  auto sreg = dev_->register_memory(src.data(), n);
  ASSERT_TRUE(greg.ok() && wreg.ok() && sreg.ok());
  auto gkey = dev_->import_key(greg->export_key());
  auto wkey = dev_->import_key(wreg->export_key());
  ASSERT_TRUE(gkey.ok() && wkey.ok());
  test::fill(src.data(), n, 51);
  // Room for one more ticket: the put would fit, its publish would not.
  const Ticket last = fill_tickets(*w, *wkey, 1);
  ASSERT_EQ(last, proto::Windows::kMaxTickets - 1);
  const uint64_t issued = w->issued();
  auto t = w->put(*sreg, 0, *gkey, 0, n);
  EXPECT_EQ(t.status().code(), Code::again) << t.status().to_string();
  // put_signal: room for two (the put and its publish), not for the signal.
  EXPECT_EQ(w->issued(), issued);
  {
    auto peer = progress_peer();
    ASSERT_TRUE(w->quiet(soon()).ok());
  }
  EXPECT_EQ(w->issued(), issued) << "the refused put went out";
  // Now it fits: the next ticket is the one after the last signal's.
  t = w->put(*sreg, 0, *gkey, 0, n);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(*t, last + 1) << "a refused put took a ticket";
  {
    auto peer = progress_peer();
    ASSERT_TRUE(w->quiet(soon()).ok());
  }
  EXPECT_EQ(test::first_mismatch(gpu, n, 51), -1);
  EXPECT_EQ(words[0], last) << "every signal applied once";
}

TEST_P(GpuSources, APutSignalIntoStagedMemoryIsIssuedWholeOrNotAtAll) {
  auto w = window_to_idle_peer();
  ASSERT_TRUE(w);
  const size_t n = 64 * 1024;
  uint8_t* gpu = gpu_alloc(n);
  std::vector<uint8_t> src(n);
  std::vector<uint64_t> words(8, 0);
  auto greg = peer_->register_memory(gpu, n);
  auto wreg = peer_->register_memory(words.data(), 64);
  auto sreg = dev_->register_memory(src.data(), n);
  ASSERT_TRUE(greg.ok() && wreg.ok() && sreg.ok());
  auto gkey = dev_->import_key(greg->export_key());
  auto wkey = dev_->import_key(wreg->export_key());
  ASSERT_TRUE(gkey.ok() && wkey.ok());
  test::fill(src.data(), n, 61);
  // Room for the put and its publish, not for the signal behind them.
  const Ticket last = fill_tickets(*w, *wkey, 2);
  const uint64_t issued = w->issued();
  auto t = w->put_signal(*sreg, 0, *gkey, 0, n, *wkey, 8, 1);
  EXPECT_EQ(t.status().code(), Code::again) << t.status().to_string();
  {
    auto peer = progress_peer();
    ASSERT_TRUE(w->quiet(soon()).ok());
  }
  EXPECT_EQ(w->issued(), issued) << "the refused put_signal's put went out";
  t = w->put_signal(*sreg, 0, *gkey, 0, n, *wkey, 8, 1);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(*t, last + 1) << "a refused put_signal took tickets";
  {
    auto peer = progress_peer();
    ASSERT_TRUE(w->quiet(soon()).ok());
  }
  EXPECT_EQ(words[1], 1u) << "the signal applied once";
  EXPECT_EQ(test::first_mismatch(gpu, n, 61), -1);
  // A transfer into staged memory: the transfer and one publish per item, or nothing.
  fill_tickets(*w, *wkey, 2);  // (the window's tickets are all complete again)
  std::vector<TransferItem> items = {
      {TransferItem::Kind::put, &*sreg, 0, &*gkey, 0, n / 2},
      {TransferItem::Kind::put, &*sreg, n / 2, &*gkey, n / 2, n / 2}};
  const uint64_t issued2 = w->issued();
  auto x = w->post(items);
  EXPECT_EQ(x.status().code(), Code::again) << x.status().to_string();
  {
    auto peer = progress_peer();
    ASSERT_TRUE(w->quiet(soon()).ok());
  }
  EXPECT_EQ(w->issued(), issued2) << "the refused transfer's puts went out";
}

// The GPU proxy retries a descriptor the window refused with again: the retry must not send
// what the refused call already sent.
TEST_P(GpuSources, TheProxyRetriesAPutIntoStagedMemoryWithoutDuplicatingIt) {
  auto w = window_to_idle_peer();
  ASSERT_TRUE(w);
  const size_t n = 64 * 1024;
  uint8_t* gpu = gpu_alloc(n);    // the peer's GPU memory
  uint8_t* src = gpu_alloc(n);    // this side's
  std::vector<uint64_t> words(8, 0);
  auto greg = peer_->register_memory(gpu, n);
  auto wreg = peer_->register_memory(words.data(), 64);
  auto sreg = dev_->register_memory(src, n);
  ASSERT_TRUE(greg.ok() && wreg.ok() && sreg.ok());
  auto gkey = dev_->import_key(greg->export_key());
  auto wkey = dev_->import_key(wreg->export_key());
  ASSERT_TRUE(gkey.ok() && wkey.ok());
  test::fill(src, n, 71);
  const Ticket last = fill_tickets(*w, *wkey, 1);
  const uint64_t issued = w->issued();
  auto proxy = GpuProxy::open(*dev_);
  ASSERT_TRUE(proxy.ok()) << proxy.status().to_string();
  ASSERT_TRUE((*proxy)->add_window(*w).ok() && (*proxy)->add_region(*sreg).ok() &&
              (*proxy)->add_remote(*gkey).ok());
  ASSERT_TRUE((*proxy)->start().ok());
  auto producer = gpu::RingProducer::attach((*proxy)->ring().header);
  ASSERT_TRUE(producer.ok());
  gpu_ring::Descriptor d{};
  d.op = static_cast<uint8_t>(gpu_ring::Op::put);
  d.length = n;
  auto pos = producer->push(d, soon());
  ASSERT_TRUE(pos.ok());
  const auto until = std::chrono::steady_clock::now() + 20s;
  while ((*proxy)->stats().again == 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::yield();
  }
  ASSERT_GT((*proxy)->stats().again, 0u) << "the window took the put: the test proves nothing";
  {
    auto peer = progress_peer();
    ASSERT_TRUE(producer->wait_completed(*pos, soon()).ok()) << (*proxy)->last_error().to_string();
    ASSERT_TRUE(w->quiet(soon()).ok());
  }
  proxy->reset();
  EXPECT_EQ(test::first_mismatch(gpu, n, 71), -1);
  EXPECT_EQ(w->issued(), issued + 1) << "the put went out more than once";
  auto next = w->signal(*wkey, 0, 1);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(*next, last + 3) << "tickets beyond the put and its publish were taken";
}

// A put from GPU memory large enough for pieces (two at 1 MiB) when one context of the window
// is free: it goes whole rather than answering again. (Seen on 2 x H200, tcp;ofi_rxm: 256 puts
// of 1 MiB from GPU memory in a row, each two pieces, answered again at the 129th, where whole
// puts had all fitted.) Gets to a peer that does not progress hold the other contexts.
TEST_P(GpuSources, APutTooLargeForTheFreeContextsInPiecesGoesWhole) {
  auto w = window_to_idle_peer();
  ASSERT_TRUE(w);
  const size_t n = 1 << 20;
  uint8_t* src = gpu_alloc(n);
  std::vector<uint8_t> target(n), got(4096);
  auto sreg = dev_->register_memory(src, n);
  auto treg = peer_->register_memory(target.data(), n);
  auto greg = dev_->register_memory(got.data(), got.size());
  ASSERT_TRUE(sreg.ok() && treg.ok() && greg.ok());
  auto tkey = dev_->import_key(treg->export_key());
  ASSERT_TRUE(tkey.ok());
  const uint64_t held = proto::Windows::kOps - 1;
  for (uint64_t i = 0; i < held; ++i) {
    ASSERT_TRUE(w->get(*greg, 0, *tkey, 0, 16).ok()) << i;
  }
  test::fill(src, n, 61);
  auto t = w->put(*sreg, 0, *tkey, 0, n);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  {
    auto peer = progress_peer();
    ASSERT_TRUE(w->quiet(soon()).ok());
  }
  EXPECT_EQ(test::first_mismatch(target.data(), n, 61), -1);
}

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
