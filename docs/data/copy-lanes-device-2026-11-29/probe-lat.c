// Latency of 8-byte staging operations on one CUDA stream, polled: H2D memcpy, D2H memcpy,
// cuStreamWriteValue64 into device memory; each followed by a mark (WriteValue64 into mapped
// host memory) that the host polls.
#include <cuda.h>
#include <stdio.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { printf("%s failed %d\n", #x, r_); return 1; } } while (0)
int main(void) {
  CUdevice dev; CUcontext ctx; CUstream s;
  CK(cuInit(0)); CK(cuDeviceGet(&dev, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr d; CK(cuMemAlloc(&d, 64));
  void* h; CK(cuMemHostAlloc(&h, 4096, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  volatile unsigned long long* mark = (volatile unsigned long long*)h; *mark = 0;
  CUdeviceptr markd; CK(cuMemHostGetDevicePointer(&markd, h, 0));
  unsigned long long* src = (unsigned long long*)((char*)h + 64); *src = 5;
  const int n = 4000; unsigned long long m = 0;
  const char* names[] = {"memcpy HtoD 8 B", "memcpy DtoH 8 B", "WriteValue64 to GPU memory", "DtoH then WriteValue64 (read+write)", "DtoH then HtoD (read+write)"};
  for (int round = 0; round < 2; ++round)
  for (int k = 0; k < 5; ++k) {
    double t0 = now();
    for (int i = 0; i < n; ++i) {
      if (k == 0) CK(cuMemcpyHtoDAsync(d, src, 8, s));
      if (k == 1) CK(cuMemcpyDtoHAsync(src, d, 8, s));
      if (k == 2) CK(cuStreamWriteValue64(s, d, i, CU_STREAM_WRITE_VALUE_DEFAULT));
      if (k >= 3) {
        CK(cuMemcpyDtoHAsync(src, d, 8, s));
        CK(cuStreamWriteValue64(s, markd, ++m, CU_STREAM_WRITE_VALUE_DEFAULT));
        while (*mark < m) {}
        if (k == 3) CK(cuStreamWriteValue64(s, d, *src + 1, CU_STREAM_WRITE_VALUE_DEFAULT));
        else { *src += 1; CK(cuMemcpyHtoDAsync(d, src, 8, s)); }
      }
      CK(cuStreamWriteValue64(s, markd, ++m, CU_STREAM_WRITE_VALUE_DEFAULT));
      while (*mark < m) {}
    }
    printf("round %d: %-36s %.2f us\n", round, names[k], (now() - t0) / n * 1e6);
  }
  return 0;
}
