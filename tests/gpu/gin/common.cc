// xport-gin-nccl: errors, deadlines, the unique-id exchange and the data patterns that every part
// uses.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "gin_nccl.hpp"

namespace gin_nccl {
namespace {
std::string error_prefix = "xport-gin-nccl";
}

void set_error_prefix(const std::string& prefix) { error_prefix = "xport-gin-nccl " + prefix; }

// _exit, not exit: a kernel may still spin on the GPU and NCCL's threads on the CPU; the process
// ending releases both, and the launcher reports the exit code.
void die(const std::string& what) {
  std::fprintf(stderr, "%s: FAILED: %s\n", error_prefix.c_str(), what.c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(1);
}

void die_nccl(const char* file, int line, const char* call, ncclResult_t r) {
  const char* last = ncclGetLastError(nullptr);
  die(std::string(file) + ":" + std::to_string(line) + ": " + call + " returned " +
      ncclGetErrorString(r) + (last && *last ? std::string(" (NCCL: ") + last + ")" : ""));
}

void die_cuda(const char* file, int line, const char* call, cudaError_t r) {
  die(std::string(file) + ":" + std::to_string(line) + ": " + call + " returned " +
      cudaGetErrorName(r) + ": " + cudaGetErrorString(r));
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string size_text(size_t bytes) {
  if (bytes >= (1u << 30) && bytes % (1u << 30) == 0) return std::to_string(bytes >> 30) + "G";
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + "M";
  if (bytes >= (1u << 10) && bytes % (1u << 10) == 0) return std::to_string(bytes >> 10) + "K";
  return std::to_string(bytes);
}

int pingpong_iterations(const Options& opt, size_t size) {
  const double cap = std::ceil(double(1ull << 30) / double(size));
  return static_cast<int>(std::min<double>(opt.iterations, std::max(5.0, cap)));
}

int bw_iterations_for(const Options& opt, size_t chunk, int nranks) {
  if (opt.bw_iterations > 0) return opt.bw_iterations;
  const double to_peers = double(chunk) * std::max(1, nranks - 1);
  const double cap = std::ceil(double(1ull << 30) / to_peers);
  return static_cast<int>(std::min<double>(opt.iterations, std::max(5.0, cap)));
}

bool wait_stream(cudaStream_t s, double seconds) {
  const double deadline = now_s() + seconds;
  for (;;) {
    const cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) die_cuda(__FILE__, __LINE__, "cudaStreamQuery", e);
    if (now_s() > deadline) return false;
    // NCCL's proxy and GIN progress threads need the CPU more than this loop does.
    sched_yield();
  }
}

namespace {
void wait_copy(Rank& r, const char* what) {
  if (!wait_stream(r.stream, r.opt.wait_timeout_s))
    die(std::string(what) + " did not finish within " + std::to_string(r.opt.wait_timeout_s) +
        " s");
}
}  // namespace

void copy_to_device(Rank& r, void* dst, const void* src, size_t bytes) {
  GIN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, r.stream));
  wait_copy(r, "a copy to the GPU");
}

void copy_to_host(Rank& r, void* dst, const void* src, size_t bytes) {
  GIN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, r.stream));
  wait_copy(r, "a copy from the GPU");
}

void zero_device(Rank& r, void* dst, size_t bytes) {
  GIN_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, r.stream));
  wait_copy(r, "zeroing GPU memory");
}

void record_alltoall(const Rank& r, size_t chunk, int iters, double slowest_s, size_t checked,
                     const std::string& what, Bandwidth& out) {
  out.measured = true;
  out.iterations = iters;
  out.time_us = slowest_s / iters * 1e6;
  const double per_s = double(iters) / slowest_s;
  out.algbw_GBps = double(chunk) * (r.nranks - 1) * per_s / 1e9;
  out.busbw_GBps = double(r.nranks - 1) / r.nranks * double(chunk) * r.nranks * per_s / 1e9;
  out.bytes_checked = checked;
  std::printf("rank %d: %s: %d alltoalls, %.2f us each, algbw %.3f GB/s, busbw %.3f GB/s\n", r.rank,
              what.c_str(), iters, out.time_us, out.algbw_GBps, out.busbw_GBps);
}

double allreduce(Rank& r, double value, ncclRedOp_t op, const char* what) {
  GIN_CUDA_CHECK(
      cudaMemcpyAsync(r.scratch, &value, sizeof value, cudaMemcpyHostToDevice, r.stream));
  GIN_NCCL_CHECK(ncclAllReduce(r.scratch, r.scratch, 1, ncclFloat64, op, r.comm, r.stream));
  GIN_CUDA_CHECK(
      cudaMemcpyAsync(&value, r.scratch, sizeof value, cudaMemcpyDeviceToHost, r.stream));
  if (!wait_stream(r.stream, r.opt.wait_timeout_s)) {
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(r.comm, &async);
    die(std::string(what) + ": the all-reduce with the peer did not finish within " +
        std::to_string(r.opt.wait_timeout_s) +
        " s (NCCL async state: " + ncclGetErrorString(async) + "); the peer is gone or stuck");
  }
  return value;
}

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(p * double(sorted.size())));
  return sorted[rank == 0 ? 0 : rank - 1];
}

void exchange_unique_id(const Options& opt, int rank, ncclUniqueId* id) {
  if (rank == 0) {
    GIN_NCCL_CHECK(ncclGetUniqueId(id));
    // Written whole under another name, then renamed: rank 1 never reads half an id.
    const std::string tmp = opt.id_file + ".tmp." + std::to_string(getpid());
    const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) die("cannot create " + tmp + ": " + std::strerror(errno));
    const ssize_t n = write(fd, id, sizeof *id);
    if (n != static_cast<ssize_t>(sizeof *id) || close(fd) != 0)
      die("cannot write the unique id to " + tmp + ": " + std::strerror(errno));
    if (rename(tmp.c_str(), opt.id_file.c_str()) != 0)
      die("cannot rename " + tmp + " to " + opt.id_file + ": " + std::strerror(errno));
    return;
  }
  // Rank 0 writes the id once CUDA is up there (seconds): poll for it under the deadline.
  const double deadline = now_s() + opt.timeout_s;
  for (;;) {
    const int fd = open(opt.id_file.c_str(), O_RDONLY);
    if (fd >= 0) {
      const ssize_t n = read(fd, id, sizeof *id);
      close(fd);
      if (n == static_cast<ssize_t>(sizeof *id)) return;
      die(opt.id_file + " holds " + std::to_string(n) + " bytes, not an ncclUniqueId (" +
          std::to_string(sizeof *id) + ")");
    }
    if (errno != ENOENT) die("cannot open " + opt.id_file + ": " + std::strerror(errno));
    if (now_s() > deadline)
      die("rank 0 wrote no unique id to " + opt.id_file + " within " +
          std::to_string(opt.timeout_s) + " s (see rank0.log)");
    poll(nullptr, 0, 10);
  }
}

uint64_t pattern_word(uint32_t kind, int src, int dst, uint64_t round, size_t word) {
  // splitmix64 of everything the word depends on.
  uint64_t z = (uint64_t(kind) << 56) ^ (uint64_t(src) << 48) ^ (uint64_t(dst) << 40) ^
               (round << 32) ^ 0x9e3779b97f4a7c15ull * (word + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void fill_pattern(std::vector<uint64_t>& words, size_t first, size_t count, uint32_t kind, int src,
                  int dst, uint64_t round) {
  for (size_t w = 0; w < count; ++w) words[first + w] = pattern_word(kind, src, dst, round, w);
}

std::string check_pattern(const uint64_t* message, size_t first, size_t count, uint32_t kind,
                          int src, int dst, uint64_t round) {
  size_t bad = 0, first_bad = 0;
  for (size_t w = first; w < first + count; ++w) {
    if (message[w] != pattern_word(kind, src, dst, round, w) && bad++ == 0) first_bad = w;
  }
  if (bad == 0) return "";
  char text[200];
  std::snprintf(text, sizeof text,
                "%zu of %zu words differ; the first at byte %zu: 0x%016llx, expected 0x%016llx",
                bad, count, first_bad * 8, static_cast<unsigned long long>(message[first_bad]),
                static_cast<unsigned long long>(pattern_word(kind, src, dst, round, first_bad)));
  return text;
}

}  // namespace gin_nccl
