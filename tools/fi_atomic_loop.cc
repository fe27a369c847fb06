// fi-atomic-loop: the bare libfabric baseline of `xport-bench --op atomic`. Two processes (this
// one forks the target) on one provider, FI_EP_RDM: the initiator runs fi_fetch_atomic(FI_SUM,
// FI_UINT64, 1) on the target's registered word and polls its CQ until the completion, N times;
// the target only polls its CQ (providers with manual progress apply atomics there, as
// libxport's target does in its progress). Prints p50/p99/mean round-trip latency in µs and
// checks that every fetched value is the previous one plus 1. A fetch that does not complete
// within 10 s ends the run (exit 1).
//   fi-atomic-loop [PROVIDER] [ITERATIONS]     (default shm 10000)
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <sys/wait.h>
#include <csignal>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const char* what, int ret) {
  std::fprintf(stderr, "fi-atomic-loop: %s: %s (%d)\n", what, fi_strerror(-ret), ret);
  std::exit(1);
}

void check(const char* what, int ret) {
  if (ret != 0) die(what, ret);
}

struct Fabric {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_cq* cq = nullptr;
  fid_ep* ep = nullptr;
};

Fabric open_fabric(const char* provider) {
  fi_info* hints = fi_allocinfo();
  hints->caps = FI_ATOMIC | FI_RMA | FI_MSG;
  hints->ep_attr->type = FI_EP_RDM;
  hints->mode = FI_CONTEXT;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->fabric_attr->prov_name = strdup(provider);
  Fabric f;
  check("fi_getinfo", fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &f.info));
  fi_freeinfo(hints);
  check("fi_fabric", fi_fabric(f.info->fabric_attr, &f.fabric, nullptr));
  check("fi_domain", fi_domain(f.fabric, f.info, &f.domain, nullptr));
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_CONTEXT;
  cq_attr.size = 64;
  check("fi_cq_open", fi_cq_open(f.domain, &cq_attr, &f.cq, nullptr));
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  check("fi_av_open", fi_av_open(f.domain, &av_attr, &f.av, nullptr));
  check("fi_endpoint", fi_endpoint(f.domain, f.info, &f.ep, nullptr));
  check("fi_ep_bind cq", fi_ep_bind(f.ep, &f.cq->fid, FI_TRANSMIT | FI_RECV));
  check("fi_ep_bind av", fi_ep_bind(f.ep, &f.av->fid, 0));
  check("fi_enable", fi_enable(f.ep));
  return f;
}

fid_mr* reg(Fabric& f, void* buf, size_t len, uint64_t access) {
  fid_mr* mr = nullptr;
  check("fi_mr_reg", fi_mr_reg(f.domain, buf, len, access, 0, 0, 0, &mr, nullptr));
  if (f.info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
    check("fi_mr_bind", fi_mr_bind(mr, &f.ep->fid, 0));
    check("fi_mr_enable", fi_mr_enable(mr));
  }
  return mr;
}

// What the target tells the initiator.
struct Hello {
  uint8_t addr[256];
  size_t addr_len;
  uint64_t word;  // its address (FI_MR_VIRT_ADDR) or 0
  uint64_t key;
};

void write_all(int fd, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    ssize_t w = write(fd, b, n);
    if (w <= 0) die("pipe write", -FI_EIO);
    b += w;
    n -= static_cast<size_t>(w);
  }
}

void read_all(int fd, void* p, size_t n) {
  auto* b = static_cast<uint8_t*>(p);
  while (n > 0) {
    ssize_t r = read(fd, b, n);
    if (r <= 0) die("pipe read", -FI_EIO);
    b += r;
    n -= static_cast<size_t>(r);
  }
}

int target(const char* provider, int to_parent, int from_parent) {
  Fabric f = open_fabric(provider);
  alignas(64) static uint64_t word[8] = {};
  fid_mr* mr = reg(f, word, sizeof(word), FI_REMOTE_READ | FI_REMOTE_WRITE);
  Hello h{};
  h.addr_len = sizeof(h.addr);
  check("fi_getname", fi_getname(&f.ep->fid, h.addr, &h.addr_len));
  h.word = (f.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? reinterpret_cast<uint64_t>(word) : 0;
  h.key = fi_mr_key(mr);
  write_all(to_parent, &h, sizeof(h));
  // Poll (progress) until the initiator says it is done (a byte, or its exit).
  fi_cq_entry e[16];
  for (;;) {
    (void)fi_cq_read(f.cq, e, 16);
    fd_set in;
    FD_ZERO(&in);
    FD_SET(from_parent, &in);
    timeval tv{0, 0};
    if (select(from_parent + 1, &in, nullptr, nullptr, &tv) > 0) break;
  }
  fi_close(&mr->fid);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* provider = argc > 1 ? argv[1] : "shm";
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 10000;
  const int warmup = std::min(1000, iterations / 10);
  int up[2], down[2];
  if (pipe(up) != 0 || pipe(down) != 0) die("pipe", -FI_EIO);
  const pid_t pid = fork();
  if (pid == 0) {
    close(up[0]);
    close(down[1]);
    return target(provider, up[1], down[0]);
  }
  close(up[1]);
  close(down[0]);
  Fabric f = open_fabric(provider);
  Hello h{};
  read_all(up[0], &h, sizeof(h));
  fi_addr_t peer = 0;
  if (fi_av_insert(f.av, h.addr, 1, &peer, 0, nullptr) != 1) die("fi_av_insert", -FI_EINVAL);
  alignas(64) static uint64_t local[2] = {1, 0};  // operand, result
  fid_mr* mr = reg(f, local, sizeof(local), FI_READ | FI_WRITE);
  void* desc = fi_mr_desc(mr);
  std::vector<double> lat;
  lat.reserve(static_cast<size_t>(iterations));
  fi_context ctx{};
  uint64_t last = 0;
  for (int i = 0; i < warmup + iterations; ++i) {
    const auto t0 = Clock::now();
    int ret;
    while ((ret = static_cast<int>(fi_fetch_atomic(f.ep, &local[0], 1, desc, &local[1], desc,
                                                   peer, h.word, h.key, FI_UINT64, FI_SUM,
                                                   &ctx))) == -FI_EAGAIN) {
      fi_cq_entry e;
      (void)fi_cq_read(f.cq, &e, 1);
    }
    check("fi_fetch_atomic", ret);
    fi_cq_entry e;
    const auto deadline = t0 + std::chrono::seconds(10);
    for (uint32_t spin = 0;; ++spin) {
      ssize_t n = fi_cq_read(f.cq, &e, 1);
      if (n == 1) break;
      if (spin % 1024 == 0 && Clock::now() > deadline) {
        std::fprintf(stderr, "fi-atomic-loop: fetch %d did not complete within 10 s\n", i);
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
        return 1;
      }
      if (n == -FI_EAVAIL) {
        fi_cq_err_entry err{};
        fi_cq_readerr(f.cq, &err, 0);
        die("completion error", -err.err);
      }
      if (n != -FI_EAGAIN) die("fi_cq_read", static_cast<int>(n));
    }
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (i >= warmup) lat.push_back(us);
    if (i > 0 && local[1] != last + 1) {
      std::fprintf(stderr, "fi-atomic-loop: fetch %d got %lu, expected %lu\n", i,
                   static_cast<unsigned long>(local[1]), static_cast<unsigned long>(last + 1));
      return 1;
    }
    last = local[1];
  }
  write_all(down[1], "x", 1);
  int status = 0;
  waitpid(pid, &status, 0);
  std::sort(lat.begin(), lat.end());
  double sum = 0;
  for (double v : lat) sum += v;
  const auto pct = [&](double q) { return lat[std::min(lat.size() - 1, size_t(q * lat.size()))]; };
  std::printf("provider %s  fi_fetch_atomic FI_SUM u64  iterations %d  p50_us %.2f  p99_us %.2f  "
              "mean_us %.2f\n",
              f.info->fabric_attr->prov_name, iterations, pct(0.50), pct(0.99),
              sum / static_cast<double>(lat.size()));
  fi_close(&mr->fid);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
