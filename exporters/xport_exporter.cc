// xport-exporter: serves the counters of every process using libxport on this node (their
// shared-memory stats segments) as Prometheus metrics at /metrics and as a status page at /.
#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <deque>
#include <iostream>

#include "common/tool.hpp"
#include "exposition.hpp"
#include "http_server.hpp"
#include "node_scan.hpp"
#include "status_page.hpp"

namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) { g_stop.store(true); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"xport-exporter: Prometheus metrics of every libxport process on this node"};
  std::string listen = "127.0.0.1:9876";
  std::string dir = "/dev/shm";
  bool once = false;
  bool list = false;
  size_t max_series = 4096;
  size_t max_processes = 1024;
  app.add_option("--listen", listen, "host:port to serve /metrics and / on (IPv4; port 0: any)");
  app.add_option("--shm-dir", dir, "directory of the stats segments (XPORT_TELEMETRY_DIR)");
  app.add_flag("--once", once, "print the text exposition to stdout and exit");
  app.add_flag("--list-metrics", list, "print every metric name the exporter can serve and exit");
  app.add_option("--max-series-per-process", max_series,
                 "series kept per process; more are dropped and counted")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--max-processes", max_processes,
                 "processes served; more are skipped and counted (reason limit)")
      ->check(CLI::Range(1, 100000));
  xport::tool::add_version(app, "xport-exporter");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (list) {
    for (const auto& n : xport::exporter::Exposition::metric_names()) std::cout << n << "\n";
    return 0;
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
  if (auto s = server.listen(listen); !s.ok()) {
    std::cerr << "xport-exporter: " << s.to_string() << "\n";
    return 1;
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;  // no SA_RESTART: poll() returns and the loop sees the flag
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  std::cerr << "xport-exporter: listening on http://" << server.address() << "/ (segments in "
            << dir << ")" << std::endl;

  // Scans of the last few seconds, oldest first: the status page's rates span them.
  std::deque<xport::exporter::ScanResult> history;
  auto tick = [&] {
    history.push_back(node.scan());  // also removes dead processes' segments promptly
    while (history.size() > 5) history.pop_front();
  };
  auto handler = [&](const std::string& path) {
    xport::exporter::HttpResponse r;
    if (path == "/metrics") {
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      r.body = metrics();
    } else if (path == "/") {
      r.content_type = "text/html; charset=utf-8";
      auto now = node.scan();
      r.body = xport::exporter::status_page(now, history, node);
    } else {
      r.status = 404;
      r.body = "not found: try /metrics or /\n";
    }
    return r;
  };
  server.serve(handler, tick, 1000, g_stop);
  return 0;
}
