// xport-scale: one target device, N initiator devices, for each N of a list (docs/tools.md). This
// process only coordinates: each N runs in a fresh process of its own (its memory figures start
// from nothing, and a run that crashes or hangs is reported, killed, and the next N goes on).
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "bench/bootstrap.hpp"
#include "common/tool.hpp"
#include "initiators.hpp"
#include "options.hpp"
#include "record.hpp"
#include "target.hpp"

extern char** environ;

namespace scale {
namespace {

using namespace xport;

// The longest a run may take: each of its phases (devices, opening, the idle passes, rounds,
// latency, counters, closing) has the timeout and a grace of its own.
int run_limit_s(const Options& opt) { return 8 * (opt.timeout_s + 5) + 30; }

// Starts `args` as this binary with stdout shared (the run prints its own row). Returns its
// wait status, or -1 when it did not end within `limit_s` (then it is killed).
int run_child(const std::vector<std::string>& args, int limit_s, pid_t* pid_out) {
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  std::fflush(stdout);
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) != 0) return -2;
  *pid_out = pid;
  const Deadline until = Deadline::after(std::chrono::seconds(limit_s));
  int st = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid) return st;
    if (r < 0) return -2;
    if (until.expired()) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      return -1;
    }
    ::usleep(20000);  // the pace of the exit check, bounded by the deadline above
  }
}

int coordinate(const Options& opt) {
  // What fails before any run: bad knobs, a provider or rail that is not there.
  ContextOptions co;
  co.provider = opt.provider;
  co.peers_on_host = true;
  auto ctx = Context::open(co);
  if (!ctx.ok()) return tool::early_failure("xport-scale", opt.json, ctx.status().to_string());
  const std::string provider = (*ctx)->provider().caps.provider;
  const auto domains = (*ctx)->domains();
  for (const auto& nic : opt.nics) {
    if (std::find(domains.begin(), domains.end(), nic) == domains.end()) {
      std::string avail;
      for (const auto& d : domains) avail += (avail.empty() ? "" : ", ") + d;
      return tool::early_failure(
          "xport-scale", opt.json,
          "--nics: '" + nic + "' is not a domain of " + provider + " (available: " + avail + ")");
    }
  }
  ctx->reset();
  if (!opt.json) {
    print_header(opt, provider,
                 device_registered_bytes(std::max<size_t>(1, opt.nics.size()), provider));
  }
  int rc = kExitOk;
  for (size_t n : opt.peers) {
    pid_t pid = -1;
    const int st = run_child(child_args(opt, "run", n), run_limit_s(opt), &pid);
    if (st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == kExitOk) continue;
    rc = kExitFailed;
    if (st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == kExitFailed) continue;  // it said why
    Record r;
    r.mode = opt.mode;
    r.peers = n;
    r.provider = provider;
    r.procs = opt.procs;
    r.threads = opt.threads;
    r.size = opt.size;
    r.rounds = rounds_of(opt);
    r.knobs = changed_knobs();
    r.error_code = "internal";
    const std::string who =
        "the run for " + std::to_string(n) + " peers (process " + std::to_string(pid) + ")";
    if (st == -1) {
      r.error = who + " did not end within " + std::to_string(run_limit_s(opt)) + " s (killed)";
      r.error_code = "timeout";
    } else if (st == -2) {
      r.error = "cannot start " + who + ": " + std::strerror(errno);
    } else if (WIFSIGNALED(st)) {
      r.error = who + " died (signal " + std::to_string(WTERMSIG(st)) + ": " +
                strsignal(WTERMSIG(st)) + ")";
    } else {
      r.error = who + " failed (exit " + std::to_string(WEXITSTATUS(st)) + ")";
    }
    print_record(r, opt.json);
  }
  return rc;
}

}  // namespace
}  // namespace scale

int main(int argc, char** argv) {
  scale::Options opt;
  if (auto rc = scale::parse(argc, argv, &opt)) return *rc;
  if (opt.role == "initiators") {
    ::signal(SIGPIPE, SIG_IGN);
    bench::LineChannel ch(0, 1);
    return scale::run_initiators(ch, opt);
  }
  if (opt.role == "run") return scale::run_target(opt);
  return scale::coordinate(opt);
}
