// The proxy ring's protocol with CPU producers (kernels follow the same one: xport/device.cuh):
// wrap-around over many laps, lap flags, a full ring, aborts, several producers at once.
#include "gpu/proxy_ring.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <thread>
#include <vector>

namespace xport::gpu {
namespace {

using namespace std::chrono_literals;
using gpu_ring::Descriptor;
using gpu_ring::Op;

struct RingMemory {
  explicit RingMemory(uint32_t capacity)
      : mem(std::aligned_alloc(64, gpu_ring::ring_bytes(capacity))) {
    EXPECT_TRUE(init_ring(mem, capacity).ok());
  }
  ~RingMemory() { std::free(mem); }
  gpu_ring::Header& header() { return *static_cast<gpu_ring::Header*>(mem); }
  Descriptor* slots() { return reinterpret_cast<Descriptor*>(&header() + 1); }
  void* mem;
};

Descriptor put(uint64_t value, uint16_t window = 0) {
  Descriptor d{};
  d.op = static_cast<uint8_t>(Op::put);
  d.window = window;
  d.value = value;
  d.length = value * 3;
  return d;
}

TEST(ProxyRing, WrapsOverManyLapsInOrder) {
  RingMemory m(4);
  auto c = RingConsumer::attach(m.mem);
  auto p = RingProducer::attach(m.mem);
  ASSERT_TRUE(c.ok() && p.ok());
  Descriptor out[3];
  uint64_t next = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    auto pos = p->push(put(i), Deadline::after(1s));
    ASSERT_TRUE(pos.ok()) << pos.status().to_string();
    EXPECT_EQ(*pos, i);
    if (i % 3 == 2) {  // drain in batches that do not divide the capacity
      size_t n = c->poll(out, 3);
      ASSERT_EQ(n, 3u) << "at " << i;
      for (size_t k = 0; k < n; ++k) {
        EXPECT_EQ(out[k].value, next);
        EXPECT_EQ(out[k].length, next * 3);
        ++next;
      }
    }
  }
  EXPECT_EQ(c->taken(), 999u);
  EXPECT_EQ(m.header().tail, 999u);
}

TEST(ProxyRing, ASlotOfAnEarlierLapIsNotTaken) {
  RingMemory m(2);
  auto c = RingConsumer::attach(m.mem);
  auto p = RingProducer::attach(m.mem);
  ASSERT_TRUE(c.ok() && p.ok());
  Descriptor out[4];
  ASSERT_TRUE(p->push(put(1), Deadline::after(1s)).ok());
  ASSERT_TRUE(p->push(put(2), Deadline::after(1s)).ok());
  ASSERT_EQ(c->poll(out, 4), 2u);
  // Slot 0 still holds lap 1's descriptor: position 2 (lap 2) is not filled yet.
  EXPECT_EQ(m.slots()[0].lap, 1u);
  EXPECT_EQ(c->poll(out, 4), 0u) << "a stale lap flag was taken as a new descriptor";
  // A producer that took position 2 but has not written its lap flag yet: not taken either.
  m.header().head = 3;
  m.slots()[0].value = 77;
  EXPECT_EQ(c->poll(out, 4), 0u);
  m.slots()[0].lap = 2;
  ASSERT_EQ(c->poll(out, 4), 1u);
  EXPECT_EQ(out[0].value, 77u);
}

TEST(ProxyRing, AFullRingTimesOutAndAbortsAndNothingIsLost) {
  RingMemory m(4);
  auto c = RingConsumer::attach(m.mem);
  auto p = RingProducer::attach(m.mem);
  ASSERT_TRUE(c.ok() && p.ok());
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(p->push(put(i), Deadline::after(1s)).ok());
  auto t0 = std::chrono::steady_clock::now();
  auto full = p->push(put(4), Deadline::after(50ms));
  EXPECT_EQ(full.status().code(), Code::timeout) << full.status().to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s) << "the full ring's wait overran its deadline";
  EXPECT_EQ(c->aborted(), gpu_ring::Abort::timeout) << "the host cannot tell a kernel gave up";
  EXPECT_EQ(p->push(put(5), Deadline::after(1s)).status().code(), Code::closed);
  // The four pushed before are still there for the consumer (their errors go to whoever waits).
  Descriptor out[8];
  EXPECT_EQ(c->poll(out, 8), 4u);
}

TEST(ProxyRing, ANeverCompletedWaitEndsAtItsDeadlineAndAbortEndsEveryWait) {
  RingMemory m(8);
  auto c = RingConsumer::attach(m.mem);
  auto p = RingProducer::attach(m.mem);
  ASSERT_TRUE(c.ok() && p.ok());
  auto pos = p->push(put(1), Deadline::after(1s));
  ASSERT_TRUE(pos.ok());
  EXPECT_EQ(p->wait_completed(*pos, Deadline::after(30ms)).code(), Code::timeout);
  Descriptor out[1];
  ASSERT_EQ(c->poll(out, 1), 1u);
  c->complete(1);
  EXPECT_TRUE(p->wait_completed(*pos, Deadline::after(1s)).ok());
  auto second = p->push(put(2), Deadline::after(1s));
  ASSERT_TRUE(second.ok());
  std::thread waiter([&] {
    EXPECT_EQ(p->wait_completed(*second, Deadline::never()).code(), Code::closed);
  });
  c->abort(gpu_ring::Abort::stopped);
  waiter.join();
  EXPECT_EQ(c->aborted(), gpu_ring::Abort::stopped);
}

TEST(ProxyRing, ProducersSkippedDescriptorsAndBadMemory) {
  RingMemory m(4);
  auto c = RingConsumer::attach(m.mem);
  auto p = RingProducer::attach(m.mem);
  ASSERT_TRUE(c.ok() && p.ok());
  Descriptor none{};
  ASSERT_TRUE(p->push(none, Deadline::after(1s)).ok());
  ASSERT_TRUE(p->push(put(9), Deadline::after(1s)).ok());
  Descriptor out[4];
  ASSERT_EQ(c->poll(out, 4), 1u) << "an op-less descriptor is skipped";
  EXPECT_EQ(out[0].value, 9u);
  EXPECT_EQ(m.header().tail, 2u) << "its slot is freed all the same";
  std::vector<uint8_t> junk(gpu_ring::ring_bytes(4) + 64, 0xAB);
  void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(junk.data()) + 63) / 64 * 64);
  EXPECT_EQ(RingConsumer::attach(aligned).status().code(), Code::protocol);
  EXPECT_EQ(init_ring(aligned, 3).code(), Code::invalid_argument);
  EXPECT_EQ(init_ring(static_cast<uint8_t*>(aligned) + 8, 4).code(), Code::invalid_argument);
}

TEST(ProxyRing, ManyProducersOneConsumerEveryDescriptorOnceInEachProducersOrder) {
  RingMemory m(64);
  auto c = RingConsumer::attach(m.mem);
  ASSERT_TRUE(c.ok());
  const int producers = 4;
  const uint64_t each = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < producers; ++t) {
    threads.emplace_back([&, t] {
      auto p = RingProducer::attach(m.mem);
      ASSERT_TRUE(p.ok());
      for (uint64_t i = 0; i < each; ++i) {
        auto pos = p->push(put(i, static_cast<uint16_t>(t)), Deadline::after(20s));
        ASSERT_TRUE(pos.ok()) << pos.status().to_string();
      }
    });
  }
  std::map<uint16_t, uint64_t> next;
  uint64_t seen = 0;
  Descriptor out[16];
  auto until = std::chrono::steady_clock::now() + 30s;
  while (seen < producers * each && std::chrono::steady_clock::now() < until) {
    size_t n = c->poll(out, 16);
    for (size_t k = 0; k < n; ++k) {
      EXPECT_EQ(out[k].value, next[out[k].window]) << "producer " << out[k].window;
      next[out[k].window] = out[k].value + 1;
      EXPECT_EQ(out[k].length, out[k].value * 3) << "a descriptor was read before it was written";
    }
    seen += n;
    c->complete(n);
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(seen, producers * each);
  EXPECT_EQ(c->completed(), producers * each);
}

}  // namespace
}  // namespace xport::gpu
