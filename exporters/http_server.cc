// poll() loop, request parsing and response framing.
#include "http_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>

#ifdef XPORT_HAVE_ZLIB
#include <zlib.h>
#endif

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

// `gzipped`: the body is already compressed (Content-Encoding: gzip).
std::string frame(const HttpResponse& r, bool head, bool gzipped = false) {
  std::string out =
      core::str("HTTP/1.1 ", r.status, " ", reason_phrase(r.status),
                "\r\nContent-Type: ", r.content_type, "\r\nContent-Length: ", r.body.size(),
                gzipped ? "\r\nContent-Encoding: gzip" : "",
                "\r\nVary: Accept-Encoding\r\nCache-Control: no-store\r\nConnection: "
                "close\r\n\r\n");
  if (!head) out += r.body;
  return out;
}

// Whether the request's Accept-Encoding takes gzip ("gzip", "gzip;q=0.5", "*"; not "gzip;q=0").
bool takes_gzip(const std::string& request) {
  size_t pos = 0;
  for (;;) {
    const size_t eol = request.find("\r\n", pos);
    if (eol == std::string::npos || eol == pos) return false;
    std::string line = request.substr(pos, eol - pos);
    pos = eol + 2;
    std::string lower;
    for (char c : line) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower.rfind("accept-encoding:", 0) != 0) continue;
    std::string v = lower.substr(16);
    for (size_t at = 0; at < v.size();) {
      size_t comma = v.find(',', at);
      if (comma == std::string::npos) comma = v.size();
      std::string item = v.substr(at, comma - at);
      at = comma + 1;
      item.erase(0, item.find_first_not_of(' '));
      const std::string coding = item.substr(0, item.find_first_of("; "));
      const bool zero = item.find("q=0") != std::string::npos &&
                        item.find_first_of("123456789", item.find("q=0")) == std::string::npos;
      if ((coding == "gzip" || coding == "*") && !zero) return true;
    }
  }
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

Result<ListenAddress> parse_listen(const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) {
    return core::error(Code::invalid_argument, "--listen '", text,
                       "': expected HOST:PORT or :PORT");
  }
  ListenAddress a;
  std::string host = text.substr(0, colon);
  const std::string port_text = text.substr(colon + 1);
  char* end = nullptr;
  const long port = std::strtol(port_text.c_str(), &end, 10);
  if (port_text.empty() || *end != '\0' || port < 0 || port > 65535) {
    return core::error(Code::invalid_argument, "--listen '", text, "': port '", port_text,
                       "' is not a number from 0 to 65535");
  }
  a.port = static_cast<int>(port);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    a.family = AF_INET6;
    a.host = host.substr(1, host.size() - 2);
    in6_addr probe{};
    if (::inet_pton(AF_INET6, a.host.c_str(), &probe) != 1) {
      return core::error(Code::invalid_argument, "--listen '", text, "': '", a.host,
                         "' is not an IPv6 address");
    }
    return a;
  }
  a.family = AF_INET;
  a.host = host.empty() ? "0.0.0.0" : host == "localhost" ? "127.0.0.1" : host;
  in_addr probe{};
  if (::inet_pton(AF_INET, a.host.c_str(), &probe) != 1) {
    return core::error(Code::invalid_argument, "--listen '", text, "': '", host,
                       "' is not an IPv4 address (or localhost, [IPv6], or nothing for every "
                       "interface)");
  }
  return a;
}

Status HttpServer::listen(const ListenAddress& a) {
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (a.family == AF_INET6) {
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&ss);
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(static_cast<uint16_t>(a.port));
    ::inet_pton(AF_INET6, a.host.c_str(), &s6->sin6_addr);
    len = sizeof(*s6);
  } else {
    auto* s4 = reinterpret_cast<sockaddr_in*>(&ss);
    s4->sin_family = AF_INET;
    s4->sin_port = htons(static_cast<uint16_t>(a.port));
    ::inet_pton(AF_INET, a.host.c_str(), &s4->sin_addr);
    len = sizeof(*s4);
  }
  const std::string shown = a.family == AF_INET6 ? core::str("[", a.host, "]:", a.port)
                                                 : core::str(a.host, ":", a.port);
  fd_ = ::socket(a.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return core::error(Code::resource, "socket: ", std::strerror(errno));
  int one = 1, zero = 0;
  ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (a.family == AF_INET6) ::setsockopt(fd_, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd_, 64) != 0) {
    return core::error(Code::resource, "listen on ", shown, ": ", std::strerror(errno));
  }
  ::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  port_ = ntohs(a.family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                     : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  where_ = a;
  return Status::success();
}

std::string HttpServer::address() const {
  return where_.family == AF_INET6 ? core::str("[", where_.host, "]:", port_)
                                   : core::str(where_.host, ":", port_);
}

bool gzip_available() {
#ifdef XPORT_HAVE_ZLIB
  return true;
#else
  return false;
#endif
}

std::string gzip(const std::string& body) {
#ifdef XPORT_HAVE_ZLIB
  z_stream z{};
  // 15 + 16: a gzip header and trailer around the deflate stream.
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return {};
  }
  std::string out(deflateBound(&z, body.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(body.data()));
  z.avail_in = static_cast<uInt>(body.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return rc == Z_STREAM_END ? out : std::string();
#else
  (void)body;
  return {};
#endif
}

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
  HttpRequest req;
  req.path = target.substr(0, target.find('?'));
  const size_t headers = eol == std::string::npos ? request.size() : eol + 2;
  req.accepts_gzip = takes_gzip(request.substr(headers));
  HttpResponse r = handler(req);
  // Small bodies gain nothing from compression (a scrape of a busy node is ~100s of KiB).
  if (req.accepts_gzip && gzip_available() && r.body.size() >= 1024) {
    std::string z = gzip(r.body);
    if (!z.empty()) {
      r.body = std::move(z);
      return frame(r, head, true);
    }
  }
  return frame(r, head);
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
