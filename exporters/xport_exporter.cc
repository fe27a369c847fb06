// xport-exporter: serves the counters of every process using libxport on this node (their
// shared-memory stats segments) as Prometheus metrics at /metrics, a status page at /, and
// /healthz for the service manager and load balancers.
#include <dirent.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <deque>
#include <iostream>

#include "common/cli.hpp"
#include "common/tool.hpp"
#include "exposition.hpp"
#include "http_server.hpp"
#include "node_scan.hpp"
#include "rate_history.hpp"
#include "status_page.hpp"

namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) { g_stop.store(true); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Why `dir` cannot be scanned, or "" when it can (a directory we may list).
std::string unreadable(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return std::strerror(errno);
  ::closedir(d);
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"xport-exporter: Prometheus metrics of every libxport process on this node"};
  xport::tool::plain_help(app, 34);
  std::string listen = "127.0.0.1:9876";
  std::string dir = "/dev/shm";
  bool once = false;
  bool list = false;
  size_t max_series = 4096;
  size_t max_processes = 1024;
  app.add_option("--listen", listen,
                 "address of /metrics, / and /healthz: HOST:PORT, :PORT for every interface, "
                 "[::]:PORT for IPv6 too; port 0 picks one (default 127.0.0.1:9876)")
      ->type_name("ADDRESS");
  app.add_option("--shm-dir", dir,
                 "directory of the stats segments, XPORT_TELEMETRY_DIR of the processes "
                 "(default /dev/shm); it must exist")
      ->type_name("DIR");
  app.add_flag("--once", once, "print the text exposition to stdout and exit");
  app.add_flag("--list-metrics", list, "print every metric name the exporter can serve and exit");
  app.add_option("--max-series-per-process", max_series,
                 "series kept per process; more are dropped and counted (default 4096)")
      ->type_name("N")
      ->check(xport::tool::number_in(1, 1000000, "", true));
  app.add_option("--max-processes", max_processes,
                 "processes served; more are skipped and counted as reason limit (default 1024)")
      ->type_name("N")
      ->check(xport::tool::number_in(1, 100000, "", true));
  xport::tool::add_version(app, "xport-exporter");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return xport::tool::usage_exit(app, e, "xport-exporter");
  }
  // A malformed --listen is bad usage (2); an address that cannot be bound is an error (1).
  auto where = xport::exporter::parse_listen(listen);
  if (!where.ok()) {
    std::cerr << "xport-exporter: " << where.status().message() << "\n";
    return 2;
  }
  if (list) {
    for (const auto& n : xport::exporter::Exposition::metric_names()) std::cout << n << "\n";
    return 0;
  }
  // A directory that is not there serves nothing, silently: a typo or a missing mount.
  if (const std::string why = unreadable(dir); !why.empty()) {
    std::cerr << "xport-exporter: --shm-dir " << dir << ": " << why << "\n";
    return 1;
  }

  xport::exporter::NodeScan node({dir, max_processes});
  xport::exporter::Exposition exposition(max_series);
  auto metrics = [&] {
    auto t0 = std::chrono::steady_clock::now();
    auto scan = node.scan();
    return exposition.render(scan, node, seconds_since(t0));
  };
  if (once) {
    std::cout << metrics() << std::flush;
    return 0;
  }

  xport::exporter::HttpServer server;
  if (auto s = server.listen(*where); !s.ok()) {
    std::cerr << "xport-exporter: " << s.message() << "\n";
    return 1;
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;  // no SA_RESTART: poll() returns and the loop sees the flag
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  std::cerr << "xport-exporter: listening on http://" << server.address() << "/ (segments in "
            << dir << ")" << std::endl;

  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "this node");
  const auto t0 = std::chrono::steady_clock::now();
  // Scans of the last few seconds, oldest first: the tables' rates span them. The charts' come
  // from `rates`, a sample per tick over the last minutes.
  std::deque<xport::exporter::ScanResult> history;
  xport::exporter::RateHistory rates;
  std::string dir_problem;  // why the last tick could not read the directory
  auto tick = [&] {
    dir_problem = unreadable(dir);
    history.push_back(node.scan());  // also removes dead processes' segments promptly
    rates.add(history.back(), seconds_since(t0));
    while (history.size() > 5) history.pop_front();
  };
  auto handler = [&](const xport::exporter::HttpRequest& req) {
    xport::exporter::HttpResponse r;
    if (req.path == "/metrics") {
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      r.body = metrics();
    } else if (req.path == "/") {
      r.content_type = "text/html; charset=utf-8";
      auto now = node.scan();
      r.body = xport::exporter::status_page(now, history, node, rates, host);
    } else if (req.path == "/healthz") {
      // Healthy while the segment directory can be read: the only thing a scrape needs.
      if (dir_problem.empty()) {
        r.body = "ok\n";
      } else {
        r.status = 503;
        r.body = "--shm-dir " + dir + ": " + dir_problem + "\n";
      }
    } else {
      r.status = 404;
      r.body = "not found: try /metrics, / or /healthz\n";
    }
    return r;
  };
  server.serve(handler, tick, 1000, g_stop);
  return 0;
}
