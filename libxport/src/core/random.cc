#include "core/random.hpp"

#include <sys/random.h>

#include <chrono>

namespace xport::core {

uint64_t random64() {
  uint64_t v = 0;
  while (v == 0) {
    if (getrandom(&v, sizeof(v), 0) != sizeof(v)) {
      v = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) *
          0x9E3779B97F4A7C15ull;
    }
  }
  return v;
}

}  // namespace xport::core
