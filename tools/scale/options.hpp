// xport-scale's command line (docs/tools.md): the peer counts to measure, how the initiators are
// spread over processes and threads, the traffic of each run, and the internal roles.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "xport/status.hpp"

namespace scale {

// Exit codes (docs/tools.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed =
    1;  // a window or comm did not open, data was wrong, a run failed
inline constexpr int kExitUsage = 2;

enum class Mode { one_sided, two_sided };

struct Options {
  Mode mode = Mode::one_sided;
  std::vector<size_t> peers{16, 64};
  int procs = 0;    // 0: the initiators live in the target's process; P: in P child processes
  int threads = 1;  // threads per initiator process that open windows / connect and issue
  std::string provider;
  std::vector<std::string> nics;
  size_t size = 4096;                        // one-sided: bytes of each put_signal
  std::vector<size_t> sizes{4096, 1 << 20};  // two-sided: message sizes
  int rounds = -1;                           // -1: 20 one-sided, 3 two-sided
  int latency_peers = 4;                     // one-sided: initiators sampled for latency (0: none)
  int latency_samples = 50;                  // ... samples each
  int idle_passes = 10000;                   // progress passes timed with nothing to do
  int timeout_s = 60;                        // deadline of each phase of a run
  bool json = false;
  std::string role;  // internal: "" (the coordinator), "run" (one N), "initiators"
  int corrupt = -1;  // internal, for tests: initiator 0 sends a wrong byte in this round
};

int rounds_of(const Options& opt);

// Parses the command line. Returns an exit code when the program should stop here (help, bad
// usage: the message is printed), nothing when it should run.
std::optional<int> parse(int argc, char** argv, Options* out);

// "4096", "4K", "1M" (K, M: powers of 1024); the error names the option and the token.
xport::Result<size_t> parse_size(std::string_view option, std::string_view text);

// The arguments that make a child of this binary run with the same settings (argv[0] first).
std::vector<std::string> child_args(const Options& opt, const std::string& role, size_t peers);

}  // namespace scale
