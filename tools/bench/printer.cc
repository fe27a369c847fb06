// Rendering of xport-bench's results as they come (printer.hpp). The JSON and CSV fields are a
// stable interface (docs/tools.md): add fields, never rename or remove them.
#include "printer.hpp"

#include <unistd.h>

#include <cstdio>
#include <ctime>

#include "common/tool.hpp"
#include "xport/xport.hpp"

namespace bench {

namespace {

// Bandwidth over link rate, or a negative number when the link rate is unknown.
double link_fraction(const RunInfo& run, const Point& p) {
  if (run.link_bits_per_s == 0) return -1;
  return p.bw * 8.0 / static_cast<double>(run.link_bits_per_s);
}

std::string json_string(const std::string& s) { return "\"" + xport::tool::json_escape(s) + "\""; }

unsigned long long ull(uint64_t v) { return static_cast<unsigned long long>(v); }

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

std::string json_strings(const std::vector<std::string>& v) {
  std::vector<std::string> q;
  for (const auto& x : v) q.push_back(json_string(x));
  return "[" + join(q, ",") + "]";
}

void json_point(const RunInfo& run, const Point& p) {
  const std::string op(to_string(run.op));
  const double f = link_fraction(run, p);
  std::string link = run.link_bits_per_s ? std::to_string(run.link_bits_per_s) : "null";
  char frac[32] = "null";
  if (f >= 0) std::snprintf(frac, sizeof(frac), "%.4f", f);
  std::printf(
      "{\"record\":\"point\",\"op\":\"%s\",\"size\":%zu,\"rails\":%zu,\"provider\":%s,"
      "\"mode\":\"%s\",\"lat_us_p50\":%.3f,\"lat_us_p99\":%.3f,\"lat_us_max\":%.3f,"
      "\"lat_us_mean\":%.3f,\"bw_bytes_per_s\":%.0f,\"msg_per_s\":%.0f,\"link_bits_per_s\":%s,"
      "\"link_fraction\":%s,\"iterations\":%d,\"warmup\":%d,\"depth\":%d,\"check\":%s,"
      "\"sliding\":%s,\"rail_names\":%s",
      op.c_str(), p.size, run.rails.size(), json_string(run.provider).c_str(), run.mode.c_str(),
      p.p50_us, p.p99_us, p.max_us, p.mean_us, p.bw, p.rate, link.c_str(), frac, p.iterations,
      p.warmup, p.depth, run.check ? "true" : "false", run.sliding ? "true" : "false",
      json_strings(run.rails).c_str());
  if (!run.pattern.empty()) {
    std::printf(",\"pattern\":\"%s\",\"ranks\":%d,\"streams\":%d", run.pattern.c_str(), run.ranks,
                p.streams);
  }
  std::printf(",\"memory\":\"%s\",\"initiator\":\"%s\",\"round_trip\":%s",
              run.cuda ? "cuda" : "host", run.device ? "device" : "host",
              run.round_trip ? "true" : "false");
  const xport::PoolStats& q = run.pool;
  std::printf(
      ",\"comms\":%d,\"pool\":{\"groups\":%u,\"channels_per_group\":%u,\"channels\":%llu,"
      "\"cqs\":%llu,\"comms_attached\":%llu,\"primaries\":%llu,\"secondaries\":%llu,"
      "\"routing_misses\":%llu,\"channel_ops\":%llu,\"busiest_channel_ops\":%llu}",
      run.comms, q.groups, q.channels_per_group, ull(q.channels), ull(q.cqs), ull(q.comms_attached),
      ull(q.primaries), ull(q.secondaries), ull(q.routing_misses), ull(q.channel_ops),
      ull(q.busiest_channel_ops));
  if (p.slots > 0) std::printf(",\"slots\":%d", p.slots);  // put and get
  if (p.call_ns >= 0) {
    std::printf(",\"time_calls\":{\"call_ns\":%.1f,\"wait_ns\":%.1f}", p.call_ns, p.wait_ns);
  }
  const RunInfo::Progress& g = run.progress;
  std::printf(
      ",\"progress\":{\"cq_polls\":%llu,\"cq_empty_polls\":%llu,\"cq_completions\":%llu,"
      "\"posts\":%llu,\"eagain_retries\":%llu,\"window_ops_held\":%llu,"
      "\"deferred_posts\":%llu}}\n",
      ull(g.cq_polls), ull(g.cq_empty_polls), ull(g.cq_completions), ull(g.posts),
      ull(g.eagain_retries), ull(g.window_ops_held), ull(g.deferred_posts));
}

void csv_point(const RunInfo& run, const Point& p) {
  const std::string op(to_string(run.op));
  const double f = link_fraction(run, p);
  char frac[32] = "";
  if (f >= 0) std::snprintf(frac, sizeof(frac), "%.4f", f);
  std::printf("%s,%zu,%zu,\"%s\",%s,%.3f,%.3f,%.3f,%.3f,%.0f,%.0f,%s,%s,%d,%d,%d,%d,%s,%d,%d",
              op.c_str(), p.size, run.rails.size(), run.provider.c_str(), run.mode.c_str(),
              p.p50_us, p.p99_us, p.max_us, p.mean_us, p.bw, p.rate,
              run.link_bits_per_s ? std::to_string(run.link_bits_per_s).c_str() : "", frac,
              p.iterations, p.warmup, p.depth, run.check ? 1 : 0, run.pattern.c_str(), run.ranks,
              p.streams);
  const xport::PoolStats& q = run.pool;
  std::printf(",%d,%u,%u,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu", run.comms, q.groups,
              q.channels_per_group, ull(q.channels), ull(q.cqs), ull(q.comms_attached),
              ull(q.primaries), ull(q.secondaries), ull(q.routing_misses), ull(q.channel_ops),
              ull(q.busiest_channel_ops));
  std::printf(",%s,%s,%d\n", run.cuda ? "cuda" : "host", run.device ? "device" : "host",
              run.round_trip ? 1 : 0);
}

void table_header(const RunInfo& run, int depth) {
  const std::string op(to_string(run.op));
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
  if (!run.pattern.empty()) std::printf(", pattern %s, %d ranks", run.pattern.c_str(), run.ranks);
  std::printf(", %d comm%s per peer and direction", run.comms, run.comms == 1 ? "" : "s");
  std::printf(", %s memory, %s-initiated\n", run.cuda ? "GPU" : "host",
              run.device ? "kernel (GpuProxy)" : "host");
  if (run.round_trip) {
    std::printf(
        "latency: one whole round trip (put_signal, the peer's wait_signal and reply "
        "put_signal, wait_signal here); bandwidth: both directions over the round trips\n");
  } else if (run.op == Op::send) {
    std::printf("latency: half the ping-pong round trip; bandwidth: %s\n",
                depth == 1 ? "ping-pong, both directions" : "one way, depth sends in flight");
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
}

void table_point(const RunInfo& run, const Point& p) {
  const double f = link_fraction(run, p);
  char frac[16] = "n/a";
  if (f >= 0) std::snprintf(frac, sizeof(frac), "%.1f%%", f * 100);
  std::printf("%10zu %8d %7d %6d %9.2f %9.2f %9.2f %9.2f %11.1f %11.0f %7s", p.size, p.iterations,
              p.warmup, p.depth, p.p50_us, p.p99_us, p.max_us, p.mean_us, p.bw / 1e6, p.rate, frac);
  if (!run.pattern.empty()) std::printf(" %7d", p.streams);
  std::printf("\n");
}

void table_end(const RunInfo& run) {
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
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char b[32];
  std::strftime(b, sizeof(b), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return b;
}

}  // namespace

const char* to_string(EndStatus s) {
  switch (s) {
    case EndStatus::complete:
      return "complete";
    case EndStatus::failed:
      return "failed";
    case EndStatus::peer_died:
      return "peer_died";
    case EndStatus::interrupted:
      return "interrupted";
  }
  return "failed";
}

Printer::Printer(Format format, bool status_line)
    : format_(format), status_line_(status_line), start_(std::chrono::steady_clock::now()) {
  if (status_line_) status_ = std::thread([this] { status_loop(); });
}

Printer::~Printer() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (status_.joinable()) status_.join();
}

bool Printer::begun() const {
  std::lock_guard<std::mutex> l(mu_);
  return begun_;
}

void Printer::begin(const RunInfo& run, const std::vector<std::string>& argv, size_t planned) {
  std::lock_guard<std::mutex> l(mu_);
  run_ = run;
  planned_ = planned;
  begun_ = true;
  if (format_ == Format::json) {
    char host[256] = {};
    if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
    const xport::FabricInfo fi = xport::fabric_info();
    std::string knobs;
    for (const auto& k : xport::knob_list()) {
      knobs += (knobs.empty() ? "" : ",") + json_string(k.name) + ":" + json_string(k.value);
    }
    std::printf(
        "{\"record\":\"header\",\"tool\":\"xport-bench\",\"version\":%s,\"build\":%s,"
        "\"libfabric\":%s,\"host\":%s,\"time\":\"%s\",\"argv\":%s,\"op\":\"%s\",\"mode\":\"%s\","
        "\"provider\":%s,\"rails\":%s,\"link_bits_per_s\":%s,\"points\":%zu,\"knobs\":{%s}}\n",
        json_string(xport::version()).c_str(), json_string(xport::build_id()).c_str(),
        json_string(fi.runtime_version).c_str(), json_string(host).c_str(), utc_now().c_str(),
        json_strings(argv).c_str(), std::string(to_string(run.op)).c_str(), run.mode.c_str(),
        json_string(run.provider).c_str(), json_strings(run.rails).c_str(),
        run.link_bits_per_s ? std::to_string(run.link_bits_per_s).c_str() : "null", planned,
        knobs.c_str());
  } else if (format_ == Format::csv) {
    std::printf(
        "op,size,rails,provider,mode,lat_us_p50,lat_us_p99,lat_us_max,lat_us_mean,"
        "bw_bytes_per_s,msg_per_s,link_bits_per_s,link_fraction,iterations,warmup,depth,"
        "check,pattern,ranks,streams,comms,pool_groups,pool_channels_per_group,pool_channels,"
        "pool_cqs,pool_comms_attached,pool_primaries,pool_secondaries,pool_routing_misses,"
        "pool_channel_ops,pool_busiest_channel_ops,memory,initiator,round_trip\n");
  } else {
    table_header(run, run.depth);
  }
  std::fflush(stdout);
}

void Printer::measuring(const Plan& p) {
  std::lock_guard<std::mutex> l(mu_);
  current_ = p;
  measuring_ = true;
  point_start_ = std::chrono::steady_clock::now();
  cv_.notify_all();
}

void Printer::point(const RunInfo& run, const Point& p) {
  std::lock_guard<std::mutex> l(mu_);
  if (ended_) return;
  clear_status_locked();
  run_ = run;
  measuring_ = false;
  ++printed_;
  if (format_ == Format::json) {
    json_point(run, p);
  } else if (format_ == Format::csv) {
    csv_point(run, p);
  } else {
    table_point(run, p);
  }
  std::fflush(stdout);
}

bool Printer::end(EndStatus status, const std::string& reason, int exit_status) {
  std::lock_guard<std::mutex> l(mu_);
  if (ended_) return false;
  ended_ = true;
  clear_status_locked();
  std::string line = reason;
  if (status != EndStatus::complete) {
    if (measuring_) line += ", while measuring size " + std::to_string(current_.size);
    if (begun_) {
      line +=
          " (" + std::to_string(printed_) + " of " + std::to_string(planned_) + " points measured)";
    }
    std::fprintf(stderr, "xport-bench: %s\n", line.c_str());
  }
  if (begun_ && format_ == Format::json) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::printf(
        "{\"record\":\"end\",\"tool\":\"xport-bench\",\"status\":\"%s\",\"error\":%s,"
        "\"points\":%zu,\"planned\":%zu,\"elapsed_s\":%.3f,\"exit_status\":%d}\n",
        to_string(status), json_string(status == EndStatus::complete ? "" : line).c_str(), printed_,
        planned_, s, exit_status);
  } else if (begun_ && format_ == Format::table && status == EndStatus::complete) {
    table_end(run_);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  return true;
}

void Printer::clear_status_locked() {
  if (!shown_) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  shown_ = false;
}

void Printer::status_loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    cv_.wait_for(l, std::chrono::milliseconds(250));
    if (stop_ || ended_ || !measuring_) continue;
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - point_start_).count();
    if (s < 1.0) continue;  // short points print their row before a status would help
    if (shown_ && static_cast<long>(s) == shown_s_) continue;  // the same text: no redraw
    shown_s_ = static_cast<long>(s);
    std::fprintf(stderr,
                 "\r\033[Kxport-bench: measuring size %zu (%d iterations, %d warm-up): "
                 "%.0f s, %zu of %zu points done",
                 current_.size, current_.iterations, current_.warmup, s, printed_, planned_);
    std::fflush(stderr);
    shown_ = true;
  }
}

}  // namespace bench
