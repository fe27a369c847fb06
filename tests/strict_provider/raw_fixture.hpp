// Raw libfabric through the strict provider: one domain, one CQ and AV (or one CQ per endpoint),
// two RDM endpoints that know each other's address, for tests that need exact control of every
// call. Opened and owned through tools/common/raw_fabric.hpp, the bare loops' set-up.
// STRICT_TEST_PROGRESS=auto|manual picks the data progress asked of the base.
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

#include "common/raw_fabric.hpp"

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

inline raw_fabric::Hints strict_hint_fields(int mr_mode) {
  raw_fabric::Hints h;
  h.provider = "strict";
  h.caps =
      FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_RECV | FI_SEND | FI_REMOTE_READ | FI_REMOTE_WRITE;
  h.mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
  if (const char* p = std::getenv("STRICT_TEST_PROGRESS"); p != nullptr && *p != '\0') {
    h.data_progress = std::strcmp(p, "auto") == 0 ? FI_PROGRESS_AUTO : FI_PROGRESS_MANUAL;
  }
  h.mr_mode = mr_mode;
  h.threading = FI_THREAD_SAFE;
  return h;
}

// The rig's hints, for tests that call fi_getinfo themselves (the caller frees them).
inline fi_info* strict_hints(int mr_mode) {
  return raw_fabric::make_hints(strict_hint_fields(mr_mode)).release();
}

constexpr int kMrModes = raw_fabric::kMrModes | FI_MR_ENDPOINT;

// The entry of fi_getinfo's `list` the rig opens: the first "lo" domain of an IPv4 fabric (its
// name has a dot), else the first (e.g. shm, whose domain is not "lo").
inline const fi_info* rig_entry(const fi_info* list) {
  for (const fi_info* i = list; i != nullptr; i = i->next) {
    const char* d = i->domain_attr->name;
    const char* f = i->fabric_attr->name;
    if (d != nullptr && std::strcmp(d, "lo") == 0 && f != nullptr && std::strchr(f, '.')) return i;
  }
  return list;
}

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
  raw_fabric::Fid<fid_domain> domain;
  raw_fabric::Fid<fid_cq> cq;
  raw_fabric::Fid<fid_av> av;
  raw_fabric::Fid<fid_ep> ep;
  raw_fabric::Fid<fid_mr> mr;
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
    raw_fabric::Hints h = strict_hint_fields(o.mr_mode);
    h.caps |= o.extra_caps;
    raw_fabric::Info list;
    const raw_fabric::Outcome got = raw_fabric::get_info(raw_fabric::make_hints(h).get(), &list);
    EXPECT_EQ(got.ret, 0) << "fi_getinfo(strict): " << fi_strerror(-got.ret)
                          << " (is FI_PROVIDER_PATH set to the module's directory?)";
    if (!got.ok()) return false;
    if (!opened(
            raw_fabric::open_domain(raw_fabric::Info(fi_dupinfo(rig_entry(list.get()))), &rig_))) {
      return false;
    }
    info_ = rig_.info.get();
    fabric_ = rig_.fabric.get();
    domain_ = rig_.domain.get();
    raw_fabric::CqOptions cq;
    cq.size = o.cq_size;
    if (!opened(raw_fabric::open_cq(domain_, cq, &cq_owners_[0]))) return false;
    cq_ = cqs_[0] = cqs_[1] = cq_owners_[0].get();
    if (o.cq_per_endpoint) {
      cq.size = o.cq1_size;
      if (!opened(raw_fabric::open_cq(domain_, cq, &cq_owners_[1]))) return false;
      cqs_[1] = cq_owners_[1].get();
    }
    if (!opened(raw_fabric::open_av(domain_, &av_owner_))) return false;
    av_ = av_owner_.get();
    for (int i = 0; i < 2; ++i) {
      if (!opened(
              raw_fabric::open_endpoint(domain_, info_, cqs_[i], cqs_[i], av_, &ep_owners_[i]))) {
        return false;
      }
      ep_[i] = ep_owners_[i].get();
    }
    for (int i = 0; i < 2; ++i) {
      raw_fabric::Address name;
      if (!opened(raw_fabric::get_address(ep_[i], &name))) return false;
      if (!opened(raw_fabric::insert_address(av_, name.bytes, &addr_[i]))) return false;
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
    if (!opened({fi_domain(fabric_, info_, p->domain.out(), nullptr), "fi_domain"}, "peer ")) {
      return false;
    }
    if (!opened(raw_fabric::open_cq(p->domain.get(), raw_fabric::CqOptions(), &p->cq), "peer ") ||
        !opened(raw_fabric::open_av(p->domain.get(), &p->av), "peer ") ||
        !opened(raw_fabric::open_endpoint(p->domain.get(), info_, p->cq.get(), p->cq.get(),
                                          p->av.get(), &p->ep),
                "peer ")) {
      return false;
    }
    raw_fabric::Address name;
    if (!opened(raw_fabric::get_address(ep_[1], &name)) ||
        !opened(raw_fabric::insert_address(p->av.get(), name.bytes, &p->to_ep1), "peer ")) {
      return false;
    }
    if (!opened(raw_fabric::get_address(p->ep.get(), &name), "peer ") ||
        !opened(raw_fabric::insert_address(av_, name.bytes, &p->from_rig), "rig ")) {
      return false;
    }
    return opened(raw_fabric::register_memory(p->domain.get(), *info_, nullptr, buf, len,
                                              raw_fabric::kAllAccess, 99, &p->mr),
                  "peer ");
  }

  void TearDown() override {
    for (const auto& p : peers_) {
      for (int ret :
           {p->mr.close(), p->ep.close(), p->av.close(), p->cq.close(), p->domain.close()}) {
        EXPECT_EQ(ret, 0) << "fi_close: " << fi_strerror(-ret);
      }
    }
    // Dependents first: MRs bound to an endpoint, endpoints, then what they were bound to.
    for (auto& m : mrs_) close_fid(m);
    for (auto& e : ep_owners_) close_fid(e);
    close_fid(av_owner_);
    close_fid(cq_owners_[1]);
    close_fid(cq_owners_[0]);
    close_fid(rig_.domain);
    close_fid(rig_.fabric);
    rig_.info.reset();
  }

  template <typename T>
  static void close_fid(raw_fabric::Fid<T>& f) {
    const int ret = f.close();
    EXPECT_EQ(ret, 0) << "fi_close: " << fi_strerror(-ret);
  }

  bool mr_endpoint() const { return (info_->domain_attr->mr_mode & FI_MR_ENDPOINT) != 0; }

  // Registers `buf`; binds and enables it on endpoint `bind_to` unless that is -1 or the domain
  // does not use FI_MR_ENDPOINT.
  fid_mr* reg(void* buf, size_t len, int bind_to, uint64_t key) {
    raw_fabric::Fid<fid_mr> mr;
    const raw_fabric::Outcome o =
        raw_fabric::register_memory(domain_, *info_, bind_to >= 0 ? ep_[bind_to] : nullptr, buf,
                                    len, raw_fabric::kAllAccess, key, &mr);
    EXPECT_EQ(o.ret, 0) << o.call << ": " << fi_strerror(-o.ret);
    if (!mr) return nullptr;
    return adopt_mr(std::move(mr));
  }

  // An MR registered elsewhere (raw_hmem_test's CUDA registrations), closed at TearDown.
  fid_mr* adopt_mr(raw_fabric::Fid<fid_mr> mr) {
    mrs_.push_back(std::move(mr));
    return mrs_.back().get();
  }

  void close_mr(fid_mr* mr) {
    for (auto& m : mrs_) {
      if (m.get() == mr) {
        EXPECT_EQ(m.close(), 0);
      }
    }
  }

  // The test's own fi_close of endpoint `i` (a refusal leaves it open); once it is closed,
  // TearDown leaves it alone.
  int close_endpoint(int i) {
    const int ret = fi_close(&ep_[i]->fid);
    if (ret == 0) {
      ep_owners_[i].release();
      ep_[i] = nullptr;
    }
    return ret;
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

  // True when `o` went through; else a gtest failure naming the call (`who`: whose it was).
  static bool opened(const raw_fabric::Outcome& o, const char* who = "") {
    if (o.ok()) return true;
    ADD_FAILURE() << who << o.call << " failed on the strict provider: " << fi_strerror(-o.ret);
    return false;
  }

  // What the rig opened (TearDown closes them, checking each fi_close) ...
  raw_fabric::Domain rig_;
  raw_fabric::Fid<fid_cq> cq_owners_[2];  // endpoint 1's own only with cq_per_endpoint
  raw_fabric::Fid<fid_av> av_owner_;
  raw_fabric::Fid<fid_ep> ep_owners_[2];
  std::vector<raw_fabric::Fid<fid_mr>> mrs_;
  std::vector<std::unique_ptr<PeerDomain>> peers_;
  // ... and the names the tests use in their libfabric calls.
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_cq* cqs_[2] = {nullptr, nullptr};  // each endpoint's CQ (both cq_ unless cq_per_endpoint)
  fid_av* av_ = nullptr;
  fid_ep* ep_[2] = {nullptr, nullptr};
  fi_addr_t addr_[2] = {FI_ADDR_NOTAVAIL, FI_ADDR_NOTAVAIL};
};

}  // namespace strict_test
