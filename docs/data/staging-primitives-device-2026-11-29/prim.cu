// Costs of one copy-engine staging step on one GPU (docs/benchmarks.md, Known gaps: staged round
// trips). Build: nvcc -O2 -o prim prim.cu -lcuda; run: ./prim. Not part of the build.
#include <cuda.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <vector>
#include <functional>
using clk = std::chrono::steady_clock;
#define CK(x) do { auto e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)
#define CKD(x) do { CUresult e = (x); if (e != CUDA_SUCCESS) { const char* s; cuGetErrorString(e, &s); printf("%s: %s\n", #x, s); return 1; } } while (0)
static cudaStream_t st; static cudaEvent_t ev;
static void spin() { cudaEventRecord(ev, st); while (cudaEventQuery(ev) == cudaErrorNotReady) {} }
static void report(const char* name, std::function<void()> f, int n = 20000) {
  std::vector<double> t(n);
  for (int i = 0; i < 200; ++i) f();
  for (int i = 0; i < n; ++i) { auto a = clk::now(); f(); t[i] = std::chrono::duration<double, std::micro>(clk::now() - a).count(); }
  std::sort(t.begin(), t.end());
  printf("%-58s p50 %6.2f us  p10 %6.2f  p90 %6.2f  p99 %6.2f\n", name, t[n/2], t[n/10], t[n*9/10], t[n*99/100]);
}
int main() {
  CK(cudaSetDevice(0));
  cudaDeviceProp p; CK(cudaGetDeviceProperties(&p, 0)); printf("GPU: %s\n", p.name);
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  uint64_t *h, *d; uint8_t *hb, *db;
  CK(cudaHostAlloc(&h, 4096, cudaHostAllocMapped)); CK(cudaMalloc(&d, 4096));
  CK(cudaHostAlloc(&hb, 1 << 20, 0)); CK(cudaMalloc(&db, 1 << 20));
  int wv = 0; cuDeviceGetAttribute(&wv, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, 0);
  printf("stream mem ops: %d\n", wv);
  report("H2D 8 B, event spin", [&] { cudaMemcpyAsync(d, h, 8, cudaMemcpyHostToDevice, st); spin(); });
  report("D2H 8 B, event spin", [&] { cudaMemcpyAsync(h, d, 8, cudaMemcpyDeviceToHost, st); spin(); });
  report("H2D 8 B, cudaStreamSynchronize", [&] { cudaMemcpyAsync(d, h, 8, cudaMemcpyHostToDevice, st); cudaStreamSynchronize(st); });
  report("H2D 8 B + H2D 8 B (data, signal) one stream, one event", [&] { cudaMemcpyAsync(d, h, 8, cudaMemcpyHostToDevice, st); cudaMemcpyAsync(d + 1, h + 1, 8, cudaMemcpyHostToDevice, st); spin(); });
  report("H2D 8 B, spin; then H2D 8 B, spin (two turns)", [&] { cudaMemcpyAsync(d, h, 8, cudaMemcpyHostToDevice, st); spin(); cudaMemcpyAsync(d + 1, h + 1, 8, cudaMemcpyHostToDevice, st); spin(); });
  report("D2H 8 B spin; H2D 8 B spin (read-modify-write)", [&] { cudaMemcpyAsync(h, d, 8, cudaMemcpyDeviceToHost, st); spin(); h[0] += 1; cudaMemcpyAsync(d, h, 8, cudaMemcpyHostToDevice, st); spin(); });
  report("cuStreamWriteValue64, event spin", [&] { cuStreamWriteValue64((CUstream)st, (CUdeviceptr)(d + 2), 7, 0); spin(); });
  report("H2D 8 B + cuStreamWriteValue64 one stream, one event", [&] { cudaMemcpyAsync(d, h, 8, cudaMemcpyHostToDevice, st); cuStreamWriteValue64((CUstream)st, (CUdeviceptr)(d + 2), 7, 0); spin(); });
  report("H2D 64 KiB, event spin", [&] { cudaMemcpyAsync(db, hb, 65536, cudaMemcpyHostToDevice, st); spin(); }, 5000);
  report("D2H 64 KiB, event spin", [&] { cudaMemcpyAsync(hb, db, 65536, cudaMemcpyDeviceToHost, st); spin(); }, 5000);
  report("H2D 64 KiB + H2D 8 B one stream, one event", [&] { cudaMemcpyAsync(db, hb, 65536, cudaMemcpyHostToDevice, st); cudaMemcpyAsync(d, h, 8, cudaMemcpyHostToDevice, st); spin(); }, 5000);
  report("event record+spin alone", [&] { spin(); });
  report("cudaMemcpyAsync H2D 8 B enqueue only", [&] { cudaMemcpyAsync(d, h, 8, cudaMemcpyHostToDevice, st); }, 2000);
  cudaStreamSynchronize(st);
  return 0;
}
