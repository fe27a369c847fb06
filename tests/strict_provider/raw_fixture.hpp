// Raw libfabric through the strict provider: one domain, one CQ and AV (or one CQ per endpoint),
// two RDM endpoints that know each other's address, for tests that need exact control of every
// call. STRICT_TEST_PROGRESS=auto|manual picks the data progress asked of the base.
#pragma once

#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace strict_test {

// Environment for one test; restored by the destructor.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const auto& [k, v] : vars) {
      const char* old = std::getenv(k);
      saved_.push_back({k, old != nullptr ? std::string(old) : std::string(), old != nullptr});
      setenv(k, v, 1);
    }
  }
  ~ScopedEnv() {
    for (const auto& s : saved_) {
      if (s.had)
        setenv(s.name.c_str(), s.value.c_str(), 1);
      else
        unsetenv(s.name.c_str());
    }
  }

 private:
  struct Saved {
    std::string name, value;
    bool had;
  };
  std::vector<Saved> saved_;
};

inline fi_info* strict_hints(int mr_mode) {
  fi_info* h = fi_allocinfo();
  h->caps =
      FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_RECV | FI_SEND | FI_REMOTE_READ | FI_REMOTE_WRITE;
  h->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
  if (const char* p = std::getenv("STRICT_TEST_PROGRESS"); p != nullptr && *p != '\0') {
    h->domain_attr->data_progress =
        std::strcmp(p, "auto") == 0 ? FI_PROGRESS_AUTO : FI_PROGRESS_MANUAL;
  }
  h->ep_attr->type = FI_EP_RDM;
  h->domain_attr->mr_mode = mr_mode;
  h->domain_attr->threading = FI_THREAD_SAFE;
  h->fabric_attr->prov_name = strdup("strict");
  return h;
}

constexpr int kMrModes =
    FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;

struct Completion {
  ssize_t ret = 0;  // 1: success entry, -FI_EAVAIL: error entry in err, else what fi_cq_read said
  fi_cq_data_entry entry{};
  fi_cq_err_entry err{};
  std::string text;  // fi_cq_strerror of an error entry
};

using Clock = std::chrono::steady_clock;

// A second domain on the rig's fabric (as another process's NIC would be), opened under the
// environment of its caller: one CQ, one endpoint, one MR. Closed by the rig's TearDown.
struct PeerDomain {
  fid_domain* domain = nullptr;
  fid_cq* cq = nullptr;
  fid_av* av = nullptr;
  fid_ep* ep = nullptr;
  fid_mr* mr = nullptr;
  fi_addr_t to = FI_ADDR_NOTAVAIL;        // where `ep` sends (set by the test)
  fi_addr_t to_ep1 = FI_ADDR_NOTAVAIL;    // the rig's endpoint 1, in this domain's AV
  fi_addr_t from_rig = FI_ADDR_NOTAVAIL;  // this endpoint, in the rig's AV
};

struct RigOptions {
  int mr_mode = kMrModes;
  size_t cq_size = 128;
  bool cq_per_endpoint = false;  // ep_[i] bound (both directions) to cqs_[i]
  size_t cq1_size = 128;         // size of endpoint 1's CQ when it has its own
  uint64_t extra_caps = 0;       // asked for beyond messages and RMA (FI_HMEM)
};

class RawRig : public ::testing::Test {
 protected:
  bool open_rig(int mr_mode) {
    RigOptions o;
    o.mr_mode = mr_mode;
    return open_rig(o);
  }

  // Opens everything; returns false (with a gtest failure) when something refuses.
  bool open_rig(const RigOptions& o = RigOptions()) {
    const int mr_mode = o.mr_mode;
    fi_info* hints = strict_hints(mr_mode);
    hints->caps |= o.extra_caps;
    fi_info* list = nullptr;
    int ret = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list);
    fi_freeinfo(hints);
    EXPECT_EQ(ret, 0) << "fi_getinfo(strict): " << fi_strerror(-ret)
                      << " (is FI_PROVIDER_PATH set to the module's directory?)";
    if (ret != 0) return false;
    for (fi_info* i = list; i != nullptr; i = i->next) {
      const char* d = i->domain_attr->name;
      const char* f = i->fabric_attr->name;
      if (d != nullptr && std::strcmp(d, "lo") == 0 && f != nullptr && std::strchr(f, '.')) {
        info_ = fi_dupinfo(i);
        break;
      }
    }
    if (info_ == nullptr) info_ = fi_dupinfo(list);  // e.g. shm, whose domain is not "lo"
    fi_freeinfo(list);
    if (fi_fabric(info_->fabric_attr, &fabric_, nullptr) != 0) return fail("fi_fabric");
    if (fi_domain(fabric_, info_, &domain_, nullptr) != 0) return fail("fi_domain");
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_DATA;
    cq_attr.size = o.cq_size;
    if (fi_cq_open(domain_, &cq_attr, &cq_, nullptr) != 0) return fail("fi_cq_open");
    cqs_[0] = cqs_[1] = cq_;
    if (o.cq_per_endpoint) {
      cq_attr.size = o.cq1_size;
      if (fi_cq_open(domain_, &cq_attr, &cqs_[1], nullptr) != 0) return fail("fi_cq_open");
    }
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    if (fi_av_open(domain_, &av_attr, &av_, nullptr) != 0) return fail("fi_av_open");
    for (int i = 0; i < 2; ++i) {
      if (fi_endpoint(domain_, info_, &ep_[i], nullptr) != 0) return fail("fi_endpoint");
      if (fi_ep_bind(ep_[i], &cqs_[i]->fid, FI_TRANSMIT | FI_RECV) != 0) return fail("bind cq");
      if (fi_ep_bind(ep_[i], &av_->fid, 0) != 0) return fail("bind av");
      if (fi_enable(ep_[i]) != 0) return fail("fi_enable");
    }
    for (int i = 0; i < 2; ++i) {
      char name[256];
      size_t len = sizeof(name);
      if (fi_getname(&ep_[i]->fid, name, &len) != 0) return fail("fi_getname");
      if (fi_av_insert(av_, name, 1, &addr_[i], 0, nullptr) != 1) return fail("fi_av_insert");
    }
    return true;
  }

  // Opens a peer domain on the rig's fabric with the rig's info, `buf` registered as its MR;
  // the rig owns it and closes it at TearDown. nullptr (with a gtest failure) when refused.
  PeerDomain* open_peer(void* buf, size_t len) {
    peers_.push_back(std::make_unique<PeerDomain>());
    PeerDomain* p = peers_.back().get();
    return open_peer(p, buf, len) ? p : nullptr;
  }

  bool open_peer(PeerDomain* p, void* buf, size_t len) {
    if (fi_domain(fabric_, info_, &p->domain, nullptr) != 0) return fail("peer fi_domain");
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_DATA;
    if (fi_cq_open(p->domain, &cq_attr, &p->cq, nullptr) != 0) return fail("peer fi_cq_open");
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    if (fi_av_open(p->domain, &av_attr, &p->av, nullptr) != 0) return fail("peer fi_av_open");
    if (fi_endpoint(p->domain, info_, &p->ep, nullptr) != 0) return fail("peer fi_endpoint");
    if (fi_ep_bind(p->ep, &p->cq->fid, FI_TRANSMIT | FI_RECV) != 0) return fail("peer bind");
    if (fi_ep_bind(p->ep, &p->av->fid, 0) != 0) return fail("peer bind av");
    if (fi_enable(p->ep) != 0) return fail("peer fi_enable");
    char name[256];
    size_t n = sizeof(name);
    if (fi_getname(&ep_[1]->fid, name, &n) != 0) return fail("fi_getname");
    if (fi_av_insert(p->av, name, 1, &p->to_ep1, 0, nullptr) != 1) return fail("peer av insert");
    n = sizeof(name);
    if (fi_getname(&p->ep->fid, name, &n) != 0) return fail("peer fi_getname");
    if (fi_av_insert(av_, name, 1, &p->from_rig, 0, nullptr) != 1) return fail("rig av insert");
    if (fi_mr_reg(p->domain, buf, len,
                  FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 99,
                  0, &p->mr, nullptr) != 0)
      return fail("peer fi_mr_reg");
    return true;
  }

  void TearDown() override {
    for (const auto& p : peers_) {
      for (fid* f :
           {p->mr != nullptr ? &p->mr->fid : nullptr, p->ep != nullptr ? &p->ep->fid : nullptr,
            p->av != nullptr ? &p->av->fid : nullptr, p->cq != nullptr ? &p->cq->fid : nullptr,
            p->domain != nullptr ? &p->domain->fid : nullptr})
        close_fid(f);
    }
    // Dependents first: MRs bound to an endpoint, endpoints, then what they were bound to.
    for (fid_mr* m : mrs_) close_fid(m != nullptr ? &m->fid : nullptr);
    for (fid_ep* e : ep_) close_fid(e != nullptr ? &e->fid : nullptr);
    close_fid(av_ != nullptr ? &av_->fid : nullptr);
    if (cqs_[1] != cq_) close_fid(cqs_[1] != nullptr ? &cqs_[1]->fid : nullptr);
    close_fid(cq_ != nullptr ? &cq_->fid : nullptr);
    close_fid(domain_ != nullptr ? &domain_->fid : nullptr);
    close_fid(fabric_ != nullptr ? &fabric_->fid : nullptr);
    fi_freeinfo(info_);
  }

  static void close_fid(fid* f) {
    if (f == nullptr) return;
    int ret = fi_close(f);
    EXPECT_EQ(ret, 0) << "fi_close: " << fi_strerror(-ret);
  }

  bool mr_endpoint() const { return (info_->domain_attr->mr_mode & FI_MR_ENDPOINT) != 0; }

  // Registers `buf`; binds and enables it on endpoint `bind_to` unless that is -1 or the domain
  // does not use FI_MR_ENDPOINT.
  fid_mr* reg(void* buf, size_t len, int bind_to, uint64_t key) {
    fid_mr* mr = nullptr;
    int ret = fi_mr_reg(domain_, buf, len,
                        FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE,
                        0, key, 0, &mr, nullptr);
    EXPECT_EQ(ret, 0) << fi_strerror(-ret);
    if (ret != 0) return nullptr;
    mrs_.push_back(mr);
    if (bind_to >= 0 && mr_endpoint()) {
      EXPECT_EQ(fi_mr_bind(mr, &ep_[bind_to]->fid, 0), 0);
      EXPECT_EQ(fi_mr_enable(mr), 0);
    }
    return mr;
  }

  void close_mr(fid_mr* mr) {
    for (fid_mr*& m : mrs_)
      if (m == mr) m = nullptr;
    EXPECT_EQ(fi_close(&mr->fid), 0);
  }

  // Drives progress on every CQ of the rig without taking entries (a read of count 0).
  void progress() {
    (void)fi_cq_read(cqs_[0], nullptr, 0);
    if (cqs_[1] != cqs_[0]) (void)fi_cq_read(cqs_[1], nullptr, 0);
  }

  // Posts until the provider stops answering -FI_EAGAIN (ofi_rxm connects on first use),
  // driving progress in between, for at most two seconds.
  template <typename F>
  ssize_t retry(F&& post) {
    auto until = Clock::now() + std::chrono::seconds(2);
    ssize_t ret;
    while ((ret = post()) == -FI_EAGAIN && Clock::now() < until) progress();
    return ret;
  }

  // Drives progress until `done()` holds; false when `limit` passed first.
  template <typename F>
  bool progress_until(F&& done, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    auto until = Clock::now() + limit;
    while (!done()) {
      if (Clock::now() >= until) return false;
      progress();
    }
    return true;
  }

  // The next completion on `cq` (default: the first CQ) within `limit`, driving progress on the
  // others too.
  Completion next(fid_cq* cq = nullptr, std::chrono::milliseconds limit = std::chrono::seconds(2)) {
    if (cq == nullptr) cq = cq_;
    Completion c;
    auto until = Clock::now() + limit;
    while (Clock::now() < until) {
      c.ret = fi_cq_read(cq, &c.entry, 1);
      if (c.ret == -FI_EAGAIN) {
        for (fid_cq* other : cqs_)
          if (other != cq) (void)fi_cq_read(other, nullptr, 0);
        continue;
      }
      if (c.ret == -FI_EAVAIL) {
        ssize_t r = fi_cq_readerr(cq, &c.err, 0);
        EXPECT_EQ(r, 1);
        char buf[256] = {0};
        const char* t = fi_cq_strerror(cq, c.err.prov_errno, c.err.err_data, buf, sizeof(buf));
        c.text = t != nullptr ? t : "";
      }
      return c;
    }
    return c;  // -FI_EAGAIN: nothing came
  }

  // The remote address of `p` for RMA into an MR registered from `start` (its offset unless
  // the domain uses virtual addresses).
  uint64_t raddr(const void* start, const void* p = nullptr) const {
    if (p == nullptr) p = start;
    if (info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR) return reinterpret_cast<uint64_t>(p);
    return static_cast<uint64_t>(static_cast<const uint8_t*>(p) -
                                 static_cast<const uint8_t*>(start));
  }

  bool fail(const char* what) {
    ADD_FAILURE() << what << " failed on the strict provider";
    return false;
  }

  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_cq* cqs_[2] = {nullptr, nullptr};  // each endpoint's CQ (both cq_ unless cq_per_endpoint)
  fid_av* av_ = nullptr;
  fid_ep* ep_[2] = {nullptr, nullptr};
  fi_addr_t addr_[2] = {FI_ADDR_NOTAVAIL, FI_ADDR_NOTAVAIL};
  std::vector<fid_mr*> mrs_;
  std::vector<std::unique_ptr<PeerDomain>> peers_;
};

}  // namespace strict_test
