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

#include "common/raw_fabric.hpp"

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const char* what, int ret) {
  std::fprintf(stderr, "fi-atomic-loop: %s: %s (%d)\n", what, fi_strerror(-ret), ret);
  std::exit(1);
}

void check(const char* what, int ret) {
  if (ret != 0) die(what, ret);
}

void check(raw_fabric::Outcome o) { check(o.call, o.ret); }

// One side's libfabric objects (tools/common/raw_fabric.hpp): one CQ for both directions.
struct Fabric {
  raw_fabric::Domain d;
  raw_fabric::Fid<fid_cq> cq;
  raw_fabric::Fid<fid_av> av;
  raw_fabric::Fid<fid_ep> ep;
};

Fabric open_fabric(const char* provider) {
  raw_fabric::Hints h;
  h.provider = provider;
  h.caps = FI_ATOMIC | FI_RMA | FI_MSG;
  raw_fabric::Info list;
  check(raw_fabric::get_info(raw_fabric::make_hints(h).get(), &list));
  Fabric f;
  check(raw_fabric::open_domain(std::move(list), &f.d));
  raw_fabric::CqOptions cq;
  cq.format = FI_CQ_FORMAT_CONTEXT;
  cq.size = 64;
  check(raw_fabric::open_cq(f.d.domain.get(), cq, &f.cq));
  check(raw_fabric::open_av(f.d.domain.get(), &f.av));
  check(raw_fabric::open_endpoint(f.d.domain.get(), f.d.info.get(), f.cq.get(), f.cq.get(),
                                  f.av.get(), &f.ep));
  return f;
}

// `buf` registered (bound to the endpoint under FI_MR_ENDPOINT); closed before the fabric by
// being declared after it.
raw_fabric::Fid<fid_mr> reg(Fabric& f, void* buf, size_t len, uint64_t access) {
  raw_fabric::Fid<fid_mr> mr;
  check(raw_fabric::register_memory(f.d.domain.get(), *f.d.info, f.ep.get(), buf, len, access, 0,
                                    &mr));
  return mr;
}

// What the target tells the initiator.
struct Hello {
  raw_fabric::Address addr;
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
  raw_fabric::Fid<fid_mr> mr = reg(f, word, sizeof(word), FI_REMOTE_READ | FI_REMOTE_WRITE);
  Hello h{};
  check(raw_fabric::get_address(f.ep.get(), &h.addr));
  h.word =
      (f.d.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? reinterpret_cast<uint64_t>(word) : 0;
  h.key = fi_mr_key(mr.get());
  write_all(to_parent, &h, sizeof(h));
  // Poll (progress) until the initiator says it is done (a byte, or its exit).
  fi_cq_entry e[16];
  for (;;) {
    (void)fi_cq_read(f.cq.get(), e, 16);
    fd_set in;
    FD_ZERO(&in);
    FD_SET(from_parent, &in);
    timeval tv{0, 0};
    if (select(from_parent + 1, &in, nullptr, nullptr, &tv) > 0) break;
  }
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
  check(raw_fabric::insert_address(f.av.get(), h.addr.bytes, &peer));
  alignas(64) static uint64_t local[2] = {1, 0};  // operand, result
  raw_fabric::Fid<fid_mr> mr = reg(f, local, sizeof(local), FI_READ | FI_WRITE);
  void* desc = fi_mr_desc(mr.get());
  std::vector<double> lat;
  lat.reserve(static_cast<size_t>(iterations));
  fi_context ctx{};
  uint64_t last = 0;
  for (int i = 0; i < warmup + iterations; ++i) {
    const auto t0 = Clock::now();
    int ret;
    while ((ret = static_cast<int>(fi_fetch_atomic(f.ep.get(), &local[0], 1, desc, &local[1], desc,
                                                   peer, h.word, h.key, FI_UINT64, FI_SUM,
                                                   &ctx))) == -FI_EAGAIN) {
      fi_cq_entry e;
      (void)fi_cq_read(f.cq.get(), &e, 1);
    }
    check("fi_fetch_atomic", ret);
    fi_cq_entry e;
    const auto deadline = t0 + std::chrono::seconds(10);
    for (uint32_t spin = 0;; ++spin) {
      ssize_t n = fi_cq_read(f.cq.get(), &e, 1);
      if (n == 1) break;
      if (spin % 1024 == 0 && Clock::now() > deadline) {
        std::fprintf(stderr, "fi-atomic-loop: fetch %d did not complete within 10 s\n", i);
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
        return 1;
      }
      if (n == -FI_EAVAIL) {
        fi_cq_err_entry err{};
        fi_cq_readerr(f.cq.get(), &err, 0);
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
  std::printf(
      "provider %s  fi_fetch_atomic FI_SUM u64  iterations %d  p50_us %.2f  p99_us %.2f  "
      "mean_us %.2f\n",
      f.d.info->fabric_attr->prov_name, iterations, pct(0.50), pct(0.99),
      sum / static_cast<double>(lat.size()));
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
