// What xport-bench asks of the CUDA runtime (--memory cuda, --initiator device): GPU buffers, the
// copies --check makes, and the kernels that issue puts and put_signals through a GpuProxy's
// ring. gpu_calls.cu implements it where nvcc was found at build time; gpu_absent.cc elsewhere,
// every call failing with the reason. Plain types only: nvcc compiles one side of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "xport/gpu_ring.hpp"

namespace bench::gpu {

// Whether this xport-bench was built with the CUDA runtime and its kernels.
bool built();

// Each call returns "" on success, else what failed (the CUDA call and its error).
// Makes `gpu` this thread's device; fails naming why when there is no GPU (or no driver), or
// `gpu` is not one of them.
std::string select(int gpu);
// Zeroed GPU memory on the selected device.
std::string alloc(size_t bytes, void** out);
void release(void* p);
std::string copy_to_gpu(void* dst, const void* src, size_t n);
std::string copy_from_gpu(void* dst, const void* src, size_t n);

// The kernels' deadlines are clock64 cycles; about this many make a second (H100, H200 boost
// clocks are near 2 GHz: a slower clock only lengthens the wait).
inline constexpr uint64_t kCyclesPerSecond = 2'000'000'000ull;

enum class Scope : int { thread = 0, warp = 1, block = 2 };

// Device-initiated puts (the proxy's window 0, region 0 -> remote 0): `latency` rounds of one
// put + quiet (after `warmup` unrecorded ones), then `iterations` puts in batches of `depth`,
// each batch followed by a quiet; put k of a batch goes from and to slot k % slots.
struct PutRun {
  uint64_t size = 0;
  int slots = 1, depth = 1, warmup = 0, latency = 0, iterations = 0;
  Scope scope = Scope::thread;
  uint64_t deadline_cycles = 0;
};
// put_signal round trips through window 0 and region/remote 0: the initiator put_signals `size`
// bytes from `ping` to the peer's `ping` and adds 1 to the peer's word at `word`, then waits for
// its own word (GPU memory at `word_ptr`) to reach base + round; the responder waits first, then
// puts its `ping` bytes back to the peer's `pong` with the same signal.
struct RoundTripRun {
  uint64_t size = 0, ping = 0, pong = 0, word = 0;
  const uint64_t* word_ptr = nullptr;
  uint64_t base = 0;
  int rounds = 0, warmup = 0;  // rounds include the warm-up; samples cover the rest
  bool initiator = true;
  uint64_t deadline_cycles = 0;
};
// What a kernel left: 0 or a device.cuh error (-1 aborted, -2 timed out, -3 a bad scope), the
// recorded per-round nanoseconds, and the rate phase's (puts) or the whole run's nanoseconds.
struct KernelResult {
  int status = 0;
  std::vector<uint64_t> samples_ns;
  uint64_t phase_ns = 0;
};

std::string launch_puts(const xport::gpu_ring::DeviceRing& ring, const PutRun& run);
std::string launch_round_trips(const xport::gpu_ring::DeviceRing& ring, const RoundTripRun& run);
// 1 while the last launched kernel runs, 0 once it ended, -1 on a CUDA error.
int running();
// After running() said 0: the kernel's result (`samples` of them).
std::string finish(int samples, KernelResult* out);

}  // namespace bench::gpu
