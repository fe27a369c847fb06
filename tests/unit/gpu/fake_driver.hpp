// A stand-in for the CUDA driver (gpu::Driver) so that CI, which has no GPU, runs every staging
// path: "GPU memory" is host memory it hands out and recognises; its copy queues hold copies back
// until the caller asks whether they are done (a few times) or synchronises, so code that
// reads a destination before its copy finished sees stale bytes and fails its test.
#pragma once

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>

#include "gpu/driver.hpp"

namespace xport::test {

class FakeGpuDriver final : public gpu::Driver {
 public:
  // `lag`: how many reached() queries a mark needs before its copies run.
  explicit FakeGpuDriver(int lag = 2) : lag_(lag) {}
  ~FakeGpuDriver() override {
    for (auto& [p, a] : allocs_) std::free(reinterpret_cast<void*>(p));
  }

  std::string describe() const override { return "fake"; }
  bool available() const override { return true; }
  Result<gpu::PointerInfo> classify(const void* p) override {
    std::lock_guard<std::mutex> g(mu_);
    gpu::PointerInfo info;
    auto q = reinterpret_cast<uintptr_t>(p);
    auto it = allocs_.upper_bound(q);
    if (it == allocs_.begin()) return info;
    --it;
    if (q >= it->first + it->second.size) return info;
    info.kind = it->second.managed ? gpu::MemoryKind::managed : gpu::MemoryKind::gpu;
    info.gpu = 0;
    info.alloc_base = it->first;
    info.alloc_size = it->second.size;
    return info;
  }
  Result<void*> alloc_pinned(size_t n) override {
    std::lock_guard<std::mutex> g(mu_);
    ++pinned_live_;
    void* p = std::malloc(n);
    if (p != nullptr) std::memset(p, scribble_, n);  // the real driver's pages are not zeroed
    return p;
  }
  // What alloc_pinned fills new page-locked memory with (0 by default).
  void scribble_pinned(uint8_t byte) { scribble_ = byte; }
  void free_pinned(void* p) override {
    std::lock_guard<std::mutex> g(mu_);
    --pinned_live_;
    std::free(p);
  }
  Result<void*> alloc_mapped(size_t n, void** gpu_address) override {
    std::lock_guard<std::mutex> g(mu_);
    ++pinned_live_;
    void* p = std::aligned_alloc(64, (n + 63) / 64 * 64);
    std::memset(p, 0, n);
    *gpu_address = p;  // one address space: "kernels" are CPU threads
    return p;
  }
  Result<std::unique_ptr<gpu::CopyQueue>> open_copy_queue(const gpu::PointerInfo&) override {
    std::lock_guard<std::mutex> g(mu_);
    ++queues_opened_;
    if (kernels_running_) ++queues_opened_while_kernels_run_;
    return std::unique_ptr<gpu::CopyQueue>(new FakeCopyQueue(*this));
  }
  Result<void*> alloc_gpu(size_t n, int) override { return alloc(n, false); }
  void free_gpu(void* p) override {
    std::lock_guard<std::mutex> g(mu_);
    allocs_.erase(reinterpret_cast<uintptr_t>(p));
    std::free(p);
  }
  void* alloc_managed(size_t n) { return alloc(n, true); }

  int pinned_live() const {
    std::lock_guard<std::mutex> g(mu_);
    return pinned_live_;
  }
  int queues_opened() const {
    std::lock_guard<std::mutex> g(mu_);
    return queues_opened_;
  }
  // From now on until told otherwise, "kernels run" on the GPU: a real driver's cuStreamCreate
  // can then wait for them to end (seen on H200s), and a kernel may wait for the copy it is
  // for: open_copy_queue counts what would have deadlocked.
  void kernels_running(bool running) {
    std::lock_guard<std::mutex> g(mu_);
    kernels_running_ = running;
  }
  int queues_opened_while_kernels_run() const {
    std::lock_guard<std::mutex> g(mu_);
    return queues_opened_while_kernels_run_;
  }
  // Copies to "GPU memory" fail from now on (a GPU that has gone bad).
  void fail_copies_to_gpu(bool fail) { fail_to_gpu_ = fail; }
  // A copy to host memory that would take bytes_to_host() past `bytes` fails as it runs (the
  // queue's reached() and synchronize() say so, as CUDA reports an asynchronous copy's error),
  // and so does everything enqueued after it on that queue.
  void fail_to_host_past(uint64_t bytes) { to_host_limit_ = bytes; }
  // Copies into [p, p+n) stay unfinished (reached() answers false for marks behind them, and
  // what is enqueued after them on the queue waits too) until release_held(): a copy that takes
  // long. synchronize() still runs them (closing never hangs).
  void hold_copies_into(const void* p, size_t n) {
    held_lo_ = reinterpret_cast<uintptr_t>(p);
    held_hi_ = held_lo_ + n;
  }
  void release_held() {
    held_hi_ = held_lo_.load();
    held_src_hi_ = held_src_lo_.load();
  }
  // The same for copies out of [p, p+n) (a GPU source's copy into host bytes that hangs).
  void hold_copies_from(const void* p, size_t n) {
    held_src_lo_ = reinterpret_cast<uintptr_t>(p);
    held_src_hi_ = held_src_lo_ + n;
  }
  uint64_t bytes_to_host() const { return to_host_; }
  uint64_t bytes_to_gpu() const { return to_gpu_; }

 private:
  uint8_t scribble_ = 0;
  struct Alloc {
    size_t size;
    bool managed;
  };
  void* alloc(size_t n, bool managed) {
    void* p = std::malloc(n);
    std::memset(p, 0xEE, n);  // never the bytes a test expects
    std::lock_guard<std::mutex> g(mu_);
    allocs_[reinterpret_cast<uintptr_t>(p)] = {n, managed};
    return p;
  }

  class FakeCopyQueue final : public gpu::CopyQueue {
   public:
    explicit FakeCopyQueue(FakeGpuDriver& d) : d_(d) {}
    // (thread-safe, as a CUDA stream is: several operations share a StagedMemory's lanes)
    Status copy_to_host(void* dst, const void* src, size_t n) override {
      std::lock_guard<std::mutex> g(mu_);
      ops_.push_back({dst, src, n, true});
      return Status::success();
    }
    Status copy_to_gpu(void* dst, const void* src, size_t n) override {
      if (d_.fail_to_gpu_) return Status(Code::fabric, "fake GPU: copy to GPU failed");
      std::lock_guard<std::mutex> g(mu_);
      ops_.push_back({dst, src, n, false});
      return Status::success();
    }
    Result<uint64_t> mark() override {
      std::lock_guard<std::mutex> g(mu_);
      ops_.push_back({nullptr, nullptr, 0, false, ++marks_});
      return marks_;
    }
    Result<bool> reached(uint64_t m) override {
      std::lock_guard<std::mutex> g(mu_);
      if (failed_) return failure();
      if (m <= done_) return true;
      if (++queries_ < d_.lag_) return false;
      queries_ = 0;
      run_through(m, true);
      if (failed_) return failure();
      return done_ >= m;
    }
    Status synchronize() override {
      std::lock_guard<std::mutex> g(mu_);
      run_through(UINT64_MAX, false);
      return failed_ ? failure() : Status::success();
    }

   private:
    struct Op {
      void* dst;
      const void* src;
      size_t n;
      bool to_host;
      uint64_t mark = 0;
    };
    bool held(const Op& op) const {
      const auto lo = reinterpret_cast<uintptr_t>(op.dst);
      const auto src = reinterpret_cast<uintptr_t>(op.src);
      return op.mark == 0 && ((lo < d_.held_hi_ && lo + op.n > d_.held_lo_) ||
                              (src < d_.held_src_hi_ && src + op.n > d_.held_src_lo_));
    }
    void run_through(uint64_t m, bool hold) {
      while (!ops_.empty()) {
        Op op = ops_.front();
        if (op.mark != 0 && op.mark > m) break;
        if (hold && held(op)) break;
        ops_.pop_front();
        if (op.mark != 0) {
          done_ = op.mark;
          continue;
        }
        if (op.to_host && d_.to_host_ + op.n > d_.to_host_limit_) {
          failed_ = true;  // (a failed queue runs nothing more)
          ops_.clear();
          return;
        }
        std::memcpy(op.dst, op.src, op.n);
        (op.to_host ? d_.to_host_ : d_.to_gpu_) += op.n;
      }
      if (m == UINT64_MAX) done_ = marks_;
    }
    static Status failure() { return Status(Code::fabric, "fake GPU: copy to host failed"); }
    std::mutex mu_;
    bool failed_ = false;
    FakeGpuDriver& d_;
    std::deque<Op> ops_;
    uint64_t marks_ = 0;
    uint64_t done_ = 0;
    int queries_ = 0;
  };

  const int lag_;
  mutable std::mutex mu_;
  std::map<uintptr_t, Alloc> allocs_;
  int pinned_live_ = 0;
  int queues_opened_ = 0;
  bool kernels_running_ = false;
  int queues_opened_while_kernels_run_ = 0;
  std::atomic<uint64_t> to_host_{0};
  std::atomic<uint64_t> to_gpu_{0};
  std::atomic<bool> fail_to_gpu_{false};
  std::atomic<uint64_t> to_host_limit_{UINT64_MAX};
  std::atomic<uintptr_t> held_lo_{0};
  std::atomic<uintptr_t> held_hi_{0};
  std::atomic<uintptr_t> held_src_lo_{0};
  std::atomic<uintptr_t> held_src_hi_{0};
};

// Installs a FakeGpuDriver for the life of a test.
class FakeGpuScope {
 public:
  explicit FakeGpuScope(int lag = 2) : driver_(lag) { gpu::set_driver_for_tests(&driver_); }
  ~FakeGpuScope() { gpu::set_driver_for_tests(nullptr); }
  FakeGpuDriver& operator*() { return driver_; }
  FakeGpuDriver* operator->() { return &driver_; }

 private:
  FakeGpuDriver driver_;
};

}  // namespace xport::test
