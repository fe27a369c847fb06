// Child processes and hex helpers for the integration tests.
#include <csignal>
#include "harness.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iostream>

extern char** environ;

namespace xport::test {

namespace {

std::deque<std::string>& stdin_lines_read_ahead() {
  static std::deque<std::string> lines;
  return lines;
}

[[noreturn]] void park() {
  std::cout << "PARKED" << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  _exit(0);  // no destructor may call into libxport once parked
}

// Whether stdin has something to read (a line or its end) within `usec`.
bool stdin_readable(long usec) {
  fd_set in;
  FD_ZERO(&in);
  FD_SET(0, &in);
  timeval tv{0, usec};
  return select(1, &in, nullptr, nullptr, &tv) > 0;
}

// The next line of stdin (false at its end); "park" parks here and never returns.
bool read_stdin_line(std::string* line) {
  if (!std::getline(std::cin, *line)) return false;
  if (*line == "park") park();
  return true;
}

}  // namespace

bool stdin_ended() {
  auto& ahead = stdin_lines_read_ahead();
  if (!ahead.empty() || !stdin_readable(0)) return false;
  std::string line;
  if (!read_stdin_line(&line)) return true;
  ahead.push_back(line);
  return false;
}

std::string next_stdin_line(const std::function<void()>& progress, const std::string& at_eof) {
  if (auto& ahead = stdin_lines_read_ahead(); !ahead.empty()) {
    std::string line = ahead.front();
    ahead.pop_front();
    return line;
  }
  while (!stdin_readable(1000)) progress();
  std::string line;
  return read_stdin_line(&line) ? line : at_eof;
}

std::string to_hex(const std::vector<uint8_t>& b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (uint8_t c : b) {
    s += d[c >> 4];
    s += d[c & 15];
  }
  return s;
}

std::vector<uint8_t> from_hex(const std::string& s) {
  std::vector<uint8_t> out;
  auto v = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (size_t i = 0; i + 1 < s.size(); i += 2) out.push_back(v(s[i]) * 16 + v(s[i + 1]));
  return out;
}

ChildProcess ChildProcess::spawn(const std::vector<std::string>& argv,
                                 const std::vector<std::string>& env) {
  // A child that failed and exited must not take the test binary with it when the test writes
  // to its pipe: the write fails with EPIPE instead.
  static const bool ignored = (std::signal(SIGPIPE, SIG_IGN), true);
  (void)ignored;
  ChildProcess c;
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return c;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  // XTEST_PEER_WRAP (e.g. "ip netns exec xpb123") runs the peer through a wrapper: the
  // multi-rail tests put it in another network namespace.
  std::vector<std::string> full;
  if (const char* wrap = std::getenv("XTEST_PEER_WRAP"); wrap != nullptr && *wrap != 0) {
    full.push_back("/usr/bin/env");
    std::string w(wrap);
    for (size_t pos = 0; pos < w.size();) {
      size_t sp = w.find(' ', pos);
      if (sp == std::string::npos) sp = w.size();
      if (sp > pos) full.push_back(w.substr(pos, sp - pos));
      pos = sp + 1;
    }
  }
  full.insert(full.end(), argv.begin(), argv.end());
  std::vector<char*> args;
  for (const auto& a : full) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // The extra entries override inherited ones of the same name.
  std::vector<std::string> envs;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    std::string name = entry.substr(0, entry.find('='));
    bool overridden = false;
    for (const auto& x : env) overridden = overridden || x.rfind(name + "=", 0) == 0;
    if (!overridden) envs.push_back(entry);
  }
  for (const auto& e : env) envs.push_back(e);
  std::vector<char*> envp;
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  if (rc != 0) {
    close(in[1]);
    close(out[0]);
    return c;
  }
  c.pid_ = pid;
  c.in_ = in[1];
  c.out_ = out[0];
  return c;
}

ChildProcess::ChildProcess(ChildProcess&& o) noexcept
    : pid_(o.pid_), in_(o.in_), out_(o.out_), stopped_(o.stopped_), buffer_(std::move(o.buffer_)) {
  o.pid_ = o.in_ = o.out_ = -1;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) {
    // A peer still running is ended by the end of its stdin (its roles leave at EOF, closing
    // their devices): killed in the middle of a provider call, a shm peer could leave its
    // region locked for whoever sends to it next. SIGKILL only when it does not leave within
    // 5 s, or when it was frozen.
    if (!stopped_ && in_ >= 0) {
      close(in_);
      in_ = -1;
      (void)wait_exit(5000);
    }
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  if (in_ >= 0) close(in_);
  if (out_ >= 0) close(out_);
}

std::string ChildProcess::read_line(int timeout_ms, std::string* error,
                                    const std::function<void()>& idle) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    auto nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    until - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) {
      *error = "no line from the peer process within " + std::to_string(timeout_ms) + " ms";
      return {};
    }
    pollfd p{out_, POLLIN, 0};
    int r = poll(&p, 1, idle ? 1 : static_cast<int>(left));
    if (r <= 0) {
      if (idle) idle();
      continue;
    }
    char buf[4096];
    ssize_t n = ::read(out_, buf, sizeof(buf));
    if (n <= 0) {
      *error = "the peer process closed its output (exited?)";
      return {};
    }
    buffer_.append(buf, static_cast<size_t>(n));
  }
}

bool ChildProcess::write_line(const std::string& line) {
  std::string l = line + "\n";
  return ::write(in_, l.data(), l.size()) == static_cast<ssize_t>(l.size());
}

void ChildProcess::stop() {
  if (pid_ > 0 && ::kill(pid_, SIGSTOP) == 0) stopped_ = true;
}

void ChildProcess::resume() {
  if (pid_ > 0 && ::kill(pid_, SIGCONT) == 0) stopped_ = false;
}

void ChildProcess::kill_now() {
  if (pid_ > 0) ::kill(pid_, SIGKILL);
}

bool ChildProcess::kill_parked() {
  bool parked = false;
  if (pid_ > 0 && !stopped_ && write_line("park")) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            until - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0) break;
      std::string err;
      const std::string line = read_line(static_cast<int>(left), &err);
      if (line == "PARKED") {
        parked = true;
        break;
      }
      if (!err.empty()) break;
    }
  }
  kill_now();
  return parked;
}

int ChildProcess::wait_exit(int timeout_ms) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int st = 0;
    pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    if (std::chrono::steady_clock::now() >= until) {
      ::kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
      return -1;
    }
    pollfd p{out_, 0, 0};
    poll(&p, 0, 10);  // a bounded pause between reaps, not synchronisation
  }
}

}  // namespace xport::test
