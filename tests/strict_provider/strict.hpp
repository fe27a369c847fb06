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
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace strict {

// prov_errno values of the error completions this provider makes itself ("ST" + a number), far
// from the small errno-like values the base providers use.
enum ProvError : int {
  kErrInjected = 0x53540001,     // STRICT_FI_ERROR_AT
  kErrDeadDomain = 0x53540002,   // STRICT_FI_DEAD_DOMAIN_AT
  kErrMrUnbound = 0x53540003,    // FI_MR_ENDPOINT: MR not bound and enabled
  kErrMrOtherEp = 0x53540004,    // FI_MR_ENDPOINT: MR bound to another endpoint
  kErrMrBadDesc = 0x53540005,    // a descriptor that is no MR of this provider
  kErrTruncated = 0x53540006,    // STRICT_FI_RX_CQ_DATA: message longer than the receive
  kErrCanceled = 0x53540007,     // STRICT_FI_RX_CQ_DATA: fi_cancel of a held receive
  kErrOverrun = 0x53540008,      // STRICT_FI_CQ_OVERRUN
  kErrDelayedPost = 0x53540009,  // STRICT_FI_DELAY_POST_US: the base refused a delayed post
  kErrBase = 0x5354000a,         // an error entry of the base, its text already formatted
  kErrMrHmem = 0x5354000b,       // FI_MR_HMEM: GPU memory without its FI_HMEM MR's descriptor
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
  size_t cq_data_size = 8;           // STRICT_FI_CQ_DATA_SIZE (4 or 8)
  bool cq_data_size_bad = false;     //   set to something else: no entries at all
  bool rx_cq_data = false;           // STRICT_FI_RX_CQ_DATA
  bool reorder = false;              // STRICT_FI_REORDER
  bool seed_set = false;             // STRICT_FI_SEED given
  uint64_t seed = 0;
  uint64_t delay_us = 0;       // STRICT_FI_DELAY_US
  uint64_t delay_post_us = 0;  // STRICT_FI_DELAY_POST_US
  std::string delay_domain;    // STRICT_FI_DELAY_DOMAIN (empty: every domain)
  bool cq_overrun = false;     // STRICT_FI_CQ_OVERRUN
  uint64_t cq_fail_at = 0;     // STRICT_FI_CQ_FAIL_AT: the Nth read of a CQ fails it for good
  std::string fault_domain;    // STRICT_FI_FAULT_DOMAIN: CQ_FAIL_AT on this domain only
  bool scribble = false;       // STRICT_FI_SCRIBBLE: use the caller's fi_context2 as providers may
  bool verbose = false;        // STRICT_FI_VERBOSE
  // STRICT_FI_HMEM: FI_HMEM offered (with FI_MR_HMEM) to whoever asks for it; FI_HMEM_CUDA
  // registrations are registered with the base as host memory (tests' "GPU memory" is host
  // memory of a fake driver). Without it, FI_HMEM is refused as by a provider that lacks it.
  bool hmem = false;
  static Config from_env();
};

// STRICT_FI_RX_CQ_DATA: receive buffers this layer posts to the base per endpoint, and so the
// largest message it advertises (ep_attr->max_msg_size). They must cover what a peer may send
// between two reads of the target's CQ (libxport keeps 256 receives per endpoint): a base out of
// posted receives holds messages as unexpected and reports later writes first. Pages are only
// committed as messages land in them.
inline constexpr size_t kRxSlots = 256;
inline constexpr size_t kRxSlotSize = 64 * 1024;
// STRICT_FI_CQ_OVERRUN: the size of a CQ opened with size 0 (the util CQ default of libfabric,
// which tcp, ofi_rxm and shm use).
inline constexpr size_t kDefaultCqSize = 1024;

// Process-wide counts of what was injected, printed at cleanup under STRICT_FI_VERBOSE=1.
struct Totals {
  std::atomic<uint64_t> posts{0}, eagain{0}, errors{0}, mr_rejects{0}, dead_fails{0},
      mr_busy_closes{0};
  std::atomic<uint64_t> cq_data_refused{0}, cq_data_masked{0};
  std::atomic<uint64_t> rx_messages{0}, rx_writes{0}, rx_waited{0}, rx_truncated{0}, rx_canceled{0};
  std::atomic<uint64_t> reordered{0}, delayed_completions{0}, delayed_posts{0},
      delayed_post_errors{0};
  std::atomic<uint64_t> overruns{0}, overrun_eio{0}, cq_peak{0};
  // STRICT_FI_HMEM: FI_HMEM_CUDA registrations made, registrations refused (an iface other than
  // FI_HMEM_SYSTEM without FI_HMEM granted), operations on GPU memory refused (no descriptor of
  // its MR, or an inject); sends admitted with a payload in GPU memory under its FI_HMEM_CUDA
  // descriptor (the provider, not the application's CPU, reads it).
  std::atomic<uint64_t> hmem_registrations{0}, hmem_refused{0}, hmem_op_rejects{0},
      hmem_sends{0};
};
extern Totals totals;
void print_totals(const Config& cfg);

struct Cq;
struct Endpoint;
struct Mr;
struct RxQueue;

struct DeferredPost;

struct Fabric {
  fid_fabric fabric;
  fid_fabric* base = nullptr;
  std::string base_name;
};

// Every data path of a domain (posts, CQ reads, binds, cancel, close) runs under Domain::mu, so
// the receive queues, held completions, delayed posts and counts never need their own locks.
// Base calls are made under it too: base providers never call back into this layer.
struct Domain {
  fid_domain domain;
  Fabric* fabric = nullptr;
  fid_domain* base = nullptr;
  Config cfg;
  std::string name;                    // domain_attr->name, for STRICT_FI_DELAY_DOMAIN
  bool enforce_mr_endpoint = false;    // the info it was opened with carries FI_MR_ENDPOINT
  bool base_prov_key = false;          // the base hands out keys (FI_MR_PROV_KEY)
  bool base_mr_local = false;          // the base wants descriptors for local buffers
  bool source = false;                 // FI_SOURCE: CQs report source addresses
  bool hmem = false;                   // opened with FI_HMEM (STRICT_FI_HMEM granted it)
  // FI_HMEM_CUDA registrations by base address (under mu): the ranges an operation may only
  // reach with their MR's descriptor, and never through an inject.
  std::map<uintptr_t, const Mr*> hmem_ranges;
  uint64_t delay_us = 0;               // STRICT_FI_DELAY_US for this domain
  uint64_t delay_post_us = 0;          // STRICT_FI_DELAY_POST_US for this domain
  bool auto_progress = false;          // opened with FI_PROGRESS_AUTO data progress
  std::atomic<uint64_t> posts{0};      // every post, for STRICT_FI_EAGAIN_EVERY
  std::atomic<uint64_t> ops{0};        // data operations admitted, for STRICT_FI_DEAD_DOMAIN_AT
  std::atomic<uint64_t> error_ops{0};  // operations of STRICT_FI_ERROR_OP kinds
  std::atomic<bool> dead{false};
  bool overrun = false;  // a CQ of it was overrun: later posts fail with -FI_EIO
  std::mutex mu;
  std::vector<Cq*> cqs;
  std::vector<Endpoint*> eps;
  std::mt19937_64 rng;
  uint64_t next_ep_id = 1;
  // FI_PROGRESS_AUTO with STRICT_FI_DELAY_POST_US: a thread posts what is due even while the
  // application makes no call (a slow NIC still delivers).
  std::thread pump;
  std::condition_variable pump_cv;
  bool pump_stop = false;
  // Marks the domain dead and fails every operation still outstanding on its CQs (mu held).
  void kill();
  uint64_t draw_us(uint64_t max_us);  // uniform in [0, max_us]
};

// A completion held by a strict CQ until the application reads it.
struct Source;
struct Entry {
  fi_cq_err_entry e{};  // op_context, flags, len, buf, data; err fields when `error`
  fi_addr_t src = FI_ADDR_NOTAVAIL;
  bool error = false;
  bool admitted = false;           // of an operation the gate admitted and tracks: dropped when
                                   // the domain dies (its context fails instead)
  bool rx = false;                 // a receive-side completion: keeps its order per endpoint
  std::shared_ptr<Source> source;  // its endpoint's CQ binding; null for CQ-wide entries
  uint64_t ready_ns = 0;           // STRICT_FI_DELAY_US: not readable before
  uint64_t seq = 0;                // order of arrival in this CQ
  std::string text;                // err_data handed out with an error entry
};

// One endpoint's binding to one strict CQ: a base CQ of its own, so that every base completion
// is known to belong to that endpoint (remote writes with data carry no context).
struct Source {
  Cq* cq = nullptr;
  Endpoint* ep = nullptr;  // null once the endpoint is closed
  fid_cq* base = nullptr;
  uint64_t ep_id = 0;
  uint64_t bind_flags = 0;  // FI_TRANSMIT | FI_RECV
  int64_t expected = 0;     // STRICT_FI_CQ_OVERRUN: completions of it that can still appear
  uint64_t last_rx_ready = 0;
};

struct Cq {
  fid_cq cq;
  Domain* domain = nullptr;
  fi_cq_format format = FI_CQ_FORMAT_CONTEXT;
  size_t entry_size = 0;
  size_t base_size = 0;   // size of each endpoint's base CQ
  size_t size = 0;        // the size the application asked for (STRICT_FI_CQ_OVERRUN)
  uint64_t reads = 0;     // fi_cq_read calls (STRICT_FI_CQ_FAIL_AT)
  bool failed = false;    // the CQ failed for good (STRICT_FI_CQ_FAIL_AT): reads give -FI_EIO
  bool tracking = false;  // remembers outstanding contexts (only when a dead domain is asked for)
  std::vector<std::shared_ptr<Source>> sources;
  std::deque<Entry> staged;
  uint64_t next_seq = 1;
  uint64_t err_seq = 0;      // the error entry fi_cq_read announced with -FI_EAVAIL
  std::string current_text;  // err_data of the last error entry read, valid until next read
  std::unordered_multimap<void*, uint64_t> outstanding;
  int64_t expected = 0;  // STRICT_FI_CQ_OVERRUN: completions that can still appear
  bool overrun = false;
  bool overrun_reported = false;
  std::string overrun_text;
  std::atomic<bool> signaled{false};

  // All of these run under domain->mu.
  void stage(Entry e);  // assigns its delay and order
  void push_error(const std::shared_ptr<Source>& s, void* ctx, uint64_t flags, bool rx, int err,
                  int prov_errno, std::string text);
  void track(void* ctx, uint64_t flags);
  void untrack(void* ctx);
  void fail_outstanding();
  // STRICT_FI_CQ_OVERRUN: one more completion can appear; false (and the CQ overrun) when that
  // exceeds its size.
  bool expect(const std::shared_ptr<Source>& s);
  void unexpect(const std::shared_ptr<Source>& s);
  void pull();  // takes what the endpoints' base CQs have
  void set_overrun();
  // The index of the held entry to hand out next (errors only, for fi_cq_readerr), -1 if none
  // may leave yet.
  long choose(uint64_t now, bool errors_only);
  Entry take_out(size_t i);  // removes it, with the bookkeeping of a completion read
};

// ---- what a post carries through the gate ----

inline constexpr ssize_t kConsumed = 1;  // an error completion was queued instead of posting
inline constexpr size_t kMaxIov = 16;
// What the gate needs to know of one call.
struct Request {
  Op op = Op::send;
  void* ctx = nullptr;
  bool completes = true;  // a completion will be written for it (not an inject)
  void* const* desc = nullptr;
  size_t count = 0;
  bool has_data = false;  // carries remote CQ data
  uint64_t data = 0;
  // The local buffers (count of them; for an inject with FI_INJECT, its payload), valid while
  // the gate runs only: checked against GPU memory registrations (STRICT_FI_HMEM).
  const iovec* iov = nullptr;
  bool inject = false;  // FI_INJECT: the payload is read by the CPU at the call
  fi_addr_t peer = FI_ADDR_UNSPEC;  // the other side (delayed posts keep their order per peer)
};

struct Admission {
  Domain* domain = nullptr;
  Endpoint* scribbled = nullptr;   // STRICT_FI_SCRIBBLE: the context was recorded as in flight
  Cq* tracked = nullptr;           // set when the context was recorded as outstanding
  bool counted_error = false;      // counted towards STRICT_FI_ERROR_AT
  std::shared_ptr<Source> expect;  // counted towards STRICT_FI_CQ_OVERRUN
};

// Posts an admitted operation to a base endpoint with the base's descriptors. Owns copies of
// whatever the call lent only for its duration (iov arrays, inject payloads), so that a
// delayed post can run it later.
using PostFn = std::function<ssize_t(fid_ep* base, void** base_desc)>;

struct DeferredPost {
  uint64_t ready_ns = 0;
  PostFn post;
  void* base_desc[kMaxIov] = {};
  Request req;
  Admission adm;
};

struct RxQueueDelete {
  void operator()(RxQueue* q) const;  // rx_queue.cc, where RxQueue is complete
};

struct Endpoint {
  fid_ep ep;
  Domain* domain = nullptr;
  fid_ep* base = nullptr;
  uint64_t id = 0;
  std::shared_ptr<Source> tx_src;
  std::shared_ptr<Source> rx_src;
  std::atomic<int> bound_mrs{0};
  bool named = false;  // the application gave the endpoint a name (fi_setname)
  std::unique_ptr<RxQueue, RxQueueDelete> rxq;  // STRICT_FI_RX_CQ_DATA
  std::deque<DeferredPost> deferred;            // STRICT_FI_DELAY_POST_US
  // STRICT_FI_SCRIBBLE: contexts of operations whose completion has not been read yet.
  std::unordered_multiset<void*> in_flight;
  Cq* tx_cq() const { return tx_src ? tx_src->cq : nullptr; }
  Cq* rx_cq() const { return rx_src ? rx_src->cq : nullptr; }
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
  bool hmem = false;  // registered as FI_HMEM_CUDA memory
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

// STRICT_FI_SCRIBBLE: writes into the provider-owned words of the caller's fi_context2, as
// providers in FI_CONTEXT2 mode may do while an operation is theirs (posting, completing,
// cancelling at endpoint close). A caller that freed a context the provider still owns is
// caught by AddressSanitizer.
void scribble(void* ctx);

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

uint64_t now_ns();

// STRICT_FI_HMEM: whether `buf` overlaps GPU memory registered on `d` (takes d->mu).
bool touches_hmem(Domain* d, const iovec& buf);
// The FI_HMEM_CUDA registration of `d` overlapping `buf`, or nullptr (d->mu held).
const Mr* hmem_overlap(const Domain* d, const iovec& buf);

// ---- the gate every data operation passes (gate.cc) ----

// Admits an operation and, unless the gate answered for it, posts it (or, under
// STRICT_FI_DELAY_POST_US, queues it); takes Domain::mu.
ssize_t submit(fid_ep* ep, const Request& req, PostFn post);
// The same for receives: under STRICT_FI_RX_CQ_DATA the receive is held by this layer.
ssize_t submit_recv(fid_ep* ep, const Request& req, const iovec* iov, size_t count, PostFn post);
// Undoes the bookkeeping of an admitted operation the base refused (typically -FI_EAGAIN), so
// that its retry is counted once.
void refused(const Admission& adm, void* ctx);

// ---- STRICT_FI_DELAY_POST_US (delay.cc) ----

void defer_post(Endpoint* ep, const Request& req, void** base_desc, PostFn post, Admission adm);
void flush_posts(Domain* d);  // posts what is due, on every endpoint of the domain
void start_pump(Domain* d);   // at fi_domain, for auto progress
void stop_pump(Domain* d);    // at domain close, before the base domain closes
// At endpoint close (`closing`: their contexts are forgotten) and domain death (they stay
// outstanding and fail).
void drop_posts(Endpoint* ep, bool closing);
// The seed of a domain's draws (STRICT_FI_SEED + the domain's ordinal in this process).
uint64_t domain_seed(const Config& cfg, const std::string& name);

// ---- STRICT_FI_RX_CQ_DATA (rx_queue.cc) ----

int rx_arm(Endpoint* ep);  // at enable: internal receives posted to the base
ssize_t rx_post(Endpoint* ep, void* ctx, const iovec* iov, size_t count);
// Takes an entry of the endpoint's receive side; false when it is not one this mode handles.
bool rx_route(const std::shared_ptr<Source>& s, const fi_cq_err_entry& e, bool error, fi_addr_t src,
              const std::string& text);
void rx_repost(Endpoint* ep);  // retries internal receives the base refused
bool rx_cancel(Endpoint* ep, void* ctx);
void rx_clear(Endpoint* ep, bool closing);  // as drop_posts

}  // namespace strict
