// xport-gin-nccl's command line: what the launcher takes and forwards to both ranks.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "gin_nccl.hpp"

namespace gin_nccl {
namespace {

// "4K" -> 4096; 0 when it is not a size.
size_t parse_size(const std::string& text) {
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str()) return 0;
  std::string suffix(end);
  if (suffix == "K" || suffix == "k")
    v <<= 10;
  else if (suffix == "M" || suffix == "m")
    v <<= 20;
  else if (suffix == "G" || suffix == "g")
    v <<= 30;
  else if (!suffix.empty())
    return 0;
  return v;
}

[[noreturn]] void usage_error(const std::string& what) {
  std::cerr << "xport-gin-nccl: " << what << "\n";
  std::exit(2);
}

}  // namespace

Options parse_options(int argc, char** argv) {
  CLI::App app{
      "xport-gin-nccl: NCCL's device API with GIN (GPU-initiated puts and signals) on two GPUs, "
      "next to host-initiated ncclSend/ncclRecv; ping-pong latency and alltoall bandwidth, every "
      "message checked. Without --rank it starts both ranks itself."};
  Options opt;
  std::string sizes = "8,64,4K,64K,1M,16M,64M";
  std::string barrier = "bounded";
  app.add_option("--sizes", sizes,
                 "message sizes (ping-pong) and chunk sizes per rank "
                 "(alltoall), multiples of 8, e.g. 8,4K,1M")
      ->capture_default_str();
  app.add_option("--iterations", opt.iterations,
                 "round trips per size (at most about 1 GiB each way per size)")
      ->check(CLI::Range(1, 10000000))
      ->capture_default_str();
  app.add_option("--bw-iterations", opt.bw_iterations,
                 "alltoalls per size (default: about 1 GiB to the peer, 5 to --iterations)")
      ->check(CLI::Range(0, 10000000));
  app.add_option("--latency-samples", opt.latency_samples,
                 "round trips timed one by one for p50/p99")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--out", opt.out, "JSON file with every number (written by rank 0)");
  app.add_option("--mode", opt.mode_text,
                 "all, or a comma list of pingpong (GIN), alltoall (GIN), sendrecv (both, "
                 "host-initiated)")
      ->capture_default_str();
  app.add_option("--logdir", opt.logdir, "where rank0.log and rank1.log go")->capture_default_str();
  app.add_option("--timeout", opt.timeout_s, "seconds both ranks may take together")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  app.add_option("--wait-timeout", opt.wait_timeout_s,
                 "seconds any one wait may take (a signal, a barrier, a round trip)")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  app.add_option("--gin-barrier", barrier,
                 "bounded (ours: GIN signals, waits with a deadline) or nccl "
                 "(ncclGinBarrierSession, which waits without one)")
      ->check(CLI::IsMember({"bounded", "nccl"}))
      ->capture_default_str();
  // The launcher's arguments for the ranks it starts.
  app.add_option("--rank", opt.rank)->group("")->check(CLI::Range(0, 1));
  app.add_option("--gpu", opt.gpu)->group("")->check(CLI::Range(0, 1024));
  app.add_option("--id-file", opt.id_file)->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);
  }

  std::stringstream list(sizes);
  for (std::string item; std::getline(list, item, ',');) {
    const size_t v = parse_size(item);
    if (v == 0 || v % 8 != 0)
      usage_error("--sizes: '" + item +
                  "' is not a multiple of 8 bytes "
                  "(examples: 8, 64, 4K, 1M)");
    if (v > (1ull << 30)) usage_error("--sizes: " + item + " is larger than 1 GiB");
    opt.sizes.push_back(v);
  }
  if (opt.sizes.empty()) usage_error("--sizes is empty");

  opt.modes = 0;
  std::stringstream modes(opt.mode_text);
  for (std::string item; std::getline(modes, item, ',');) {
    if (item == "all")
      opt.modes |= kAllModes;
    else if (item == "pingpong")
      opt.modes |= kPingPong;
    else if (item == "alltoall")
      opt.modes |= kAlltoall;
    else if (item == "sendrecv")
      opt.modes |= kSendRecv;
    else
      usage_error("--mode: '" + item + "' is not all, pingpong, alltoall or sendrecv");
  }
  if (opt.modes == 0) usage_error("--mode is empty");
  opt.nccl_barrier = barrier == "nccl";
  if (opt.rank >= 0 && opt.id_file.empty()) usage_error("--rank needs --id-file");
  return opt;
}

}  // namespace gin_nccl
