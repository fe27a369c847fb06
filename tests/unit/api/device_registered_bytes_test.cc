// device_registered_bytes(): the knobs that size bounce buffers move it, rails multiply it.
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/knob.hpp"
#include "xport/context.hpp"

namespace xport {
namespace {

class RegisteredBytesKnobs : public ::testing::Test {
 protected:
  void TearDown() override {
    unsetenv("XPORT_EAGER_MAX");
    unsetenv("XPORT_RX_BUFFERS");
    unsetenv("XPORT_CONTROL_ENDPOINT");
    core::reload_knobs();
  }
};

TEST_F(RegisteredBytesKnobs, DefaultsAndScaling) {
  core::reload_knobs();
  // Defaults: 256 rx + 256 tx slots of 40 + 8192 bytes (rounded to 8256) on the data endpoint,
  // as many of 40 + 64 + 4096 bytes (the largest control message, rounded to 4224) on the
  // control endpoint, plus one page of flush buffer and two pages of native atomic slots
  // (operand, compare, result).
  const size_t control = 2 * 256 * 4224;
  const size_t one = 2 * 256 * 8256 + control + 4096 + 8192;
  EXPECT_EQ(device_registered_bytes(), one);
  EXPECT_EQ(device_registered_bytes(4), 4 * one);
  EXPECT_EQ(device_registered_bytes(0), 0u);

  setenv("XPORT_EAGER_MAX", "64K", 1);
  setenv("XPORT_RX_BUFFERS", "128", 1);
  core::reload_knobs();
  const size_t slot = (40 + 65536 + 63) / 64 * 64;
  EXPECT_EQ(device_registered_bytes(), (128 + 256) * slot + (128 + 256) * 4224 + 4096 + 8192);

  // A tiny eager limit still leaves room for the largest control message (a CONN_REQ).
  setenv("XPORT_EAGER_MAX", "0", 1);
  core::reload_knobs();
  EXPECT_GT(device_registered_bytes(), 2 * (384 * size_t{4096}));
}

// XPORT_CONTROL_ENDPOINT: where control messages share the data endpoint (auto: tcp;ofi_rxm),
// the control endpoint's buffers are not registered.
TEST_F(RegisteredBytesKnobs, ASharedControlEndpointRegistersNothingOfItsOwn) {
  core::reload_knobs();
  const size_t control = 2 * 256 * 4224;
  const size_t separate = 2 * 256 * 8256 + control + 4096 + 8192;
  EXPECT_EQ(device_registered_bytes(1, "cxi"), separate) << "cxi has traffic classes";
  // shm's door (shard 0's control endpoint) posts no more receive buffers than its provider
  // queue of 64 commands (docs/pool.md, "Shards").
  EXPECT_EQ(device_registered_bytes(1, "shm"), separate - (256 - 64) * 4224);
  EXPECT_EQ(device_registered_bytes(2, "tcp;ofi_rxm"), 2 * (separate - control));
  setenv("XPORT_CONTROL_ENDPOINT", "separate", 1);
  core::reload_knobs();
  EXPECT_EQ(device_registered_bytes(1, "tcp;ofi_rxm"), separate);
  setenv("XPORT_CONTROL_ENDPOINT", "shared", 1);
  core::reload_knobs();
  EXPECT_EQ(device_registered_bytes(1, "cxi"), separate - control);
}

// Linux's default RLIMIT_MEMLOCK is 8 MiB: a device of one rail on default knobs stays well
// under it (an ordinary user's xport-probe does not FAIL its memlock check), and a device
// opened on defaults registers what device_registered_bytes() says.
TEST_F(RegisteredBytesKnobs, TheDefaultDeviceFitsTheDefaultLockedMemoryLimit) {
  core::reload_knobs();
  EXPECT_LE(device_registered_bytes(1), size_t{13} << 19)
      << "a one-rail device on defaults should leave at least 1.5 MiB of an 8 MiB limit";
}

}  // namespace
}  // namespace xport
