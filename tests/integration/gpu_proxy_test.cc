// The host proxy of GPU-initiated operations, with CPU threads as the kernels (the stand-in
// CUDA driver maps "device" memory at its host address) on every RDM provider: put_signal
// descriptors from staged GPU memory executed through a Window, completions published in ring
// order, quiet, counters, a bad descriptor aborting the ring with a named error. The same
// with real kernels: tests/gpu/.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "../unit/gpu/fake_driver.hpp"
#include "gpu/host/proxy_telemetry.hpp"
#include "gpu/staging/telemetry.hpp"
#include "telemetry/names.hpp"
#include "gpu/proxy_ring.hpp"
#include "harness.hpp"
#include "provider_fixture.hpp"

namespace xport {
namespace {

using namespace std::chrono_literals;
using gpu_ring::Descriptor;
using gpu_ring::Op;

Deadline soon() { return Deadline::after(20s); }

uint64_t counter(const telemetry::BlockRecord& b, telemetry::CounterId id) {
  for (int i = 0; i < b.counter_count; ++i) {
    if (b.counters[i].id == static_cast<uint16_t>(id)) return b.counters[i].value;
  }
  return UINT64_MAX;
}

// What the staging block of CUDA device 0 says now (UINT64_MAX: no block).
uint64_t staged_to_host() {
  std::vector<telemetry::BlockRecord> out;
  gpu::append_staging_blocks(out);
  for (const auto& b : out) {
    if (b.kind == static_cast<uint16_t>(telemetry::BlockKind::gpu_staging)) {
      return counter(b, telemetry::CounterId::gpu_staging_to_host_bytes);
    }
  }
  return UINT64_MAX;
}

class GpuProxyTest : public test::ProviderTest {
 protected:
  test::FakeGpuScope gpu_;
};

Descriptor put_signal(uint64_t i, size_t slice) {
  Descriptor d{};
  d.op = static_cast<uint8_t>(Op::put_signal);
  d.window = 0;
  d.local_region = 0;
  d.local_offset = i * slice;
  d.remote_region = 0;
  d.remote_offset = i * slice;
  d.length = slice;
  d.signal_region = 1;
  d.signal_offset = 8;
  d.value = 1;
  return d;
}

TEST_P(GpuProxyTest, DescriptorsFromTheRingAreExecutedAndCompletedInOrder) {
  test::Pair p = test::connect_pair(*dev_, *dev_);
  ASSERT_TRUE(p.send && p.recv);
  auto w = Window::open(*p.send, soon());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const size_t slice = 1024, count = 300;
  auto* src = static_cast<uint8_t*>(*gpu_->alloc_gpu(slice * count, 0));
  test::fill(src, slice * count, 3);
  std::vector<uint8_t> target(slice * count);
  std::vector<uint64_t> signals(4, 0), counters(4, 0);
  auto sreg = dev_->register_memory(src, slice * count);
  auto treg = dev_->register_memory(target.data(), target.size());
  auto sigreg = dev_->register_memory(signals.data(), 32);
  auto creg = dev_->register_memory(counters.data(), 32);
  ASSERT_TRUE(sreg.ok() && treg.ok() && sigreg.ok() && creg.ok());
  ASSERT_TRUE(sreg->staged());
  const uint64_t staged_before = staged_to_host();
  ASSERT_NE(staged_before, UINT64_MAX) << "a shadow exists, so the staging block must";
  auto tkey = dev_->import_key(treg->export_key());
  auto skey = dev_->import_key(sigreg->export_key());
  ASSERT_TRUE(tkey.ok() && skey.ok());
  GpuProxyOptions o;
  o.capacity = 64;  // wraps several times
  o.batch = 16;
  auto proxy = GpuProxy::open(*dev_, o);
  ASSERT_TRUE(proxy.ok()) << proxy.status().to_string();
  ASSERT_EQ(*(*proxy)->add_window(**w), 0);
  ASSERT_EQ(*(*proxy)->add_region(*sreg), 0);
  ASSERT_EQ(*(*proxy)->add_region(*creg), 1);
  ASSERT_EQ(*(*proxy)->add_remote(*tkey), 0);
  ASSERT_EQ(*(*proxy)->add_remote(*skey), 1);
  ASSERT_TRUE((*proxy)->start().ok());
  EXPECT_EQ((*proxy)->add_region(*sreg).status().code(), Code::invalid_argument)
      << "tables are fixed once the proxy runs";
  auto producer = gpu::RingProducer::attach((*proxy)->ring().header);
  ASSERT_TRUE(producer.ok());
  uint64_t last = 0;
  for (uint64_t i = 0; i < count; ++i) {
    Descriptor d = put_signal(i, slice);
    if (i == count - 1) {  // the last one also counts at the initiator
      d.op = static_cast<uint8_t>(Op::put_signal_counter);
      d.counter_region = 1;
      d.counter_word = 2;
    }
    auto pos = producer->push(d, soon());
    ASSERT_TRUE(pos.ok()) << pos.status().to_string();
    last = *pos;
  }
  Descriptor q{};
  q.op = static_cast<uint8_t>(Op::quiet);
  auto qpos = producer->push(q, soon());
  ASSERT_TRUE(qpos.ok());
  ASSERT_TRUE(producer->wait_completed(*qpos, soon()).ok()) << (*proxy)->last_error().to_string();
  EXPECT_GT(*qpos, last);
  EXPECT_EQ(test::first_mismatch(target.data(), target.size(), 3), -1)
      << "the ring's puts did not carry the GPU bytes";
  EXPECT_EQ(signals[1], count) << "every put_signal applied once";
  auto counted = (*w)->read_signal(*creg, 16);
  ASSERT_TRUE(counted.ok());
  EXPECT_EQ(*counted, 1u) << "the counter of put_signal_counter";
  auto st = (*proxy)->stats();
  EXPECT_EQ(st.descriptors, count + 1);
  EXPECT_EQ(st.completed, count + 1);
  EXPECT_LE(st.max_occupancy, 16u) << "a pass took more than its batch";
  EXPECT_EQ(st.capacity, 64u);
  EXPECT_EQ(st.queued, 0u) << "every descriptor was taken";
  EXPECT_EQ(st.failures, 0u);
  EXPECT_TRUE((*proxy)->last_error().ok());
  EXPECT_GE(staged_to_host() - staged_before, slice * count)
      << "the puts' sources were copied in from GPU memory: telemetry must count them";
  // The proxy's block, as the publisher builds it.
  std::vector<telemetry::BlockRecord> blocks;
  gpu::append_proxy_block(st, 3, 0, blocks);
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(counter(blocks[0], telemetry::CounterId::gpu_proxy_descriptors), count + 1);
  EXPECT_EQ(counter(blocks[0], telemetry::CounterId::gpu_proxy_capacity), 64u);
  // A descriptor naming a window the proxy does not have: the ring aborts, the error names it.
  Descriptor bad = put_signal(0, slice);
  bad.window = 9;
  auto bpos = producer->push(bad, soon());
  ASSERT_TRUE(bpos.ok());
  EXPECT_EQ(producer->wait_completed(*bpos, soon()).code(), Code::closed);
  EXPECT_EQ((*proxy)->aborted(), gpu_ring::Abort::bad_descriptor);
  EXPECT_EQ((*proxy)->stats().failures, 1u);
  EXPECT_EQ((*proxy)->stats().aborted, gpu_ring::Abort::bad_descriptor);
  EXPECT_NE((*proxy)->last_error().message().find("window 9"), std::string::npos)
      << (*proxy)->last_error().to_string();
  proxy->reset();
  gpu_->free_gpu(src);
}

TEST_P(GpuProxyTest, WithoutAGpuTheProxyIsRefused) {
  gpu::set_driver_for_tests(nullptr);  // the process's own driver: no GPU in CI
  if (gpu::driver().available()) GTEST_SKIP() << "this host has a GPU";
  auto proxy = GpuProxy::open(*dev_);
  EXPECT_EQ(proxy.status().code(), Code::unsupported) << proxy.status().to_string();
  gpu::set_driver_for_tests(&*gpu_);
}

INSTANTIATE_TEST_SUITE_P(Providers, GpuProxyTest,
                         ::testing::Values(test::ProviderParam{"shm", "auto"},
                                           test::ProviderParam{"tcp;ofi_rxm", "auto"},
                                           test::ProviderParam{"sockets", "auto"}),
                         test::provider_param_name);

}  // namespace
}  // namespace xport
