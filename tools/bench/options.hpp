// xport-bench's command line: the stable interface of docs/tools.md, size lists and ranges, and
// the per-size iteration, warm-up and depth choices derived from it.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "xport/status.hpp"

namespace bench {

// Exit codes (docs/tools.md): scripts and acceptance checks depend on them.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;       // a run failed, a check failed, or --expect-* missed
inline constexpr int kExitUsage = 2;        // bad usage
inline constexpr int kExitUnavailable = 3;  // the operation or mode is not in this libxport build

enum class Op { send, put, get, put_signal, atomic };
std::string_view to_string(Op op);

enum class Format { table, csv, json };

// The largest message libxport accepts: its CQ data carries 32 bits of length, and 0xffffffff
// means "unknown" (proto/wire.hpp), so a message is at most 4 GiB - 2 bytes.
inline constexpr size_t kMaxSize = 0xfffffffeull;
// --comms: communicators per peer and direction (each side's device holds 2 per session).
inline constexpr int kMaxComms = 256;

struct Options {
  Op op = Op::send;
  std::vector<size_t> sizes{8};
  std::string provider;
  std::vector<std::string> nics;
  int iterations = 10000;
  bool iterations_set = false;  // false: lowered for large sizes (iterations_for)
  int warmup = 1000;
  bool warmup_set = false;
  int depth = 0;    // 0: the op's default (default_depth)
  int comms = 1;    // communicators per peer and direction; traffic goes round-robin over them
  bool single_thread = false;  // --single-thread: ContextOptions::thread_safe = false
  int cpu = -1;                // --cpu: this process on that CPU (sched_setaffinity)
  int peer_cpu = -1;           // --peer-cpu: local mode's peer on that CPU
  int groups = -1;  // --groups: XPORT_POOL_GROUPS for this run; -1: as the environment says
  bool check = false;
  bool sliding = false;  // --sliding: put/get rate with a sliding window, one quiet at the end
  bool time_calls = false;  // --time-calls (with --sliding): clock each put/get and each wait
  int slots = 0;   // --slots (put, get, unchecked): SIZE-byte slots the operations cycle
                   // through; 0: kRateSlots
  int gap_us = 0;  // --gap-us
  bool cuda = false;            // --memory cuda: data buffers in GPU memory
  int gpu = 0;                  // --gpu: this process's GPU
  int peer_gpu = -1;            // --peer-gpu: local mode's peer's GPU; -1: --gpu
  bool round_trip = false;      // --round-trip (put-signal)
  bool device_initiator = false;  // --initiator device (put, put-signal)
  int device_scope = 0;         // --device-scope: gpu::Scope (thread, warp, block)
  Format format = Format::table;
  double expect_bw_gbs = 0;  // GB/s (1e9 bytes); 0: no expectation
  double expect_lat_us = 0;  // p50 one-way latency in µs; 0: no expectation
  bool server = false;
  int port = 18515;
  std::string connect;
  int timeout_s = 30;
  std::string pattern;          // pairwise, fan-in (MPI mode), alltoall (MPI, local, two-host)
  std::string role = "client";  // internal: "peer" for the process local mode spawns
  int64_t corrupt = -1;         // internal, for tests of --check (--test-corrupt ITERATION)
};

// Parses the command line. Returns an exit code when the program should stop here (help, bad
// usage: the message is printed), nothing when it should run.
std::optional<int> parse(int argc, char** argv, Options* out);

// "8", "4K", "1M", ranges "1:64M" (powers of two times the start, up to the end inclusive),
// comma-separated and mixed: "8,4K:1M". The error names the bad token.
xport::Result<std::vector<size_t>> parse_sizes(std::string_view text);

// Per-size choices. Without --iterations, large sizes get fewer iterations (about 1 GiB moved
// per point, 256 MiB with --check, at least 10); without --warmup, a tenth of that, at most 1000.
int iterations_for(const Options& opt, size_t size);
int warmup_for(const Options& opt, size_t size);
// send: 1 (ping-pong); put and get: 16 operations per quiet.
int default_depth(Op op);
int depth_of(const Options& opt);

// Whether this run is MPI mode: --pattern pairwise or fan-in, or alltoall started by an MPI
// launcher (its environment says so) without --server or --connect.
bool mpi_mode(const Options& opt);

}  // namespace bench
