// What both sides of xport-scale share: the line protocol's small parsers, the data patterns
// every byte is checked against, the process's resident memory, and progress-pass timing.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "xport/status.hpp"

namespace scale {

inline uint64_t now_ns() {
  // steady_clock is CLOCK_MONOTONIC: one clock for every process of the host, so an
  // initiator's issue time and the target's arrival time can be subtracted.
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// The code's name as the public header spells it ("resource", "timeout", "peer_lost"): one
// token for the line protocol and the JSON's error_code.
std::string code_name(xport::Code code);

// VmRSS of this process from /proc/self/status, in bytes; 0 if unreadable.
uint64_t resident_bytes();

// Line protocol: "WORD key=value ... error=free text to the end".
std::vector<std::string> words(const std::string& line);
std::string field(const std::vector<std::string>& w, const std::string& key);
uint64_t field_u64(const std::vector<std::string>& w, const std::string& key);
// The text after " error=" (to the end of the line), "" when absent.
std::string error_of(const std::string& line);
// A status or message made fit for one line.
std::string one_line(std::string text);
// An error's words with every number as '#': errors that differ only in their numbers (ms
// waited, a device id) are one kind.
std::string error_shape(const std::string& text);
// Indices as "3,17,40" and back ("-": none).
std::string index_list(const std::vector<size_t>& v);
std::vector<size_t> parse_index_list(const std::string& s);

// The bytes initiator `peer` sends in round `round` (one-sided slot, or a two-sided message of
// `size` bytes): they differ per peer, round and size, so stale or misplaced data fails.
void fill_pattern(uint8_t* p, size_t len, uint64_t peer, uint64_t round, uint64_t size);
// The first offset where [p, p+len) differs from the pattern, or len when it matches.
size_t check_pattern(const uint8_t* p, size_t len, uint64_t peer, uint64_t round, uint64_t size);

// Durations of Device::progress() calls: count, sum and max of all, percentiles of the first
// kKept (storage taken up front, so timing allocates nothing).
class PassTimes {
 public:
  static constexpr size_t kKept = 1 << 18;
  PassTimes() { kept_.reserve(kKept); }
  void add(uint64_t ns) {
    ++count_;
    sum_ += ns;
    if (ns > max_) max_ = ns;
    if (kept_.size() < kKept)
      kept_.push_back(static_cast<uint32_t>(ns > UINT32_MAX ? UINT32_MAX : ns));
  }
  uint64_t count() const { return count_; }
  double mean_us() const { return count_ ? static_cast<double>(sum_) / count_ / 1e3 : -1; }
  double max_us() const { return count_ ? static_cast<double>(max_) / 1e3 : -1; }
  double percentile_us(double q) const;  // -1 when empty

 private:
  uint64_t count_ = 0, sum_ = 0, max_ = 0;
  std::vector<uint32_t> kept_;
};

// Percentile of `v` (unsorted copy taken), -1 when empty.
double percentile(std::vector<double> v, double q);

}  // namespace scale
