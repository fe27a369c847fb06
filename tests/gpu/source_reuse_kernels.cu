// The caller's own writes into a GPU source in source_reuse_gpu_test.cc: cudaMemset, finished
// before the test's next call (libxport's copy of a source is ordered after nothing of the
// caller's). Built by nvcc (CUDA runtime, static).
#include <cuda_runtime.h>

#include <cstddef>

extern "C" int xtest_cuda_memset(void* p, int value, size_t n) {
  if (cudaMemset(p, value, n) != cudaSuccess) return 1;
  return cudaDeviceSynchronize() == cudaSuccess ? 0 : 2;
}
