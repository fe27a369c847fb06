// xport-bench: acceptance figures of libxport (docs/tools.md). This file picks the mode (local,
// two-host server or client, MPI) and runs the initiator or the target side of a session.
#include <cstdio>
#include <string>

#include "bootstrap.hpp"
#include "mpi_mode.hpp"
#include "ops.hpp"
#include "options.hpp"
#include "report.hpp"

namespace bench {
namespace {

using namespace xport;

constexpr const char* kHello = "XPORT-BENCH 1 buffer=";
// Who speaks in error messages: in local mode both processes write to the same terminal.
std::string g_who = "xport-bench";

int fail(const std::string& where, const Status& s) {
  std::fprintf(stderr, "%s: %s: %s\n", g_who.c_str(), where.c_str(), s.to_string().c_str());
  return kExitFailed;
}

struct Opened {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Device> dev;
};
Result<Opened> open_device(const Options& opt, bool peers_on_host) {
  ContextOptions co;
  co.provider = opt.provider;
  co.peers_on_host = peers_on_host;
  Opened o;
  XPORT_ASSIGN_OR_RETURN(o.ctx, Context::open(co));
  DeviceOptions d;
  d.rails = opt.nics;
  XPORT_ASSIGN_OR_RETURN(o.dev, o.ctx->open_device(d));
  return o;
}

Result<std::string> expect_line(LineChannel& ch, const std::string& prefix, const Options& opt) {
  XPORT_ASSIGN_OR_RETURN(std::string line,
                         ch.recv(Deadline::after(std::chrono::seconds(opt.timeout_s))));
  if (line.rfind(prefix, 0) != 0) {
    return Status(Code::protocol, "the other side is not an xport-bench of this version (got '" +
                                      line.substr(0, 40) + "')");
  }
  return line.substr(prefix.size());
}

// The target: serves whatever points the initiator asks for, until it says goodbye.
int run_target(const Options& opt, Device& dev, LineChannel& ch) {
  auto hello = expect_line(ch, kHello, opt);
  if (!hello.ok()) return fail("waiting for the initiator", hello.status());
  char* end = nullptr;
  const unsigned long long bytes = std::strtoull(hello->c_str(), &end, 10);
  if (*end != '\0' || bytes == 0 || bytes > std::max<size_t>(kMaxSize, kSlotBytes)) {
    return fail("bootstrap", Status(Code::protocol, "bad buffer size '" + *hello + "'"));
  }
  auto s = Session::open(dev, bytes, std::chrono::seconds(opt.timeout_s));
  if (!s.ok()) return fail("session", s.status());
  if (auto st = ch.send("PEER " + (*s)->hello()); !st.ok()) return fail("bootstrap", st);
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

// The initiator: runs every point, then reports. `peer` is the local mode's child, or -1.
int run_initiator(const Options& opt, Opened& o, LineChannel& ch, const std::string& mode,
                  pid_t peer) {
  std::vector<Plan> plans;
  for (size_t size : opt.sizes) plans.push_back(make_plan(opt, size));
  std::vector<Point> points;
  int rc = kExitOk;
  {
    // The session closes before the peer is reaped, so a failed run ends both sides at once.
    std::unique_ptr<Session> s;
    auto run = [&]() -> Status {
      XPORT_RETURN_IF_ERROR(ch.send(kHello + std::to_string(buffer_bytes(plans))));
      auto peer_hello = expect_line(ch, "PEER ", opt);
      if (!peer_hello.ok()) {
        return peer_hello.status().with_context(
            peer > 0 ? "the peer did not start (its error is above)" : "waiting for the server");
      }
      XPORT_ASSIGN_OR_RETURN(
          s, Session::open(*o.dev, buffer_bytes(plans), std::chrono::seconds(opt.timeout_s)));
      XPORT_RETURN_IF_ERROR(ch.send("CLIENT " + s->hello()));
      XPORT_RETURN_IF_ERROR(s->join(*peer_hello, true).with_context("connecting to the peer"));
      for (const Plan& p : plans) {
        auto m = run_point(*s, p);
        if (!m.ok()) return m.status().with_context("size " + std::to_string(p.size));
        points.push_back(summarize(p, *m));
      }
      XPORT_RETURN_IF_ERROR(say_bye(*s));
      return expect_line(ch, "DONE", opt).status().with_context("waiting for the peer to finish");
    };
    if (Status st = run(); !st.ok()) rc = fail(to_string(opt.op).data(), st);
  }
  if (peer > 0) {
    if (Status st = reap_peer(peer, opt.timeout_s); !st.ok() && rc == kExitOk)
      rc = fail("peer", st);
  }
  if (rc != kExitOk) return rc;
  print_report(describe_run(opt, *o.dev, mode), points, opt.format);
  return check_expectations(opt, points);
}

int run(const Options& opt, int argc, char** argv) {
  std::string why;
  if (!op_available(opt.op, &why)) {
    std::fprintf(stderr, "xport-bench: --op %s is not available: %s\n", to_string(opt.op).data(),
                 why.c_str());
    return kExitUnavailable;
  }
  if (opt.comms > 1) {
    std::fprintf(stderr,
                 "xport-bench: --comms %d is not available: libxport has no channel pools "
                 "yet (communicators per channel)\n",
                 opt.comms);
    return kExitUnavailable;
  }
  if (!opt.pattern.empty()) return run_mpi(opt, argc, argv);
  if (opt.server) g_who = "xport-bench (server)";
  const bool local = opt.connect.empty() && !opt.server;
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
    return run_initiator(opt, *o, *ch, "two-host", -1);
  }
  std::vector<std::string> args{"xport-bench", "--role", "peer", "--timeout",
                                std::to_string(opt.timeout_s)};
  if (!opt.provider.empty()) args.insert(args.end(), {"--provider", opt.provider});
  if (!opt.nics.empty()) {
    std::string n;
    for (const auto& x : opt.nics) n += (n.empty() ? "" : ",") + x;
    args.insert(args.end(), {"--nics", n});
  }
  LineChannel ch;
  auto pid = spawn_peer(args, &ch);
  if (!pid.ok()) return fail("local mode", pid.status());
  return run_initiator(opt, *o, ch, "local", *pid);
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  bench::Options opt;
  if (auto rc = bench::parse(argc, argv, &opt)) return *rc;
  return bench::run(opt, argc, argv);
}
