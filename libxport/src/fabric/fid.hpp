// RAII ownership of libfabric objects: each Owned<T> closes its fid exactly once, and owners
// declare members so that dependents (MRs, endpoints) are destroyed before what they bind to.
#pragma once

#include <rdma/fabric.h>

#include <memory>
#include <utility>

namespace xport::fabric {

void close_fid(fid_t fid, const char* what);

template <typename T>
class Owned {
 public:
  Owned() = default;
  explicit Owned(T* p) : p_(p) {}
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  Owned(Owned&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  Owned& operator=(Owned&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  ~Owned() { reset(); }

  void reset() {
    if (p_ != nullptr) close_fid(&p_->fid, __PRETTY_FUNCTION__);
    p_ = nullptr;
  }
  T* get() const { return p_; }
  T** out() {
    reset();
    return &p_;
  }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  T* p_ = nullptr;
};

struct InfoDeleter {
  void operator()(fi_info* info) const { fi_freeinfo(info); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoDeleter>;

inline InfoPtr dup_info(const fi_info* info) { return InfoPtr(fi_dupinfo(info)); }

}  // namespace xport::fabric
