// Shared by the integration tests and their peer process: data patterns, message sizes,
// hex encoding of handles and keys, and a child process with line I/O under deadlines.
#pragma once

#include <dirent.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace xport::test {

// File descriptors this process has open (entries of /proc/self/fd).
inline size_t open_fds() {
  size_t n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d) != nullptr) ++n;
    closedir(d);
  }
  return n;
}

// This process's resident memory in KiB (VmRSS), 0 where /proc does not say.
inline size_t resident_kib() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10);
  }
  return 0;
}

inline uint8_t pattern_byte(uint64_t msg, size_t i) {
  uint64_t x = (msg + 1) * 0x9E3779B97F4A7C15ull ^ (i * 0xBF58476D1CE4E5B9ull);
  return static_cast<uint8_t>((x >> 29) ^ (x >> 47) ^ i);
}

inline void fill(uint8_t* p, size_t n, uint64_t msg) {
  for (size_t i = 0; i < n; ++i) p[i] = pattern_byte(msg, i);
}

// Index of the first wrong byte, or -1.
inline long long first_mismatch(const uint8_t* p, size_t n, uint64_t msg) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != pattern_byte(msg, i)) return static_cast<long long>(i);
  return -1;
}

// Random sizes both sides derive from one seed: mostly small (eager), some rendezvous.
inline std::vector<size_t> message_sizes(uint32_t seed, size_t count, size_t max) {
  std::mt19937 rng(seed);
  std::vector<size_t> out;
  for (size_t i = 0; i < count; ++i) {
    const uint32_t r = rng();
    size_t s = (r % 10 == 0) ? rng() % (max + 1) : rng() % 4097;
    out.push_back(s);
  }
  return out;
}

// A peer's next command on stdin, calling `progress` while none has come (with a
// manual-progress provider a process that stopped calling libxport could strand its last
// messages); `at_eof` once stdin has ended. The command "park" is handled here: the peer
// prints "PARKED" and never calls libxport again (it waits on stdin, and leaves with _exit at
// its end), so that a test can kill it outside the provider (ChildProcess::kill_parked).
std::string next_stdin_line(const std::function<void()>& progress, const std::string& at_eof);

// For a peer busy in a loop of its own: true once stdin has ended (the test is done with it);
// parks on "park"; another line is kept for next_stdin_line. Never blocks.
bool stdin_ended();

std::string to_hex(const std::vector<uint8_t>& b);
std::vector<uint8_t> from_hex(const std::string& s);

class ChildProcess {
 public:
  // Starts `argv` with extra environment entries; stdin/stdout are pipes.
  static ChildProcess spawn(const std::vector<std::string>& argv,
                            const std::vector<std::string>& env);
  ~ChildProcess();
  ChildProcess(ChildProcess&& o) noexcept;
  ChildProcess& operator=(ChildProcess&&) = delete;

  bool started() const { return pid_ > 0; }
  int pid() const { return pid_; }
  // A line from the child's stdout, or an empty string with `error` set at the deadline/EOF.
  // `idle`, when given, runs between short polls (a test that must keep driving progress while
  // it waits: with manual progress its last sends may still need it).
  std::string read_line(int timeout_ms, std::string* error,
                        const std::function<void()>& idle = {});
  bool write_line(const std::string& line);
  // SIGKILL, wherever the child is. A shm peer killed inside the provider can leave its
  // region's lock held, and whoever sends to it next spins for ever inside libfabric (1.17):
  // tests that kill a peer mid-test use kill_parked.
  void kill_now();
  // Asks the peer to park (next_stdin_line's "park": no more calls into libxport), waits up to
  // 10 s for its "PARKED" (lines before it are dropped), then kills it. False when it never
  // said PARKED (it is killed all the same).
  bool kill_parked();
  // Freezes / resumes the child (SIGSTOP / SIGCONT): a peer that stops answering.
  void stop();
  void resume();
  // Exit status, or -1 when it did not exit in time (then it is killed).
  int wait_exit(int timeout_ms);

 private:
  ChildProcess() = default;
  int pid_ = -1;
  int in_ = -1;   // to the child's stdin
  int out_ = -1;  // from the child's stdout
  bool stopped_ = false;
  std::string buffer_;
};

}  // namespace xport::test
