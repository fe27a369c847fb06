// The copy queues every host shadow of one GPU's memory shares (gpu/staged_memory.hpp): a few
// lanes that copies take in turn, and one for signal words' early reads. Opened with the first
// shadow of that GPU and CUDA context (a registration), kept while a shadow there lives: none
// is opened while kernels may run (creating a CUDA stream can wait for a running kernel to end,
// and the kernel may wait for the copy), and their number does not grow with registrations.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "gpu/driver.hpp"

namespace xport::gpu {

class CopyLanes {
 public:
  // Copies on different lanes overlap (a GPU has a few copy engines a way); more in flight
  // share them, in the order enqueued.
  static constexpr size_t kLanes = 4;
  // The lanes of `info`'s GPU and context on `driver`: those its live shadows share, or opened
  // now (Code::resource when the GPU cannot give them).
  static Result<std::shared_ptr<CopyLanes>> of(Driver& driver, const PointerInfo& info);
  CopyLanes(const CopyLanes&) = delete;
  CopyLanes& operator=(const CopyLanes&) = delete;
  ~CopyLanes();

  // The lane the next copy goes on, in turn.
  std::shared_ptr<CopyQueue> next();
  // Signal words' early reads (apart from the lanes: they overlap the copies they wait behind).
  CopyQueue& ahead() { return *ahead_; }
  // A copy on `q` failed (a failed CUDA stream runs nothing more): a new queue takes its place
  // for later copies (opened now: only after a failure). Copies on `q` keep it until they go.
  void failed(const std::shared_ptr<CopyQueue>& q);

 private:
  CopyLanes(Driver& driver, const PointerInfo& info) : driver_(driver), info_(info) {}
  Driver& driver_;
  PointerInfo info_;
  std::mutex mu_;  // guards lanes_ and next_: no copy runs or waits under it
  std::vector<std::shared_ptr<CopyQueue>> lanes_;
  size_t next_ = 0;
  std::unique_ptr<CopyQueue> ahead_;
};

}  // namespace xport::gpu
