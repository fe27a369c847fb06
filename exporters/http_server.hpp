// A small single-threaded HTTP/1.1 server for the exporter: GET (and HEAD) only, bounded
// request size, one request per connection, idle connections closed. prometheus-cpp's Exposer
// cannot serve the status page, and civetweb's thread pool is more than a scrape target needs.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "xport/status.hpp"

namespace xport::exporter {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const std::string& path)>;

  HttpServer() = default;
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds "host:port" (IPv4; "localhost" is 127.0.0.1; port 0 picks a free one).
  Status listen(const std::string& address);
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
  std::string host_;
  std::vector<Conn> conns_;
};

}  // namespace xport::exporter
