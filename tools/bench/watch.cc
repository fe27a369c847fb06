// The signal thread of xport-bench (watch.hpp): sigwait for SIGINT, SIGTERM and SIGCHLD.
#include "watch.hpp"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <thread>

#include "printer.hpp"

namespace bench::watch {
namespace {

std::atomic<Printer*> g_printer{nullptr};
std::atomic<pid_t> g_peer{-1};
std::atomic<bool> g_peer_may_exit{false};
sigset_t g_set;

void on_child(int) {}  // a handler, so that SIGCHLD is never discarded as ignored

std::string how_ended(const siginfo_t& info) {
  if (info.si_code == CLD_EXITED) return "exited with status " + std::to_string(info.si_status);
  return "was killed by signal " + std::to_string(info.si_status) + " (" +
         signal_name(info.si_status) + ")" + (info.si_code == CLD_DUMPED ? ", core dumped" : "");
}

// Ends the peer (SIGTERM, then SIGKILL after a second) and collects it.
void end_peer() {
  const pid_t peer = g_peer.load();
  if (peer <= 0) return;
  ::kill(peer, SIGTERM);
  for (int i = 0; i < 100; ++i) {
    if (::waitpid(peer, nullptr, WNOHANG) == peer) return;
    pollfd none{-1, 0, 0};
    ::poll(&none, 0, 10);  // pace of the exit check, at most a second in all
  }
  ::kill(peer, SIGKILL);
  ::waitpid(peer, nullptr, 0);
}

[[noreturn]] void finish(EndStatus status, const std::string& reason, int rc) {
  Printer* p = g_printer.load();
  if (p != nullptr) {
    p->end(status, reason, rc);
  } else {
    std::fprintf(stderr, "xport-bench: %s, before the first point\n", reason.c_str());
  }
  std::fflush(stdout);
  std::fflush(stderr);
  // The main thread may be inside the library: no destructors, no atexit handlers. What this
  // process leaves in /dev/shm, the next Context::open and xport-exporter remove.
  ::_exit(rc);
}

void run() {
  for (;;) {
    int sig = 0;
    if (::sigwait(&g_set, &sig) != 0) continue;
    if (sig == SIGCHLD) {
      const pid_t peer = g_peer.load();
      if (peer <= 0 || g_peer_may_exit.load()) continue;
      if (auto how = peer_ended(peer, 0)) {
        ::waitpid(peer, nullptr, WNOHANG);
        finish(EndStatus::peer_died,
               "the peer process (pid " + std::to_string(peer) + ") died: it " + *how, 1);
      }
      continue;
    }
    end_peer();
    finish(EndStatus::interrupted, "interrupted by " + signal_name(sig), 128 + sig);
  }
}

}  // namespace

std::string signal_name(int sig) {
  switch (sig) {
    case SIGHUP:
      return "SIGHUP";
    case SIGINT:
      return "SIGINT";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGILL:
      return "SIGILL";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGKILL:
      return "SIGKILL";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGALRM:
      return "SIGALRM";
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGUSR2:
      return "SIGUSR2";
  }
  return "signal " + std::to_string(sig);
}

void start() {
  struct sigaction sa {};
  sa.sa_handler = on_child;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  ::sigaction(SIGCHLD, &sa, nullptr);
  sigemptyset(&g_set);
  sigaddset(&g_set, SIGINT);
  sigaddset(&g_set, SIGTERM);
  sigaddset(&g_set, SIGCHLD);
  ::pthread_sigmask(SIG_BLOCK, &g_set, nullptr);
  std::thread(run).detach();
}

void set_printer(Printer* p) { g_printer.store(p); }
void set_peer(pid_t pid) {
  g_peer.store(pid);
  // A death before this store left SIGCHLD pending or already taken: look once more.
  ::kill(::getpid(), SIGCHLD);
}
void peer_may_exit() { g_peer_may_exit.store(true); }

std::optional<std::string> peer_ended(pid_t pid, int grace_ms) {
  for (int waited = 0;; waited += 10) {
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == pid) {
      return how_ended(info);
    }
    if (waited >= grace_ms) return std::nullopt;
    pollfd none{-1, 0, 0};
    ::poll(&none, 0, 10);  // pace of the check, bounded by grace_ms
  }
}

}  // namespace bench::watch
