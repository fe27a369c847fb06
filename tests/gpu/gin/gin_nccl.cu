// xport-gin-nccl: NCCL 2.28's device API with GIN on two GPUs, one process per GPU. This file is
// a rank: the communicator, the symmetric windows, the device communicator with GIN, the GIN
// measurements (kernels in gin_kernels.cu) and the order of everything; main() is here too.
// Without --rank the program is its own launcher (launcher.cc).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gin_kernels.cuh"
#include "gin_nccl.hpp"

namespace gin_nccl {
namespace {

// The variables that decide which network and GIN path NCCL takes.
const char* const kEnvNames[] = {"NCCL_NET_PLUGIN", "NCCL_NET",       "NCCL_GIN_TYPE",
                                 "NCCL_GIN_ENABLE", "XPORT_PROVIDER", "XPORT_DOMAIN"};

struct Gin {
  bool active = false;
  ncclDevComm dev{};
  SignalBook* book = nullptr;             // device memory
  DeviceStatus* status = nullptr;         // device memory
  unsigned long long* samples = nullptr;  // device memory, latency_samples entries
};

const char* gin_type_name(int type) {
  switch (type) {
    case NCCL_NET_DEVICE_GIN_PROXY:
      return "proxy";
    case NCCL_NET_DEVICE_GIN_GDAKI:
      return "gdaki";
    default:
      return "unknown";
  }
}

std::string version_text(int v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

void describe_machine(Rank& r, Report& rep) {
  GIN_NCCL_CHECK(ncclGetVersion(&rep.nccl_version));
  // The device API is inline code over NCCL's structures: it must run on the NCCL it was built
  // against (2.28.x; a patch release may differ).
  if (rep.nccl_version / 100 != NCCL_VERSION_CODE / 100)
    die("built against NCCL " + version_text(NCCL_VERSION_CODE) + " headers, running libnccl " +
        version_text(rep.nccl_version) + ": the device API needs the same 2.28 release");
  int count = 0;
  GIN_CUDA_CHECK(cudaGetDeviceCount(&count));
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop{};
    GIN_CUDA_CHECK(cudaGetDeviceProperties(&prop, d));
    char bus[32];
    std::snprintf(bus, sizeof bus, "%04x:%02x:%02x.0", prop.pciDomainID, prop.pciBusID,
                  prop.pciDeviceID);
    rep.gpus.push_back(std::to_string(d) + ": " + prop.name + " (" + bus + ", sm_" +
                       std::to_string(prop.major) + std::to_string(prop.minor) + ")" +
                       (d == r.gpu ? " [this rank]" : ""));
  }
  for (const char* name : kEnvNames) {
    const char* v = std::getenv(name);
    rep.env.emplace_back(name, v ? v : "(unset)");
  }
  std::printf("xport-gin-nccl rank %d of %d: NCCL %s (headers %s), GPU %d\n", r.rank, r.nranks,
              version_text(rep.nccl_version).c_str(), version_text(NCCL_VERSION_CODE).c_str(),
              r.gpu);
  for (const std::string& g : rep.gpus) std::printf("  GPU %s\n", g.c_str());
  for (const auto& [name, value] : rep.env) std::printf("  %s=%s\n", name.c_str(), value.c_str());
  std::fflush(stdout);
}

void setup(Rank& r, Report& rep) {
  GIN_CUDA_CHECK(cudaSetDevice(r.gpu));
  describe_machine(r, rep);
  ncclUniqueId id;
  exchange_unique_id(r.opt, r.rank, &id);
  GIN_NCCL_CHECK(ncclCommInitRank(&r.comm, r.nranks, id, r.rank));
  GIN_CUDA_CHECK(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking));

  // One chunk per rank for alltoall; ping-pong uses the first.
  const size_t largest = *std::max_element(r.opt.sizes.begin(), r.opt.sizes.end());
  r.buffer_bytes = size_t(r.nranks) * largest;
  r.host.resize(r.buffer_bytes / 8);
  // GIN puts reach only window memory, and windows need NCCL's own (cuMem) allocation.
  GIN_NCCL_CHECK(ncclMemAlloc(&r.send, r.buffer_bytes));
  GIN_NCCL_CHECK(ncclMemAlloc(&r.recv, r.buffer_bytes));
  GIN_NCCL_CHECK(
      ncclCommWindowRegister(r.comm, r.send, r.buffer_bytes, &r.send_win, NCCL_WIN_COLL_SYMMETRIC));
  GIN_NCCL_CHECK(
      ncclCommWindowRegister(r.comm, r.recv, r.buffer_bytes, &r.recv_win, NCCL_WIN_COLL_SYMMETRIC));
  // ncclCommWindowRegister succeeds without a window where the communicator has no symmetric
  // memory (NCCL needs CUDA P2P between all local GPUs and cuMem for it).
  if (r.send_win == nullptr || r.recv_win == nullptr)
    die("ncclCommWindowRegister returned no window: this communicator has no symmetric memory "
        "support (NCCL's log says 'isAllCudaP2p 0' without P2P between the GPUs, or cuMem is "
        "off: NCCL_CUMEM_ENABLE=0, NCCL_WIN_ENABLE=0)");
  GIN_CUDA_CHECK(cudaMalloc(&r.scratch, sizeof(double)));
}

// The device communicator with GIN, only for the GIN modes: send/recv alone runs without.
void setup_gin(Rank& r, Gin& g, Report& rep) {
  ncclDevCommRequirements reqs{};
  // Two ranks on one node would not turn GIN on by themselves (NCCL does so for nNodes > 1 or
  // for GIN signals/counters requested); say it outright.
  reqs.ginForceEnable = true;
  reqs.ginContextCount = 1;  // a hint; the kernels use context 0
  reqs.ginSignalCount = kSignalCount;
  reqs.ginCounterCount = 0;  // completion by flush, not by counters
  // One CTA per kernel. Only --gin-barrier nccl uses it (NCCL's barrier over our world team),
  // but it costs one signal and 16 bytes.
  reqs.railGinBarrierCount = 1;
  GIN_NCCL_CHECK(ncclDevCommCreate(r.comm, &reqs, &g.dev));
  if (g.dev.ginContextCount == 0)
    die("ncclDevCommCreate gave no GIN context: NCCL found no GIN plugin (look for 'Assigned "
        "GIN plugin' in NCCL_DEBUG=INFO output)");
  rep.gin_contexts = g.dev.ginContextCount;
  rep.gin_type = gin_type_name(g.dev.ginTypes[0]);
  std::printf("rank %d: GIN: %d context(s), type %s, signals %u..%u of NCCL's pool\n", r.rank,
              rep.gin_contexts, rep.gin_type.c_str(), g.dev.ginSignalBase,
              g.dev.ginSignalBase + unsigned(g.dev.ginSignalCount) - 1);

  GIN_CUDA_CHECK(cudaMalloc(&g.book, sizeof(SignalBook)));
  GIN_CUDA_CHECK(cudaMalloc(&g.status, sizeof(DeviceStatus)));
  GIN_CUDA_CHECK(cudaMalloc(&g.samples, sizeof(unsigned long long) * r.opt.latency_samples));
  // The signals' starting values, read while nothing can be in flight: both ranks read before
  // the all-reduce below, and the first put comes after it.
  GIN_CUDA_CHECK(launch_read_signals(g.dev, g.book, r.stream));
  if (!wait_stream(r.stream, r.opt.wait_timeout_s)) die("reading the GIN signals did not finish");
  allreduce(r, 0, ncclMax, "after ncclDevCommCreate");
  g.active = true;
}

void teardown(Rank& r, Gin& g) {
  if (g.active) {
    GIN_NCCL_CHECK(ncclDevCommDestroy(r.comm, &g.dev));
    GIN_CUDA_CHECK(cudaFree(g.book));
    GIN_CUDA_CHECK(cudaFree(g.status));
    GIN_CUDA_CHECK(cudaFree(g.samples));
  }
  GIN_NCCL_CHECK(ncclCommWindowDeregister(r.comm, r.send_win));
  GIN_NCCL_CHECK(ncclCommWindowDeregister(r.comm, r.recv_win));
  GIN_NCCL_CHECK(ncclMemFree(r.send));
  GIN_NCCL_CHECK(ncclMemFree(r.recv));
  GIN_CUDA_CHECK(cudaFree(r.scratch));
  GIN_NCCL_CHECK(ncclCommFinalize(r.comm));
  GIN_NCCL_CHECK(ncclCommDestroy(r.comm));
  GIN_CUDA_CHECK(cudaStreamDestroy(r.stream));
}

// Launches one GIN kernel and waits for it. Each wait inside gives up after --wait-timeout by
// itself; the host's deadline only catches a kernel that does not end at all.
template <typename Launch>
DeviceStatus run_gin_kernel(Rank& r, Gin& g, const std::string& what, int waits, Launch launch) {
  GIN_CUDA_CHECK(cudaMemsetAsync(g.status, 0, sizeof(DeviceStatus), r.stream));
  GIN_CUDA_CHECK(launch());
  const double limit = std::min(r.opt.timeout_s, r.opt.wait_timeout_s * (waits + 2));
  if (!wait_stream(r.stream, limit))
    die(what + ": the kernel did not end within " + std::to_string(limit) +
        " s although each of its waits gives up after " + std::to_string(r.opt.wait_timeout_s) +
        " s (a GPU fault, or --gin-barrier nccl, which waits without a deadline)");
  DeviceStatus st{};
  copy_to_host(r, &st, g.status, sizeof st);
  if (st.error == kDeviceOk) return st;
  const std::string where = st.iteration < 0
                                ? "the barrier before the first iteration"
                                : "iteration " + std::to_string(st.iteration) + " of the launch";
  const std::string waited = std::to_string(r.opt.wait_timeout_s) + " s for signal value " +
                             std::to_string(st.expected) + ", saw " + std::to_string(st.seen);
  if (st.error == kDeviceBarrierTimeout)
    die(what + ", " + where + ": the barrier waited " + waited +
        ": the peer did not arrive (stopped or failed: see its log)");
  die(what + ", " + where + ": waited " + waited +
      ": a put or its signal did not arrive (or the peer stopped)");
}

void gin_pingpong(Rank& r, Gin& g, size_t size, int size_index, Latency& out) {
  const std::string what = "GIN ping-pong " + size_text(size);
  const int iters = pingpong_iterations(r.opt, size);
  const int warmup = std::min(10, iters);
  const int samples = std::min(iters, r.opt.latency_samples);
  const size_t words = size / 8;
  fill_pattern(r.host, 0, words, kPatternPingPong, r.rank, r.peer, size_index);
  copy_to_device(r, r.send, r.host.data(), size);
  zero_device(r, r.recv, size);

  PingPongArgs a{};
  a.dev = g.dev;
  a.send_win = r.send_win;
  a.recv_win = r.recv_win;
  a.send_words = static_cast<uint64_t*>(r.send);
  a.recv_words = static_cast<uint64_t*>(r.recv);
  a.bytes = size;
  a.first_round = 0;
  a.warmup = warmup;
  a.iters = iters;
  a.samples = nullptr;
  a.wait_ns = static_cast<unsigned long long>(r.opt.wait_timeout_s * 1e9);
  a.nccl_barrier = r.opt.nccl_barrier;
  a.book = g.book;
  a.status = g.status;
  // The average: all round trips in one kernel, so no launch is in it.
  const DeviceStatus avg = run_gin_kernel(r, g, what + " (average)", warmup + iters + 1,
                                          [&] { return launch_pingpong(a, r.stream); });
  // The distribution: each round trip timed on the GPU.
  a.first_round = uint64_t(warmup + iters);
  a.iters = samples;
  a.samples = g.samples;
  const DeviceStatus dist = run_gin_kernel(r, g, what + " (per round trip)", warmup + samples + 1,
                                           [&] { return launch_pingpong(a, r.stream); });
  const uint64_t last_round = a.first_round + uint64_t(warmup + samples - 1);

  std::vector<unsigned long long> ns(samples);
  copy_to_host(r, ns.data(), g.samples, sizeof(unsigned long long) * samples);
  std::vector<double> us(ns.begin(), ns.end());
  for (double& v : us) v /= 1e3;
  std::sort(us.begin(), us.end());

  out.measured = true;
  out.iterations = iters;
  out.samples = samples;
  out.avg_us = double(avg.t_end_ns - avg.t_start_ns) / 1e3 / iters;
  out.p50_us = percentile(us, 0.50);
  out.p99_us = percentile(us, 0.99);
  out.min_us = us.front();
  out.max_us = us.back();
  out.tag_mismatches = avg.mismatches + dist.mismatches;
  if (out.tag_mismatches != 0) {
    r.failures.push_back(what + ": " + std::to_string(out.tag_mismatches) +
                         " first/last words were not the round's tag after its signal");
    std::printf("rank %d: FAILED: %s\n", r.rank, r.failures.back().c_str());
  }

  // The last message, every byte: the peer's pattern with the last round's tag at both ends.
  copy_to_host(r, r.host.data(), r.recv, size);
  const uint64_t tag = pingpong_tag(r.peer, last_round);
  std::string bad;
  if (r.host[0] != tag || r.host[words - 1] != tag) {
    char text[160];
    std::snprintf(text, sizeof text,
                  "the last message's tags are 0x%016llx/0x%016llx, expected "
                  "0x%016llx",
                  static_cast<unsigned long long>(r.host[0]),
                  static_cast<unsigned long long>(r.host[words - 1]),
                  static_cast<unsigned long long>(tag));
    bad = text;
  } else if (words > 2) {
    bad = check_pattern(r.host.data(), 1, words - 2, kPatternPingPong, r.peer, r.rank, size_index);
  }
  if (!bad.empty()) {
    r.failures.push_back(what + ": " + bad);
    std::printf("rank %d: FAILED: %s\n", r.rank, r.failures.back().c_str());
  }
  out.bytes_checked = size;
  std::printf(
      "rank %d: %s: %d round trips, avg %.2f us; %d timed one by one: p50 %.2f us, "
      "p99 %.2f us\n",
      r.rank, what.c_str(), iters, out.avg_us, samples, out.p50_us, out.p99_us);
  std::fflush(stdout);
}

void gin_alltoall(Rank& r, Gin& g, size_t chunk, Bandwidth& out) {
  const std::string what = "GIN alltoall " + size_text(chunk);
  const int iters = bw_iterations_for(r.opt, chunk, r.nranks);
  const size_t words = chunk / 8;
  const auto prepare = [&](uint64_t round) {
    for (int p = 0; p < r.nranks; ++p)
      fill_pattern(r.host, p * words, words, kPatternAlltoall, r.rank, p, round);
    copy_to_device(r, r.send, r.host.data(), r.nranks * chunk);
    zero_device(r, r.recv, r.nranks * chunk);
  };
  const auto verify = [&](uint64_t round, const std::string& when) {
    copy_to_host(r, r.host.data(), r.recv, r.nranks * chunk);
    for (int p = 0; p < r.nranks; ++p) {
      const std::string bad =
          check_pattern(&r.host[p * words], 0, words, kPatternAlltoall, p, r.rank, round);
      if (bad.empty()) continue;
      r.failures.push_back(what + ", " + when + ", the chunk from rank " + std::to_string(p) +
                           ": " + bad);
      std::printf("rank %d: FAILED: %s\n", r.rank, r.failures.back().c_str());
    }
    return r.nranks * chunk;
  };
  AlltoallArgs a{};
  a.dev = g.dev;
  a.send_win = r.send_win;
  a.recv_win = r.recv_win;
  a.chunk = chunk;
  a.wait_ns = static_cast<unsigned long long>(r.opt.wait_timeout_s * 1e9);
  a.nccl_barrier = r.opt.nccl_barrier;
  a.book = g.book;
  a.status = g.status;

  // One alltoall, every byte checked.
  prepare(0);
  a.iters = 1;
  run_gin_kernel(r, g, what + " (checked)", 3, [&] { return launch_alltoall(a, r.stream); });
  size_t checked = verify(0, "the checked alltoall");

  // The timed run on new data, checked after it. The kernel's barriers keep the peer's puts of
  // this run behind this rank's reset of its receive buffer.
  prepare(1);
  a.iters = iters;
  const DeviceStatus st = run_gin_kernel(r, g, what + " (timed)", 2 * iters + 1,
                                         [&] { return launch_alltoall(a, r.stream); });
  checked += verify(1, "after the timed run");
  const double mine = double(st.t_end_ns - st.t_start_ns) / 1e9;
  const double slowest = allreduce(r, mine, ncclMax, (what + ", the times").c_str());

  record_alltoall(r, chunk, iters, slowest, checked, what, out);
  std::fflush(stdout);
}

int run_rank(const Options& opt) {
  Rank r;
  r.opt = opt;
  r.rank = opt.rank;
  r.peer = 1 - opt.rank;
  r.gpu = opt.gpu < 0 ? opt.rank : opt.gpu;
  set_error_prefix("rank " + std::to_string(r.rank));
  Report rep;
  Gin g;
  setup(r, rep);
  if (opt.modes & (kPingPong | kAlltoall)) setup_gin(r, g, rep);

  // GIN and send/recv take turns size by size, so a drift of the machine hits both alike.
  if (opt.modes & (kPingPong | kSendRecv)) {
    for (size_t i = 0; i < opt.sizes.size(); ++i) {
      PingPongRow row;
      row.size = opt.sizes[i];
      if (opt.modes & kPingPong) gin_pingpong(r, g, row.size, int(i), row.gin);
      if (opt.modes & kSendRecv) sendrecv_pingpong(r, row.size, int(i), row.sendrecv);
      rep.pingpong.push_back(row);
    }
  }
  if (opt.modes & (kAlltoall | kSendRecv)) {
    for (size_t chunk : opt.sizes) {
      AlltoallRow row;
      row.chunk = chunk;
      if (opt.modes & kAlltoall) gin_alltoall(r, g, chunk, row.gin);
      if (opt.modes & kSendRecv) sendrecv_alltoall(r, chunk, row.sendrecv);
      rep.alltoall.push_back(row);
    }
  }

  rep.failures = r.failures;
  rep.failures_all_ranks =
      int(allreduce(r, double(r.failures.size()), ncclSum, "counting the failures"));
  teardown(r, g);
  if (r.rank == 0) {
    print_table(rep, opt);
    if (!opt.out.empty() && !write_json(rep, opt, opt.out)) {
      std::printf("rank 0: FAILED: cannot write %s\n", opt.out.c_str());
      return 1;
    }
  }
  std::printf("rank %d: %s (%zu failed checks here, %d on all ranks)\n", r.rank,
              rep.failures_all_ranks == 0 ? "PASSED" : "FAILED", r.failures.size(),
              rep.failures_all_ranks);
  return rep.failures_all_ranks == 0 ? 0 : 1;
}

}  // namespace
}  // namespace gin_nccl

int main(int argc, char** argv) {
  const gin_nccl::Options opt = gin_nccl::parse_options(argc, argv);
  if (opt.rank < 0) return gin_nccl::run_launcher(opt, argc, argv);
  return gin_nccl::run_rank(opt);
}
