// Hot-path counters of endpoints, CQs and rails: written by one thread at a time (under the
// engine's lock, or by the only thread of a thread_safe = false device), read by any thread as
// relaxed snapshots (telemetry aggregates and publishes them). A single writer needs no atomic
// read-modify-write: a relaxed load and store keep readers tear-free at the cost of nothing.
#pragma once

#include <atomic>
#include <cstdint>

namespace xport::fabric {

enum class OpKind : uint8_t { send = 0, recv, write, read, atomic, count };
inline constexpr int kOpKinds = static_cast<int>(OpKind::count);
const char* op_name(OpKind op);

struct Counter {
  std::atomic<uint64_t> v{0};
  void add(uint64_t n = 1) {
    v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  void max(uint64_t n) {
    if (n > v.load(std::memory_order_relaxed)) v.store(n, std::memory_order_relaxed);
  }
  void set(uint64_t n) { v.store(n, std::memory_order_relaxed); }
  uint64_t get() const { return v.load(std::memory_order_relaxed); }
};

struct EndpointCounters {
  Counter ops[kOpKinds];
  Counter bytes[kOpKinds];
  Counter posted;              // operations handed to the provider
  Counter completed;           // their completions (successful or not)
  Counter error_completions;   // completions that carried an error
  Counter eagain;              // posts the provider refused with -FI_EAGAIN (queued, retried)

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
  Counter hard_errors;        // fi_cq_read failures other than -FI_EAGAIN/-FI_EAVAIL
};

}  // namespace xport::fabric
