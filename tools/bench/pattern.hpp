// The data pattern behind xport-bench's --check: 64-bit words of a mixed counter, different per
// size, iteration and stream; and writing or verifying it in a Session's buffer, host or GPU
// memory (a GPU buffer is filled and read through a host copy).
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops.hpp"

namespace bench {

enum Stream : uint64_t { kPing = 0, kPong = 1, kStream = 2, kGet = 3 };

uint64_t seed_of(size_t size, uint64_t iteration, Stream stream);
void fill(uint8_t* p, size_t n, uint64_t seed);
// The offset of the first byte that differs from the pattern; n when all match.
size_t verify(const uint8_t* p, size_t n, uint64_t seed);

// The first mismatch a side saw.
struct Mismatch {
  bool bad = false;
  uint64_t iteration = 0;
  uint64_t offset = 0;
  void note(uint64_t it, uint64_t off) {
    if (!bad) *this = {true, it, off};
  }
};
xport::Status check_failed(const Plan& p, uint64_t it, uint64_t off, const char* who);

// The session's bytes [off, off + plan.size) get the pattern of `seed`; tests of --check:
// iteration `it` gets one byte wrong, as a faulty path would (Plan::corrupt).
xport::Status fill_at(Session& s, const Plan& p, size_t off, uint64_t seed, uint64_t it);
// The offset of the first byte of [off, off + n) that differs from the pattern; n when all match.
xport::Result<size_t> verify_at(Session& s, size_t off, size_t n, uint64_t seed);

}  // namespace bench
