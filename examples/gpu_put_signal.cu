// The README's GPU example: GPU buffers in a two-sided send, and a kernel that issues a
// put_signal through GpuProxy into a peer's GPU memory (here the same device, connected to itself).
#include <cuda_runtime.h>
#include <xport/device.cuh>
#include <xport/gpu_proxy.hpp>
#include <xport/xport.hpp>

#include <chrono>
#include <cstdio>

using namespace std::chrono_literals;

__global__ void my_kernel(xport::device::Ring ring, uint64_t n, int* status) {
  // window 0, local region 0 -> remote region 0, signal +1 at the word after the data
  int64_t t = xport::device::put_signal(ring, 0, 0, 0, 0, 0, n, 0, n, 1,
                                        xport::gpu_ring::SignalOp::add, 1ull << 34);
  *status = t < 0 ? static_cast<int>(t) : xport::device::quiet(ring, 0, 1ull << 34);
}

static int fail(const xport::Status& st) {
  std::fprintf(stderr, "%s\n", st.to_string().c_str());
  return 1;
}

int main() {
  const size_t n = 1 << 20;
  auto ctx = xport::Context::open();
  if (!ctx.ok()) return fail(ctx.status());
  auto dev = (*ctx)->open_device();
  if (!dev.ok()) return fail(dev.status());
  auto listener = (*dev)->listen();
  if (!listener.ok()) return fail(listener.status());
  auto send = (*dev)->connect((*listener)->handle(), xport::Deadline::after(5s));
  auto recv = (*listener)->accept(xport::Deadline::after(5s));
  if (!send.ok()) return fail(send.status());
  if (!recv.ok()) return fail(recv.status());
  void* src = nullptr;
  void* dst = nullptr;
  int* status = nullptr;
  if (cudaMalloc(&src, n) != cudaSuccess || cudaMalloc(&dst, n + 8) != cudaSuccess ||
      cudaMallocManaged(&status, sizeof(int)) != cudaSuccess) {
    return std::fprintf(stderr, "no GPU memory: %s\n", cudaGetErrorString(cudaGetLastError())), 1;
  }
  cudaMemset(src, 0x5a, n);
  cudaMemset(dst, 0, n + 8);
  cudaDeviceSynchronize();
  auto rd = (*dev)->register_memory(dst, n + 8);
  if (!rd.ok()) return fail(rd.status());
  auto r = (*recv)->irecv(dst, n, *rd);
  auto window = xport::Window::open(**send);
  if (!window.ok()) return fail(window.status());
  auto remote = (*dev)->import_key(rd->export_key());
  if (!remote.ok()) return fail(remote.status());
  // [readme-gpu]
  auto rg = (*dev)->register_memory(src, n);            // rg->memory_type() == MemoryType::cuda
  auto s = (*send)->isend(src, n, *rg);                 // GPU buffers in every operation
  // Kernels: a GpuProxy executes what they put on its ring (#include <xport/device.cuh>)
  auto proxy = xport::GpuProxy::open(**dev);
  bool ready = proxy.ok() && (*proxy)->add_window(**window).ok() &&
               (*proxy)->add_region(*rg).ok() && (*proxy)->add_remote(*remote).ok() &&
               (*proxy)->start().ok();
  if (ready) my_kernel<<<1, 1>>>((*proxy)->ring(), n, status);  // xport::device::put_signal
  // [/readme-gpu]
  if (!r.ok()) return fail(r.status());
  if (!s.ok()) return fail(s.status());
  auto got = (*recv)->wait(*r, xport::Deadline::after(5s));
  if (!got.ok()) return fail(got.status());
  if (!proxy.ok()) return fail(proxy.status());
  if (!ready) return std::fprintf(stderr, "GpuProxy set-up failed\n"), 1;
  cudaDeviceSynchronize();
  xport::Status st = (*window)->wait_signal(*rd, n, 1, xport::Deadline::after(5s));
  if (!st.ok()) return fail(st);
  std::printf("received %zu bytes from GPU memory; kernel put_signal: %s (status %d)\n", *got,
              st.to_string().c_str(), *status);
  return *status == 0 ? 0 : 1;
}
