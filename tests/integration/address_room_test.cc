// A target device whose shm address table is full (libfabric 1.17's shm maps 256 addresses per
// address vector, 2 per peer device) refuses further initiators at once, naming why, and keeps
// serving the ones it took; the addresses of those it refused go again (past the table's limit
// the provider overwrites live entries), for windows and connections alike. Before: the 124th..
// initiator's window request went unanswered (the target had no address to answer on) and its
// open waited out its deadline.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "provider_fixture.hpp"
#include "xport/xport.hpp"

namespace xport {
namespace {

using namespace std::chrono_literals;

TEST(AddressRoom, InitiatorsPastAFullShmAddressTableAreRefusedAtOnceAndTheRestServed) {
  if (std::getenv("FI_PROVIDER_PATH") != nullptr) GTEST_SKIP() << "shm only";
  setenv("XPORT_PROVIDER", "shm", 1);
  core::reload_knobs();
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Device> target;
  test::open_context_and_device("shm", ctx, target);
  if (target == nullptr) return;
  constexpr size_t kInitiators = 140, kLen = 64;
  std::vector<uint8_t> mem(kInitiators * (kLen + 8), 0);
  auto region = target->register_memory(mem.data(), mem.size());
  ASSERT_TRUE(region.ok()) << region.status().to_string();
  const std::vector<uint8_t> blob = region->export_key();
  std::atomic<bool> stop{false};
  std::thread progress([&] {
    while (!stop.load(std::memory_order_relaxed)) (void)target->progress();
  });
  struct Initiator {
    std::unique_ptr<Device> dev;
    std::vector<uint8_t> src = std::vector<uint8_t>(kLen);
    std::unique_ptr<Region> local;
    std::unique_ptr<RemoteRegion> key;
    std::unique_ptr<Window> win;
  };
  std::vector<Initiator> in(kInitiators);
  size_t opened = 0, refused = 0;
  for (size_t k = 0; k < kInitiators; ++k) {
    auto dev = ctx->open_device();
    ASSERT_TRUE(dev.ok()) << dev.status().to_string();
    in[k].dev = std::move(dev).value();
    auto key = in[k].dev->import_key(blob);
    ASSERT_TRUE(key.ok()) << key.status().to_string();
    in[k].key = std::make_unique<RemoteRegion>(std::move(key).value());
    const auto t0 = std::chrono::steady_clock::now();
    auto w = Window::open(*in[k].dev, *in[k].key, Deadline::after(20s));
    const auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_LT(took, 5s) << "window " << k << ": answered only after "
                        << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                        << " ms: " << (w.ok() ? "opened" : w.status().to_string());
    if (w.ok()) {
      EXPECT_EQ(refused, 0u) << "window " << k << " opened after one was refused";
      in[k].win = std::move(w).value();
      ++opened;
      continue;
    }
    EXPECT_EQ(w.status().code(), Code::resource) << w.status().to_string();
    EXPECT_NE(w.status().message().find("no room for another peer device"), std::string::npos)
        << w.status().to_string();
    ++refused;
    in[k].key.reset();
    in[k].dev.reset();  // a refused initiator goes; the next one asks afresh
  }
  // 256 addresses: the target's own 2, 8 kept for refusals, 2 per initiator: 123.
  EXPECT_GE(opened, 120u);
  EXPECT_EQ(opened + refused, kInitiators);
  EXPECT_GT(refused, 0u) << "the table held all " << kInitiators << ": raise kInitiators";
  // Every window opened is served: a put_signal each, every byte and signal checked.
  for (size_t k = 0; k < opened; ++k) {
    for (size_t i = 0; i < kLen; ++i) in[k].src[i] = static_cast<uint8_t>(k * 31 + i + 1);
    auto r = in[k].dev->register_memory(in[k].src.data(), kLen);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    in[k].local = std::make_unique<Region>(std::move(r).value());
    auto t = in[k].win->put_signal(*in[k].local, 0, *in[k].key, k * kLen, kLen, *in[k].key,
                                   kInitiators * kLen + k * 8, 1);
    ASSERT_TRUE(t.ok()) << "initiator " << k << ": " << t.status().to_string();
  }
  for (size_t k = 0; k < opened; ++k) {
    Status q = in[k].win->quiet(Deadline::after(30s));
    ASSERT_TRUE(q.ok()) << "initiator " << k << ": " << q.to_string();
    uint64_t signal = 0;
    std::memcpy(&signal, mem.data() + kInitiators * kLen + k * 8, 8);
    EXPECT_EQ(signal, 1u) << "initiator " << k;
    EXPECT_EQ(std::memcmp(mem.data() + k * kLen, in[k].src.data(), kLen), 0) << "initiator " << k;
  }
  // A connection from one more device is rejected at once, naming the same cause.
  {
    auto listener = target->listen();
    ASSERT_TRUE(listener.ok()) << listener.status().to_string();
    auto dev = ctx->open_device();
    ASSERT_TRUE(dev.ok()) << dev.status().to_string();
    const auto t0 = std::chrono::steady_clock::now();
    auto comm = (*dev)->connect((*listener)->handle(), Deadline::after(20s));
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s) << "the rejection came late";
    ASSERT_FALSE(comm.ok()) << "a connection past the full table was accepted";
    EXPECT_EQ(comm.status().code(), Code::peer_lost) << comm.status().to_string();
    EXPECT_NE(comm.status().message().find("no room for another peer device"), std::string::npos)
        << comm.status().to_string();
  }
  in.clear();
  stop = true;
  progress.join();
  target.reset();
  ctx.reset();
  unsetenv("XPORT_PROVIDER");
  core::reload_knobs();
}

}  // namespace
}  // namespace xport
