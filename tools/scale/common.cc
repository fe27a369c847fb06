// Line parsing, data patterns, resident memory and pass timing for xport-scale (common.hpp).
#include "common.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace scale {

std::string code_name(xport::Code code) {
  using xport::Code;
  switch (code) {
    case Code::ok:
      return "ok";
    case Code::invalid_argument:
      return "invalid_argument";
    case Code::not_found:
      return "not_found";
    case Code::unsupported:
      return "unsupported";
    case Code::timeout:
      return "timeout";
    case Code::again:
      return "again";
    case Code::fabric:
      return "fabric";
    case Code::peer_lost:
      return "peer_lost";
    case Code::truncated:
      return "truncated";
    case Code::closed:
      return "closed";
    case Code::protocol:
      return "protocol";
    case Code::resource:
      return "resource";
    case Code::internal:
      return "internal";
  }
  return "unknown";
}

uint64_t resident_bytes() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "VmRSS:", 6) == 0) {
      kb = std::strtoull(line + 6, nullptr, 10);
      break;
    }
  }
  std::fclose(f);
  return kb * 1024;
}

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> w;
  const size_t cut = line.find(" error=");
  std::istringstream in(line.substr(0, cut));
  for (std::string x; in >> x;) w.push_back(x);
  return w;
}

std::string field(const std::vector<std::string>& w, const std::string& key) {
  for (const auto& x : w) {
    if (x.rfind(key + "=", 0) == 0) return x.substr(key.size() + 1);
  }
  return "";
}

uint64_t field_u64(const std::vector<std::string>& w, const std::string& key) {
  return std::strtoull(field(w, key).c_str(), nullptr, 10);
}

std::string error_of(const std::string& line) {
  const size_t at = line.find(" error=");
  return at == std::string::npos ? std::string() : line.substr(at + 7);
}

std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

std::string error_shape(const std::string& text) {
  std::string key;
  for (char c : text) {
    if (c < '0' || c > '9') {
      key += c;
    } else if (key.empty() || key.back() != '#') {
      key += '#';
    }
  }
  return key;
}

std::string index_list(const std::vector<size_t>& v) {
  if (v.empty()) return "-";
  std::string s;
  for (size_t i : v) {
    if (!s.empty()) s += ',';
    s += std::to_string(i);
  }
  return s;
}

std::vector<size_t> parse_index_list(const std::string& s) {
  std::vector<size_t> out;
  if (s.empty() || s == "-") return out;
  for (size_t pos = 0; pos <= s.size();) {
    const size_t comma = s.find(',', pos);
    out.push_back(std::strtoull(s.substr(pos, comma - pos).c_str(), nullptr, 10));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

namespace {

uint64_t seed_of(uint64_t peer, uint64_t round, uint64_t size) {
  uint64_t x = peer * 0x9e3779b97f4a7c15ull ^ (round + 1) * 0xc2b2ae3d27d4eb4full ^
               size * 0x165667b19e3779f9ull;
  x ^= x >> 31;
  return x * 0xbf58476d1ce4e5b9ull;
}

// Word k of the pattern; its bytes in memory order.
inline uint64_t word_at(uint64_t seed, size_t k) { return seed + k * 0x9e3779b97f4a7c15ull; }

}  // namespace

void fill_pattern(uint8_t* p, size_t len, uint64_t peer, uint64_t round, uint64_t size) {
  const uint64_t seed = seed_of(peer, round, size);
  size_t k = 0;
  for (; (k + 1) * 8 <= len; ++k) {
    const uint64_t w = word_at(seed, k);
    std::memcpy(p + k * 8, &w, 8);
  }
  const uint64_t w = word_at(seed, k);
  std::memcpy(p + k * 8, &w, len - k * 8);
}

size_t check_pattern(const uint8_t* p, size_t len, uint64_t peer, uint64_t round, uint64_t size) {
  const uint64_t seed = seed_of(peer, round, size);
  size_t k = 0;
  for (; (k + 1) * 8 <= len; ++k) {
    const uint64_t w = word_at(seed, k);
    if (std::memcmp(p + k * 8, &w, 8) != 0) break;
  }
  const uint64_t w = word_at(seed, k);
  const uint8_t* expect = reinterpret_cast<const uint8_t*>(&w);
  // Word k is the first that differs (or the tail after the last whole word).
  for (size_t i = k * 8; i < std::min(len, k * 8 + 8); ++i) {
    if (p[i] != expect[i - k * 8]) return i;
  }
  return len;
}

double PassTimes::percentile_us(double q) const {
  if (kept_.empty()) return -1;
  std::vector<uint32_t> v = kept_;
  const size_t at = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(at), v.end());
  return v[at] / 1e3;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return -1;
  const size_t at = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(at), v.end());
  return v[at];
}

}  // namespace scale
