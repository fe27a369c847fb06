// Rendering of xport-bench's results (report.hpp). The JSON and CSV fields are a stable
// interface (docs/tools.md): add fields, never rename or remove them.
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

// Bandwidth over link rate, or a negative number when the link rate is unknown.
double link_fraction(const RunInfo& run, const Point& p) {
  if (run.link_bits_per_s == 0) return -1;
  return p.bw * 8.0 / static_cast<double>(run.link_bits_per_s);
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char u[8];
      std::snprintf(u, sizeof(u), "\\u%04x", c);
      out += u;
      continue;
    }
    out += c;
  }
  return out + "\"";
}

unsigned long long ull(uint64_t v) { return static_cast<unsigned long long>(v); }

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

}  // namespace

Point summarize(const Plan& plan, const Measured& m) {
  Point p;
  p.size = plan.size;
  p.iterations = plan.iterations;
  p.warmup = plan.warmup;
  p.depth = plan.depth;
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

void print_report(const RunInfo& run, const std::vector<Point>& points, Format format) {
  const std::string op(to_string(run.op));
  if (format == Format::json) {
    for (const auto& p : points) {
      const double f = link_fraction(run, p);
      std::string link = run.link_bits_per_s ? std::to_string(run.link_bits_per_s) : "null";
      char frac[32] = "null";
      if (f >= 0) std::snprintf(frac, sizeof(frac), "%.4f", f);
      std::printf(
          "{\"op\":\"%s\",\"size\":%zu,\"rails\":%zu,\"provider\":%s,\"mode\":\"%s\","
          "\"lat_us_p50\":%.3f,\"lat_us_p99\":%.3f,\"lat_us_max\":%.3f,\"lat_us_mean\":%.3f,"
          "\"bw_bytes_per_s\":%.0f,\"msg_per_s\":%.0f,\"link_bits_per_s\":%s,"
          "\"link_fraction\":%s,\"iterations\":%d,\"warmup\":%d,\"depth\":%d,\"check\":%s,"
          "\"sliding\":%s,\"rail_names\":[%s]",
          op.c_str(), p.size, run.rails.size(), json_string(run.provider).c_str(), run.mode.c_str(),
          p.p50_us, p.p99_us, p.max_us, p.mean_us, p.bw, p.rate, link.c_str(), frac, p.iterations,
          p.warmup, p.depth, run.check ? "true" : "false", run.sliding ? "true" : "false",
          [&] {
            std::vector<std::string> q;
            for (const auto& r : run.rails) q.push_back(json_string(r));
            return join(q, ",");
          }()
              .c_str());
      if (!run.pattern.empty()) {
        std::printf(",\"pattern\":\"%s\",\"ranks\":%d,\"streams\":%d", run.pattern.c_str(),
                    run.ranks, p.streams);
      }
      std::printf(",\"memory\":\"%s\",\"initiator\":\"%s\",\"round_trip\":%s",
                  run.cuda ? "cuda" : "host", run.device ? "device" : "host",
                  run.round_trip ? "true" : "false");
      const xport::PoolStats& q = run.pool;
      std::printf(
          ",\"comms\":%d,\"pool\":{\"groups\":%u,\"channels_per_group\":%u,\"channels\":%llu,"
          "\"cqs\":%llu,\"comms_attached\":%llu,\"primaries\":%llu,\"secondaries\":%llu,"
          "\"routing_misses\":%llu,\"channel_ops\":%llu,\"busiest_channel_ops\":%llu}",
          run.comms, q.groups, q.channels_per_group, ull(q.channels), ull(q.cqs),
          ull(q.comms_attached), ull(q.primaries), ull(q.secondaries), ull(q.routing_misses),
          ull(q.channel_ops), ull(q.busiest_channel_ops));
      if (p.call_ns >= 0) {
        std::printf(",\"time_calls\":{\"call_ns\":%.1f,\"wait_ns\":%.1f}", p.call_ns,
                    p.wait_ns);
      }
      const RunInfo::Progress& g = run.progress;
      std::printf(
          ",\"progress\":{\"cq_polls\":%llu,\"cq_empty_polls\":%llu,\"cq_completions\":%llu,"
          "\"posts\":%llu,\"eagain_retries\":%llu,\"window_ops_held\":%llu,"
          "\"deferred_posts\":%llu}}\n",
          ull(g.cq_polls), ull(g.cq_empty_polls), ull(g.cq_completions), ull(g.posts),
          ull(g.eagain_retries), ull(g.window_ops_held), ull(g.deferred_posts));
    }
    std::fflush(stdout);
    return;
  }
  if (format == Format::csv) {
    std::printf(
        "op,size,rails,provider,mode,lat_us_p50,lat_us_p99,lat_us_max,lat_us_mean,"
        "bw_bytes_per_s,msg_per_s,link_bits_per_s,link_fraction,iterations,warmup,depth,"
        "check,pattern,ranks,streams,comms,pool_groups,pool_channels_per_group,pool_channels,"
        "pool_cqs,pool_comms_attached,pool_primaries,pool_secondaries,pool_routing_misses,"
        "pool_channel_ops,pool_busiest_channel_ops,memory,initiator,round_trip\n");
    for (const auto& p : points) {
      const double f = link_fraction(run, p);
      char frac[32] = "";
      if (f >= 0) std::snprintf(frac, sizeof(frac), "%.4f", f);
      std::printf("%s,%zu,%zu,\"%s\",%s,%.3f,%.3f,%.3f,%.3f,%.0f,%.0f,%s,%s,%d,%d,%d,%d,%s,%d,%d",
                  op.c_str(), p.size, run.rails.size(), run.provider.c_str(), run.mode.c_str(),
                  p.p50_us, p.p99_us, p.max_us, p.mean_us, p.bw, p.rate,
                  run.link_bits_per_s ? std::to_string(run.link_bits_per_s).c_str() : "", frac,
                  p.iterations, p.warmup, p.depth, run.check ? 1 : 0, run.pattern.c_str(),
                  run.ranks, p.streams);
      const xport::PoolStats& q = run.pool;
      std::printf(",%d,%u,%u,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu", run.comms, q.groups,
                  q.channels_per_group, ull(q.channels), ull(q.cqs), ull(q.comms_attached),
                  ull(q.primaries), ull(q.secondaries), ull(q.routing_misses), ull(q.channel_ops),
                  ull(q.busiest_channel_ops));
      std::printf(",%s,%s,%d\n", run.cuda ? "cuda" : "host", run.device ? "device" : "host",
                  run.round_trip ? 1 : 0);
    }
    std::fflush(stdout);
    return;
  }
  std::string link = "link rate unknown: no fraction";
  if (run.link_bits_per_s) {
    char b[64];
    std::snprintf(b, sizeof(b), "link rate %.1f Gb/s",
                  static_cast<double>(run.link_bits_per_s) / 1e9);
    link = b;
  }
  std::printf("xport-bench %s: op %s, provider %s, rails %s (%s), %s mode", xport::version(),
              op.c_str(), run.provider.c_str(), join(run.rails, ",").c_str(), link.c_str(),
              run.mode.c_str());
  if (!run.pattern.empty()) {
    std::printf(", pattern %s, %d ranks", run.pattern.c_str(), run.ranks);
  }
  std::printf(", %d comm%s per peer and direction", run.comms, run.comms == 1 ? "" : "s");
  std::printf(", %s memory, %s-initiated\n", run.cuda ? "GPU" : "host",
              run.device ? "kernel (GpuProxy)" : "host");
  if (run.round_trip) {
    std::printf(
        "latency: one whole round trip (put_signal, the peer's wait_signal and reply "
        "put_signal, wait_signal here); bandwidth: both directions over the round trips\n");
  } else if (run.op == Op::send) {
    std::printf("latency: half the ping-pong round trip; bandwidth: %s\n",
                points.empty() || points[0].depth == 1 ? "ping-pong, both directions"
                                                       : "one way, depth sends in flight");
  } else if (run.op == Op::atomic) {
    std::printf(
        "latency: one fetch_add round trip (old value in place); rate: depth atomics per "
        "quiet\n");
  } else {
    std::printf("latency: one %s + quiet (delivered%s); bandwidth: %s\n", op.c_str(),
                run.op == Op::put_signal ? ", signal applied" : "",
                run.sliding ? "depth in flight (sliding window to local completion), one quiet "
                              "at the end"
                            : (std::string("depth ") + op + "s per quiet").c_str());
  }
  if (!run.pattern.empty()) {
    std::printf(
        "%s: bandwidth and rate sum every stream over the first start to the last end; "
        "latency is the worst stream's\n",
        run.pattern.c_str());
  }
  if (run.check) {
    std::printf(
        "--check: every byte of every transfer verified (slower: send latency includes "
        "the peer's verification)\n");
  }
  std::printf("%10s %8s %7s %6s %9s %9s %9s %9s %11s %11s %7s%s\n", "size", "iters", "warmup",
              "depth", "p50_us", "p99_us", "max_us", "mean_us", "MB/s", "msg/s", "link",
              run.pattern.empty() ? "" : " streams");
  for (const auto& p : points) {
    const double f = link_fraction(run, p);
    char frac[16] = "n/a";
    if (f >= 0) std::snprintf(frac, sizeof(frac), "%.1f%%", f * 100);
    std::printf("%10zu %8d %7d %6d %9.2f %9.2f %9.2f %9.2f %11.1f %11.0f %7s", p.size, p.iterations,
                p.warmup, p.depth, p.p50_us, p.p99_us, p.max_us, p.mean_us, p.bw / 1e6, p.rate,
                frac);
    if (!run.pattern.empty()) std::printf(" %7d", p.streams);
    std::printf("\n");
  }
  const xport::PoolStats& q = run.pool;
  std::printf(
      "channel pool (this process's device, comms still open): groups %u x %u channels per "
      "group%s\n  channels %llu, CQs %llu, comms attached %llu, primaries %llu, secondaries "
      "%llu, routing misses %llu, channel ops %llu, busiest channel ops %llu\n",
      q.groups, q.channels_per_group, q.groups == 0 ? " (0: no sharing)" : "", ull(q.channels),
      ull(q.cqs), ull(q.comms_attached), ull(q.primaries), ull(q.secondaries),
      ull(q.routing_misses), ull(q.channel_ops), ull(q.busiest_channel_ops));
  const RunInfo::Progress& g = run.progress;
  std::printf(
      "progress (this process's device, the whole run): CQ polls %llu (empty %llu), "
      "completions %llu, posts %llu, -FI_EAGAIN retries %llu, window operations held %llu, "
      "posts deferred %llu\n",
      ull(g.cq_polls), ull(g.cq_empty_polls), ull(g.cq_completions), ull(g.posts),
      ull(g.eagain_retries), ull(g.window_ops_held), ull(g.deferred_posts));
  std::fflush(stdout);
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
