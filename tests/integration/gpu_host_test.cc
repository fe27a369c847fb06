// The host API GPU backends share (xport/gpu_host.hpp) on every provider: three ranks (threads,
// each with its own GpuHost) connect all-to-all, register symmetric regions, and each rank's
// proxy backend context carries put_signals to every rank, its own included (a CPU producer stands in for the
// kernels, the stand-in CUDA driver for the GPU); a peer that never joins ends connect with a
// timeout naming what is missing; the direct backend is refused by name.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "../unit/gpu/fake_driver.hpp"
#include "gpu/proxy_ring.hpp"
#include "harness.hpp"
#include "provider_fixture.hpp"
#include "xport/gpu_host.hpp"

namespace xport {
namespace {

using namespace std::chrono_literals;
using gpu_ring::Descriptor;
using gpu_ring::Op;

class GpuHostTest : public test::ProviderTest {
 protected:
  test::FakeGpuScope gpu_;
};

TEST_P(GpuHostTest, ThreeRanksPutSignalToEveryPeerThroughTheirProxyContexts) {
  constexpr int n = 3;
  constexpr size_t slice = 4096;
  std::vector<std::unique_ptr<GpuHost>> hosts(n);
  std::vector<ConnectionHandle> handles(n);
  for (int r = 0; r < n; ++r) {
    auto h = GpuHost::init();
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    hosts[r] = std::move(h).value();
    ASSERT_GE(hosts[r]->devices(), 1);
    auto l = hosts[r]->listen(0);
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    handles[r] = *l;
  }
  std::vector<std::vector<uint8_t>> data(n, std::vector<uint8_t>(n * slice, 0));
  std::vector<std::vector<uint64_t>> signals(n, std::vector<uint64_t>(n, 0));
  std::vector<std::string> failures(n);
  auto rank_main = [&](int r) {
    auto fail = [&](const std::string& what, const Status& s) {
      failures[r] = what + ": " + s.to_string();
    };
    auto team = hosts[r]->connect(0, handles, r, Deadline::after(30s));
    if (!team.ok()) return fail("connect", team.status());
    if ((*team)->size() != n || (*team)->rank() != r || (*team)->window(r) == nullptr ||
        (*team)->window(n) != nullptr) {
      failures[r] = "the team's shape";
      return;
    }
    test::fill(data[r].data() + r * slice, slice, 100 + r);  // this rank's slot
    auto d = hosts[r]->register_symmetric(**team, data[r].data(), data[r].size(), Deadline::after(30s));
    if (!d.ok()) return fail("register data", d.status());
    auto s = hosts[r]->register_symmetric(**team, signals[r].data(), n * 8, Deadline::after(30s));
    if (!s.ok()) return fail("register signals", s.status());
    auto backend = GpuBackend::open(GpuBackendKind::proxy);
    if (!backend.ok()) return fail("backend", backend.status());
    if ((*backend)->properties(**team).name != "proxy") failures[r] = "backend name";
    const SymmetricRegion* regions[] = {&*d, &*s};
    GpuProxyOptions o;
    o.capacity = 16;
    auto ctx = (*backend)->create_context(**team, regions, o);
    if (!ctx.ok()) return fail("create_context", ctx.status());
    auto producer = gpu::RingProducer::attach((*ctx)->ring().header);
    if (!producer.ok()) return fail("producer", producer.status());
    uint64_t last = 0;
    for (int p = 0; p < n; ++p) {  // this rank too, through the loopback window
      Descriptor x{};
      x.op = static_cast<uint8_t>(Op::put_signal);
      x.window = static_cast<uint16_t>(p);
      x.local_region = 0;
      x.local_offset = r * slice;
      x.remote_region = static_cast<uint16_t>(0 * n + p);  // region 0 at peer p
      x.remote_offset = r * slice;
      x.length = slice;
      x.signal_region = static_cast<uint16_t>(1 * n + p);  // region 1 at peer p
      x.signal_offset = 8 * r;
      x.value = 1;
      auto pos = producer->push(x, Deadline::after(30s));
      if (!pos.ok()) return fail("push", pos.status());
      last = *pos;
    }
    Status done = producer->wait_completed(last, Deadline::after(30s));
    if (!done.ok()) return fail("descriptors (" + (*ctx)->last_error().to_string() + ")", done);
    // Every peer's signal, then its bytes.
    for (int p = 0; p < n; ++p) {
      Status w = (*team)->window(p)->wait_signal(s->local, 8 * p, 1, Deadline::after(30s));
      if (!w.ok()) return fail("signal of rank " + std::to_string(p), w);
    }
    // Stay (and progress) until every rank is done with this one's memory: a last exchange.
    auto bye = hosts[r]->register_symmetric(**team, signals[r].data(), 8, Deadline::after(30s));
    if (!bye.ok()) return fail("closing exchange", bye.status());
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(rank_main, r);
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
  for (int r = 0; r < n; ++r) {
    for (int p = 0; p < n; ++p) {
      EXPECT_EQ(test::first_mismatch(data[r].data() + p * slice, slice, 100 + p), -1)
          << "rank " << r << ", slot of rank " << p;
      EXPECT_EQ(signals[r][p], 1u) << "rank " << r << ", signal of rank " << p;
    }
  }
}

TEST_P(GpuHostTest, APeerThatNeverJoinsEndsConnectWithATimeoutNamingIt) {
  if (std::string(GetParam().provider) == "shm") {
    // Both hosts live in this process: libfabric 1.17's shm faults in the closing host when the
    // other one (never having answered) is gone. Processes of their own do not share that.
    GTEST_SKIP() << "shm: two hosts of one process, one never answering";
  }
  if (std::string(GetParam().provider) == "tcp;ofi_rxm") {
    // libfabric 1.17's rxm leaks (LeakSanitizer: 376 bytes in 2 callocs of libfabric) the
    // connection request of a peer whose endpoint closes without ever having progressed it;
    // tcp (connected endpoints) runs the same test.
    GTEST_SKIP() << "tcp;ofi_rxm: the never-progressed peer's connection request leaks in rxm";
  }
  auto a = GpuHost::init();
  auto b = GpuHost::init();
  ASSERT_TRUE(a.ok() && b.ok());
  auto ha = (*a)->listen(0);
  auto hb = (*b)->listen(0);
  ASSERT_TRUE(ha.ok() && hb.ok());
  std::vector<ConnectionHandle> handles{*ha, *hb};
  auto team = (*a)->connect(0, handles, 0, Deadline::after(300ms));  // b never calls connect
  ASSERT_EQ(team.status().code(), Code::timeout) << team.status().to_string();
  EXPECT_NE(team.status().message().find("rank 1"), std::string::npos)
      << team.status().to_string();
  EXPECT_EQ((*a)->connect(0, handles, 2, Deadline::after(1s)).status().code(),
            Code::invalid_argument) << "rank 2 of a team of 2";
  EXPECT_EQ((*a)->device(7).status().code(), Code::invalid_argument);
  auto direct = GpuBackend::open(GpuBackendKind::direct);
  EXPECT_EQ(direct.status().code(), Code::unsupported);
  EXPECT_NE(direct.status().message().find("proxy"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Providers, GpuHostTest,
                         ::testing::Values(test::ProviderParam{"shm", "auto"},
                                           test::ProviderParam{"tcp;ofi_rxm", "manual"},
                                           test::ProviderParam{"tcp", "auto"}),
                         test::provider_param_name);

}  // namespace
}  // namespace xport
