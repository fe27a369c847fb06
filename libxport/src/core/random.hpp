// Unpredictable non-zero 64-bit values for tokens and nonces (getrandom; a clock-derived value
// where the kernel refuses).
#pragma once

#include <cstdint>

namespace xport::core {

uint64_t random64();

}  // namespace xport::core
