// xport-gin-nccl without --rank: starts this program twice, as rank 0 on GPU 0 and rank 1 on
// GPU 1, each with its output in LOGDIR/rank<r>.log, and waits for both under --timeout. No MPI:
// the ranks meet through a unique-id file in LOGDIR. With one GPU visible both ranks use it, each
// under an NCCL_HOSTID of its own (unless NCCL_HOSTID is set already): NCCL refuses two ranks of
// one communicator on one GPU of one host ("Duplicate GPU detected"), and takes them for two
// hosts then, which is what a run through the network plugin wants anyway.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <limits>

#include "gin_nccl.hpp"

namespace gin_nccl {
namespace {

constexpr int kRanks = 2;

struct Child {
  pid_t pid = -1;
  int gpu = 0;
  std::string log;
  bool done = false;
  bool killed = false;
  int status = 0;
  double ended_s = 0;
};

std::string describe(const Child& c) {
  if (c.killed) return "killed by the launcher";
  if (WIFEXITED(c.status)) {
    const int code = WEXITSTATUS(c.status);
    return code == 0 ? "passed" : "failed (exit " + std::to_string(code) + ")";
  }
  if (WIFSIGNALED(c.status)) return std::string("died of ") + strsignal(WTERMSIG(c.status));
  return "ended oddly (wait status " + std::to_string(c.status) + ")";
}

bool passed(const Child& c) {
  return !c.killed && WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0;
}

void print_tail(const std::string& path, size_t lines) {
  std::ifstream f(path);
  std::deque<std::string> tail;
  for (std::string line; std::getline(f, line);) {
    tail.push_back(line);
    if (tail.size() > lines) tail.pop_front();
  }
  for (const std::string& line : tail) std::printf("    %s\n", line.c_str());
}

// Rank 0's table, from its log.
void print_results(const std::string& path) {
  std::ifstream f(path);
  bool inside = false;
  for (std::string line; std::getline(f, line);) {
    if (line.rfind(kResultsBegin, 0) == 0) inside = true;
    if (inside) std::printf("%s\n", line.c_str());
    if (line.rfind(kResultsEnd, 0) == 0) inside = false;
  }
}

// Reaps whichever children have ended; true when all have.
bool reap(Child (&children)[kRanks], double start) {
  bool all = true;
  for (int r = 0; r < kRanks; ++r) {
    Child& c = children[r];
    if (c.done) continue;
    const pid_t got = waitpid(c.pid, &c.status, WNOHANG);
    if (got == c.pid) {
      c.done = true;
      c.ended_s = now_s() - start;
      std::printf("xport-gin-nccl: rank %d %s after %.1f s\n", r, describe(c).c_str(), c.ended_s);
      std::fflush(stdout);
    } else {
      all = false;
    }
  }
  return all;
}

// SIGTERM, then SIGKILL for what is still there after 5 s; reaps both.
void stop(Child (&children)[kRanks], double start) {
  for (Child& c : children) {
    if (c.done) continue;
    kill(c.pid, SIGTERM);
    c.killed = true;
  }
  const double hard = now_s() + 5;
  while (!reap(children, start) && now_s() < hard) poll(nullptr, 0, 20);
  for (Child& c : children) {
    if (c.done) continue;
    kill(c.pid, SIGKILL);
    waitpid(c.pid, &c.status, 0);
    c.done = true;
  }
}

}  // namespace

int run_launcher(const Options& opt, int argc, char** argv) {
  if (mkdir(opt.logdir.c_str(), 0755) != 0 && errno != EEXIST) {
    std::fprintf(stderr, "xport-gin-nccl: cannot create --logdir %s: %s\n", opt.logdir.c_str(),
                 std::strerror(errno));
    return 1;
  }
  int gpus = 0;
  const cudaError_t e = cudaGetDeviceCount(&gpus);
  if (e != cudaSuccess || gpus < 1) {
    std::fprintf(stderr, "xport-gin-nccl: no GPU visible (cudaGetDeviceCount: %s)\n",
                 e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    return 1;
  }
  Child children[kRanks];
  children[1].gpu = gpus >= 2 ? 1 : 0;
  const bool own_host_ids = gpus < 2 && std::getenv("NCCL_HOSTID") == nullptr;
  if (gpus < 2)
    std::printf(
        "xport-gin-nccl: only 1 GPU is visible: both ranks use GPU 0%s (the GPU time-slices "
        "the two processes' kernels unless MPS serves them).\n",
        own_host_ids ? ", each rank under an NCCL_HOSTID of its own (xport-gin-rank<r>)"
                     : " under the NCCL_HOSTID set");

  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    std::fprintf(stderr, "xport-gin-nccl: cannot find this program (/proc/self/exe): %s\n",
                 std::strerror(errno));
    return 1;
  }
  self[n] = '\0';
  const std::string id_file = opt.logdir + "/xport-gin-nccl." + std::to_string(getpid()) + ".id";
  unlink(id_file.c_str());

  // Everything the children need is built before fork: after it, only exec.
  std::vector<std::vector<std::string>> args(kRanks);
  std::vector<std::vector<char*>> argvs(kRanks);
  std::vector<int> fds(kRanks, -1);
  // Each child's environment: this one's, with its NCCL_HOSTID where both share the GPU.
  std::vector<std::vector<std::string>> envs(kRanks);
  std::vector<std::vector<char*>> envps(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    for (char** e = environ; *e != nullptr; ++e) envs[r].emplace_back(*e);
    if (own_host_ids) envs[r].push_back("NCCL_HOSTID=xport-gin-rank" + std::to_string(r));
    for (std::string& e : envs[r]) envps[r].push_back(e.data());
    envps[r].push_back(nullptr);
  }
  for (int r = 0; r < kRanks; ++r) {
    Child& c = children[r];
    c.log = opt.logdir + "/rank" + std::to_string(r) + ".log";
    args[r].assign(argv, argv + argc);
    args[r][0] = self;
    for (const std::string& a : {std::string("--rank"), std::to_string(r), std::string("--gpu"),
                                 std::to_string(c.gpu), std::string("--id-file"), id_file})
      args[r].push_back(a);
    for (std::string& a : args[r]) argvs[r].push_back(a.data());
    argvs[r].push_back(nullptr);
    fds[r] = open(c.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fds[r] < 0) {
      std::fprintf(stderr, "xport-gin-nccl: cannot create %s: %s\n", c.log.c_str(),
                   std::strerror(errno));
      return 1;
    }
  }

  std::printf(
      "xport-gin-nccl: rank 0 on GPU 0, rank 1 on GPU %d (%d visible); logs %s, %s; at "
      "most %.0f s\n",
      children[1].gpu, gpus, children[0].log.c_str(), children[1].log.c_str(), opt.timeout_s);
  std::fflush(stdout);
  std::fflush(stderr);
  const double start = now_s();
  for (int r = 0; r < kRanks; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::fprintf(stderr, "xport-gin-nccl: fork: %s\n", std::strerror(errno));
      stop(children, start);
      return 1;
    }
    if (pid == 0) {
      // dup2 clears close-on-exec on 1 and 2; the other rank's log stays closed here.
      dup2(fds[r], STDOUT_FILENO);
      dup2(fds[r], STDERR_FILENO);
      execve(self, argvs[r].data(), envps[r].data());
      const char msg[] = "xport-gin-nccl: exec of the rank failed\n";
      ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
      (void)ignored;
      _exit(127);
    }
    children[r].pid = pid;
  }
  for (int fd : fds) close(fd);

  // A rank that fails leaves its peer waiting for it; the peer's own waits give up after
  // --wait-timeout and say where, so it gets that long (and 10 s) before it is stopped.
  const double deadline = start + opt.timeout_s;
  double grace = std::numeric_limits<double>::infinity();
  bool timed_out = false;
  while (!reap(children, start)) {
    for (const Child& c : children) {
      if (c.done && !passed(c))
        grace = std::min(grace, start + c.ended_s + opt.wait_timeout_s + 10);
    }
    const double now = now_s();
    if (now > deadline || now > grace) {
      timed_out = now > deadline;
      std::printf("xport-gin-nccl: %s; stopping the rank(s) still running\n",
                  timed_out ? ("the ranks did not finish within --timeout " +
                               std::to_string(int(opt.timeout_s)) + " s")
                                  .c_str()
                            : "a rank failed and its peer did not end by itself");
      stop(children, start);
      break;
    }
    poll(nullptr, 0, 20);
  }
  unlink(id_file.c_str());

  bool ok = true;
  std::printf("\nxport-gin-nccl summary (%.1f s):\n", now_s() - start);
  for (int r = 0; r < kRanks; ++r) {
    const Child& c = children[r];
    std::printf("  rank %d (GPU %d): %s; log %s\n", r, c.gpu, describe(c).c_str(), c.log.c_str());
    ok = ok && passed(c);
  }
  if (timed_out)
    std::printf("  TIMEOUT: the run took longer than --timeout %.0f s\n", opt.timeout_s);
  for (int r = 0; r < kRanks; ++r) {
    if (passed(children[r])) continue;
    std::printf("  the end of rank %d's log:\n", r);
    print_tail(children[r].log, 20);
  }
  print_results(children[0].log);
  if (!opt.out.empty() && passed(children[0])) std::printf("JSON: %s\n", opt.out.c_str());
  std::printf("xport-gin-nccl: %s\n", ok ? "PASSED" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace gin_nccl
