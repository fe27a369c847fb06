// An initiator device of the tests that run many of them against one target (credits, address
// room, shards): a source registered on it, the target's region key imported, and once opened a
// window to the target.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "xport/xport.hpp"

namespace xport::test {

struct Initiator {
  std::unique_ptr<Device> dev;
  std::vector<uint8_t> src;
  std::unique_ptr<Region> local;
  std::unique_ptr<RemoteRegion> key;
  std::unique_ptr<Window> win;  // (declared last: destroyed first)

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
  // Lets go of everything, the window first and the device last.
  void close() {
    win.reset();
    key.reset();
    local.reset();
    dev.reset();
  }
};

}  // namespace xport::test
