// The libfabric objects of one rail: fabric+domain, event queue, completion queue, address
// vector, endpoints (active and passive) and memory registrations, each owning its fid.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_rma.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fabric/counters.hpp"
#include "fabric/error.hpp"
#include "fabric/fid.hpp"
#include "xport/status.hpp"

namespace xport::fabric {

class Domain {
 public:
  static Result<std::unique_ptr<Domain>> open(const fi_info* info);

  fi_info* info() const { return info_.get(); }
  fid_fabric* fabric() const { return fabric_.get(); }
  fid_domain* domain() const { return domain_.get(); }
  fid_eq* eq() const { return eq_.get(); }  // connection events (FI_EP_MSG only)
  const std::string& name() const { return name_; }
  bool connected_endpoints() const { return info_->ep_attr->type == FI_EP_MSG; }
  int mr_mode() const { return info_->domain_attr->mr_mode; }
  bool manual_progress() const {
    return info_->domain_attr->data_progress == FI_PROGRESS_MANUAL;
  }
  size_t cq_data_size() const { return info_->domain_attr->cq_data_size; }
  size_t mr_key_size() const { return info_->domain_attr->mr_key_size; }

 private:
  InfoPtr info_;
  Owned<fid_fabric> fabric_;
  Owned<fid_domain> domain_;
  Owned<fid_eq> eq_;
  std::string name_;
};

class CompletionQueue {
 public:
  // With `wait_fd`, a wait object (FI_WAIT_FD) where the provider offers one; without it
  // where it does not (shm: -FI_ENOSYS), or when false.
  static Result<std::unique_ptr<CompletionQueue>> open(Domain& domain, size_t size,
                                                       bool wait_fd = false);

  fid_cq* get() const { return cq_.get(); }
  // The wait object's file descriptor (readable when a completion may be there; call
  // fi_trywait before sleeping on it), or -1.
  int wait_fd() const { return wait_fd_; }
  CqCounters& counters() { return counters_; }
  const CqCounters& counters() const { return counters_; }

  // Reads at most `batch` entries. on_ok(const fi_cq_data_entry&) for each success;
  // on_error(void* op_context, Status, int err) for an error entry (read with fi_cq_readerr,
  // the provider's message included; err: the positive FI_E* value, FI_ECANCELED for a
  // cancelled operation). Returns how many entries were handled.
  template <typename OnOk, typename OnError>
  Result<size_t> poll(size_t batch, OnOk&& on_ok, OnError&& on_error);

 private:
  Status read_error(void** context, int* err);

  Owned<fid_cq> cq_;
  CqCounters counters_;
  int wait_fd_ = -1;
};

// The shm provider's regions of libxport endpoints are /dev/shm/xport_<pid>_<nonce>_<n> (named
// by Endpoint::open). True, with the owner's pid, for such a name; false for any other.
bool parse_shm_region_name(std::string_view name, pid_t* pid);

// libfabric 1.17's shm: peers one address vector maps (SMR_MAX_PEERS).
inline constexpr size_t kShmAvCapacity = 256;

class AddressVector {
 public:
  static Result<std::unique_ptr<AddressVector>> open(Domain& domain);
  fid_av* get() const { return av_.get(); }
  // Refuses, naming why, an address the provider would take and then crash on: on shm, a name
  // with no shared-memory region behind it (libfabric 1.17's shm maps the region at the first
  // send and dereferences it unchecked; a forged connection request could name one); or one
  // that would leave the AV unusable: a socket address not of the domain's format
  // (check_peer_address: libfabric 1.17's rxm AV then refuses every later address).
  Result<fi_addr_t> insert(const std::vector<uint8_t>& address);
  Status remove(fi_addr_t addr);

  // Addresses the provider's AV holds at most, 0 where it has no fixed limit: libfabric 1.17's
  // shm maps 256 peers per AV (SMR_MAX_PEERS), counting the ones that only sent to its
  // endpoints; past it the provider overwrites live entries. `used`: inserted, not removed.
  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }

 private:
  Owned<fid_av> av_;
  bool shm_ = false;
  size_t capacity_ = 0;
  size_t used_ = 0;
  uint32_t addr_format_ = FI_FORMAT_UNSPEC;
};

// An active endpoint: RDM (with an address vector) or connected MSG. Posts never wait: a
// provider that answers -FI_EAGAIN gets Code::again back to the caller, who queues the operation
// for a later progress pass (nothing spins inside a post, least of all under the engine lock).
class Endpoint {
 public:
  // `info` may differ from the domain's (an FI_CONNREQ's info for accepted MSG endpoints).
  static Result<std::unique_ptr<Endpoint>> open(Domain& domain, fi_info* info,
                                                CompletionQueue& cq, AddressVector* av,
                                                std::string name);
  ~Endpoint() = default;

  fid_ep* get() const { return ep_.get(); }
  const std::string& name() const { return name_; }
  Result<std::vector<uint8_t>> address() const;
  EndpointCounters& counters() { return counters_; }
  const EndpointCounters& counters() const { return counters_; }

  Status send(const void* buf, size_t len, void* desc, fi_addr_t dest, void* ctx);
  Status inject(const void* buf, size_t len, fi_addr_t dest);
  // One message gathered from two buffers, each with its own descriptor (fi_sendv): a header
  // in a bounce buffer and a payload the provider reads itself (GPU memory, FI_HMEM).
  Status send2(const void* head, size_t head_len, void* head_desc, const void* body,
               size_t body_len, void* body_desc, fi_addr_t dest, void* ctx);
  // Messages that carry remote CQ data (the receiver's completion reports it).
  Status senddata(const void* buf, size_t len, void* desc, uint64_t data, fi_addr_t dest,
                  void* ctx);
  Status injectdata(const void* buf, size_t len, uint64_t data, fi_addr_t dest);
  Status recv(void* buf, size_t len, void* desc, fi_addr_t src, void* ctx);
  Status write(const void* buf, size_t len, void* desc, fi_addr_t dest, uint64_t raddr,
               uint64_t key, void* ctx);
  Status writedata(const void* buf, size_t len, void* desc, uint64_t data, fi_addr_t dest,
                   uint64_t raddr, uint64_t key, void* ctx);
  // fi_inject_writedata: the source is reusable when it returns; no local completion comes.
  Status inject_writedata(const void* buf, size_t len, uint64_t data, fi_addr_t dest,
                          uint64_t raddr, uint64_t key);
  Status read(void* buf, size_t len, void* desc, fi_addr_t src, uint64_t raddr, uint64_t key,
              void* ctx);
  // One 64-bit atomic on the peer's word at raddr, its old value fetched into `result`
  // (FI_SUM, FI_ATOMIC_WRITE, FI_ATOMIC_READ), or a compare-and-swap (FI_CSWAP).
  Status fetch_atomic(const uint64_t* operand, void* desc, uint64_t* result, void* result_desc,
                      fi_addr_t dest, uint64_t raddr, uint64_t key, fi_op op, void* ctx);
  Status compare_atomic(const uint64_t* operand, void* desc, const uint64_t* compare,
                        void* compare_desc, uint64_t* result, void* result_desc, fi_addr_t dest,
                        uint64_t raddr, uint64_t key, void* ctx);
  // Whether the provider performs these 64-bit atomics on this endpoint (fi_*atomicvalid).
  bool atomics_valid();
  // Asks the provider to cancel a posted receive (its completion then reports FI_ECANCELED).
  void cancel(void* ctx);

  // A completion (success or error) for an operation this endpoint posted.
  void count_completion(bool error) {
    counters_.completed.add();
    if (error) counters_.error_completions.add();
  }

 private:
  // One try: Code::again (counted) on -FI_EAGAIN, the provider's error otherwise.
  Status result(ssize_t ret, const char* what);
  template <typename F>
  Status post(OpKind op, size_t bytes, const char* what, F&& fn) {
    const ssize_t ret = fn();
    if (ret != 0) return result(ret, what);
    counters_.count_post(op, bytes);
    return Status();
  }

  Owned<fid_ep> ep_;
  std::string name_;
  EndpointCounters counters_;
};

class PassiveEndpoint {
 public:
  static Result<std::unique_ptr<PassiveEndpoint>> listen(Domain& domain);
  fid_pep* get() const { return pep_.get(); }
  Result<std::vector<uint8_t>> address() const;

 private:
  Owned<fid_pep> pep_;
};

// One registration of [buf, buf+len) on one domain (bound to one endpoint under FI_MR_ENDPOINT).
// Where the application chooses keys (no FI_MR_PROV_KEY), the key is random within the
// provider's key size, so a peer cannot guess the keys of other registrations from its own.
class MemoryRegistration {
 public:
  // cuda_device >= 0: [buf, +len) is memory of that CUDA device, registered with the provider
  // as such (fi_mr_regattr, FI_HMEM_CUDA; the domain was opened with FI_HMEM).
  static Result<std::unique_ptr<MemoryRegistration>> create(Domain& domain, const void* buf,
                                                            size_t len, uint64_t access,
                                                            Endpoint* bind_to,
                                                            int cuda_device = -1);
  void* desc() const { return desc_; }
  uint64_t key() const { return key_; }
  fid_mr* get() const { return mr_.get(); }

 private:
  Owned<fid_mr> mr_;
  void* desc_ = nullptr;
  uint64_t key_ = 0;
};

// A random requested key within `key_size` bytes (never 0), from the kernel's generator.
uint64_t random_mr_key(size_t key_size);

// ---- template bodies ----

template <typename OnOk, typename OnError>
Result<size_t> CompletionQueue::poll(size_t batch, OnOk&& on_ok, OnError&& on_error) {
  constexpr size_t kChunk = 16;
  fi_cq_data_entry entries[kChunk];
  size_t handled = 0;
  while (handled < batch) {
    size_t want = batch - handled < kChunk ? batch - handled : kChunk;
    counters_.polls.add();
    ssize_t n = fi_cq_read(cq_.get(), entries, want);
    if (n == -FI_EAGAIN) {
      if (handled == 0) counters_.empty_polls.add();
      break;
    }
    if (n == -FI_EAVAIL) {
      void* ctx = nullptr;
      int err = 0;
      Status s = read_error(&ctx, &err);
      counters_.error_completions.add();
      ++handled;
      on_error(ctx, std::move(s), err);
      continue;
    }
    if (n < 0) {
      counters_.hard_errors.add();
      return fi_status(static_cast<int>(n), "fi_cq_read");
    }
    for (ssize_t i = 0; i < n; ++i) on_ok(entries[i]);
    counters_.completions.add(static_cast<uint64_t>(n));
    handled += static_cast<size_t>(n);
    if (static_cast<size_t>(n) < want) break;
  }
  counters_.max_batch.max(handled);
  return handled;
}

}  // namespace xport::fabric
