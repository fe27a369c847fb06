// xport-bench's CUDA side (gpu_calls.hpp): GPU buffers and copies through the CUDA runtime, and
// the kernels of --initiator device, which issue their operations with xport/device.cuh. One
// kernel at a time per process, on a non-blocking stream of its own.
#include <cuda_runtime.h>

#include "gpu_calls.hpp"
#include "xport/device.cuh"

namespace bench::gpu {
namespace {

namespace dev = xport::device;
using xport::gpu_ring::SignalOp;

struct Out {
  int status;
  unsigned long long phase_ns;
};

cudaStream_t g_stream = nullptr;
int g_stream_gpu = -1;  // the GPU g_stream belongs to
Out* g_out = nullptr;
uint64_t* g_samples = nullptr;
size_t g_samples_cap = 0;

std::string failed(const char* call, cudaError_t e) {
  return std::string(call) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}

__device__ inline uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Warp and block scope: every thread calls, one issues (device.cuh); results are the same in all.
__device__ inline int64_t put_in(const dev::Ring& r, Scope s, uint64_t off, uint64_t size,
                                 uint64_t dl) {
  if (s == Scope::warp) return dev::put_warp(r, 0, 0, off, 0, off, size, dl);
  if (s == Scope::block) return dev::put_block(r, 0, 0, off, 0, off, size, dl);
  return dev::put(r, 0, 0, off, 0, off, size, dl);
}
__device__ inline int quiet_in(const dev::Ring& r, Scope s, uint64_t dl) {
  if (s == Scope::warp) return dev::quiet_warp(r, 0, dl);
  if (s == Scope::block) return dev::quiet_block(r, 0, dl);
  return dev::quiet(r, 0, dl);
}

__global__ void puts(dev::Ring r, PutRun run, uint64_t* samples, Out* out) {
  const bool lead = threadIdx.x == 0;
  const uint64_t dl = run.deadline_cycles;
  int e = 0;
  for (int i = 0; i < run.warmup + run.latency && e == 0; ++i) {
    const uint64_t t0 = now_ns();
    const int64_t t = put_in(r, run.scope, 0, run.size, dl);
    e = t < 0 ? static_cast<int>(t) : quiet_in(r, run.scope, dl);
    if (lead && i >= run.warmup) samples[i - run.warmup] = now_ns() - t0;
  }
  const uint64_t start = now_ns();
  for (int done = 0; done < run.iterations && e == 0;) {
    const int batch = min(run.depth, run.iterations - done);
    for (int k = 0; k < batch && e == 0; ++k) {
      const int64_t t = put_in(r, run.scope, static_cast<uint64_t>(k % run.slots) * run.size,
                               run.size, dl);
      if (t < 0) e = static_cast<int>(t);
    }
    if (e == 0) e = quiet_in(r, run.scope, dl);
    done += batch;
  }
  if (lead) {
    out->status = e;
    out->phase_ns = now_ns() - start;
  }
}

__global__ void round_trips(dev::Ring r, RoundTripRun run, uint64_t* samples, Out* out) {
  const uint64_t dl = run.deadline_cycles;
  // The responder echoes what arrived in its ping area into the initiator's pong area.
  const uint64_t to = run.initiator ? run.ping : run.pong;
  int e = 0;
  uint64_t start = now_ns();
  for (int i = 1; i <= run.rounds && e == 0; ++i) {
    if (i == run.warmup + 1) start = now_ns();
    const uint64_t t0 = now_ns();
    if (!run.initiator) e = dev::wait_signal(r, run.word_ptr, run.base + i, dl);
    if (e != 0) break;
    const int64_t t = dev::put_signal(r, 0, 0, run.ping, 0, to, run.size, 0, run.word, 1,
                                      SignalOp::add, dl);
    if (t < 0) e = static_cast<int>(t);
    if (run.initiator && e == 0) e = dev::wait_signal(r, run.word_ptr, run.base + i, dl);
    if (run.initiator && e == 0 && i > run.warmup) samples[i - 1 - run.warmup] = now_ns() - t0;
  }
  const uint64_t end = now_ns();
  if (e == 0) e = dev::quiet(r, 0, dl);  // everything this kernel issued is delivered
  out->status = e;
  out->phase_ns = end - start;
}

std::string prepare(int samples) {
  const size_t want = static_cast<size_t>(samples > 0 ? samples : 1);
  if (want > g_samples_cap) {
    if (g_samples != nullptr) cudaFree(g_samples);
    g_samples = nullptr;
    g_samples_cap = 0;
    if (cudaError_t e = cudaMalloc(&g_samples, want * sizeof(uint64_t)); e != cudaSuccess) {
      return failed("cudaMalloc (samples)", e);
    }
    g_samples_cap = want;
  }
  if (g_out == nullptr) {
    if (cudaError_t e = cudaMalloc(&g_out, sizeof(Out)); e != cudaSuccess) {
      return failed("cudaMalloc", e);
    }
  }
  if (cudaError_t e = cudaMemsetAsync(g_out, 0xff, sizeof(Out), g_stream); e != cudaSuccess) {
    return failed("cudaMemsetAsync", e);
  }
  return "";
}

}  // namespace

bool built() { return true; }

std::string select(int gpu) {
  int n = 0;
  if (cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess) {
    return "no usable GPU (no GPU or no NVIDIA driver on this host): " +
           failed("cudaGetDeviceCount", e);
  }
  if (n == 0) return "no usable GPU: the CUDA runtime sees none";
  if (gpu < 0 || gpu >= n) {
    return "GPU " + std::to_string(gpu) + " does not exist (this host has " + std::to_string(n) +
           ": 0.." + std::to_string(n - 1) + ")";
  }
  if (cudaError_t e = cudaSetDevice(gpu); e != cudaSuccess) return failed("cudaSetDevice", e);
  // The stream follows the GPU selected last (local mode checks the peer's GPU here first: a
  // stream of that GPU made every launch on this one fail with cudaErrorInvalidValue).
  if (g_stream != nullptr && g_stream_gpu != gpu) {
    cudaStreamDestroy(g_stream);
    g_stream = nullptr;
  }
  if (g_stream == nullptr) {
    if (cudaError_t e = cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking);
        e != cudaSuccess) {
      return failed("cudaStreamCreateWithFlags", e);
    }
    g_stream_gpu = gpu;
  }
  return "";
}

std::string alloc(size_t bytes, void** out) {
  *out = nullptr;
  if (cudaError_t e = cudaMalloc(out, bytes); e != cudaSuccess) {
    return failed("cudaMalloc", e) + " of " + std::to_string(bytes) + " bytes";
  }
  if (cudaError_t e = cudaMemset(*out, 0, bytes); e != cudaSuccess) {
    cudaFree(*out);
    *out = nullptr;
    return failed("cudaMemset", e);
  }
  return "";
}

void release(void* p) {
  if (p != nullptr) cudaFree(p);
}

std::string copy_to_gpu(void* dst, const void* src, size_t n) {
  // A cudaMemcpy from pageable memory returns once the bytes are staged for DMA, before they
  // are in GPU memory; libxport copies a staged source into its shadow on a non-blocking stream
  // of its own, ordered after nothing of ours, so a put issued next read the buffer's old tail
  // (--check failed at 1 MiB from GPU memory). The copy is finished before this returns, as
  // docs/semantics.md asks of a source's writer.
  cudaError_t e = cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaStreamSynchronize(cudaStreamLegacy);
  return e == cudaSuccess ? "" : failed("cudaMemcpy to the GPU", e);
}

std::string copy_from_gpu(void* dst, const void* src, size_t n) {
  cudaError_t e = cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost);
  return e == cudaSuccess ? "" : failed("cudaMemcpy from the GPU", e);
}

std::string launch_puts(const xport::gpu_ring::DeviceRing& ring, const PutRun& run) {
  if (std::string e = prepare(run.latency); !e.empty()) return e;
  const unsigned threads = run.scope == Scope::block ? 128 : run.scope == Scope::warp ? 32 : 1;
  puts<<<1, threads, 0, g_stream>>>(ring, run, g_samples, g_out);
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? "" : failed("launching the put kernel", e);
}

std::string launch_round_trips(const xport::gpu_ring::DeviceRing& ring, const RoundTripRun& run) {
  if (std::string e = prepare(run.rounds - run.warmup); !e.empty()) return e;
  round_trips<<<1, 1, 0, g_stream>>>(ring, run, g_samples, g_out);
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? "" : failed("launching the round-trip kernel", e);
}

int running() {
  cudaError_t e = cudaStreamQuery(g_stream);
  return e == cudaErrorNotReady ? 1 : e == cudaSuccess ? 0 : -1;
}

std::string finish(int samples, KernelResult* out) {
  if (cudaError_t e = cudaStreamSynchronize(g_stream); e != cudaSuccess) {
    return failed("the kernel", e);
  }
  Out o{};
  if (cudaError_t e = cudaMemcpy(&o, g_out, sizeof(o), cudaMemcpyDeviceToHost); e != cudaSuccess) {
    return failed("cudaMemcpy (kernel result)", e);
  }
  out->status = o.status;
  out->phase_ns = o.phase_ns;
  out->samples_ns.assign(static_cast<size_t>(samples > 0 ? samples : 0), 0);
  if (samples > 0) {
    if (cudaError_t e = cudaMemcpy(out->samples_ns.data(), g_samples,
                                   out->samples_ns.size() * sizeof(uint64_t),
                                   cudaMemcpyDeviceToHost);
        e != cudaSuccess) {
      return failed("cudaMemcpy (samples)", e);
    }
  }
  return "";
}

}  // namespace bench::gpu
