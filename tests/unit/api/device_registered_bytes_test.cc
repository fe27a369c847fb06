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
    core::reload_knobs();
  }
};

TEST_F(RegisteredBytesKnobs, DefaultsAndScaling) {
  core::reload_knobs();
  // Defaults: 256 rx + 256 tx slots of 40 + 8192 bytes (rounded to 8256) on two endpoints, plus
  // one page of flush buffer and two pages of native atomic slots (operand, compare, result).
  const size_t one = 2 * (2 * 256 * 8256) + 4096 + 8192;
  EXPECT_EQ(device_registered_bytes(), one);
  EXPECT_EQ(device_registered_bytes(4), 4 * one);
  EXPECT_EQ(device_registered_bytes(0), 0u);

  setenv("XPORT_EAGER_MAX", "64K", 1);
  setenv("XPORT_RX_BUFFERS", "128", 1);
  core::reload_knobs();
  const size_t slot = (40 + 65536 + 63) / 64 * 64;
  EXPECT_EQ(device_registered_bytes(), 2 * (128 * slot + 256 * slot) + 4096 + 8192);

  // A tiny eager limit still leaves room for the largest control message (a CONN_REQ).
  setenv("XPORT_EAGER_MAX", "0", 1);
  core::reload_knobs();
  EXPECT_GT(device_registered_bytes(), 2 * (384 * size_t{4096}));
}

}  // namespace
}  // namespace xport
