// xport-bench: latency, bandwidth and message rate of send/recv and put between two processes
// on this host (local mode: it spawns its own peer). One JSON object per measured point with
// --json. Two-host and MPI modes, get/atomics and sweeps over rails come with later issues.
#include <CLI/CLI.hpp>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "xport/xport.hpp"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using namespace xport;

struct Options {
  std::string op = "send";
  std::vector<size_t> sizes{8};
  std::string provider;
  int iterations = 10000;
  int warmup = 1000;
  int window = 16;
  bool json = false;
  bool check = false;
  std::string role = "client";
  std::vector<std::string> nics;
  bool server = false;
  int port = 18515;
  std::string connect;
  int timeout_s = 30;
};

[[noreturn]] void die(const std::string& what) {
  std::cerr << "xport-bench: " << what << "\n";
  std::exit(1);
}
template <typename T>
T must(Result<T> r, const std::string& what) {
  if (!r.ok()) die(what + ": " + r.status().to_string());
  return std::move(r).value();
}
void must(const Status& s, const std::string& what) {
  if (!s.ok()) die(what + ": " + s.to_string());
}

// Opens the device with the rails asked for (--nics), else the Context's choice.
std::unique_ptr<Device> open_device(Context& ctx, const Options& opt) {
  DeviceOptions d;
  d.rails = opt.nics;
  return must(ctx.open_device(d), "device");
}

bool parse_size(const std::string& t, size_t* out) {
  char* end = nullptr;
  unsigned long long v = std::strtoull(t.c_str(), &end, 10);
  if (end == t.c_str()) return false;
  std::string suf(end);
  if (suf == "K" || suf == "k") v <<= 10;
  else if (suf == "M") v <<= 20;
  else if (suf == "G") v <<= 30;
  else if (!suf.empty()) return false;
  *out = v;
  return true;
}

std::string hex(const std::vector<uint8_t>& b) {
  std::string s;
  char t[3];
  for (uint8_t c : b) {
    std::snprintf(t, sizeof(t), "%02x", c);
    s += t;
  }
  return s;
}
std::vector<uint8_t> unhex(const std::string& s) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < s.size(); i += 2) out.push_back(std::stoi(s.substr(i, 2), nullptr, 16));
  return out;
}

Deadline dl() { return Deadline::after(std::chrono::seconds(60)); }

// The peer: accepts, then serves each measured point (echo for send, target for put).
int run_peer(const Options& opt, Device& dev, FILE* in, FILE* out) {
  const size_t max = *std::max_element(opt.sizes.begin(), opt.sizes.end());
  std::vector<uint8_t> buf(std::max<size_t>(max, 8));
  auto reg = must(dev.register_memory(buf.data(), buf.size()), "register");
  auto listener = must(dev.listen(), "listen");
  std::fprintf(out, "HANDLE %s\nKEY %s\n", hex(listener->handle()).c_str(),
               hex(reg.export_key()).c_str());
  std::fflush(out);
  auto recv = must(listener->accept(dl()), "accept");
  char buf_line[8192];
  std::string line = std::fgets(buf_line, sizeof(buf_line), in) ? buf_line : "";
  line.erase(line.find_last_not_of("\r\n") + 1);
  if (line.rfind("HANDLE ", 0) != 0) die("no client handle");
  auto send = must(dev.connect(unhex(line.substr(7)), dl()), "connect back");
  for (size_t size : opt.sizes) {
    const int n = opt.warmup + opt.iterations;
    if (opt.op == "send") {
      for (int i = 0; i < n; ++i) {  // ping-pong
        auto r = must(recv->irecv(buf.data(), size, reg), "irecv");
        must(recv->wait(r, dl()), "recv");
        auto s = must(send->isend(buf.data(), size, reg), "isend");
        must(send->wait(s, dl()), "send");
      }
    }
    // Both ops end a point with a 1-byte message from the client, answered with one.
    auto r = must(recv->irecv(buf.data(), buf.size(), reg), "irecv");
    must(recv->wait(r, dl()), "end of point");
    auto s = must(send->isend(buf.data(), 1, reg), "isend");
    must(send->wait(s, dl()), "ack");
  }
  return 0;
}

struct Point {
  size_t size;
  double p50_us, p99_us, max_us, mean_us, bw, rate;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// Local mode: spawns this program as the peer with pipes on its stdin/stdout.
pid_t spawn_peer(const Options& opt, const char* self, FILE** in, FILE** out) {
  int to_peer[2], from_peer[2];
  if (pipe(to_peer) != 0 || pipe(from_peer) != 0) die("pipe");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, to_peer[0], 0);
  posix_spawn_file_actions_adddup2(&fa, from_peer[1], 1);
  posix_spawn_file_actions_addclose(&fa, to_peer[1]);
  posix_spawn_file_actions_addclose(&fa, from_peer[0]);
  std::vector<std::string> args{self, "--role", "peer", "--op", opt.op, "--iterations",
                                std::to_string(opt.iterations), "--warmup",
                                std::to_string(opt.warmup)};
  std::string sizes;
  for (size_t s : opt.sizes) sizes += (sizes.empty() ? "" : ",") + std::to_string(s);
  args.push_back("--size");
  args.push_back(sizes);
  if (!opt.provider.empty()) {
    args.push_back("--provider");
    args.push_back(opt.provider);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  if (posix_spawn(&pid, self, &fa, nullptr, argv.data(), environ) != 0) die("cannot spawn peer");
  close(to_peer[0]);
  close(from_peer[1]);
  *in = fdopen(from_peer[0], "r");
  *out = fdopen(to_peer[1], "w");
  return pid;
}

// Two-host mode: a TCP connection carries the same lines as the local pipes.
int tcp_server(int port, int timeout_s) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(fd, 1) != 0) {
    die("cannot listen on port " + std::to_string(port) + ": " + std::strerror(errno));
  }
  std::fprintf(stderr, "xport-bench: waiting for a client on port %d\n", port);
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, timeout_s * 1000) <= 0) {
    die("no client connected to port " + std::to_string(port) + " within " +
        std::to_string(timeout_s) + " s");
  }
  int c = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
  close(fd);
  if (c < 0) die(std::string("accept: ") + std::strerror(errno));
  return c;
}

int tcp_connect(const std::string& target, int timeout_s) {
  auto colon = target.rfind(':');
  if (colon == std::string::npos) die("--connect wants host:port, got '" + target + "'");
  std::string host = target.substr(0, colon), port = target.substr(colon + 1);
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || res == nullptr) {
    die("cannot resolve '" + target + "'");
  }
  const auto until = Clock::now() + std::chrono::seconds(timeout_s);
  for (;;) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
      freeaddrinfo(res);
      return fd;
    }
    const int err = errno;
    close(fd);
    if (Clock::now() >= until) {
      freeaddrinfo(res);
      die("no xport-bench server at " + target + " within " + std::to_string(timeout_s) +
          " s (" + std::strerror(err) + ")");
    }
    pollfd none{-1, 0, 0};
    poll(&none, 0, 100);  // retry pace while the server starts
  }
}

int run_client(const Options& opt, FILE* in, FILE* out, pid_t pid) {
  char line[8192];
  std::string handle, key;
  for (int i = 0; i < 2 && std::fgets(line, sizeof(line), in); ++i) {
    std::string l(line);
    l.erase(l.find_last_not_of("\r\n") + 1);
    if (l.rfind("HANDLE ", 0) == 0) handle = l.substr(7);
    if (l.rfind("KEY ", 0) == 0) key = l.substr(4);
  }
  if (handle.empty() || key.empty()) die("the peer did not start (see its error above)");

  ContextOptions co;
  co.provider = opt.provider;
  co.peers_on_host = opt.connect.empty();
  auto ctx = must(Context::open(co), "context");
  auto dev = open_device(*ctx, opt);
  const auto& caps = dev->capabilities();
  const size_t rails = dev->rails().size();
  auto send = must(dev->connect(unhex(handle), dl()), "connect");
  auto listener = must(dev->listen(), "listen");
  std::fprintf(out, "HANDLE %s\n", hex(listener->handle()).c_str());
  std::fflush(out);
  auto recv = must(listener->accept(dl()), "accept");
  auto remote = must(dev->import_key(unhex(key)), "import key");
  auto win = must(Window::open(*send), "window");
  const size_t max = *std::max_element(opt.sizes.begin(), opt.sizes.end());
  std::vector<uint8_t> buf(std::max<size_t>(max, 8), 0x5a);
  auto reg = must(dev->register_memory(buf.data(), buf.size()), "register");

  std::vector<Point> points;
  for (size_t size : opt.sizes) {
    std::vector<double> lat;
    lat.reserve(opt.iterations);
    const int n = opt.warmup + opt.iterations;
    Clock::time_point start;
    if (opt.op == "send") {
      for (int i = 0; i < n; ++i) {
        if (i == opt.warmup) start = Clock::now();
        auto t0 = Clock::now();
        auto s = must(send->isend(buf.data(), size, reg), "isend");
        auto r = must(recv->irecv(buf.data(), size, reg), "irecv");
        must(send->wait(s, dl()), "send");
        must(recv->wait(r, dl()), "recv");
        if (i >= opt.warmup) {
          lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 2);
        }
      }
    } else {  // put: `window` puts in flight, then quiet; latency = one put + quiet
      for (int i = 0; i < opt.warmup; ++i) {
        must(win->put(reg, 0, remote, 0, size), "put");
        must(win->quiet(dl()), "quiet");
      }
      for (int i = 0; i < std::min(opt.iterations, 1000); ++i) {
        auto t0 = Clock::now();
        must(win->put(reg, 0, remote, 0, size), "put");
        must(win->quiet(dl()), "quiet");
        lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      }
      start = Clock::now();
      for (int i = 0; i < opt.iterations; i += opt.window) {
        for (int j = 0; j < opt.window && i + j < opt.iterations; ++j) {
          must(win->put(reg, 0, remote, 0, size), "put");
        }
        must(win->quiet(dl()), "quiet");
      }
    }
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    auto s = must(send->isend(buf.data(), 1, reg), "end of point");
    must(send->wait(s, dl()), "end of point");
    auto r = must(recv->irecv(buf.data(), buf.size(), reg), "ack");
    must(recv->wait(r, dl()), "ack");
    const double msgs = opt.iterations * (opt.op == "send" ? 2.0 : 1.0);
    double sum = 0;
    for (double v : lat) sum += v;
    points.push_back(Point{size, percentile(lat, 0.5), percentile(lat, 0.99),
                           lat.empty() ? 0 : *std::max_element(lat.begin(), lat.end()),
                           lat.empty() ? 0 : sum / lat.size(), size * msgs / secs, msgs / secs});
  }
  std::fclose(out);
  if (pid > 0) {
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) die("the peer process failed");
  }

  if (!opt.json) {
    std::string names;
    for (const auto& r : dev->rails()) names += (names.empty() ? "" : ",") + r;
    std::printf("xport-bench %s: op %s, provider %s, rails %s, %d iterations\n", version(),
                opt.op.c_str(), caps.provider.c_str(), names.c_str(), opt.iterations);
    std::printf("%10s %10s %10s %10s %10s %14s %12s\n", "size", "p50_us", "p99_us", "max_us",
                "mean_us", "MB/s", "msg/s");
  }
  for (const auto& p : points) {
    if (opt.json) {
      std::printf(
          "{\"op\":\"%s\",\"size\":%zu,\"rails\":%zu,\"provider\":\"%s\",\"lat_us_p50\":%.3f,"
          "\"lat_us_p99\":%.3f,\"lat_us_max\":%.3f,\"lat_us_mean\":%.3f,\"bw_bytes_per_s\":%.0f,"
          "\"msg_per_s\":%.0f,\"iterations\":%d}\n",
          opt.op.c_str(), p.size, rails, caps.provider.c_str(), p.p50_us, p.p99_us, p.max_us, p.mean_us,
          p.bw, p.rate, opt.iterations);
    } else {
      std::printf("%10zu %10.2f %10.2f %10.2f %10.2f %14.1f %12.0f\n", p.size, p.p50_us,
                  p.p99_us, p.max_us, p.mean_us, p.bw / 1e6, p.rate);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"xport-bench: latency and bandwidth between two processes on this host"};
  Options opt;
  std::string sizes = "8";
  app.add_option("--op", opt.op, "send (ping-pong) or put")->check(CLI::IsMember({"send", "put"}));
  app.add_option("--size", sizes, "sizes, comma-separated: 8,4K,1M");
  app.add_option("--provider", opt.provider, "libfabric provider (default: as Context chooses)");
  app.add_option("--iterations", opt.iterations, "measured iterations per size")
      ->check(CLI::Range(1, 100000000));
  app.add_option("--warmup", opt.warmup, "unmeasured iterations first")->check(CLI::Range(0, 100000000));
  app.add_option("--window", opt.window, "puts in flight per quiet")->check(CLI::Range(1, 256));
  app.add_flag("--json", opt.json, "one JSON object per measured point");
  std::string nics;
  app.add_option("--nics", nics, "rails, comma-separated domain or interface names (default: "
                                 "XPORT_RAILS, else the provider's choice)");
  app.add_flag("--server", opt.server, "two-host mode: wait for a client (--port)");
  app.add_option("--port", opt.port, "two-host mode: TCP port of the bootstrap")
      ->check(CLI::Range(1, 65535));
  app.add_option("--connect", opt.connect, "two-host mode: the server's host:port");
  app.add_option("--timeout", opt.timeout_s, "seconds to wait for the other side")
      ->check(CLI::Range(1, 3600));
  app.add_option("--role", opt.role, "internal: client or peer")->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (opt.server && !opt.connect.empty()) {
    std::cerr << "xport-bench: --server and --connect exclude each other\n";
    return 2;
  }
  {
    std::stringstream ns(nics);
    std::string n;
    while (std::getline(ns, n, ',')) {
      if (!n.empty()) opt.nics.push_back(n);
    }
  }
  opt.sizes.clear();
  std::stringstream ss(sizes);
  std::string t;
  while (std::getline(ss, t, ',')) {
    size_t v;
    if (!parse_size(t, &v) || v == 0) {
      std::cerr << "xport-bench: --size '" << t << "' is not a size (examples: 8, 4K, 1M)\n";
      return 2;
    }
    opt.sizes.push_back(v);
  }
  if (opt.role == "peer" || opt.server) {
    ContextOptions co;
    co.provider = opt.provider;
    co.peers_on_host = !opt.server;
    auto ctx = must(Context::open(co), "context");
    auto dev = open_device(*ctx, opt);
    if (!opt.server) return run_peer(opt, *dev, stdin, stdout);
    int fd = tcp_server(opt.port, opt.timeout_s);
    return run_peer(opt, *dev, fdopen(fd, "r"), fdopen(dup(fd), "w"));
  }
  if (!opt.connect.empty()) {
    int fd = tcp_connect(opt.connect, opt.timeout_s);
    return run_client(opt, fdopen(fd, "r"), fdopen(dup(fd), "w"), -1);
  }
  // Local mode: spawn ourselves as the peer (/proc/self/exe works however we were started).
  FILE *in = nullptr, *out = nullptr;
  pid_t pid = spawn_peer(opt, "/proc/self/exe", &in, &out);
  return run_client(opt, in, out, pid);
}
