// xport-gin-nccl: what its parts share. The launcher (launcher.cc) starts two ranks of the same
// program; each rank measures GIN (gin_nccl.cu) next to host-initiated send/recv (sendrecv.cc).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gin_nccl {

// --mode bits.
enum Mode : unsigned { kPingPong = 1, kAlltoall = 2, kSendRecv = 4, kAllModes = 7 };

struct Options {
  std::vector<size_t> sizes;
  int iterations = 1000;
  int bw_iterations = 0;      // 0: per size, about 1 GiB to the peer (bw_iterations_for)
  int latency_samples = 200;  // round trips timed one by one for p50/p99
  std::string out;            // JSON, written by rank 0
  unsigned modes = kAllModes;
  std::string mode_text = "all";
  std::string logdir = ".";
  double timeout_s = 300;      // the launcher's deadline for both ranks
  double wait_timeout_s = 20;  // the longest any one wait (signal, barrier, round trip) may take
  bool nccl_barrier = false;   // ncclGinBarrierSession (unbounded) instead of our bounded barrier
  // Set by the launcher for the ranks it starts.
  int rank = -1;
  int gpu = -1;
  std::string id_file;
};

// Parses argv; prints usage and exits on a bad command line.
Options parse_options(int argc, char** argv);
// Starts `--rank 0` and `--rank 1` of this program, waits under opt.timeout_s; the exit code.
int run_launcher(const Options& opt, int argc, char** argv);

// ---- errors: a failed NCCL or CUDA call ends the rank (the peer is out of step after it) ----
void set_error_prefix(const std::string& prefix);  // "rank 1" for the messages below
[[noreturn]] void die(const std::string& what);
[[noreturn]] void die_nccl(const char* file, int line, const char* call, ncclResult_t r);
[[noreturn]] void die_cuda(const char* file, int line, const char* call, cudaError_t r);
#define GIN_NCCL_CHECK(call)                                                            \
  do {                                                                                  \
    ncclResult_t gin_r_ = (call);                                                       \
    if (gin_r_ != ncclSuccess) ::gin_nccl::die_nccl(__FILE__, __LINE__, #call, gin_r_); \
  } while (0)
#define GIN_CUDA_CHECK(call)                                                            \
  do {                                                                                  \
    cudaError_t gin_e_ = (call);                                                        \
    if (gin_e_ != cudaSuccess) ::gin_nccl::die_cuda(__FILE__, __LINE__, #call, gin_e_); \
  } while (0)

// ---- what a rank holds ----
struct Rank {
  Options opt;
  int rank = 0, nranks = 2, peer = 1, gpu = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  // ncclMemAlloc'd, registered as symmetric windows; nranks x the largest size each.
  void* send = nullptr;
  void* recv = nullptr;
  size_t buffer_bytes = 0;
  ncclWindow_t send_win = nullptr;
  ncclWindow_t recv_win = nullptr;
  double* scratch = nullptr;   // one double of device memory for host-side reductions
  std::vector<uint64_t> host;  // buffer_bytes of host memory: patterns out, received data back
  std::vector<std::string> failures;  // checks that failed on this rank (the run goes on)
};

// ---- results (rank 0's view; alltoall times are the slower rank's) ----
struct Latency {
  bool measured = false;
  int iterations = 0;  // round trips in the averaged run
  int samples = 0;     // round trips timed one by one
  double avg_us = 0, p50_us = 0, p99_us = 0, min_us = 0, max_us = 0;
  unsigned long long tag_mismatches = 0;  // GIN: first/last word of a message not this round's
  size_t bytes_checked = 0;               // the last message, every byte
};
struct Bandwidth {
  bool measured = false;
  int iterations = 0;
  double time_us = 0;     // one alltoall, the slower rank
  double algbw_GBps = 0;  // bytes each rank sends to the other rank / time
  double busbw_GBps = 0;  // nccl-tests: (n-1)/n x bytes each rank sends (itself included) / time
  size_t bytes_checked = 0;
};
struct PingPongRow {
  size_t size = 0;
  Latency gin, sendrecv;
};
struct AlltoallRow {
  size_t chunk = 0;  // bytes to each rank
  Bandwidth gin, sendrecv;
};
struct Report {
  int nccl_version = 0;
  std::vector<std::string> gpus;                         // "index: name (bus id)"
  std::vector<std::pair<std::string, std::string>> env;  // the variables that pick the path
  std::string gin_type;
  int gin_contexts = 0;
  std::vector<PingPongRow> pingpong;
  std::vector<AlltoallRow> alltoall;
  std::vector<std::string> failures;  // rank 0's
  int failures_all_ranks = 0;
};

// ---- shared helpers (common.cc) ----
double now_s();
std::string size_text(size_t bytes);  // 4096 -> "4K"
// Round trips per size: --iterations, but no more than about 1 GiB each way (64 MiB x 1000
// would take minutes over tcp), at least 5.
int pingpong_iterations(const Options& opt, size_t size);
// Alltoalls per chunk: --bw-iterations, else about 1 GiB to the peer, at least 5, at most
// --iterations.
int bw_iterations_for(const Options& opt, size_t chunk, int nranks);
// Waits for the stream's work under a deadline (cudaStreamQuery; the CPU yields between polls).
// false when the deadline passed; a CUDA error ends the rank.
bool wait_stream(cudaStream_t s, double seconds);
// Copies and zeroing on the rank's stream, waited for under --wait-timeout. Not cudaMemcpy and
// cudaMemset: they run on the legacy default stream, which the rank's non-blocking stream does
// not wait for, and may return before the device memory is written.
void copy_to_device(Rank& r, void* dst, const void* src, size_t bytes);
void copy_to_host(Rank& r, void* dst, const void* src, size_t bytes);
void zero_device(Rank& r, void* dst, size_t bytes);
// Every rank has reached this point (an NCCL all-reduce of one double, waited for under the
// deadline); its argument comes back reduced over the ranks with `op`.
double allreduce(Rank& r, double value, ncclRedOp_t op, const char* what);
// An alltoall row from the slower rank's time for `iters` alltoalls of `chunk` bytes to each rank
// (GIN and send/recv alike), printed on this rank's log.
void record_alltoall(const Rank& r, size_t chunk, int iters, double slowest_s, size_t checked,
                     const std::string& what, Bandwidth& out);
// Nearest-rank percentile of sorted values.
double percentile(const std::vector<double>& sorted, double p);
// The unique id: rank 0 writes it (tmp + rename), rank 1 polls for it under the deadline.
void exchange_unique_id(const Options& opt, int rank, ncclUniqueId* id);

// Data patterns: one 64-bit word per 8 bytes, different per (kind, source, destination, round,
// word) so a misplaced, stale or torn message does not pass.
enum PatternKind : uint32_t {
  kPatternPingPong = 1,
  kPatternAlltoall = 2,
  kPatternSendRecvPP = 3,
  kPatternSendRecvA2a = 4
};
uint64_t pattern_word(uint32_t kind, int src, int dst, uint64_t round, size_t word);
void fill_pattern(std::vector<uint64_t>& words, size_t first, size_t count, uint32_t kind, int src,
                  int dst, uint64_t round);
// Compares words first..first+count-1 of `message` with the pattern; "" when equal, else how
// many differ and the first difference.
std::string check_pattern(const uint64_t* message, size_t first, size_t count, uint32_t kind,
                          int src, int dst, uint64_t round);

// The tag a ping-pong sender writes into the first and last word of its message: the round
// number, so the receiver sees whether the words it reads belong to this round.
#ifdef __CUDACC__
__host__ __device__
#endif
    inline uint64_t
    pingpong_tag(int src, uint64_t round) {
  return 0x6a69000000000000ull ^ (static_cast<uint64_t>(src) << 40) ^ round;
}

// ---- the measurements ----
void sendrecv_pingpong(Rank& r, size_t size, int size_index, Latency& out);
void sendrecv_alltoall(Rank& r, size_t chunk, Bandwidth& out);

// ---- output (report.cc) ----
// Rank 0 prints its table between these lines; the launcher copies that part of rank0.log.
constexpr const char* kResultsBegin = "=== xport-gin-nccl results";
constexpr const char* kResultsEnd = "=== end of results";
void print_table(const Report& rep, const Options& opt);
bool write_json(const Report& rep, const Options& opt, const std::string& path);

}  // namespace gin_nccl
