// The strict test provider: its configuration and the wrapped fid types that every file shares.
// Each wrapper starts with the public fid it hands out and keeps the base provider's object.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/providers/fi_prov.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace strict {

// prov_errno values of the error completions this provider makes itself ("ST" + a number), far
// from the small errno-like values the base providers use.
enum ProvError : int {
  kErrInjected = 0x53540001,    // STRICT_FI_ERROR_AT
  kErrDeadDomain = 0x53540002,  // STRICT_FI_DEAD_DOMAIN_AT
  kErrMrUnbound = 0x53540003,   // FI_MR_ENDPOINT: MR not bound and enabled
  kErrMrOtherEp = 0x53540004,   // FI_MR_ENDPOINT: MR bound to another endpoint
  kErrMrBadDesc = 0x53540005,   // a descriptor that is no MR of this provider
};
bool is_strict_error(int prov_errno);

enum class Op : unsigned { send = 1, recv = 2, write = 4, read = 8, atomic = 16 };
inline constexpr unsigned kAllOps = 31;
const char* op_name(Op op);
uint64_t completion_flags(Op op);

// Read from the environment at fi_getinfo (what is advertised) and fi_domain (what is injected).
struct Config {
  std::string base = "tcp;ofi_rxm";  // STRICT_FI_BASE
  bool mr_endpoint = false;          // STRICT_FI_MR_ENDPOINT
  bool hide_atomic = false;          // STRICT_FI_HIDE_ATOMIC
  uint64_t eagain_every = 0;         // STRICT_FI_EAGAIN_EVERY
  uint64_t error_at = 0;             // STRICT_FI_ERROR_AT
  unsigned error_ops = kAllOps;      // STRICT_FI_ERROR_OP
  uint64_t dead_at = 0;              // STRICT_FI_DEAD_DOMAIN_AT
  bool verbose = false;              // STRICT_FI_VERBOSE
  static Config from_env();
};

// Process-wide counts of what was injected, printed at cleanup under STRICT_FI_VERBOSE=1.
struct Totals {
  std::atomic<uint64_t> posts{0}, eagain{0}, errors{0}, mr_rejects{0}, dead_fails{0},
      mr_busy_closes{0};
};
extern Totals totals;

struct Cq;
struct Endpoint;

struct Fabric {
  fid_fabric fabric;
  fid_fabric* base = nullptr;
  std::string base_name;
};

struct Domain {
  fid_domain domain;
  Fabric* fabric = nullptr;
  fid_domain* base = nullptr;
  Config cfg;
  bool enforce_mr_endpoint = false;    // the info it was opened with carries FI_MR_ENDPOINT
  bool base_prov_key = false;          // the base hands out keys (FI_MR_PROV_KEY)
  std::atomic<uint64_t> posts{0};      // every post, for STRICT_FI_EAGAIN_EVERY
  std::atomic<uint64_t> ops{0};        // data operations admitted, for STRICT_FI_DEAD_DOMAIN_AT
  std::atomic<uint64_t> error_ops{0};  // operations of STRICT_FI_ERROR_OP kinds
  std::atomic<bool> dead{false};
  std::mutex lock;
  std::vector<Cq*> cqs;
  // Marks the domain dead and fails every operation still outstanding on its CQs.
  void kill();
};

// An error completion this provider made; its text travels in err_data.
struct InjectedError {
  fi_cq_err_entry entry;
  std::string text;
};

struct Cq {
  fid_cq cq;
  Domain* domain = nullptr;
  fid_cq* base = nullptr;
  size_t entry_size = 0;
  bool tracking = false;  // remembers outstanding contexts (only when a dead domain is asked for)
  std::mutex lock;
  std::deque<InjectedError> injected;
  std::string current_text;  // err_data of the last injected entry read, valid until next read
  std::unordered_multimap<void*, uint64_t> outstanding;

  void push_error(void* ctx, uint64_t flags, int err, int prov_errno, std::string text);
  void track(void* ctx, uint64_t flags);
  void untrack(void* ctx);
  void fail_outstanding();
};

struct Endpoint {
  fid_ep ep;
  Domain* domain = nullptr;
  fid_ep* base = nullptr;
  Cq* tx_cq = nullptr;
  Cq* rx_cq = nullptr;
  std::atomic<int> bound_mrs{0};
};

struct Mr {
  fid_mr mr;
  uint64_t magic = 0;
  Domain* domain = nullptr;
  fid_mr* base = nullptr;  // registered with the base at fi_mr_enable under FI_MR_ENDPOINT
  Endpoint* ep = nullptr;
  bool enabled = false;
  std::vector<iovec> iov;  // the registration, replayed at enable
  std::vector<uint8_t> auth_key;
  fi_mr_attr attr{};
  uint64_t flags = 0;
};
inline constexpr uint64_t kMrMagic = 0x5354524943544d52ull;  // "STRICTMR"

struct Av {
  fid_av av;
  fid_av* base = nullptr;
};

// fid operations a wrapper does not offer.
int no_bind(fid*, fid*, uint64_t);
int no_control(fid*, int, void*);
int no_ops_open(fid*, const char*, uint64_t, void**, void*);
int no_tostr(const fid*, char*, size_t);
int no_ops_set(fid*, const char*, uint64_t, void*, void*);

// Object constructors used across files (each lives beside its type's operations).
int open_fabric(fi_fabric_attr* attr, fid_fabric** fabric, void* context);
int open_domain(Fabric* fabric, fi_info* info, fid_domain** out, void* context);
int open_cq(Domain* domain, fi_cq_attr* attr, fid_cq** out, void* context);
int open_av(Domain* domain, fi_av_attr* attr, fid_av** out, void* context);
int open_endpoint(Domain* domain, fi_info* info, fid_ep** out, void* context);
extern fi_ops_mr mr_ops;
extern fi_ops_msg msg_ops;
extern fi_ops_rma rma_ops;
extern fi_ops_atomic atomic_ops;

// A copy of `info` that the base provider accepts: its own name, no FI_MR_ENDPOINT (this layer
// owns endpoint binding). nullptr when out of memory.
fi_info* to_base_info(const fi_info* info, const std::string& base_name);

// Recognise our own objects among the fids a caller passes in.
Cq* as_cq(fid* f);
Av* as_av(fid* f);
Endpoint* as_endpoint(fid* f);

// The gate every data operation passes: injected -FI_EAGAIN, a dead domain, FI_MR_ENDPOINT checks
// on the local descriptors (translated to the base's), the injected error completion.
inline constexpr ssize_t kConsumed = 1;  // an error completion was queued instead of posting
struct Admission {
  Domain* domain = nullptr;
  Cq* tracked = nullptr;       // set when the context was recorded as outstanding
  bool counted_error = false;  // counted towards STRICT_FI_ERROR_AT
};
inline constexpr size_t kMaxIov = 16;
ssize_t admit(Endpoint* ep, Op op, void* ctx, bool completes, void* const* desc, void** out,
              size_t count, Admission* adm);
// Undoes the bookkeeping of an admitted operation the base refused (typically -FI_EAGAIN), so
// that its retry is counted once.
void refused(const Admission& adm, void* ctx);

// Admits an operation and, unless the gate answered for it, posts it to the base endpoint with
// the translated descriptors: post(fid_ep* base, void** desc).
template <typename Post>
ssize_t pass(fid_ep* e, Op op, void* ctx, bool completes, void* const* desc, size_t count,
             Post&& post) {
  auto* ep = reinterpret_cast<Endpoint*>(e);
  void* base_desc[kMaxIov] = {};
  Admission adm;
  ssize_t r = admit(ep, op, ctx, completes, desc, base_desc, count, &adm);
  if (r == kConsumed) return 0;
  if (r < 0) return r;
  ssize_t ret = post(ep->base, base_desc);
  if (ret != 0) refused(adm, ctx);
  return ret;
}

}  // namespace strict
