// Window credits under pressure from several threads at once (docs/semantics.md, "Credits"): each
// thread drives its own initiator device against one target whose CQ room holds fewer first
// grants than there are streams to grow, and mixes puts of random sizes, put_signals, fetch-adds,
// fences and quiets, closing its window and opening a new one every few batches. Every quiet
// succeeds within its deadline and leaves the target's memory as the thread's own image of it:
// every byte, every signal, every fetch-add (each old value seen once).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "initiator.hpp"
#include "provider_fixture.hpp"
#include "xport/xport.hpp"

namespace xport {
namespace {

using namespace std::chrono_literals;

constexpr size_t kThreads = 8, kBatches = 48, kReopenEvery = 6, kSlot = 16 << 10, kMaxOps = 12;

// The target's memory: per thread a slot; after them, each thread's signal word and fetch-add
// word.
constexpr size_t words_at(size_t t) { return kThreads * kSlot + t * 16; }

// One thread's life; failures are recorded (gtest's assertions are thread-safe) and end it.
void drive(Context& ctx, const test::Target& target, size_t t, uint32_t seed) {
  auto dev = ctx.open_device();
  ASSERT_TRUE(dev.ok()) << "thread " << t << ": " << dev.status().to_string();
  std::vector<uint8_t> src(kSlot * 2);
  auto local = (*dev)->register_memory(src.data(), src.size());
  ASSERT_TRUE(local.ok()) << local.status().to_string();
  auto key = (*dev)->import_key(target.blob);
  ASSERT_TRUE(key.ok()) << key.status().to_string();
  std::mt19937 rng(seed);
  std::vector<uint8_t> image(kSlot, 0);  // what this thread's slot must hold after a quiet
  uint64_t signals = 0, adds = 0;
  std::vector<uint64_t> old_values;      // fetch-add results, in flight until the quiet
  std::vector<uint64_t> seen;
  std::unique_ptr<Window> win;
  for (size_t batch = 0; batch < kBatches; ++batch) {
    if (batch % kReopenEvery == 0) {
      win.reset();  // (after a quiet: nothing in flight)
      auto w = Window::open(**dev, *key, Deadline::after(30s));
      ASSERT_TRUE(w.ok()) << "thread " << t << ", batch " << batch << ": "
                          << w.status().to_string();
      win = std::move(w).value();
    }
    // Ops of this batch write disjoint ranges of the slot (puts within a batch are unordered).
    const size_t ops = 1 + rng() % kMaxOps;
    const size_t chunk = kSlot / ops;
    old_values.assign(ops, UINT64_MAX);
    for (size_t i = 0; i < ops; ++i) {
      const size_t len = 1 + rng() % chunk, off = i * chunk + rng() % (chunk - len + 1);
      uint8_t* s = src.data() + (batch % 2) * kSlot + off;
      for (size_t k = 0; k < len; ++k) s[k] = static_cast<uint8_t>(rng());
      std::memcpy(image.data() + off, s, len);
      const size_t src_off = static_cast<size_t>(s - src.data());
      const size_t dst_off = t * kSlot + off;
      Status r;
      switch (rng() % 4) {
        case 0:
          r = win->put(*local, src_off, *key, dst_off, len).status();
          break;
        case 1:
          r = win->put_signal(*local, src_off, *key, dst_off, len, *key, words_at(t), 1)
                  .status();
          ++signals;
          break;
        case 2:
          r = win->put(*local, src_off, *key, dst_off, len).status();
          if (r.ok()) {
            r = win->atomic(AtomicOp::fetch_add, *key, words_at(t) + 8, 1, 0,
                            &old_values[i])
                    .status();
            ++adds;
          }
          break;
        default:
          r = win->put(*local, src_off, *key, dst_off, len).status();
          if (r.ok()) r = win->fence();
          break;
      }
      ASSERT_TRUE(r.ok()) << "thread " << t << ", batch " << batch << ", op " << i << ": "
                          << r.to_string();
    }
    Status q = win->quiet(Deadline::after(30s));
    ASSERT_TRUE(q.ok()) << "thread " << t << ", batch " << batch << ": " << q.to_string();
    for (uint64_t v : old_values) {
      if (v != UINT64_MAX) seen.push_back(v);
    }
    // Delivered: the slot and the words are this thread's alone.
    const uint8_t* slot = target.mem.data() + t * kSlot;
    size_t wrong = 0;
    for (size_t k = 0; k < kSlot; ++k) wrong += slot[k] != image[k];
    ASSERT_EQ(wrong, 0u) << "thread " << t << ", batch " << batch;
    uint64_t sig = 0, sum = 0;
    std::memcpy(&sig, target.mem.data() + words_at(t), 8);
    std::memcpy(&sum, target.mem.data() + words_at(t) + 8, 8);
    ASSERT_EQ(sig, signals) << "thread " << t << ", batch " << batch;
    ASSERT_EQ(sum, adds) << "thread " << t << ", batch " << batch;
  }
  std::sort(seen.begin(), seen.end());
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], i) << "thread " << t;
}

class CreditsStress : public ::testing::TestWithParam<test::ProviderParam> {};

TEST_P(CreditsStress, ThreadsMixOperationsAndReopenWindowsOnATargetShortOfRoom) {
  if (std::getenv("FI_PROVIDER_PATH") != nullptr) GTEST_SKIP() << "runs in the credits test";
  // (XPORT_CQ_ENTRIES=64: 48 entries for 8 streams that each want up to 128)
  test::ScopedKnobs knobs{{"XPORT_PROVIDER", GetParam().provider},
                          {"XPORT_PROGRESS", GetParam().progress}, {"XPORT_CQ_ENTRIES", "64"}};
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Device> target_dev;
  test::open_context_and_device(GetParam().provider, ctx, target_dev);
  if (target_dev == nullptr) return;
  test::Target target;
  ASSERT_NO_FATAL_FAILURE(target.start(*target_dev, kThreads * kSlot + kThreads * 16));
  std::vector<std::thread> threads;
  for (size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back(
        [&, t] { drive(*ctx, target, t, 1000 + static_cast<uint32_t>(t)); });
  }
  for (auto& th : threads) th.join();
  target.stop();
  // Nobody is left waiting for room (whether the room ran short in a run depends on timing).
  EXPECT_EQ(target_dev->stats().window_streams_waiting, 0u);
}

INSTANTIATE_TEST_SUITE_P(Providers, CreditsStress,
                         ::testing::Values(test::ProviderParam{"shm", "auto"},
                                           test::ProviderParam{"shm", "manual"},
                                           test::ProviderParam{"tcp;ofi_rxm", "auto"}),
                         test::provider_param_name);

}  // namespace
}  // namespace xport
