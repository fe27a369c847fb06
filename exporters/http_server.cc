// poll() loop, request parsing and response framing.
#include "http_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/format.hpp"

namespace xport::exporter {
namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const char* reason_phrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
  }
  return "Error";
}

std::string frame(const HttpResponse& r, bool head) {
  std::string out =
      core::str("HTTP/1.1 ", r.status, " ", reason_phrase(r.status),
                "\r\nContent-Type: ", r.content_type, "\r\nContent-Length: ", r.body.size(),
                "\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n");
  if (!head) out += r.body;
  return out;
}

HttpResponse plain(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

}  // namespace

HttpServer::~HttpServer() {
  for (auto& c : conns_) ::close(c.fd);
  if (fd_ >= 0) ::close(fd_);
}

Status HttpServer::listen(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return core::error(Code::invalid_argument, "--listen '", address, "': expected host:port");
  }
  std::string host = address.substr(0, colon);
  std::string port_text = address.substr(colon + 1);
  if (host == "localhost" || host.empty()) host = "127.0.0.1";
  char* end = nullptr;
  long port = std::strtol(port_text.c_str(), &end, 10);
  if (port_text.empty() || *end != '\0' || port < 0 || port > 65535) {
    return core::error(Code::invalid_argument, "--listen '", address, "': bad port");
  }
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1) {
    return core::error(Code::invalid_argument, "--listen '", address,
                       "': host must be an IPv4 address");
  }
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return core::error(Code::resource, "socket: ", std::strerror(errno));
  int one = 1;
  ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 || ::listen(fd_, 64) != 0) {
    return core::error(Code::resource, "listen on ", address, ": ", std::strerror(errno));
  }
  socklen_t len = sizeof(sa);
  ::getsockname(fd_, reinterpret_cast<sockaddr*>(&sa), &len);
  port_ = ntohs(sa.sin_port);
  host_ = host;
  return Status::success();
}

std::string HttpServer::address() const { return core::str(host_, ":", port_); }

std::string HttpServer::respond(const std::string& request, const Handler& handler) {
  size_t eol = request.find("\r\n");
  std::string line = request.substr(0, eol);
  size_t s1 = line.find(' ');
  size_t s2 = s1 == std::string::npos ? s1 : line.find(' ', s1 + 1);
  if (s1 == std::string::npos || s2 == std::string::npos ||
      line.compare(s2 + 1, 7, "HTTP/1.") != 0) {
    return frame(plain(400, "bad request\n"), false);
  }
  std::string method = line.substr(0, s1);
  std::string target = line.substr(s1 + 1, s2 - s1 - 1);
  bool head = method == "HEAD";
  if (method != "GET" && !head) return frame(plain(405, "only GET and HEAD\n"), false);
  std::string path = target.substr(0, target.find('?'));
  return frame(handler(path), head);
}

void HttpServer::on_readable(Conn& c, const Handler& handler) {
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
    if (n > 0) {
      c.in.append(buf, static_cast<size_t>(n));
      c.last_ms = now_ms();
      if (c.in.size() > kMaxRequest) {
        c.out = frame(plain(431, "request too large\n"), false);
        c.responding = true;
        return;
      }
      continue;
    }
    if (n == 0) {  // the client closed its side: answer a complete request, else drop it
      if (c.in.find("\r\n\r\n") == std::string::npos) c.last_ms = 0;
      break;
    }
    if (errno == EINTR) continue;
    break;  // EAGAIN
  }
  if (c.last_ms != 0 && c.in.find("\r\n\r\n") != std::string::npos) {
    c.out = respond(c.in, handler);
    c.responding = true;
  }
}

void HttpServer::serve(const Handler& handler, const std::function<void()>& tick, int tick_ms,
                       const std::atomic<bool>& stop) {
  int64_t next_tick = now_ms();
  while (!stop.load()) {
    const int64_t now = now_ms();
    if (now >= next_tick) {
      tick();
      next_tick = now + tick_ms;
    }
    std::vector<pollfd> fds;
    fds.push_back({fd_, POLLIN, 0});
    for (auto& c : conns_) {
      fds.push_back({c.fd, static_cast<short>(c.responding ? POLLOUT : POLLIN), 0});
    }
    int wait = static_cast<int>(next_tick - now_ms());
    int rc = ::poll(fds.data(), fds.size(), wait < 0 ? 0 : wait);
    if (rc < 0 && errno != EINTR) break;
    if (rc <= 0) continue;
    for (size_t i = 1; i < fds.size(); ++i) {
      Conn& c = conns_[i - 1];
      if (fds[i].revents & (POLLERR | POLLHUP | POLLNVAL)) {
        c.last_ms = 0;
        continue;
      }
      if (!c.responding && (fds[i].revents & POLLIN)) on_readable(c, handler);
      if (c.responding && (fds[i].revents & POLLOUT)) {
        while (c.sent < c.out.size()) {
          ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
          if (n > 0) {
            c.sent += static_cast<size_t>(n);
            c.last_ms = now_ms();
          } else if (n < 0 && errno == EINTR) {
            continue;
          } else {
            if (n < 0 && errno != EAGAIN) c.last_ms = 0;
            break;
          }
        }
        if (c.sent == c.out.size()) c.last_ms = 0;  // done: close
      }
    }
    // Close finished, failed and idle connections.
    const int64_t t = now_ms();
    for (size_t i = 0; i < conns_.size();) {
      if (conns_[i].last_ms == 0 || t - conns_[i].last_ms > kIdleMs) {
        ::close(conns_[i].fd);
        conns_[i] = std::move(conns_.back());
        conns_.pop_back();
      } else {
        ++i;
      }
    }
    if (fds[0].revents & POLLIN) {
      for (;;) {
        int cfd = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd < 0) break;
        if (static_cast<int>(conns_.size()) >= kMaxConnections) {
          ::close(cfd);  // shed load rather than grow without bound
          continue;
        }
        Conn c;
        c.fd = cfd;
        c.last_ms = now_ms();
        conns_.push_back(std::move(c));
      }
    }
  }
}

}  // namespace xport::exporter
