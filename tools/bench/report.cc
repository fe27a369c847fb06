// xport-bench's figures (report.hpp): a point from its samples, streams summed, the run's
// description and the --expect-* verdicts. printer.cc renders them.
#include "report.hpp"

#include <algorithm>
#include <cstdio>

namespace bench {

namespace {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

}  // namespace

Point summarize(const Plan& plan, const Measured& m) {
  Point p;
  p.size = plan.size;
  p.iterations = plan.iterations;
  p.warmup = plan.warmup;
  p.depth = plan.depth;
  if (plan.op == Op::put || plan.op == Op::get) p.slots = plan.slots;
  p.p50_us = percentile(m.lat_us, 0.5);
  p.p99_us = percentile(m.lat_us, 0.99);
  p.max_us = m.lat_us.empty() ? 0 : *std::max_element(m.lat_us.begin(), m.lat_us.end());
  double sum = 0;
  for (double v : m.lat_us) sum += v;
  p.mean_us = m.lat_us.empty() ? 0 : sum / static_cast<double>(m.lat_us.size());
  p.bw = m.seconds > 0 ? m.bytes / m.seconds : 0;
  p.rate = m.seconds > 0 ? m.messages / m.seconds : 0;
  p.bytes = m.bytes;
  p.messages = m.messages;
  p.wall_s = m.wall_seconds;
  p.call_ns = m.call_ns;
  p.wait_ns = m.wait_ns;
  return p;
}

Point aggregate(const std::vector<Point>& streams) {
  Point a;
  if (streams.empty()) return a;
  a = streams[0];
  a.streams = 0;
  a.bw = a.rate = a.mean_us = a.bytes = a.messages = a.wall_s = 0;
  for (const auto& s : streams) {
    a.streams += s.streams;
    a.bytes += s.bytes;
    a.messages += s.messages;
    a.wall_s = std::max(a.wall_s, s.wall_s);
    a.p50_us = std::max(a.p50_us, s.p50_us);
    a.p99_us = std::max(a.p99_us, s.p99_us);
    a.max_us = std::max(a.max_us, s.max_us);
    a.mean_us += s.mean_us / static_cast<double>(streams.size());
  }
  double first = streams[0].start_s, last = streams[0].end_s;
  for (const auto& s : streams) {
    first = std::min(first, s.start_s);
    last = std::max(last, s.end_s);
  }
  a.wall_s = std::max(a.wall_s, last - first);
  a.bw = a.wall_s > 0 ? a.bytes / a.wall_s : 0;
  a.rate = a.wall_s > 0 ? a.messages / a.wall_s : 0;
  return a;
}

void pack(const Point& p, double* d) {
  const double v[kPointDoubles] = {static_cast<double>(p.size),
                                   static_cast<double>(p.iterations),
                                   static_cast<double>(p.warmup),
                                   static_cast<double>(p.depth),
                                   p.p50_us,
                                   p.p99_us,
                                   p.max_us,
                                   p.mean_us,
                                   p.bw,
                                   p.rate,
                                   p.bytes,
                                   p.messages,
                                   p.wall_s,
                                   p.start_s,
                                   p.end_s};
  std::copy(v, v + kPointDoubles, d);
}

Point unpack(const double* d) {
  Point p;
  p.size = static_cast<size_t>(d[0]);
  p.iterations = static_cast<int>(d[1]);
  p.warmup = static_cast<int>(d[2]);
  p.depth = static_cast<int>(d[3]);
  p.p50_us = d[4], p.p99_us = d[5], p.max_us = d[6], p.mean_us = d[7], p.bw = d[8], p.rate = d[9];
  p.bytes = d[10], p.messages = d[11], p.wall_s = d[12], p.start_s = d[13], p.end_s = d[14];
  return p;
}

RunInfo describe_run(const Options& opt, const xport::Device& dev, const std::string& mode) {
  RunInfo r;
  r.op = opt.op;
  r.comms = opt.comms;
  r.depth = depth_of(opt);
  r.provider = dev.capabilities().provider;
  r.mode = mode;
  r.pattern = opt.pattern;
  r.check = opt.check;
  r.sliding = opt.sliding;
  r.cuda = opt.cuda;
  r.device = opt.device_initiator;
  r.round_trip = opt.op == Op::put_signal && (opt.round_trip || opt.device_initiator);
  bool known = true;
  for (const auto& rail : dev.rail_info()) {
    r.rails.push_back(rail.name);
    r.link_bits_per_s += rail.link_bits_per_s;
    known = known && rail.link_bits_per_s > 0;
  }
  // A fraction of some rails' rate would flatter the result: all known, or none.
  if (!known) r.link_bits_per_s = 0;
  return r;
}

RunInfo::Progress progress_of(const xport::Stats& s) {
  RunInfo::Progress g;
  for (const auto& c : s.cqs) {
    g.cq_polls += c.polls;
    g.cq_empty_polls += c.empty_polls;
    g.cq_completions += c.completions;
  }
  for (const auto& e : s.endpoints) {
    g.posts += e.posted;
    g.eagain_retries += e.eagain_retries;
  }
  g.window_ops_held = s.window_ops_held;
  g.deferred_posts = s.deferred_posts;
  return g;
}

int check_expectations(const Options& opt, const std::vector<Point>& points) {
  int rc = kExitOk;
  for (const auto& p : points) {
    if (opt.expect_bw_gbs > 0 && p.bw < opt.expect_bw_gbs * 1e9) {
      std::fprintf(stderr, "xport-bench: size %zu fell short of --expect-bw %g GB/s: %.3f GB/s\n",
                   p.size, opt.expect_bw_gbs, p.bw / 1e9);
      rc = kExitFailed;
    }
    if (opt.expect_lat_us > 0 && p.p50_us > opt.expect_lat_us) {
      std::fprintf(stderr, "xport-bench: size %zu fell short of --expect-lat %g us: p50 %.2f us\n",
                   p.size, opt.expect_lat_us, p.p50_us);
      rc = kExitFailed;
    }
  }
  return rc;
}

}  // namespace bench
