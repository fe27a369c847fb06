// The pieces of the tests that run many initiator devices against one target (credits, address
// room, shards): knobs set for a test's scope, the target (its memory registered, its key, a
// thread driving it), and an initiator (a source registered, the target's key imported, and once
// opened a window to the target).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/knob.hpp"
#include "xport/xport.hpp"

namespace xport::test {

// Environment knobs for a scope: set (and the library's knobs reloaded) when made, unset (and
// reloaded) when it ends. Declare it before the devices it configures, so that it ends after them.
class ScopedKnobs {
 public:
  ScopedKnobs(std::initializer_list<std::pair<const char*, std::string>> knobs) {
    for (const auto& [name, value] : knobs) {
      setenv(name, value.c_str(), 1);
      names_.push_back(name);
    }
    core::reload_knobs();
  }
  ~ScopedKnobs() {
    for (const char* name : names_) unsetenv(name);
    core::reload_knobs();
  }
  ScopedKnobs(const ScopedKnobs&) = delete;
  ScopedKnobs& operator=(const ScopedKnobs&) = delete;

 private:
  std::vector<const char*> names_;
};

// The one target: `mem` registered on its device, the region's key, and a thread that drives the
// device (as its own process would) from start() until stop(), which the end of the scope makes.
class Target {
 public:
  std::vector<uint8_t> mem;
  std::unique_ptr<Region> region;
  std::vector<uint8_t> blob;  // the region's exported key

  // `bytes` of zeroed memory registered on `dev` and the driving thread started. Fatal failures
  // are the caller's to check (ASSERT_NO_FATAL_FAILURE).
  void start(Device& dev, size_t bytes) {
    mem.assign(bytes, 0);
    auto r = dev.register_memory(mem.data(), mem.size());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    region = std::make_unique<Region>(std::move(r).value());
    blob = region->export_key();
    driver_ = std::thread([this, &dev] {
      while (!stop_.load(std::memory_order_relaxed)) (void)dev.progress();
    });
  }
  // Joins the driving thread (the region stays until the end of the scope).
  void stop() {
    stop_ = true;
    if (driver_.joinable()) driver_.join();
  }
  Target() = default;
  Target(const Target&) = delete;
  Target& operator=(const Target&) = delete;
  ~Target() { stop(); }

 private:
  std::thread driver_;
  std::atomic<bool> stop_{false};
};

struct Initiator {
  std::unique_ptr<Device> dev;
  std::vector<uint8_t> src;
  std::unique_ptr<Region> local;
  std::unique_ptr<RemoteRegion> key;
  std::unique_ptr<Window> win;  // (declared last: destroyed first)
  uint64_t signals = 0;         // put_signal_round's adds so far

  // A new device of `ctx` with `len` bytes of source registered and the key `blob` imported; no
  // window yet. Fatal failures are the caller's to check (ASSERT_NO_FATAL_FAILURE).
  void prepare(Context& ctx, const std::vector<uint8_t>& blob, size_t len) {
    auto d = ctx.open_device();
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    dev = std::move(d).value();
    src.assign(len, 0);
    auto r = dev->register_memory(src.data(), len);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    local = std::make_unique<Region>(std::move(r).value());
    auto k = dev->import_key(blob);
    ASSERT_TRUE(k.ok()) << k.status().to_string();
    key = std::make_unique<RemoteRegion>(std::move(k).value());
  }
  // Opens the window (after prepare()).
  void open(std::chrono::seconds within) {
    auto w = Window::open(*dev, *key, Deadline::after(within));
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    win = std::move(w).value();
  }
  // Lets go of everything, the window first and the device last.
  void close() {
    win.reset();
    key.reset();
    local.reset();
    dev.reset();
  }
};

// One round: each initiator with a window puts `len` bytes of a pattern of (k, round) into slot
// k of the target's `mem` (in.size() slots of `len`, then a signal word each) and adds 1 to its
// signal word; then a quiet of each, and every byte and signal of each checked.
inline void put_signal_round(std::vector<Initiator>& in, const std::vector<uint8_t>& mem,
                             size_t len, size_t round) {
  using namespace std::chrono_literals;
  const size_t words = in.size() * len;
  for (size_t k = 0; k < in.size(); ++k) {
    if (!in[k].win) continue;
    for (size_t i = 0; i < len; ++i) in[k].src[i] = static_cast<uint8_t>(k * 31 + i + round);
    auto t = in[k].win->put_signal(*in[k].local, 0, *in[k].key, k * len, len, *in[k].key,
                                   words + k * 8, 1);
    ASSERT_TRUE(t.ok()) << "initiator " << k << ": " << t.status().to_string();
    in[k].signals += 1;
  }
  for (size_t k = 0; k < in.size(); ++k) {
    if (!in[k].win) continue;
    Status q = in[k].win->quiet(Deadline::after(30s));
    ASSERT_TRUE(q.ok()) << "initiator " << k << ": " << q.to_string();
    uint64_t signal = 0;
    std::memcpy(&signal, mem.data() + words + k * 8, 8);
    EXPECT_EQ(signal, in[k].signals) << "initiator " << k << ", round " << round;
    EXPECT_EQ(std::memcmp(mem.data() + k * len, in[k].src.data(), len), 0)
        << "initiator " << k << ", round " << round;
  }
}

}  // namespace xport::test
