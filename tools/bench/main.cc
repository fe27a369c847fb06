// xport-bench: acceptance figures of libxport (docs/tools.md). This file picks the mode (local,
// two-host server or client, MPI) and runs the initiator or the target side of a session.
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>

#include "bootstrap.hpp"
#include "common/tool.hpp"
#include "mpi_mode.hpp"
#include "ops.hpp"
#include "options.hpp"
#include "printer.hpp"
#include "report.hpp"
#include "streams.hpp"
#include "watch.hpp"

namespace bench {
namespace {

using namespace xport;

// The line protocol's version: a peer of another version says so instead of misreading.
constexpr const char* kHello = "XPORT-BENCH 3 ";
// Who speaks in error messages: in local mode both processes write to the same terminal.
std::string g_who = "xport-bench";
// --json on the initiator's side: a failure is also one JSON object on stdout.
bool g_json = false;

int fail(const std::string& where, const Status& s) {
  return xport::tool::early_failure(g_who, g_json, where + ": " + s.to_string());
}

struct Opened {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Device> dev;
};
Result<Opened> open_device(const Options& opt, bool peers_on_host) {
  ContextOptions co;
  co.provider = opt.provider;
  co.peers_on_host = peers_on_host;
  co.thread_safe = !opt.single_thread;
  Opened o;
  XPORT_ASSIGN_OR_RETURN(o.ctx, Context::open(co));
  DeviceOptions d;
  d.rails = opt.nics;
  XPORT_ASSIGN_OR_RETURN(o.dev, o.ctx->open_device(d));
  return o;
}

// With `dev`, progress goes on while waiting (the other side may still need this device).
Result<std::string> expect_line(LineChannel& ch, const std::string& prefix, const Options& opt,
                                Device* dev = nullptr) {
  std::function<void()> idle;
  if (dev != nullptr) idle = [dev] { (void)dev->progress(); };
  XPORT_ASSIGN_OR_RETURN(std::string line,
                         ch.recv(Deadline::after(std::chrono::seconds(opt.timeout_s)), idle));
  if (line.rfind(prefix, 0) != 0) {
    return Status(Code::protocol, "the other side is not an xport-bench of this version (got '" +
                                      line.substr(0, 40) + "')");
  }
  return line.substr(prefix.size());
}

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> w;
  std::istringstream in(line);
  for (std::string x; in >> x;) w.push_back(x);
  return w;
}

// "key=value" among `w`; "" when absent.
std::string field(const std::vector<std::string>& w, const std::string& key) {
  for (const auto& x : w) {
    if (x.rfind(key + "=", 0) == 0) return x.substr(key.size() + 1);
  }
  return "";
}

uint64_t link_rate(const Device& dev) {
  uint64_t sum = 0;
  for (const auto& r : dev.rail_info()) {
    if (r.link_bits_per_s == 0) return 0;  // all known, or none (report.cc)
    sum += r.link_bits_per_s;
  }
  return sum;
}

// What the target answers the hello with: its pool's groups and link rate, then the hellos of
// its sessions ("<handle> <key>" each: one, or for alltoall the one it serves on and the one
// it initiates on).
struct PeerHello {
  unsigned groups = 0;
  uint64_t link = 0;
  std::vector<std::string> sessions;
};
std::string peer_hello(Device& dev, const std::vector<Session*>& sessions) {
  // Appended piece by piece: `"literal" + std::string&&` trips GCC 12's -Wrestrict at -O3 (a
  // false positive; see tools/probe/report.cc).
  std::string line = "PEER groups=";
  line += std::to_string(dev.stats().pool.groups);
  line += " link=";
  line += std::to_string(link_rate(dev));
  for (Session* s : sessions) {
    line += ' ';
    line += s->hello();
  }
  return line;
}
Result<PeerHello> parse_peer_hello(const std::string& text, size_t sessions) {
  const auto w = words(text);
  if (w.size() != 2 + 2 * sessions) {
    return Status(Code::protocol, "bootstrap: malformed peer hello '" + text.substr(0, 40) + "'");
  }
  PeerHello h;
  h.groups = static_cast<unsigned>(std::strtoul(field(w, "groups").c_str(), nullptr, 10));
  h.link = std::strtoull(field(w, "link").c_str(), nullptr, 10);
  for (size_t k = 0; k < sessions; ++k) h.sessions.push_back(w[2 + 2 * k] + " " + w[3 + 2 * k]);
  return h;
}

// alltoall between two processes: the initiator names each point in a line, the target runs
// the same plan.
std::string plan_line(const Plan& p) {
  char b[160];
  std::snprintf(b, sizeof(b), "GO %d %zu %d %d %d %d %d %lld", static_cast<int>(p.op), p.size,
                p.warmup, p.iterations, p.depth, p.slots, p.check ? 1 : 0,
                static_cast<long long>(p.corrupt));
  return b;
}
Result<Plan> parse_plan(const std::string& text, size_t buffer) {
  Plan p;
  int op = 0, check = 0;
  long long corrupt = -1;
  if (std::sscanf(text.c_str(), "%d %zu %d %d %d %d %d %lld", &op, &p.size, &p.warmup,
                  &p.iterations, &p.depth, &p.slots, &check, &corrupt) != 8 ||
      op < 0 || op > static_cast<int>(Op::atomic) || p.size == 0 || p.size > buffer ||
      p.iterations < 1 || p.warmup < 0 || p.depth < 1 || p.slots < 1) {
    return Status(Code::protocol, "bootstrap: malformed point '" + text.substr(0, 60) + "'");
  }
  p.op = static_cast<Op>(op);
  p.check = check != 0;
  p.corrupt = corrupt;
  return p;
}
std::string result_line(const Point& p) {
  double d[kPointDoubles];
  pack(p, d);
  std::string line = "RESULT";
  for (double x : d) {
    char b[40];
    std::snprintf(b, sizeof(b), " %.17g", x);
    line += b;
  }
  return line;
}
Result<Point> parse_result(const std::string& text) {
  std::istringstream in(text);
  double d[kPointDoubles];
  for (double& x : d) {
    if (!(in >> x)) return Status(Code::protocol, "bootstrap: malformed result of the peer");
  }
  return unpack(d);
}

// The target of alltoall: a session each way, the points the initiator names, run at once
// both ways, its own stream's figures sent back.
Status serve_alltoall(const Options& opt, Device& dev, LineChannel& ch, size_t bytes, int comms) {
  const auto timeout = std::chrono::seconds(opt.timeout_s);
  XPORT_ASSIGN_OR_RETURN(auto in, Session::open(dev, bytes, timeout, comms));
  XPORT_ASSIGN_OR_RETURN(auto out, Session::open(dev, bytes, timeout, comms));
  XPORT_RETURN_IF_ERROR(ch.send(peer_hello(dev, {in.get(), out.get()})));
  XPORT_ASSIGN_OR_RETURN(std::string client, expect_line(ch, "CLIENT ", opt));
  const auto w = words(client);
  if (w.size() != 4) return Status(Code::protocol, "bootstrap: malformed initiator hello");
  XPORT_RETURN_IF_ERROR(in_parallel(2, [&](size_t i) {
                          return i == 0 ? in->join(w[0] + " " + w[1], false)
                                        : out->join(w[2] + " " + w[3], true);
                        }).with_context("connecting to the initiator"));
  for (;;) {
    // The initiator may still be opening its windows towards this device: it is answered.
    XPORT_ASSIGN_OR_RETURN(std::string line,
                           ch.recv(Deadline::after(std::chrono::seconds(opt.timeout_s)),
                                   [&] { (void)dev.progress(); }));
    if (line == "DONE") return ch.send("DONE");
    if (line.rfind("GO ", 0) != 0) return Status(Code::protocol, "bootstrap: expected a point");
    XPORT_ASSIGN_OR_RETURN(Plan p, parse_plan(line.substr(3), bytes));
    XPORT_ASSIGN_OR_RETURN(
        auto mine, run_streams({out.get()}, {in.get()}, p, std::chrono::steady_clock::now()));
    XPORT_RETURN_IF_ERROR(ch.send(result_line(mine[0])));
  }
}

// The target: serves whatever points the initiator asks for, until it says goodbye.
int run_target(const Options& opt, Device& dev, LineChannel& ch) {
  auto hello = expect_line(ch, kHello, opt);
  if (!hello.ok()) return fail("waiting for the initiator", hello.status());
  const auto w = words(*hello);
  char* end = nullptr;
  const std::string b = field(w, "buffer");
  const unsigned long long bytes = std::strtoull(b.c_str(), &end, 10);
  if (b.empty() || *end != '\0' || bytes == 0 || bytes > std::max<size_t>(kMaxSize, kSlotBytes)) {
    return fail("bootstrap", Status(Code::protocol, "bad buffer size in '" + *hello + "'"));
  }
  const int comms = std::atoi(field(w, "comms").c_str());
  if (comms < 1 || comms > kMaxComms) {
    return fail("bootstrap", Status(Code::protocol, "bad comms in '" + *hello + "'"));
  }
  const std::string pattern = field(w, "pattern");
  if (pattern == "alltoall") {
    if (Status st = serve_alltoall(opt, dev, ch, bytes, comms); !st.ok()) {
      return fail("alltoall", st);
    }
    return kExitOk;
  }
  if (!pattern.empty()) {
    return fail("bootstrap", Status(Code::protocol, "pattern '" + pattern + "' needs MPI mode"));
  }
  auto s = Session::open(dev, bytes, std::chrono::seconds(opt.timeout_s), comms,
                         Memory{opt.cuda, opt.gpu});
  if (!s.ok()) return fail("session", s.status());
  if (auto st = ch.send(peer_hello(dev, {s->get()})); !st.ok()) return fail("bootstrap", st);
  auto client = expect_line(ch, "CLIENT ", opt);
  if (!client.ok()) return fail("waiting for the initiator's handle", client.status());
  if (auto st = (*s)->join(*client, false); !st.ok())
    return fail("connecting to the initiator", st);
  for (bool bye = false; !bye;) {
    if (auto st = serve_point(**s, &bye); !st.ok()) return fail("serving a point", st);
  }
  // Both sides close only once neither has an operation pending: a close can overtake data
  // still in flight on another rail and fail the peer's last receive.
  if (auto st = ch.send("DONE"); !st.ok()) return fail("bootstrap", st);
  return kExitOk;
}

// The initiator: runs every point, each row printed as it is measured. `peer` is the local
// mode's child, or -1. With --pattern alltoall both sides initiate at once, each to the other,
// and every point is the sum of the two streams. What ends the run is said once (printer.hpp):
// the last point, a failure, or (watch.cc) a signal or the peer's death.
int run_initiator(const Options& opt, Opened& o, LineChannel& ch, const std::string& mode,
                  pid_t peer, const std::vector<std::string>& argv) {
  std::vector<Plan> plans;
  for (size_t size : opt.sizes) plans.push_back(make_plan(opt, size));
  const bool alltoall = opt.pattern == "alltoall";
  std::vector<Point> points;
  // Leaked on purpose: the signal thread may end the run through it at any time until exit.
  auto* printer = new Printer(opt.format, ::isatty(STDERR_FILENO) == 1);
  watch::set_printer(printer);
  RunInfo info = describe_run(opt, *o.dev, mode);
  // The pool and progress counters as of the latest point (the comms still open).
  auto counters = [&] {
    const xport::Stats st = o.dev->stats();
    info.pool = st.pool;
    info.progress = progress_of(st);
  };
  int rc = kExitOk;
  std::string failure;
  {
    // The sessions close before the peer is reaped, so a failed run ends both sides at once.
    // `s`: this side initiates; `in` (alltoall): the peer initiates.
    std::unique_ptr<Session> s, in;
    auto run = [&]() -> Status {
      const size_t bytes = buffer_bytes(plans);
      XPORT_RETURN_IF_ERROR(ch.send(kHello + ("buffer=" + std::to_string(bytes)) + " comms=" +
                                    std::to_string(opt.comms) + " pattern=" + opt.pattern));
      auto peer_line = expect_line(ch, "PEER ", opt);
      if (!peer_line.ok()) {
        return peer_line.status().with_context(
            peer > 0 ? "the peer did not start (its error is above)" : "waiting for the server");
      }
      XPORT_ASSIGN_OR_RETURN(PeerHello ph, parse_peer_hello(*peer_line, alltoall ? 2 : 1));
      if (const unsigned mine = o.dev->stats().pool.groups; ph.groups != mine) {
        std::fprintf(stderr,
                     "xport-bench: note: the server's channel pool has XPORT_POOL_GROUPS=%u, "
                     "this side %u (each side has its own: --groups or XPORT_POOL_GROUPS there)\n",
                     ph.groups, mine);
      }
      if (alltoall) {  // data arrives on both sides' rails
        info.link_bits_per_s =
            info.link_bits_per_s && ph.link ? info.link_bits_per_s + ph.link : 0;
      }
      printer->begin(info, argv, plans.size());
      const auto timeout = std::chrono::seconds(opt.timeout_s);
      XPORT_ASSIGN_OR_RETURN(s, Session::open(*o.dev, bytes, timeout, opt.comms,
                                              Memory{opt.cuda, opt.gpu}));
      if (alltoall) {
        XPORT_ASSIGN_OR_RETURN(in, Session::open(*o.dev, bytes, timeout, opt.comms));
      }
      XPORT_RETURN_IF_ERROR(ch.send("CLIENT " + s->hello() + (alltoall ? " " + in->hello() : "")));
      if (!alltoall) {
        XPORT_RETURN_IF_ERROR(s->join(ph.sessions[0], true).with_context("connecting to the peer"));
        for (const Plan& p : plans) {
          printer->measuring(p);
          auto m = run_point(*s, p);
          if (!m.ok()) return m.status().with_context("size " + std::to_string(p.size));
          points.push_back(summarize(p, *m));
          counters();
          printer->point(info, points.back());
        }
        watch::peer_may_exit();  // it exits once it said DONE
        XPORT_RETURN_IF_ERROR(say_bye(*s));
        return expect_line(ch, "DONE", opt, o.dev.get())
            .status()
            .with_context("waiting for the peer to finish");
      }
      XPORT_RETURN_IF_ERROR(in_parallel(2, [&](size_t i) {
                              return i == 0 ? s->join(ph.sessions[0], true)
                                            : in->join(ph.sessions[1], false);
                            }).with_context("connecting to the peer"));
      for (const Plan& p : plans) {
        printer->measuring(p);
        XPORT_RETURN_IF_ERROR(ch.send(plan_line(p)));
        auto mine = run_streams({s.get()}, {in.get()}, p, std::chrono::steady_clock::now());
        if (!mine.ok()) return mine.status().with_context("size " + std::to_string(p.size));
        auto line = expect_line(ch, "RESULT ", opt, o.dev.get());
        if (!line.ok()) return line.status().with_context("waiting for the peer's figures");
        XPORT_ASSIGN_OR_RETURN(Point theirs, parse_result(*line));
        points.push_back(aggregate({(*mine)[0], theirs}));
        counters();
        printer->point(info, points.back());
      }
      // Each side has every message of the other once both finished their points.
      watch::peer_may_exit();
      XPORT_RETURN_IF_ERROR(ch.send("DONE"));
      return expect_line(ch, "DONE", opt, o.dev.get())
          .status()
          .with_context("waiting for the peer to finish");
    };
    if (Status st = run(); !st.ok()) {
      rc = kExitFailed;
      failure = std::string(to_string(opt.op)) + ": " + st.to_string();
      // A failure because the peer died is said as its death (it was an operation's error, or
      // a timeout, naming nothing).
      if (peer > 0) {
        watch::peer_may_exit();
        if (auto how = watch::peer_ended(peer, 1000)) {
          failure = "the peer process (pid " + std::to_string(peer) + ") died: it " + *how +
                    " (" + failure + ")";
          if (printer->begun()) {
            printer->end(EndStatus::peer_died, failure, rc);
          } else {
            fail("local mode", Status(Code::peer_lost, failure));
          }
          failure.clear();
        }
      }
      if (!failure.empty()) {
        if (printer->begun()) {
          printer->end(EndStatus::failed, failure, rc);
        } else {
          fail(to_string(opt.op).data(), st);
        }
      }
    }
  }
  if (peer > 0) {
    if (Status st = reap_peer(peer, opt.timeout_s); !st.ok() && rc == kExitOk) {
      rc = kExitFailed;
      printer->end(EndStatus::failed, "peer: " + st.to_string(), rc);
    }
  }
  if (rc != kExitOk) return rc;
  rc = check_expectations(opt, points);
  printer->end(EndStatus::complete, "", rc);
  return rc;
}

int run(const Options& opt, int argc, char** argv) {
  // The initiator's run ends with what it measured whatever ends it (watch.hpp): signals are
  // blocked before any thread starts, and one thread waits for them.
  if (opt.role != "peer" && !opt.server && !mpi_mode(opt)) watch::start();
  const std::vector<std::string> command(argv, argv + argc);
  std::string why;
  if (!op_available(opt.op, &why)) {
    std::fprintf(stderr, "xport-bench: --op %s is not available: %s\n", to_string(opt.op).data(),
                 why.c_str());
    return kExitUnavailable;
  }
  // Knobs are read when the first Context opens: before it, and before the peer is spawned (it
  // inherits the environment, and gets --groups too).
  if (opt.groups >= 0) ::setenv("XPORT_POOL_GROUPS", std::to_string(opt.groups).c_str(), 1);
  if (mpi_mode(opt)) return run_mpi(opt, argc, argv);
  // --cpu, --peer-cpu: before any thread starts (the ones started later inherit the mask).
  if (opt.cpu >= 0 || opt.peer_cpu >= 0) {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
      std::fprintf(stderr, "xport-bench: --cpu: sched_getaffinity: %s\n", std::strerror(errno));
      return kExitUsage;
    }
    for (int c : {opt.cpu, opt.peer_cpu}) {
      // (the peer inherits the pinned initiator's mask: the initiator checked its CPU)
      if (c >= 0 && !CPU_ISSET(c, &allowed) && opt.role != "peer") {
        std::fprintf(stderr, "xport-bench: --cpu/--peer-cpu: CPU %d is not one this process may "
                     "run on\n", c);
        return kExitUsage;
      }
    }
    if (opt.cpu >= 0) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(opt.cpu, &one);
      if (sched_setaffinity(0, sizeof(one), &one) != 0) {
        std::fprintf(stderr, "xport-bench: --cpu %d: %s\n", opt.cpu, std::strerror(errno));
        return kExitUsage;
      }
    }
  }
  const bool local = opt.connect.empty() && !opt.server;
  const int peer_gpu = opt.peer_gpu >= 0 ? opt.peer_gpu : opt.gpu;
  if (opt.cuda && opt.role != "peer") {
    // Before anything starts: no CUDA in this build, no GPU, or no such GPU ends the run here.
    for (int g : local && peer_gpu != opt.gpu ? std::vector<int>{peer_gpu, opt.gpu}
                                              : std::vector<int>{opt.gpu}) {
      if (const std::string why = gpu_unavailable(g); !why.empty()) {
        std::fprintf(stderr, "xport-bench: --memory cuda%s: %s\n",
                     opt.device_initiator ? " --initiator device" : "", why.c_str());
        return kExitUnavailable;
      }
    }
  }
  g_json = opt.format == Format::json && opt.role != "peer";
  if (opt.server) g_who = "xport-bench (server)";
  auto o = open_device(opt, local);
  if (!o.ok()) return fail("device", o.status());
  if (opt.role == "peer") {
    g_who = "xport-bench (peer)";
    LineChannel ch(0, 1);
    return run_target(opt, *o->dev, ch);
  }
  if (opt.server) {
    auto ch = tcp_serve_one(opt.port, opt.timeout_s);
    if (!ch.ok()) return fail("bootstrap", ch.status());
    return run_target(opt, *o->dev, *ch);
  }
  if (!opt.connect.empty()) {
    auto ch = tcp_connect(opt.connect, opt.timeout_s);
    if (!ch.ok()) return fail("bootstrap", ch.status());
    return run_initiator(opt, *o, *ch, "two-host", -1, command);
  }
  std::vector<std::string> args{"xport-bench", "--role", "peer", "--timeout",
                                std::to_string(opt.timeout_s)};
  if (!opt.provider.empty()) args.insert(args.end(), {"--provider", opt.provider});
  if (opt.groups >= 0) args.insert(args.end(), {"--groups", std::to_string(opt.groups)});
  if (opt.single_thread) args.push_back("--single-thread");
  if (opt.peer_cpu >= 0) args.insert(args.end(), {"--cpu", std::to_string(opt.peer_cpu)});
  // libxport refuses gets and atomics on a peer's GPU memory (docs/semantics.md, "GPU memory"):
  // for those the peer's buffers stay host memory.
  if (opt.cuda && opt.op != Op::get && opt.op != Op::atomic) {
    args.insert(args.end(), {"--memory", "cuda", "--gpu", std::to_string(peer_gpu)});
  }
  if (!opt.nics.empty()) {
    std::string n;
    for (const auto& x : opt.nics) n += (n.empty() ? "" : ",") + x;
    args.insert(args.end(), {"--nics", n});
  }
  LineChannel ch;
  auto pid = spawn_peer(args, &ch);
  if (!pid.ok()) return fail("local mode", pid.status());
  watch::set_peer(*pid);
  return run_initiator(opt, *o, ch, "local", *pid, command);
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  bench::Options opt;
  if (auto rc = bench::parse(argc, argv, &opt)) return *rc;
  return bench::run(opt, argc, argv);
}
