// Kernels of the proxy ring test (ring_gpu_test.cc): producers on a real GPU following
// xport/device.cuh, against the host's RingConsumer. Built by nvcc (CUDA runtime, static).
#include <cuda_runtime.h>

#include "xport/device.cuh"

namespace {

__global__ void producers(xport::device::Ring r, int per_thread, uint64_t deadline_cycles,
                          int* status) {
  const int me = blockIdx.x * blockDim.x + threadIdx.x;
  int64_t last = 0;
  for (int i = 0; i < per_thread && last >= 0; ++i) {
    last = xport::device::put(r, static_cast<uint16_t>(me), 1, static_cast<uint64_t>(i), 2,
                              static_cast<uint64_t>(me) * per_thread + i, 8, deadline_cycles);
  }
  status[me] = last < 0 ? static_cast<int>(last) : xport::device::wait_local(r, last, deadline_cycles);
}

__global__ void waiter(xport::device::Ring r, const uint64_t* word, uint64_t value,
                       uint64_t deadline_cycles, int* status) {
  *status = xport::device::wait_signal(r, word, value, deadline_cycles);
}

// Block b spins until words[b] >= value (as a GIN barrier's CTAs wait on their signals):
// status[b] 0, or -1 once deadline_cycles pass.
__global__ void words_waiter(const uint64_t* words, uint64_t value, uint64_t deadline_cycles,
                             int* status) {
  const volatile uint64_t* w = words + blockIdx.x;
  const long long start = clock64();
  int st = 0;
  while (*w < value) {
    if (static_cast<uint64_t>(clock64() - start) > deadline_cycles) {
      st = -1;
      break;
    }
  }
  status[blockIdx.x] = st;
}

__global__ void warp_and_block(xport::device::Ring r, uint64_t deadline_cycles, int* status) {
  namespace d = xport::device;
  using d::Scope;
  using xport::gpu_ring::SignalOp;
  int64_t a = d::put_warp(r, 7, 1, 0, 2, blockIdx.x, 8, deadline_cycles);
  int64_t b = d::put_block(r, 8, 1, 0, 2, blockIdx.x, 8, deadline_cycles);
  // Every other call at both scopes: windows 10-17 count them.
  int64_t c[8] = {
      d::put_signal<Scope::warp>(r, 10, 1, 0, 2, 0, 8, 3, 0, 1, SignalOp::add, deadline_cycles),
      d::put_signal<Scope::block>(r, 11, 1, 0, 2, 0, 8, 3, 0, 1, SignalOp::add, deadline_cycles),
      d::signal<Scope::warp>(r, 12, 3, 0, 1, SignalOp::set, deadline_cycles),
      d::signal<Scope::block>(r, 13, 3, 0, 1, SignalOp::set, deadline_cycles),
      d::put_signal_counter<Scope::warp>(r, 14, 1, 0, 2, 0, 8, 3, 0, 1, SignalOp::add, 4, 0,
                                         deadline_cycles),
      d::put_signal_counter<Scope::block>(r, 15, 1, 0, 2, 0, 8, 3, 0, 1, SignalOp::add, 4, 0,
                                          deadline_cycles),
      d::signal_counter<Scope::warp>(r, 16, 3, 0, 1, SignalOp::add, 4, 0, deadline_cycles),
      d::signal_counter<Scope::block>(r, 17, 3, 0, 1, SignalOp::add, 4, 0, deadline_cycles)};
  int w = d::wait_local<Scope::warp>(r, c[0], deadline_cycles);
  int q = d::quiet_block(r, 9, deadline_cycles);
  bool bad = a < 0 || b < 0 || w != 0;
  for (int64_t t : c) bad = bad || t < 0;
  if (threadIdx.x == 0) status[blockIdx.x] = bad ? -3 : q;
}

// Each thread: a put_signal of its slice (region 0 -> remote 0, signal word 1 of remote 1),
// waits for it, then the block quiets.
__global__ void proxy_put_signals(xport::device::Ring r, uint64_t slice, uint64_t deadline_cycles,
                                  int* status) {
  const uint64_t me = blockIdx.x * blockDim.x + threadIdx.x;
  int64_t t = xport::device::put_signal(r, 0, 0, me * slice, 0, me * slice, slice, 1, 8, 1,
                                        xport::gpu_ring::SignalOp::add, deadline_cycles);
  int e = xport::device::wait_local(r, t, deadline_cycles);
  int q = xport::device::quiet_block(r, 0, deadline_cycles);
  if (e != 0) atomicMin(&status[blockIdx.x], e);
  if (threadIdx.x == 0 && q != 0) atomicMin(&status[blockIdx.x], q);
}

// One thread: `count` puts of `size` bytes, then quiet (device-initiated put bandwidth).
__global__ void proxy_put_stream(xport::device::Ring r, uint64_t size, int count,
                                 uint64_t deadline_cycles, int* status) {
  int e = 0;
  for (int i = 0; i < count && e == 0; ++i) {
    int64_t t = xport::device::put(r, 0, 0, 0, 0, 0, size, deadline_cycles);
    if (t < 0) e = static_cast<int>(t);
  }
  if (e == 0) e = xport::device::quiet(r, 0, deadline_cycles);
  *status = e;
}

// Ping-pong between two rings: each round, put_signal 8 bytes to the other side (signal +1 at
// offset 8 of its remote 1), then wait for the other side's signal on `mine` (GPU memory).
__global__ void ping_pong(xport::device::Ring r, const uint64_t* mine, int rounds, bool first,
                          uint64_t deadline_cycles, int* status, unsigned long long* cycles) {
  int e = 0;
  const uint64_t start = clock64();
  for (int i = 1; i <= rounds && e == 0; ++i) {
    if (!first) e = xport::device::wait_signal(r, mine, static_cast<uint64_t>(i), deadline_cycles);
    if (e != 0) break;
    int64_t t = xport::device::put_signal(r, 0, 0, 0, 0, 0, 8, 1, 8, 1,
                                          xport::gpu_ring::SignalOp::add, deadline_cycles);
    if (t < 0) e = static_cast<int>(t);
    if (first && e == 0) e = xport::device::wait_signal(r, mine, static_cast<uint64_t>(i), deadline_cycles);
  }
  *status = e;
  *cycles = clock64() - start;
}

cudaStream_t g_stream;
cudaStream_t g_stream2;
unsigned long long* g_cycles;
int* g_status;

}  // namespace

extern "C" {

int xtest_ring_alloc(uint32_t bytes, void** host, void** device, void** head) {
  if (cudaHostAlloc(host, bytes, cudaHostAllocMapped) != cudaSuccess) return 1;
  if (cudaHostGetDevicePointer(device, *host, 0) != cudaSuccess) return 2;
  if (cudaMalloc(head, sizeof(unsigned long long)) != cudaSuccess) return 3;
  if (cudaMemset(*head, 0, sizeof(unsigned long long)) != cudaSuccess) return 4;
  if (cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking) != cudaSuccess) return 5;
  if (cudaMalloc(&g_status, sizeof(int) * 4096) != cudaSuccess) return 6;
  if (cudaStreamCreateWithFlags(&g_stream2, cudaStreamNonBlocking) != cudaSuccess) return 7;
  if (cudaMalloc(&g_cycles, sizeof(unsigned long long) * 2) != cudaSuccess) return 8;
  return 0;
}

void xtest_ring_free(void* host, void* head) {
  cudaStreamSynchronize(g_stream);
  cudaFreeHost(host);
  cudaFree(head);
  cudaStreamSynchronize(g_stream2);
  cudaFree(g_status);
  cudaFree(g_cycles);
  cudaStreamDestroy(g_stream);
  cudaStreamDestroy(g_stream2);
}

static xport::device::Ring ring_of(void* device, void* head, uint32_t capacity) {
  auto* h = static_cast<xport::gpu_ring::Header*>(device);
  return xport::device::Ring{h, reinterpret_cast<xport::gpu_ring::Descriptor*>(h + 1),
                             static_cast<unsigned long long*>(head), capacity};
}

int xtest_launch_producers(void* device, void* head, uint32_t capacity, int blocks, int threads,
                           int per_thread, uint64_t deadline_cycles) {
  producers<<<blocks, threads, 0, g_stream>>>(ring_of(device, head, capacity), per_thread,
                                              deadline_cycles, g_status);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

int xtest_launch_waiter(void* device, void* head, uint32_t capacity, void* word_host,
                        uint64_t value, uint64_t deadline_cycles) {
  void* word = nullptr;
  if (cudaHostGetDevicePointer(&word, word_host, 0) != cudaSuccess) return 2;
  waiter<<<1, 1, 0, g_stream>>>(ring_of(device, head, capacity), static_cast<uint64_t*>(word),
                                value, deadline_cycles, g_status);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

int xtest_launch_scopes(void* device, void* head, uint32_t capacity, int blocks,
                        uint64_t deadline_cycles) {
  warp_and_block<<<blocks, 64, 0, g_stream>>>(ring_of(device, head, capacity), deadline_cycles,
                                              g_status);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

int xtest_launch_proxy_put_signals(xport::gpu_ring::DeviceRing r, int blocks, int threads,
                                   uint64_t slice, uint64_t deadline_cycles) {
  cudaMemset(g_status, 0, sizeof(int) * blocks);
  proxy_put_signals<<<blocks, threads, 0, g_stream>>>(r, slice, deadline_cycles, g_status);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

int xtest_launch_proxy_put_stream(xport::gpu_ring::DeviceRing r, uint64_t size, int count,
                                  uint64_t deadline_cycles) {
  proxy_put_stream<<<1, 1, 0, g_stream>>>(r, size, count, deadline_cycles, g_status);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

int xtest_launch_waiter_device_word(xport::gpu_ring::DeviceRing r, const uint64_t* word,
                                    uint64_t value, uint64_t deadline_cycles) {
  waiter<<<1, 1, 0, g_stream>>>(r, word, value, deadline_cycles, g_status);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

int xtest_launch_words_waiter(const uint64_t* words, int n, uint64_t value,
                              uint64_t deadline_cycles) {
  words_waiter<<<n, 1, 0, g_stream>>>(words, value, deadline_cycles, g_status);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

// Two kernels at once (two streams): the pinger on ring a, the ponger on ring b.
int xtest_launch_ping_pong(xport::gpu_ring::DeviceRing a, const uint64_t* a_word,
                           xport::gpu_ring::DeviceRing b, const uint64_t* b_word, int rounds,
                           uint64_t deadline_cycles) {
  ping_pong<<<1, 1, 0, g_stream2>>>(b, b_word, rounds, false, deadline_cycles, g_status + 1,
                                    g_cycles + 1);
  ping_pong<<<1, 1, 0, g_stream>>>(a, a_word, rounds, true, deadline_cycles, g_status, g_cycles);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

// After the ping-pong: both statuses, and the pinger's clock64 cycles.
int xtest_finish_ping_pong(int* statuses, unsigned long long* cycles) {
  if (cudaStreamSynchronize(g_stream) != cudaSuccess) return 1;
  if (cudaStreamSynchronize(g_stream2) != cudaSuccess) return 1;
  if (cudaMemcpy(statuses, g_status, sizeof(int) * 2, cudaMemcpyDeviceToHost) != cudaSuccess) return 2;
  return cudaMemcpy(cycles, g_cycles, sizeof(unsigned long long), cudaMemcpyDeviceToHost) == cudaSuccess ? 0 : 2;
}

// Waits for the kernel and copies the first n statuses out; 0 or the CUDA error.
int xtest_finish(int* statuses, int n) {
  if (cudaStreamSynchronize(g_stream) != cudaSuccess) return 1;
  return cudaMemcpy(statuses, g_status, sizeof(int) * n, cudaMemcpyDeviceToHost) == cudaSuccess ? 0 : 2;
}

// Whether a kernel launched earlier is still running (1), done (0), or failed (-1).
int xtest_running() {
  cudaError_t e = cudaStreamQuery(g_stream);
  return e == cudaErrorNotReady ? 1 : e == cudaSuccess ? 0 : -1;
}

int xtest_gpus() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

}  // extern "C"
