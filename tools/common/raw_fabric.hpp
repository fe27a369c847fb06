// Raw libfabric set-up shared by the bare loops (fi-bare-loop, fi-atomic-loop) and the strict
// provider's raw tests: hints, fabric and domain, CQs, AV, RDM endpoints and registrations, each
// owned by a small RAII type. No libxport: these are the baselines libxport is measured against.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

namespace raw_fabric {

inline constexpr uint32_t kApiVersion = FI_VERSION(1, 17);
// What libxport asks of every provider: local registration, virtual addresses, allocated
// memory, provider keys.
inline constexpr int kMrModes = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;

// One fid, closed once: when its owner goes, or by close(), whose code a test can check.
// Owners declare dependents (MRs, endpoints) after what they bind to, so they close first.
template <typename T>
class Fid {
 public:
  Fid() = default;
  explicit Fid(T* p) : p_(p) {}  // takes over a fid opened elsewhere
  Fid(const Fid&) = delete;
  Fid& operator=(const Fid&) = delete;
  Fid(Fid&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  Fid& operator=(Fid&& o) noexcept {
    if (this != &o) {
      close();
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  ~Fid() { close(); }

  T* get() const { return p_; }
  T* operator->() const { return p_; }
  explicit operator bool() const { return p_ != nullptr; }
  T** out() {  // where the libfabric call that opens it writes it
    close();
    return &p_;
  }
  // Forgets the fid without closing it (someone else closed it).
  T* release() { return std::exchange(p_, nullptr); }
  // fi_close's code (0 when there was nothing to close); the fid is forgotten either way.
  int close() {
    T* p = std::exchange(p_, nullptr);
    return p != nullptr ? fi_close(&p->fid) : 0;
  }

 private:
  T* p_ = nullptr;
};

struct FreeInfo {
  void operator()(fi_info* i) const { fi_freeinfo(i); }
};
using Info = std::unique_ptr<fi_info, FreeInfo>;

// A step's outcome: libfabric's code (0: done, else -FI_*) and the call that gave it.
struct Outcome {
  int ret = 0;
  const char* call = "";
  bool ok() const { return ret == 0; }
};

// What to ask fi_getinfo for: reliable datagram endpoints of `provider` (nullptr: any).
struct Hints {
  const char* provider = nullptr;
  uint64_t caps = FI_MSG | FI_RMA;
  uint64_t mode = FI_CONTEXT;
  int mr_mode = kMrModes;
  fi_threading threading = FI_THREAD_UNSPEC;
  fi_progress data_progress = FI_PROGRESS_UNSPEC;
};
Info make_hints(const Hints& h);  // empty only when fi_allocinfo fails
// fi_getinfo(kApiVersion) for `hints`: every match in `list`, in the provider's order.
Outcome get_info(const fi_info* hints, Info* list);

// A fabric and one of its domains, with the fi_info they were opened from; closes the domain,
// then the fabric.
struct Domain {
  Info info;
  Fid<fid_fabric> fabric;
  Fid<fid_domain> domain;
};
// fi_fabric and fi_domain for `info` (taken over by `d`).
Outcome open_domain(Info info, Domain* d);

struct CqOptions {
  fi_cq_format format = FI_CQ_FORMAT_DATA;
  size_t size = 0;  // 0: the provider's default
  fi_wait_obj wait = FI_WAIT_NONE;
};
Outcome open_cq(fid_domain* domain, const CqOptions& o, Fid<fid_cq>* cq);
Outcome open_av(fid_domain* domain, Fid<fid_av>* av);  // FI_AV_TABLE

// An endpoint of `info`, bound to its CQs (one for both directions when tx == rx: the call
// "fi_ep_bind cq"; else "fi_ep_bind tx cq" and "fi_ep_bind rx cq") and its AV, enabled.
Outcome open_endpoint(fid_domain* domain, fi_info* info, fid_cq* tx, fid_cq* rx, fid_av* av,
                      Fid<fid_ep>* ep);

// `len` bytes at `buf` registered with `access` and requested `key` (the provider's own key
// under FI_MR_PROV_KEY); under FI_MR_ENDPOINT also bound to `bind_to` and enabled, unless
// `bind_to` is nullptr.
Outcome register_memory(fid_domain* domain, const fi_info& info, fid_ep* bind_to, void* buf,
                        size_t len, uint64_t access, uint64_t key, Fid<fid_mr>* mr);
// Every access the loops and tests use: send, receive, read, write, remote read and write.
inline constexpr uint64_t kAllAccess =
    FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

// An endpoint's address as fi_getname gives it (256 bytes hold every provider's here).
struct Address {
  uint8_t bytes[256] = {};
  size_t len = 0;
};
Outcome get_address(fid_ep* ep, Address* a);
// One address into `av`; -FI_EINVAL when the AV took none ("fi_av_insert").
Outcome insert_address(fid_av* av, const void* address, fi_addr_t* out);

}  // namespace raw_fabric
