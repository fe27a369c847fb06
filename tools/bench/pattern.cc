// xport-bench's --check pattern (pattern.hpp).
#include "pattern.hpp"

#include <algorithm>
#include <cstring>
#include <string>

namespace bench {

using namespace xport;

namespace {
uint64_t mix(uint64_t x) {  // splitmix64's finalizer: every input bit moves every output bit
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

uint64_t seed_of(size_t size, uint64_t iteration, Stream stream) {
  return mix(size * 0x100000001b3ull ^ (iteration << 2) ^ stream);
}

void fill(uint8_t* p, size_t n, uint64_t seed) {
  size_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const uint64_t w = mix(seed + k);
    std::memcpy(p + k, &w, 8);
  }
  if (k < n) {
    const uint64_t w = mix(seed + k);
    std::memcpy(p + k, &w, n - k);
  }
}

size_t verify(const uint8_t* p, size_t n, uint64_t seed) {
  size_t k = 0;
  for (; k < n; k += 8) {
    const uint64_t w = mix(seed + k);
    const size_t m = std::min<size_t>(8, n - k);
    if (std::memcmp(p + k, &w, m) != 0) {
      for (size_t b = 0; b < m; ++b) {
        if (p[k + b] != reinterpret_cast<const uint8_t*>(&w)[b]) return k + b;
      }
    }
  }
  return n;
}

Status check_failed(const Plan& p, uint64_t it, uint64_t off, const char* who) {
  return Status(Code::protocol, "check failed: size " + std::to_string(p.size) + ", iteration " +
                                    std::to_string(it) +
                                    (it < static_cast<uint64_t>(p.warmup) ? " (warm-up)" : "") +
                                    ": first bad byte at offset " + std::to_string(off) +
                                    " (seen by the " + who + ")");
}

Status fill_at(Session& s, const Plan& p, size_t off, uint64_t seed, uint64_t it) {
  XPORT_ASSIGN_OR_RETURN(uint8_t * b, s.writable(off, p.size));
  fill(b, p.size, seed);
  if (p.corrupt >= 0 && it == static_cast<uint64_t>(p.corrupt)) b[p.size / 2] ^= 0x5a;
  return s.written(off, p.size);
}

Result<size_t> verify_at(Session& s, size_t off, size_t n, uint64_t seed) {
  XPORT_ASSIGN_OR_RETURN(const uint8_t* b, s.readable(off, n));
  return verify(b, n, seed);
}

}  // namespace bench
