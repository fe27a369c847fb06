// Line exchange over pipes and TCP for xport-bench's local and two-host modes (bootstrap.hpp).
#include "bootstrap.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

extern char** environ;

namespace bench {

using xport::Code;
using xport::Deadline;
using xport::Result;
using xport::Status;

namespace {

int remaining_ms(Deadline d) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d.remaining()).count();
  return static_cast<int>(std::min<int64_t>(ms, 1 << 30));
}

}  // namespace

LineChannel& LineChannel::operator=(LineChannel&& o) noexcept {
  std::swap(in_, o.in_);
  std::swap(out_, o.out_);
  std::swap(pending_, o.pending_);
  return *this;
}

LineChannel::~LineChannel() {
  if (out_ >= 0 && out_ != in_) ::close(out_);
  if (in_ >= 0) ::close(in_);
}

Status LineChannel::send(const std::string& line) {
  std::string buf = line + "\n";
  for (size_t done = 0; done < buf.size();) {
    ssize_t n = ::write(out_, buf.data() + done, buf.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return Status(Code::peer_lost, std::string("bootstrap: write: ") + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return Status();
}

Result<std::string> LineChannel::recv(Deadline deadline, const std::function<void()>& idle) {
  for (;;) {
    const size_t nl = pending_.find('\n');
    if (nl != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      return line;
    }
    if (pending_.size() > (1u << 20)) return Status(Code::protocol, "bootstrap: line too long");
    pollfd p{in_, POLLIN, 0};
    // With `idle`, short polls with it in between (the device answers its peer meanwhile).
    const int r = ::poll(&p, 1, idle ? std::min(remaining_ms(deadline), 1) : remaining_ms(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 && idle && !deadline.expired()) {
      idle();
      continue;
    }
    if (r == 0) return Status(Code::timeout, "bootstrap: the other side said nothing in time");
    char chunk[4096];
    const ssize_t n = ::read(in_, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status(Code::peer_lost, "bootstrap: the other side closed the connection");
    pending_.append(chunk, static_cast<size_t>(n));
  }
}

Result<pid_t> spawn_peer(const std::vector<std::string>& args, LineChannel* channel) {
  int to_peer[2], from_peer[2];
  if (::pipe2(to_peer, O_CLOEXEC) != 0) return Status(Code::resource, "pipe");
  if (::pipe2(from_peer, O_CLOEXEC) != 0) {
    ::close(to_peer[0]);
    ::close(to_peer[1]);
    return Status(Code::resource, "pipe");
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  // dup2 clears FD_CLOEXEC on the copies, so only stdin/stdout reach the peer.
  posix_spawn_file_actions_adddup2(&fa, to_peer[0], 0);
  posix_spawn_file_actions_adddup2(&fa, from_peer[1], 1);
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The initiator blocks SIGINT, SIGTERM and SIGCHLD for its signal thread (watch.hpp): the
  // peer starts with none blocked, so that a Ctrl-C on the terminal ends it too.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  // /proc/self/exe: this very binary, however it was started (its telemetry names the
  // executable, not "exe": telemetry/process.cc).
  const int rc = posix_spawn(&pid, "/proc/self/exe", &fa, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  ::close(to_peer[0]);
  ::close(from_peer[1]);
  if (rc != 0) {
    ::close(to_peer[1]);
    ::close(from_peer[0]);
    return Status(Code::resource,
                  std::string("cannot start the peer process: ") + std::strerror(rc));
  }
  *channel = LineChannel(from_peer[0], to_peer[1]);
  return pid;
}

Status reap_peer(pid_t pid, int timeout_s) {
  const Deadline until = Deadline::after(std::chrono::seconds(timeout_s));
  int st = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid) break;
    if (r < 0) return Status(Code::internal, std::string("waitpid: ") + std::strerror(errno));
    if (until.expired()) {
      ::kill(pid, SIGKILL);  // our own child, stuck: do not leave it behind
      ::waitpid(pid, &st, 0);
      return Status(Code::timeout, "the peer process did not exit within " +
                                       std::to_string(timeout_s) + " s (killed)");
    }
    pollfd none{-1, 0, 0};
    ::poll(&none, 0, 10);  // pace of the exit check, bounded by the deadline above
  }
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return Status();
  if (WIFEXITED(st)) {
    return Status(Code::peer_lost, "the peer process failed (exit " +
                                       std::to_string(WEXITSTATUS(st)) + ", its error is above)");
  }
  return Status(Code::peer_lost,
                "the peer process died (signal " + std::to_string(WTERMSIG(st)) + ")");
}

Result<LineChannel> tcp_serve_one(int port, int timeout_s) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status(Code::resource, std::string("socket: ") + std::strerror(errno));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd, 1) != 0) {
    const int err = errno;
    ::close(fd);
    return Status(Code::resource,
                  "cannot listen on TCP port " + std::to_string(port) + ": " + std::strerror(err));
  }
  std::fprintf(stderr, "xport-bench: waiting for a client on port %d (%d s)\n", port, timeout_s);
  const Deadline until = Deadline::after(std::chrono::seconds(timeout_s));
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, remaining_ms(until));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      ::close(fd);
      return Status(Code::timeout, "no client connected to port " + std::to_string(port) +
                                       " within " + std::to_string(timeout_s) + " s");
    }
    break;
  }
  const int c = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
  const int err = errno;
  ::close(fd);
  if (c < 0) return Status(Code::peer_lost, std::string("accept: ") + std::strerror(err));
  return LineChannel(c, ::dup(c));
}

Result<LineChannel> tcp_connect(const std::string& target, int timeout_s) {
  const size_t colon = target.rfind(':');
  std::string host = target.substr(0, colon), port = target.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || res == nullptr) {
    return Status(Code::not_found, "cannot resolve '" + host + "'");
  }
  const Deadline until = Deadline::after(std::chrono::seconds(timeout_s));
  int err = 0;
  for (;;) {
    for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
      const int fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) continue;
      if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
        ::freeaddrinfo(res);
        return LineChannel(fd, ::dup(fd));
      }
      err = errno;
      ::close(fd);
    }
    if (until.expired()) {
      ::freeaddrinfo(res);
      return Status(Code::timeout, "no xport-bench server at " + target + " within " +
                                       std::to_string(timeout_s) + " s (" + std::strerror(err) +
                                       ")");
    }
    pollfd none{-1, 0, 0};
    ::poll(&none, 0, 100);  // retry pace while the server starts, bounded by the deadline
  }
}

std::string hex(const std::vector<uint8_t>& b) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  s.reserve(b.size() * 2);
  for (uint8_t c : b) {
    s += digits[c >> 4];
    s += digits[c & 15];
  }
  return s;
}

Result<std::vector<uint8_t>> unhex(const std::string& s) {
  auto val = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (s.size() % 2 != 0) return Status(Code::protocol, "bootstrap: odd-length hex");
  std::vector<uint8_t> out;
  for (size_t i = 0; i < s.size(); i += 2) {
    const int hi = val(s[i]), lo = val(s[i + 1]);
    if (hi < 0 || lo < 0) return Status(Code::protocol, "bootstrap: bad hex");
    out.push_back(static_cast<uint8_t>(hi << 4 | lo));
  }
  return out;
}

}  // namespace bench
