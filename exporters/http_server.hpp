// A small single-threaded HTTP/1.1 server for the exporter: GET (and HEAD) only, bounded
// request size, one request per connection, idle connections closed, gzip when the client asks.
// prometheus-cpp's Exposer cannot serve the status page, and civetweb's thread pool is more
// than a scrape target needs.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "xport/status.hpp"

namespace xport::exporter {

struct HttpRequest {
  std::string path;          // without the query
  bool accepts_gzip = false;  // Accept-Encoding names gzip (not with q=0)
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// "HOST:PORT", ":PORT" (every IPv4 interface, as node_exporter's :9100), "[::]:PORT" or
// "[ADDR]:PORT" (IPv6; [::] also takes IPv4 where the system allows both), "localhost:PORT"
// (127.0.0.1). Port 0 picks a free one. A syntax error names the part that is wrong.
struct ListenAddress {
  int family = 0;  // AF_INET, AF_INET6
  std::string host;  // numeric
  int port = 0;
};
Result<ListenAddress> parse_listen(const std::string& text);

// gzip of `body` (zlib's deflate with the gzip wrapper); empty when this build has no zlib.
bool gzip_available();
std::string gzip(const std::string& body);

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest& request)>;

  HttpServer() = default;
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds an address of parse_listen().
  Status listen(const ListenAddress& address);
  int port() const { return port_; }
  std::string address() const;

  // Serves until `stop` is set; calls `tick` about every tick_ms.
  void serve(const Handler& handler, const std::function<void()>& tick, int tick_ms,
             const std::atomic<bool>& stop);

  static constexpr size_t kMaxRequest = 8192;
  static constexpr int kMaxConnections = 64;
  static constexpr int kIdleMs = 10000;

 private:
  struct Conn {
    int fd = -1;
    std::string in;
    std::string out;
    size_t sent = 0;
    int64_t last_ms = 0;
    bool responding = false;
  };
  void on_readable(Conn& c, const Handler& handler);
  static std::string respond(const std::string& request, const Handler& handler);

  int fd_ = -1;
  int port_ = 0;
  ListenAddress where_;
  std::vector<Conn> conns_;
};

}  // namespace xport::exporter
