// The CUDA calls libxport makes, behind one interface: the CUDA driver loaded at run time
// (libcuda.so.1, so that libxport.a links no CUDA library and runs where there is none), or a
// test's stand-in (tests/unit/gpu/fake_driver.hpp) that lets CI exercise every staging path
// without a GPU. Knows nothing of libfabric.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "xport/status.hpp"

namespace xport::gpu {

enum class MemoryKind : uint8_t {
  host,     // ordinary or CUDA-pinned host memory: registered as it is
  gpu,      // cudaMalloc / cuMemAlloc / cuMemCreate (VMM) memory of one GPU ("device memory")
  managed,  // cudaMallocManaged: refused (it migrates under the NIC's feet)
};

struct PointerInfo {
  MemoryKind kind = MemoryKind::host;
  int gpu = -1;                 // CUDA device ordinal (GPU and managed memory)
  uintptr_t alloc_base = 0;     // the allocation [alloc_base, +alloc_size) holding the pointer
  size_t alloc_size = 0;
  void* context = nullptr;      // the CUcontext it was allocated in, nullptr for VMM memory
};

// Copies on one non-blocking CUDA stream (never the legacy default stream: a copy must not wait
// for, or hold up, a kernel that spins on a signal). Copies run in the order enqueued. (Named
// apart from a Window's streams, which order one-sided operations to a peer.)
// Thread-safe: several operations share one (a StagedMemory's lanes), each with marks of its own;
// a mark covers everything enqueued before it, whoever enqueued it.
class CopyQueue {
 public:
  virtual ~CopyQueue() = default;
  virtual Status copy_to_host(void* dst, const void* gpu_src, size_t n) = 0;
  virtual Status copy_to_gpu(void* gpu_dst, const void* src, size_t n) = 0;
  // A mark after everything enqueued so far; marks increase.
  virtual Result<uint64_t> mark() = 0;
  // Whether everything enqueued before `mark` is done. Never blocks.
  virtual Result<bool> reached(uint64_t mark) = 0;
  // Blocks until everything enqueued is done.
  virtual Status synchronize() = 0;
};

class Driver {
 public:
  virtual ~Driver() = default;
  // "cuda 13.0", "none (libcuda.so.1: not found)", "fake": what xport-probe and logs print.
  virtual std::string describe() const = 0;
  // Whether GPU memory can be used at all (a driver and at least one GPU).
  virtual bool available() const = 0;
  virtual Result<PointerInfo> classify(const void* p) = 0;
  // Page-locked host memory the GPU copies to and from at full speed (staging shadows).
  virtual Result<void*> alloc_pinned(size_t n) = 0;
  virtual void free_pinned(void* p) = 0;
  // Page-locked host memory mapped into every GPU's address space: the host address, and the
  // address kernels use in *gpu_address (the proxy ring).
  virtual Result<void*> alloc_mapped(size_t n, void** gpu_address) = 0;
  // A copy queue (a CUDA stream) on the GPU that holds `info`'s memory (in its context). Not
  // while kernels may run on that GPU: creating a CUDA stream can wait for a running kernel to
  // end (seen on H200s), and a kernel may spin until a copy it waits for is done.
  virtual Result<std::unique_ptr<CopyQueue>> open_copy_queue(const PointerInfo& info) = 0;
  // GPU memory for tools and tests (xport-bench --memory cuda, the GPU tests).
  virtual Result<void*> alloc_gpu(size_t n, int gpu) = 0;
  virtual void free_gpu(void* p) = 0;
};

// The process's driver: CUDA when libcuda.so.1 loads and initialises, else one that finds no
// GPU (every pointer is host memory). Loaded once, on first use.
Driver& driver();
// Tests: use `d` instead (nullptr: back to the process's own). Not while other threads use it.
void set_driver_for_tests(Driver* d);

}  // namespace xport::gpu
