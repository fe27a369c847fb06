// xport-bench without nvcc at build time (gpu_calls.hpp): --memory cuda and --initiator device
// fail at once, naming why.
#include "gpu_calls.hpp"

namespace bench::gpu {
namespace {
const char* const kWhy =
    "this xport-bench was built without CUDA (Meson found no nvcc under its cuda-root option, "
    "or cuda was disabled): rebuild where the CUDA toolkit is installed";
}  // namespace

bool built() { return false; }
std::string select(int) { return kWhy; }
std::string alloc(size_t, void** out) {
  *out = nullptr;
  return kWhy;
}
void release(void*) {}
std::string copy_to_gpu(void*, const void*, size_t) { return kWhy; }
std::string copy_from_gpu(void*, const void*, size_t) { return kWhy; }
std::string launch_puts(const xport::gpu_ring::DeviceRing&, const PutRun&) { return kWhy; }
std::string launch_round_trips(const xport::gpu_ring::DeviceRing&, const RoundTripRun&) {
  return kWhy;
}
int running() { return -1; }
std::string finish(int, KernelResult*) { return kWhy; }

}  // namespace bench::gpu
