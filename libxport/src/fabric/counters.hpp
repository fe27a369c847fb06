// Hot-path counters of endpoints and CQs: relaxed atomics owned by one object, no locks,
// read as snapshots (telemetry aggregates and publishes them).
#pragma once

#include <atomic>
#include <cstdint>

namespace xport::fabric {

enum class OpKind : uint8_t { send = 0, recv, write, read, atomic, count };
inline constexpr int kOpKinds = static_cast<int>(OpKind::count);
const char* op_name(OpKind op);

struct Counter {
  std::atomic<uint64_t> v{0};
  void add(uint64_t n = 1) { v.fetch_add(n, std::memory_order_relaxed); }
  void max(uint64_t n) {
    uint64_t cur = v.load(std::memory_order_relaxed);
    while (n > cur && !v.compare_exchange_weak(cur, n, std::memory_order_relaxed)) {
    }
  }
  uint64_t get() const { return v.load(std::memory_order_relaxed); }
};

struct EndpointCounters {
  Counter ops[kOpKinds];
  Counter bytes[kOpKinds];
  Counter posted;              // operations handed to the provider
  Counter completed;           // their completions (successful or not)
  Counter error_completions;   // completions that carried an error
  Counter eagain_retries;      // posts retried after -FI_EAGAIN

  void count_post(OpKind op, uint64_t n) {
    ops[static_cast<int>(op)].add();
    bytes[static_cast<int>(op)].add(n);
    posted.add();
  }
};

struct CqCounters {
  Counter polls;              // fi_cq_read calls
  Counter empty_polls;        // ... that found nothing
  Counter completions;        // entries read
  Counter error_completions;  // entries read with fi_cq_readerr
  Counter max_batch;          // most entries handled in one progress pass
};

}  // namespace xport::fabric
