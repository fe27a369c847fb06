// Opening, binding and registering libfabric objects.
#include "fabric/objects.hpp"

#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cctype>
#include <cstring>
#include <charconv>
#include <limits>
#include <string_view>

#include "core/log.hpp"
#include "fabric/address.hpp"

namespace xport::fabric {
namespace {

constexpr std::string_view kShmRegionPrefix = "xport_";

// shm names its region in /dev/shm "<pid>:<domain>:<endpoint>" by default. A process killed
// with SIGKILL leaves its regions behind; once its pid is reused, a new process's fi_enable can
// meet its stale region (seen: -FI_EBUSY with some 900 stale regions after a day of tests). A
// name with a per-process random part never meets a stale region, whatever the pid.
std::string unique_shm_name() {
  static const uint64_t nonce = [] {
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), 0) != sizeof(v)) {
      v = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    }
    return v;
  }();
  static std::atomic<uint32_t> next{0};
  return core::str(kShmRegionPrefix, getpid(), "_", std::hex, nonce, "_", std::dec,
                   next.fetch_add(1));
}

bool is_shm(const fi_info* info) {
  return info->fabric_attr != nullptr && info->fabric_attr->prov_name != nullptr &&
         std::strcmp(info->fabric_attr->prov_name, "shm") == 0;
}

}  // namespace

bool parse_shm_region_name(std::string_view name, pid_t* pid) {
  if (name.substr(0, kShmRegionPrefix.size()) != kShmRegionPrefix) return false;
  name.remove_prefix(kShmRegionPrefix.size());
  // <pid>_<hex nonce>_<n>: three fields, each all digits of its base, nothing else.
  uint64_t fields[3] = {};
  const int bases[3] = {10, 16, 10};
  for (int i = 0; i < 3; ++i) {
    const char* end = name.data() + name.size();
    auto [at, ec] = std::from_chars(name.data(), end, fields[i], bases[i]);
    if (ec != std::errc() || at == name.data()) return false;
    name.remove_prefix(static_cast<size_t>(at - name.data()));
    if (i < 2 && (name.empty() || name.front() != '_')) return false;
    if (i < 2) name.remove_prefix(1);
  }
  if (!name.empty() || fields[0] == 0 ||
      fields[0] > static_cast<uint64_t>(std::numeric_limits<pid_t>::max())) {
    return false;
  }
  *pid = static_cast<pid_t>(fields[0]);
  return true;
}

const char* op_name(OpKind op) {
  switch (op) {
    case OpKind::send: return "send";
    case OpKind::recv: return "recv";
    case OpKind::write: return "write";
    case OpKind::read: return "read";
    case OpKind::atomic: return "atomic";
    case OpKind::count: break;
  }
  return "?";
}

Result<std::unique_ptr<Domain>> Domain::open(const fi_info* info) {
  auto d = std::unique_ptr<Domain>(new Domain());
  d->info_ = dup_info(info);
  d->name_ = info->domain_attr->name != nullptr ? info->domain_attr->name : "?";
  int ret = fi_fabric(d->info_->fabric_attr, d->fabric_.out(), nullptr);
  if (ret != 0) return fi_status(ret, core::str("fi_fabric for ", d->name_));
  ret = fi_domain(d->fabric_.get(), d->info_.get(), d->domain_.out(), nullptr);
  if (ret != 0) return fi_status(ret, core::str("fi_domain ", d->name_));
  if (d->connected_endpoints()) {
    fi_eq_attr attr{};
    attr.size = 256;
    attr.wait_obj = FI_WAIT_UNSPEC;
    ret = fi_eq_open(d->fabric_.get(), &attr, d->eq_.out(), nullptr);
    if (ret != 0) return fi_status(ret, core::str("fi_eq_open on ", d->name_));
  }
  return d;
}

Result<std::unique_ptr<CompletionQueue>> CompletionQueue::open(Domain& domain, size_t size,
                                                               bool wait_fd) {
  auto cq = std::make_unique<CompletionQueue>();
  fi_cq_attr attr{};
  attr.format = FI_CQ_FORMAT_DATA;
  attr.size = size;
  attr.wait_obj = wait_fd ? FI_WAIT_FD : FI_WAIT_NONE;
  int ret = fi_cq_open(domain.domain(), &attr, cq->cq_.out(), nullptr);
  if (ret != 0 && wait_fd) {
    // No file-descriptor wait object here (shm: -FI_ENOSYS): a CQ without one; waits poll it.
    attr.wait_obj = FI_WAIT_NONE;
    ret = fi_cq_open(domain.domain(), &attr, cq->cq_.out(), nullptr);
  }
  if (ret != 0) return fi_status(ret, core::str("fi_cq_open on ", domain.name()));
  if (attr.wait_obj == FI_WAIT_FD) {
    int fd = -1;
    if (fi_control(&cq->cq_.get()->fid, FI_GETWAIT, &fd) == 0 && fd >= 0) cq->wait_fd_ = fd;
  }
  return cq;
}

Status CompletionQueue::read_error(void** context, int* errnum) {
  fi_cq_err_entry err{};
  ssize_t ret = fi_cq_readerr(cq_.get(), &err, 0);
  if (ret < 0) {
    *context = nullptr;
    *errnum = static_cast<int>(-ret);
    return fi_status(static_cast<int>(ret), "fi_cq_readerr");
  }
  *context = err.op_context;
  *errnum = err.err;
  char buf[256] = {0};
  const char* prov = fi_cq_strerror(cq_.get(), err.prov_errno, err.err_data, buf, sizeof(buf));
  Status s = fi_status(-err.err, "operation");
  return Status(s.code(), core::str("completion error: ", fi_strerror(err.err), " (provider: ",
                                    prov != nullptr ? prov : "no detail", ", prov_errno ",
                                    err.prov_errno, ")"));
}

Result<std::unique_ptr<AddressVector>> AddressVector::open(Domain& domain) {
  auto av = std::make_unique<AddressVector>();
  fi_av_attr attr{};
  attr.type = FI_AV_TABLE;
  attr.count = 64;
  int ret = fi_av_open(domain.domain(), &attr, av->av_.out(), nullptr);
  if (ret != 0) return fi_status(ret, core::str("fi_av_open on ", domain.name()));
  const char* prov = domain.info()->fabric_attr->prov_name;
  av->shm_ = prov != nullptr && std::strcmp(prov, "shm") == 0;
  av->capacity_ = av->shm_ ? kShmAvCapacity : 0;
  av->addr_format_ = domain.info()->addr_format;
  return av;
}

namespace {

// shm addresses are a region name in /dev/shm, NUL-terminated or not, with or without the
// "fi_shm://" prefix (libxport names its endpoints itself: xport_PID_TOKEN_N).
Status check_shm_address(const std::vector<uint8_t>& address) {
  static constexpr std::string_view kPrefix = "fi_shm://";
  std::string_view name(reinterpret_cast<const char*>(address.data()), address.size());
  name = name.substr(0, name.find('\0'));
  if (name.starts_with(kPrefix)) name.remove_prefix(kPrefix.size());
  if (name.empty() || name.size() > 255) {
    return core::error(Code::invalid_argument, "not a shm address (a region name): ",
                       address.size(), " bytes");
  }
  for (char ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != ':' && ch != '_' && ch != '-' &&
        ch != '.') {
      return core::error(Code::invalid_argument, "shm address with a character a region name "
                         "does not have (", static_cast<int>(static_cast<unsigned char>(ch)), ")");
    }
  }
  struct stat st {};
  if (name == "." || name == ".." || ::stat(core::str("/dev/shm/", name).c_str(), &st) != 0) {
    return core::error(Code::invalid_argument, "shm address 'fi_shm://", name,
                       "' names no shared-memory region on this host");
  }
  return Status::success();
}

}  // namespace

Result<fi_addr_t> AddressVector::insert(const std::vector<uint8_t>& address) {
  if (shm_) XPORT_RETURN_IF_ERROR(check_shm_address(address));
  if (capacity_ != 0 && used_ >= capacity_) {
    return core::error(Code::resource, "the address table is full (", used_, " of ", capacity_,
                       " addresses, the shm provider's limit per address vector)");
  }
  XPORT_RETURN_IF_ERROR(check_peer_address(addr_format_, address));
  fi_addr_t out = FI_ADDR_NOTAVAIL;
  int ret = fi_av_insert(av_.get(), address.data(), 1, &out, 0, nullptr);
  if (ret != 1 || out == FI_ADDR_NOTAVAIL) {
    // Nothing of it may stay: an entry the provider made all the same is removed.
    if (out != FI_ADDR_NOTAVAIL) (void)fi_av_remove(av_.get(), &out, 1, 0);
    return core::error(Code::invalid_argument, "fi_av_insert rejected a peer address of ",
                       address.size(), " bytes (ret ", ret, ")");
  }
  ++used_;
  return out;
}

Status AddressVector::remove(fi_addr_t addr) {
  int ret = fi_av_remove(av_.get(), &addr, 1, 0);
  if (ret != 0) return fi_status(ret, "fi_av_remove");
  if (used_ > 0) --used_;
  return Status::success();
}

Result<std::unique_ptr<Endpoint>> Endpoint::open(Domain& domain, fi_info* info,
                                                 CompletionQueue& cq, AddressVector* av,
                                                 std::string name) {
  auto ep = std::unique_ptr<Endpoint>(new Endpoint());
  ep->name_ = std::move(name);
  int ret = fi_endpoint(domain.domain(), info, ep->ep_.out(), nullptr);
  if (ret != 0) return fi_status(ret, core::str("fi_endpoint ", ep->name_));
  ret = fi_ep_bind(ep->ep_.get(), &cq.get()->fid, FI_TRANSMIT | FI_RECV);
  if (ret != 0) return fi_status(ret, core::str("fi_ep_bind(cq) ", ep->name_));
  if (av != nullptr) {
    ret = fi_ep_bind(ep->ep_.get(), &av->get()->fid, 0);
    if (ret != 0) return fi_status(ret, core::str("fi_ep_bind(av) ", ep->name_));
  }
  if (domain.eq() != nullptr) {
    ret = fi_ep_bind(ep->ep_.get(), &domain.eq()->fid, 0);
    if (ret != 0) return fi_status(ret, core::str("fi_ep_bind(eq) ", ep->name_));
  }
  if (is_shm(info)) {
    std::string shm_name = unique_shm_name();
    ret = fi_setname(&ep->ep_.get()->fid, shm_name.data(), shm_name.size() + 1);
    if (ret != 0) return fi_status(ret, core::str("fi_setname ", ep->name_, " to ", shm_name));
  }
  ret = fi_enable(ep->ep_.get());
  if (ret != 0) return fi_status(ret, core::str("fi_enable ", ep->name_));
  return ep;
}

namespace {
Result<std::vector<uint8_t>> get_name(fid_t fid, const char* what) {
  std::vector<uint8_t> addr(64);
  size_t len = addr.size();
  int ret = fi_getname(fid, addr.data(), &len);
  if (ret == -FI_ETOOSMALL) {
    addr.resize(len);
    ret = fi_getname(fid, addr.data(), &len);
  }
  if (ret != 0) return fi_status(ret, core::str("fi_getname of ", what));
  addr.resize(len);
  return addr;
}
}  // namespace

Result<std::vector<uint8_t>> Endpoint::address() const {
  return get_name(&ep_.get()->fid, name_.c_str());
}

Status Endpoint::result(ssize_t ret, const char* what) {
  if (ret == 0) return Status::success();
  if (ret == -FI_EAGAIN) {
    counters_.eagain.add();
    // Hot (posts retried by progress): no formatting; callers say what and where if it lasts.
    (void)what;
    return Status(Code::again, "provider busy (-FI_EAGAIN)");
  }
  return fi_status(static_cast<int>(ret), core::str(what, " on ", name_));
}

Status Endpoint::send(const void* buf, size_t len, void* desc, fi_addr_t dest, void* ctx) {
  return post(OpKind::send, len, "fi_send",
              [&] { return fi_send(ep_.get(), buf, len, desc, dest, ctx); });
}

Status Endpoint::send2(const void* head, size_t head_len, void* head_desc, const void* body,
                       size_t body_len, void* body_desc, fi_addr_t dest, void* ctx) {
  iovec iov[2] = {{const_cast<void*>(head), head_len}, {const_cast<void*>(body), body_len}};
  void* desc[2] = {head_desc, body_desc};
  return post(OpKind::send, head_len + body_len, "fi_sendv",
              [&] { return fi_sendv(ep_.get(), iov, desc, 2, dest, ctx); });
}

Status Endpoint::inject(const void* buf, size_t len, fi_addr_t dest) {
  Status s = post(OpKind::send, len, "fi_inject", [&] { return fi_inject(ep_.get(), buf, len, dest); });
  if (s.ok()) counters_.completed.add();  // an inject completes when it returns
  return s;
}

Status Endpoint::senddata(const void* buf, size_t len, void* desc, uint64_t data,
                          fi_addr_t dest, void* ctx) {
  return post(OpKind::send, len, "fi_senddata",
              [&] { return fi_senddata(ep_.get(), buf, len, desc, data, dest, ctx); });
}

Status Endpoint::injectdata(const void* buf, size_t len, uint64_t data, fi_addr_t dest) {
  Status s = post(OpKind::send, len, "fi_injectdata",
                  [&] { return fi_injectdata(ep_.get(), buf, len, data, dest); });
  if (s.ok()) counters_.completed.add();  // an inject completes when it returns
  return s;
}

Status Endpoint::recv(void* buf, size_t len, void* desc, fi_addr_t src, void* ctx) {
  // Posted receives are counted as buffers, not as traffic: bytes are counted on arrival.
  return result(fi_recv(ep_.get(), buf, len, desc, src, ctx), "fi_recv");
}

Status Endpoint::write(const void* buf, size_t len, void* desc, fi_addr_t dest, uint64_t raddr,
                       uint64_t key, void* ctx) {
  return post(OpKind::write, len, "fi_write",
              [&] { return fi_write(ep_.get(), buf, len, desc, dest, raddr, key, ctx); });
}

Status Endpoint::writedata(const void* buf, size_t len, void* desc, uint64_t data,
                           fi_addr_t dest, uint64_t raddr, uint64_t key, void* ctx) {
  return post(OpKind::write, len, "fi_writedata", [&] {
    return fi_writedata(ep_.get(), buf, len, desc, data, dest, raddr, key, ctx);
  });
}

Status Endpoint::inject_writedata(const void* buf, size_t len, uint64_t data, fi_addr_t dest,
                                  uint64_t raddr, uint64_t key) {
  Status s = post(OpKind::write, len, "fi_inject_writedata", [&] {
    return fi_inject_writedata(ep_.get(), buf, len, data, dest, raddr, key);
  });
  if (s.ok()) counters_.completed.add();  // an inject completes when it returns
  return s;
}

Status Endpoint::read(void* buf, size_t len, void* desc, fi_addr_t src, uint64_t raddr,
                      uint64_t key, void* ctx) {
  return post(OpKind::read, len, "fi_read",
              [&] { return fi_read(ep_.get(), buf, len, desc, src, raddr, key, ctx); });
}

Status Endpoint::fetch_atomic(const uint64_t* operand, void* desc, uint64_t* result,
                              void* result_desc, fi_addr_t dest, uint64_t raddr, uint64_t key,
                              fi_op op, void* ctx) {
  return post(OpKind::atomic, sizeof(uint64_t), "fi_fetch_atomic", [&] {
    return fi_fetch_atomic(ep_.get(), operand, 1, desc, result, result_desc, dest, raddr, key,
                           FI_UINT64, op, ctx);
  });
}

Status Endpoint::compare_atomic(const uint64_t* operand, void* desc, const uint64_t* compare,
                                void* compare_desc, uint64_t* result, void* result_desc,
                                fi_addr_t dest, uint64_t raddr, uint64_t key, void* ctx) {
  return post(OpKind::atomic, sizeof(uint64_t), "fi_compare_atomic", [&] {
    return fi_compare_atomic(ep_.get(), operand, 1, desc, compare, compare_desc, result,
                             result_desc, dest, raddr, key, FI_UINT64, FI_CSWAP, ctx);
  });
}

bool Endpoint::atomics_valid() {
  size_t count = 0;
  for (fi_op op : {FI_SUM, FI_ATOMIC_WRITE, FI_ATOMIC_READ}) {
    if (fi_fetch_atomicvalid(ep_.get(), FI_UINT64, op, &count) != 0 || count < 1) return false;
  }
  return fi_compare_atomicvalid(ep_.get(), FI_UINT64, FI_CSWAP, &count) == 0 && count >= 1;
}

void Endpoint::cancel(void* ctx) { (void)fi_cancel(&ep_.get()->fid, ctx); }

Result<std::unique_ptr<PassiveEndpoint>> PassiveEndpoint::listen(Domain& domain) {
  auto pep = std::make_unique<PassiveEndpoint>();
  int ret = fi_passive_ep(domain.fabric(), domain.info(), pep->pep_.out(), nullptr);
  if (ret != 0) return fi_status(ret, core::str("fi_passive_ep on ", domain.name()));
  ret = fi_pep_bind(pep->pep_.get(), &domain.eq()->fid, 0);
  if (ret != 0) return fi_status(ret, "fi_pep_bind(eq)");
  ret = fi_listen(pep->pep_.get());
  if (ret != 0) return fi_status(ret, core::str("fi_listen on ", domain.name()));
  return pep;
}

Result<std::vector<uint8_t>> PassiveEndpoint::address() const {
  return get_name(&pep_.get()->fid, "passive endpoint");
}

uint64_t random_mr_key(size_t key_size) {
  for (;;) {
    uint64_t k = 0;
    if (getrandom(&k, sizeof(k), 0) != sizeof(k)) {
      k = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) *
          0x9E3779B97F4A7C15ull;
    }
    if (key_size > 0 && key_size < 8) k &= (uint64_t{1} << (8 * key_size)) - 1;
    if (k != 0 && k != FI_KEY_NOTAVAIL) return k;
  }
}

Result<std::unique_ptr<MemoryRegistration>> MemoryRegistration::create(
    Domain& domain, const void* buf, size_t len, uint64_t access, Endpoint* bind_to,
    int cuda_device) {
  auto m = std::unique_ptr<MemoryRegistration>(new MemoryRegistration());
  const bool prov_key = (domain.mr_mode() & FI_MR_PROV_KEY) != 0;
  uint64_t requested = 0;
  int ret = -FI_ENOKEY;
  // A random requested key can meet one in use (-FI_ENOKEY): draw again, a bounded number of
  // times (a collision at 64 bits means the provider's key space is tiny).
  for (int attempt = 0; attempt < 16 && ret == -FI_ENOKEY; ++attempt) {
    requested = prov_key ? 0 : random_mr_key(domain.mr_key_size());
    if (cuda_device < 0) {
      ret = fi_mr_reg(domain.domain(), buf, len, access, 0, requested, 0, m->mr_.out(), nullptr);
    } else {
      // GPU memory the provider registers itself (FI_HMEM): the same range, named as CUDA
      // memory of its device.
      iovec iov{const_cast<void*>(buf), len};
      fi_mr_attr attr{};
      attr.mr_iov = &iov;
      attr.iov_count = 1;
      attr.access = access;
      attr.requested_key = requested;
      attr.iface = FI_HMEM_CUDA;
      attr.device.cuda = cuda_device;
      ret = fi_mr_regattr(domain.domain(), &attr, 0, m->mr_.out());
    }
  }
  if (ret != 0) {
    return fi_status(ret, core::str(cuda_device < 0 ? "fi_mr_reg" : "fi_mr_regattr (FI_HMEM_CUDA)",
                                    " of ", len, " bytes at ", buf,
                                    cuda_device < 0 ? "" : core::str(" on GPU ", cuda_device),
                                    " on ", domain.name()));
  }
  if (domain.mr_mode() & FI_MR_ENDPOINT) {
    if (bind_to == nullptr) {
      return core::error(Code::internal, "FI_MR_ENDPOINT registration without an endpoint");
    }
    ret = fi_mr_bind(m->mr_.get(), &bind_to->get()->fid, 0);
    if (ret != 0) return fi_status(ret, core::str("fi_mr_bind to ", bind_to->name()));
    ret = fi_mr_enable(m->mr_.get());
    if (ret != 0) return fi_status(ret, core::str("fi_mr_enable on ", bind_to->name()));
  }
  m->desc_ = fi_mr_desc(m->mr_.get());
  m->key_ = prov_key ? fi_mr_key(m->mr_.get()) : requested;
  if (m->key_ == FI_KEY_NOTAVAIL) {
    return core::error(Code::unsupported, "provider returned no MR key (FI_MR_RAW keys are not "
                                          "supported yet) on ", domain.name());
  }
  return m;
}

}  // namespace xport::fabric
