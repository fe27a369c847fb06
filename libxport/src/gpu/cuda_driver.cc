// The CUDA driver API, loaded at run time from libcuda.so.1 (the driver every GPU node has;
// libxport.a links no CUDA library). Prototypes come from CUDA's cuda.h; the symbols are looked
// up by their versioned names, as cuda.h maps them.
#include <cuda.h>
#include <dlfcn.h>

#include <map>
#include <mutex>

#include "core/format.hpp"
#include "gpu/driver.hpp"

namespace xport::gpu {

namespace {

struct Api {
#define XPORT_CU(fn) decltype(&::fn) fn = nullptr;
  XPORT_CU(cuInit)
  XPORT_CU(cuDriverGetVersion)
  XPORT_CU(cuGetErrorString)
  XPORT_CU(cuDeviceGet)
  XPORT_CU(cuDeviceGetCount)
  XPORT_CU(cuDevicePrimaryCtxRetain)
  XPORT_CU(cuCtxPushCurrent)
  XPORT_CU(cuCtxPopCurrent)
  XPORT_CU(cuPointerGetAttributes)
  XPORT_CU(cuMemAlloc)
  XPORT_CU(cuMemFree)
  XPORT_CU(cuMemHostAlloc)
  XPORT_CU(cuMemFreeHost)
  XPORT_CU(cuMemHostGetDevicePointer)
  XPORT_CU(cuStreamCreate)
  XPORT_CU(cuStreamDestroy)
  XPORT_CU(cuStreamSynchronize)
  XPORT_CU(cuMemcpyDtoHAsync)
  XPORT_CU(cuMemcpyHtoDAsync)
  XPORT_CU(cuEventCreate)
  XPORT_CU(cuEventRecord)
  XPORT_CU(cuEventQuery)
  XPORT_CU(cuEventDestroy)
  XPORT_CU(cuStreamWriteValue64)  // optional: marks by stream memory operation
#undef XPORT_CU
};

// The exported names behind cuda.h's macros (cuMemAlloc is cuMemAlloc_v2, ...).
template <typename F>
bool resolve(void* lib, F& fn, const char* name, std::string& missing) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (fn == nullptr) missing = name;
  return fn != nullptr;
}

bool resolve_all(void* lib, Api& a, std::string& missing) {
  return resolve(lib, a.cuInit, "cuInit", missing) &&
         resolve(lib, a.cuDriverGetVersion, "cuDriverGetVersion", missing) &&
         resolve(lib, a.cuGetErrorString, "cuGetErrorString", missing) &&
         resolve(lib, a.cuDeviceGet, "cuDeviceGet", missing) &&
         resolve(lib, a.cuDeviceGetCount, "cuDeviceGetCount", missing) &&
         resolve(lib, a.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", missing) &&
         resolve(lib, a.cuCtxPushCurrent, "cuCtxPushCurrent_v2", missing) &&
         resolve(lib, a.cuCtxPopCurrent, "cuCtxPopCurrent_v2", missing) &&
         resolve(lib, a.cuPointerGetAttributes, "cuPointerGetAttributes", missing) &&
         resolve(lib, a.cuMemAlloc, "cuMemAlloc_v2", missing) &&
         resolve(lib, a.cuMemFree, "cuMemFree_v2", missing) &&
         resolve(lib, a.cuMemHostAlloc, "cuMemHostAlloc", missing) &&
         resolve(lib, a.cuMemFreeHost, "cuMemFreeHost", missing) &&
         resolve(lib, a.cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2", missing) &&
         resolve(lib, a.cuStreamCreate, "cuStreamCreate", missing) &&
         resolve(lib, a.cuStreamDestroy, "cuStreamDestroy_v2", missing) &&
         resolve(lib, a.cuStreamSynchronize, "cuStreamSynchronize", missing) &&
         resolve(lib, a.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", missing) &&
         resolve(lib, a.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", missing) &&
         resolve(lib, a.cuEventCreate, "cuEventCreate", missing) &&
         resolve(lib, a.cuEventRecord, "cuEventRecord", missing) &&
         resolve(lib, a.cuEventQuery, "cuEventQuery", missing) &&
         resolve(lib, a.cuEventDestroy, "cuEventDestroy_v2", missing);
}

// Not every driver has it under this name: without it, marks are events.
void resolve_optional(void* lib, Api& a) {
  a.cuStreamWriteValue64 =
      reinterpret_cast<decltype(a.cuStreamWriteValue64)>(dlsym(lib, "cuStreamWriteValue64_v2"));
}

class CudaDriver;

// Makes a context current for the calls of one scope, and restores the caller's.
class ContextScope {
 public:
  ContextScope(const Api& a, CUcontext c) : a_(a), pushed_(c != nullptr && a.cuCtxPushCurrent(c) == CUDA_SUCCESS) {}
  ~ContextScope() {
    CUcontext popped;
    if (pushed_) a_.cuCtxPopCurrent(&popped);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  const Api& a_;
  bool pushed_;
};

// Marks: where the driver has stream memory operations, a mark is a cuStreamWriteValue64 of
// its number into a word of mapped page-locked memory the CUDA stream owns, so that reached() is
// one load, no driver call (cuEventQuery cost ~3 us on an H100, in every progress pass while
// a copy was in flight, under the engine's lock). Otherwise, or if the first write fails, an
// event per mark.
class CudaCopyQueue final : public CopyQueue {
 public:
  CudaCopyQueue(const Api& a, CUcontext ctx, CUstream s) : a_(a), ctx_(ctx), cuda_stream_(s) {
    if (a_.cuStreamWriteValue64 == nullptr) return;
    ContextScope scope(a_, ctx_);
    void* p = nullptr;
    if (a_.cuMemHostAlloc(&p, 64, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP) != CUDA_SUCCESS) {
      return;
    }
    CUdeviceptr d = 0;
    if (a_.cuMemHostGetDevicePointer(&d, p, 0) != CUDA_SUCCESS ||
        a_.cuStreamWriteValue64(cuda_stream_, d, 0, CU_STREAM_WRITE_VALUE_DEFAULT) !=
            CUDA_SUCCESS ||
        a_.cuStreamSynchronize(cuda_stream_) != CUDA_SUCCESS) {
      a_.cuMemFreeHost(p);
      return;
    }
    word_ = static_cast<uint64_t*>(p);
    word_gpu_ = d;
  }
  ~CudaCopyQueue() override {
    ContextScope scope(a_, ctx_);
    a_.cuStreamSynchronize(cuda_stream_);
    for (auto& [m, e] : events_) a_.cuEventDestroy(e);
    a_.cuStreamDestroy(cuda_stream_);
    if (word_ != nullptr) a_.cuMemFreeHost(word_);
  }
  Status copy_to_host(void* dst, const void* src, size_t n) override {
    ContextScope scope(a_, ctx_);
    std::lock_guard<std::mutex> g(mu_);
    return check(a_.cuMemcpyDtoHAsync(dst, reinterpret_cast<CUdeviceptr>(src), n, cuda_stream_),
                 "cuMemcpyDtoHAsync", n);
  }
  Status copy_to_gpu(void* dst, const void* src, size_t n) override {
    ContextScope scope(a_, ctx_);
    std::lock_guard<std::mutex> g(mu_);
    return check(a_.cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(dst), src, n, cuda_stream_),
                 "cuMemcpyHtoDAsync", n);
  }
  Result<uint64_t> mark() override {
    ContextScope scope(a_, ctx_);
    std::lock_guard<std::mutex> g(mu_);  // (marks' numbers go in the CUDA stream's order)
    if (word_ != nullptr) {
      // Ordered after the stream's earlier work, with a memory barrier before the write.
      XPORT_RETURN_IF_ERROR(check(a_.cuStreamWriteValue64(cuda_stream_, word_gpu_, marks_ + 1,
                                                          CU_STREAM_WRITE_VALUE_DEFAULT),
                                  "cuStreamWriteValue64", 8));
      return ++marks_;
    }
    CUevent e;
    XPORT_RETURN_IF_ERROR(check(a_.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate", 0));
    if (Status s = check(a_.cuEventRecord(e, cuda_stream_), "cuEventRecord", 0); !s.ok()) {
      a_.cuEventDestroy(e);
      return s;
    }
    events_.emplace(++marks_, e);
    return marks_;
  }
  Result<bool> reached(uint64_t m) override {
    if (word_ != nullptr) return __atomic_load_n(word_, __ATOMIC_ACQUIRE) >= m;
    std::lock_guard<std::mutex> g(mu_);  // (an event query returns at once)
    auto it = events_.find(m);
    if (it == events_.end()) return m <= marks_;  // reached and forgotten already
    ContextScope scope(a_, ctx_);
    CUresult r = a_.cuEventQuery(it->second);
    if (r == CUDA_ERROR_NOT_READY) return false;
    XPORT_RETURN_IF_ERROR(check(r, "cuEventQuery", 0));
    // Events of one stream complete in order: every earlier mark is reached too.
    for (auto e = events_.begin(); e != events_.end() && e->first <= m;) {
      a_.cuEventDestroy(e->second);
      e = events_.erase(e);
    }
    return true;
  }
  Status synchronize() override {
    ContextScope scope(a_, ctx_);
    uint64_t before;
    {
      std::lock_guard<std::mutex> g(mu_);
      before = marks_;
    }
    // (not under mu_: the other users of the stream go on enqueueing meanwhile)
    XPORT_RETURN_IF_ERROR(check(a_.cuStreamSynchronize(cuda_stream_), "cuStreamSynchronize", 0));
    std::lock_guard<std::mutex> g(mu_);
    for (auto e = events_.begin(); e != events_.end() && e->first <= before;) {
      a_.cuEventDestroy(e->second);
      e = events_.erase(e);
    }
    return Status::success();
  }

 private:
  Status check(CUresult r, const char* call, size_t n) const {
    if (r == CUDA_SUCCESS) return Status::success();
    const char* text = nullptr;
    a_.cuGetErrorString(r, &text);
    return core::error(Code::fabric, call, "(", n, " bytes) failed: ", text ? text : "?", " (",
                       static_cast<int>(r), ")");
  }
  const Api& a_;
  CUcontext ctx_;
  CUstream cuda_stream_;
  std::mutex mu_;  // guards marks_ and events_; enqueues and marks keep one order
  uint64_t marks_ = 0;
  std::map<uint64_t, CUevent> events_;
  uint64_t* word_ = nullptr;  // mapped page-locked: the last mark the CUDA stream reached
  CUdeviceptr word_gpu_ = 0;
};

class CudaDriver final : public Driver {
 public:
  // libcuda.so.1 stays loaded for the process's life (the driver is never unloaded).
  CudaDriver(Api a, int version, int gpus) : a_(a), version_(version), gpus_(gpus) {}

  std::string describe() const override {
    return core::str("cuda driver ", version_ / 1000, ".", (version_ % 1000) / 10, ", ", gpus_,
                     " GPU(s)");
  }
  bool available() const override { return gpus_ > 0; }

  Result<PointerInfo> classify(const void* p) override {
    unsigned int type = 0;
    int ordinal = -1;
    unsigned int managed = 0;  // the attribute is a bool; the driver writes 4 bytes on some versions
    CUcontext ctx = nullptr;
    CUdeviceptr start = 0;
    size_t size = 0;
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                   CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_CONTEXT,
                                   CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                   CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    void* data[] = {&type, &ordinal, &managed, &ctx, &start, &size};
    // Host pointers CUDA never saw come back with every attribute zero, not an error.
    CUresult r = a_.cuPointerGetAttributes(6, attrs, data, reinterpret_cast<CUdeviceptr>(p));
    PointerInfo info;
    if (r != CUDA_SUCCESS) return info;
    if (managed) {
      info.kind = MemoryKind::managed;
    } else if (type == CU_MEMORYTYPE_DEVICE) {
      info.kind = MemoryKind::gpu;
    } else {
      return info;
    }
    info.gpu = ordinal;
    info.alloc_base = static_cast<uintptr_t>(start);
    info.alloc_size = size;
    info.context = ctx;
    return info;
  }

  Result<void*> alloc_pinned(size_t n) override {
    CUcontext ctx;
    XPORT_RETURN_IF_ERROR(primary(0, ctx));
    ContextScope scope(a_, ctx);
    void* p = nullptr;
    CUresult r = a_.cuMemHostAlloc(&p, n, CU_MEMHOSTALLOC_PORTABLE);
    if (r != CUDA_SUCCESS) return fail(r, "cuMemHostAlloc", n, Code::resource);
    return p;
  }
  void free_pinned(void* p) override {
    if (p != nullptr) a_.cuMemFreeHost(p);
  }
  Result<void*> alloc_mapped(size_t n, void** gpu_address) override {
    CUcontext ctx;
    XPORT_RETURN_IF_ERROR(primary(0, ctx));
    ContextScope scope(a_, ctx);
    void* p = nullptr;
    CUresult r = a_.cuMemHostAlloc(&p, n, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
    if (r != CUDA_SUCCESS) return fail(r, "cuMemHostAlloc(DEVICEMAP)", n, Code::resource);
    CUdeviceptr d = 0;
    r = a_.cuMemHostGetDevicePointer(&d, p, 0);
    if (r != CUDA_SUCCESS) {
      a_.cuMemFreeHost(p);
      return fail(r, "cuMemHostGetDevicePointer", n, Code::resource);
    }
    *gpu_address = reinterpret_cast<void*>(d);
    return p;
  }

  Result<std::unique_ptr<CopyQueue>> open_copy_queue(const PointerInfo& info) override {
    CUcontext ctx = static_cast<CUcontext>(info.context);
    if (ctx == nullptr) XPORT_RETURN_IF_ERROR(primary(info.gpu, ctx));
    ContextScope scope(a_, ctx);
    CUstream s;
    CUresult r = a_.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
    if (r != CUDA_SUCCESS) return fail(r, "cuStreamCreate", 0, Code::resource);
    return std::unique_ptr<CopyQueue>(new CudaCopyQueue(a_, ctx, s));
  }

  Result<void*> alloc_gpu(size_t n, int gpu) override {
    CUcontext ctx;
    XPORT_RETURN_IF_ERROR(primary(gpu, ctx));
    ContextScope scope(a_, ctx);
    CUdeviceptr p = 0;
    CUresult r = a_.cuMemAlloc(&p, n);
    if (r != CUDA_SUCCESS) return fail(r, "cuMemAlloc", n, Code::resource);
    return reinterpret_cast<void*>(p);
  }
  void free_gpu(void* p) override {
    if (p != nullptr) a_.cuMemFree(reinterpret_cast<CUdeviceptr>(p));
  }

 private:
  // The GPU's primary context (the one the CUDA runtime uses), retained once per GPU for
  // the process's life.
  Status primary(int gpu, CUcontext& out) {
    if (gpu < 0 || gpu >= gpus_) {
      return core::error(Code::invalid_argument, "GPU ", gpu, " does not exist (", gpus_,
                         " GPU(s))");
    }
    std::lock_guard<std::mutex> g(mu_);
    auto it = primaries_.find(gpu);
    if (it != primaries_.end()) {
      out = it->second;
      return Status::success();
    }
    CUdevice dev;
    CUresult r = a_.cuDeviceGet(&dev, gpu);
    if (r == CUDA_SUCCESS) r = a_.cuDevicePrimaryCtxRetain(&out, dev);
    if (r != CUDA_SUCCESS) return fail(r, "cuDevicePrimaryCtxRetain", 0, Code::fabric);
    primaries_.emplace(gpu, out);
    return Status::success();
  }
  Status fail(CUresult r, const char* call, size_t n, Code code) const {
    const char* text = nullptr;
    a_.cuGetErrorString(r, &text);
    return core::error(code, call, "(", n, " bytes) failed: ", text ? text : "?", " (",
                       static_cast<int>(r), ")");
  }

  Api a_;
  int version_;
  int gpus_;
  std::mutex mu_;
  std::map<int, CUcontext> primaries_;
};

}  // namespace

std::unique_ptr<Driver> load_cuda_driver(std::string& why_not) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    why_not = core::str("libcuda.so.1: ", e ? e : "not found");
    return nullptr;
  }
  Api a;
  std::string missing;
  if (!resolve_all(lib, a, missing)) {
    why_not = core::str("libcuda.so.1 has no ", missing);
    dlclose(lib);
    return nullptr;
  }
  resolve_optional(lib, a);
  if (CUresult r = a.cuInit(0); r != CUDA_SUCCESS) {
    const char* text = nullptr;
    a.cuGetErrorString(r, &text);
    why_not = core::str("cuInit failed: ", text ? text : "?", " (", static_cast<int>(r), ")");
    dlclose(lib);
    return nullptr;
  }
  int version = 0, gpus = 0;
  a.cuDriverGetVersion(&version);
  a.cuDeviceGetCount(&gpus);
  if (gpus <= 0) {
    why_not = "the CUDA driver sees no GPU";
    dlclose(lib);
    return nullptr;
  }
  return std::unique_ptr<Driver>(new CudaDriver(a, version, gpus));
}

}  // namespace xport::gpu
