// The loopback check of one rail: two devices restricted to the rail, connected both ways; one
// message above XPORT_EAGER_MAX (rendezvous: an RDMA write carrying remote CQ data), every byte
// verified, then small round trips for latency. Every wait has the check's deadline.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "checks.hpp"

namespace probe {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kSmall = 8;
constexpr int kWarmup = 4;
constexpr int kRoundTrips = 32;
constexpr size_t kMaxMessage = size_t{256} << 20;  // modest memory beside a running job

uint8_t pattern(size_t i, uint32_t seed) {
  return static_cast<uint8_t>((i * 131 + (i >> 8) * 7 + seed) & 0xff);
}

struct Failure {
  std::string what;
};
template <typename T>
T must(xport::Result<T> r, const std::string& what) {
  if (!r.ok()) throw Failure{what + ": " + r.status().to_string()};
  return std::move(r).value();
}

// Waits in slices so that one side stops soon after the other has failed.
template <typename Comm>
size_t wait_for(Comm& comm, xport::Request req, xport::Deadline deadline,
                const std::atomic<bool>& other_failed, const std::string& what) {
  for (;;) {
    auto slice = xport::Deadline::at(
        std::min(deadline.time_point(), Clock::now() + std::chrono::milliseconds(50)));
    auto r = comm.wait(req, slice);
    if (r.ok()) return *r;
    if (r.status().code() != xport::Code::timeout)
      throw Failure{what + ": " + r.status().to_string()};
    if (deadline.expired()) throw Failure{what + ": " + r.status().to_string()};
    if (other_failed.load()) throw Failure{what + ": abandoned, the other side failed"};
  }
}

uint64_t write_ops(const xport::Stats& s) {
  int op = 0;
  while (op < xport::kStatOps && std::strcmp(xport::stat_op_name(op), "write") != 0) ++op;
  uint64_t n = 0;
  for (const auto& e : s.endpoints) n += op < xport::kStatOps ? e.ops[op] : 0;
  return n;
}

uint64_t write_bytes_in(const xport::Stats& s) {
  uint64_t n = 0;
  for (const auto& r : s.rails) n += r.write_bytes_in;
  return n;
}

}  // namespace

Outcome check_loopback(std::shared_ptr<xport::Context> ctx, const std::string& rail,
                       size_t eager_max, xport::Deadline deadline) {
  Outcome o;
  o.check.name = "loopback";
  o.check.rail = rail;
  const size_t big = std::max<size_t>(size_t{1} << 20, (eager_max + 4096) & ~size_t{4095});
  if (big > kMaxMessage) {
    o.check.status = Verdict::warn;
    o.check.reason = "XPORT_EAGER_MAX " + human_bytes(eager_max) +
                     ": a rendezvous message would exceed the probe's " + human_bytes(kMaxMessage) +
                     " limit; not tested";
    return o;
  }
  std::vector<uint8_t> src(big), dst(big), small_a(kSmall), small_b(kSmall);
  const uint32_t seed = static_cast<uint32_t>(std::hash<std::string>{}(rail));
  for (size_t i = 0; i < big; ++i) {
    src[i] = pattern(i, seed);
    dst[i] = static_cast<uint8_t>(~src[i]);  // any byte left untouched shows as a mismatch
  }
  std::atomic<bool> a_failed{false}, b_failed{false};
  std::string b_error;
  size_t b_got = 0, mismatch = SIZE_MAX;
  std::vector<double> rtt_us;
  uint64_t writes = 0, landed = 0;
  try {
    xport::DeviceOptions d;
    d.rails = {rail};
    auto dev_a = must(ctx->open_device(d), "opening device A on " + rail);
    auto dev_b = must(ctx->open_device(d), "opening device B on " + rail);
    auto reg_src = must(dev_a->register_memory(src.data(), big), "registering A's buffer");
    auto reg_sa = must(dev_a->register_memory(small_a.data(), kSmall), "registering A's buffer");
    auto reg_dst = must(dev_b->register_memory(dst.data(), big), "registering B's buffer");
    auto reg_sb = must(dev_b->register_memory(small_b.data(), kSmall), "registering B's buffer");
    auto listen_a = must(dev_a->listen(), "listening on A");
    auto listen_b = must(dev_b->listen(), "listening on B");

    // B: accepts A, connects back, receives the big message, then echoes every small one.
    std::thread peer([&] {
      try {
        auto recv = must(listen_b->accept(deadline), "B accepting A");
        auto send = must(dev_b->connect(listen_a->handle(), deadline), "B connecting to A");
        auto r = must(recv->irecv(dst.data(), big, reg_dst), "B posting the receive");
        b_got = wait_for(*recv, r, deadline, a_failed, "B receiving the rendezvous message");
        for (size_t i = 0; i < big && mismatch == SIZE_MAX; ++i) {
          if (dst[i] != src[i]) mismatch = i;
        }
        for (int i = 0; i < kWarmup + kRoundTrips; ++i) {
          auto rr = must(recv->irecv(small_b.data(), kSmall, reg_sb), "B posting a receive");
          wait_for(*recv, rr, deadline, a_failed, "B receiving a ping");
          auto s = must(send->isend(small_b.data(), kSmall, reg_sb), "B sending a pong");
          wait_for(*send, s, deadline, a_failed, "B sending a pong");
        }
      } catch (const Failure& f) {
        b_error = f.what;
        b_failed = true;
      }
    });
    try {
      auto send = must(dev_a->connect(listen_b->handle(), deadline), "A connecting to B");
      auto recv = must(listen_a->accept(deadline), "A accepting B");
      const uint64_t writes_before = write_ops(dev_a->stats());
      auto s = must(send->isend(src.data(), big, reg_src), "A sending the rendezvous message");
      wait_for(*send, s, deadline, b_failed, "A sending the rendezvous message");
      writes = write_ops(dev_a->stats()) - writes_before;
      for (int i = 0; i < kWarmup + kRoundTrips; ++i) {
        small_a[0] = static_cast<uint8_t>(i);
        const auto t0 = Clock::now();
        auto rr = must(recv->irecv(small_a.data(), kSmall, reg_sa), "A posting a receive");
        auto ss = must(send->isend(small_a.data(), kSmall, reg_sa), "A sending a ping");
        wait_for(*send, ss, deadline, b_failed, "A sending a ping");
        wait_for(*recv, rr, deadline, b_failed, "A receiving a pong");
        if (i >= kWarmup) {
          rtt_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        }
        if (small_a[0] != static_cast<uint8_t>(i)) throw Failure{"a pong came back altered"};
      }
    } catch (...) {  // the peer thread is joined on every path out
      a_failed = true;
      peer.join();
      throw;
    }
    peer.join();
    landed = write_bytes_in(dev_b->stats());
  } catch (const Failure& f) {
    o.check.status = Verdict::fail;
    o.check.reason = f.what + (b_error.empty() ? "" : " (peer: " + b_error + ")");
    return o;
  }
  if (!b_error.empty() || b_got != big || mismatch != SIZE_MAX || writes == 0) {
    o.check.status = Verdict::fail;
    o.check.reason =
        !b_error.empty() ? b_error
        : b_got != big   ? "received " + std::to_string(b_got) + " bytes of " + std::to_string(big)
        : mismatch != SIZE_MAX
            ? "data mismatch at byte " + std::to_string(mismatch) + " of " + std::to_string(big)
            : "the " + human_bytes(big) +
                  " message went without an RDMA write "
                  "(rendezvous expected above XPORT_EAGER_MAX)";
    return o;
  }
  std::sort(rtt_us.begin(), rtt_us.end());
  const double p50 = rtt_us[rtt_us.size() / 2], max = rtt_us.back();
  char text[200];
  std::snprintf(text, sizeof(text),
                "%s by RDMA write with remote CQ data, every byte verified; round trip "
                "p50 %.1f us, max %.1f us (%d x %zu B)",
                human_bytes(big).c_str(), p50, max, kRoundTrips, kSmall);
  o.check.status = Verdict::pass;
  o.check.reason = text;
  o.check.details.integer("bytes", static_cast<int64_t>(big))
      .integer("eager_max", static_cast<int64_t>(eager_max))
      .integer("rdma_writes", static_cast<int64_t>(writes))
      .integer("write_bytes_landed", static_cast<int64_t>(landed))
      .boolean("verified", true)
      .integer("round_trips", kRoundTrips)
      .num("rtt_us_p50", p50)
      .num("rtt_us_max", max);
  return o;
}

}  // namespace probe
