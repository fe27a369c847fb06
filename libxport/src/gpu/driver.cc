// Which Driver the process uses: CUDA's when this build has it and libcuda.so.1 initialises,
// else one that sees only host memory.
#include "gpu/driver.hpp"

#include <atomic>
#include <mutex>

#include "core/format.hpp"
#include "core/log.hpp"

namespace xport::gpu {

// gpu/cuda_driver.cc in builds with CUDA's headers (-Dcuda), else the function below.
std::unique_ptr<Driver> load_cuda_driver(std::string& why_not);

namespace {

class NoGpu final : public Driver {
 public:
  explicit NoGpu(std::string why) : why_(std::move(why)) {}
  std::string describe() const override { return "none (" + why_ + ")"; }
  bool available() const override { return false; }
  Result<PointerInfo> classify(const void*) override { return PointerInfo{}; }
  Result<void*> alloc_pinned(size_t) override { return unsupported("pinned host memory"); }
  void free_pinned(void*) override {}
  Result<void*> alloc_mapped(size_t, void**) override { return unsupported("mapped memory"); }
  Result<std::unique_ptr<CopyQueue>> open_copy_queue(const PointerInfo&) override {
    return unsupported("a copy queue (CUDA stream)");
  }
  Result<void*> alloc_gpu(size_t, int) override { return unsupported("GPU memory"); }
  void free_gpu(void*) override {}

 private:
  Status unsupported(const char* what) const {
    return core::error(Code::unsupported, "no GPU for ", what, ": ", why_);
  }
  std::string why_;
};

std::atomic<Driver*> g_test_driver{nullptr};

Driver& process_driver() {
  static Driver* d = [] {
    std::string why;
    std::unique_ptr<Driver> cuda = load_cuda_driver(why);
    if (cuda) {
      XPORT_LOG(info, "GPU memory: ", cuda->describe());
      return cuda.release();  // lives as long as the process: CUDA unloads itself at exit
    }
    XPORT_LOG(debug, "GPU memory: none: ", why);
    return static_cast<Driver*>(new NoGpu(why));
  }();
  return *d;
}

}  // namespace

Driver& driver() {
  if (Driver* t = g_test_driver.load(std::memory_order_acquire)) return *t;
  return process_driver();
}

void set_driver_for_tests(Driver* d) { g_test_driver.store(d, std::memory_order_release); }

#ifndef XPORT_HAVE_CUDA
std::unique_ptr<Driver> load_cuda_driver(std::string& why_not) {
  why_not = "libxport was built without CUDA (-Dcuda=disabled or no cuda.h)";
  return nullptr;
}
#endif

}  // namespace xport::gpu
