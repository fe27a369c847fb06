// Rendering of xport-bench's results as they come (printer.hpp). The JSON and CSV fields are a
// stable interface (docs/tools.md): add fields, never rename or remove them.
#include "printer.hpp"

#include <unistd.h>

#include <cstdio>
#include <ctime>

#include "core/json.hpp"
#include "xport/xport.hpp"

namespace bench {

namespace {

// Bandwidth over link rate, or a negative number when the link rate is unknown.
double link_fraction(const RunInfo& run, const Point& p) {
  if (run.link_bits_per_s == 0) return -1;
  return p.bw * 8.0 / static_cast<double>(run.link_bits_per_s);
}

unsigned long long ull(uint64_t v) { return static_cast<unsigned long long>(v); }

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

using xport::core::JsonFixed;
using xport::core::JsonWriter;

void strings(JsonWriter& w, const char* key, const std::vector<std::string>& v) {
  w.begin_array(key);
  for (const auto& x : v) w.value(x);
  w.end_array();
}

void print_json(const std::string& json) {
  std::fwrite(json.data(), 1, json.size(), stdout);
  std::fputc('\n', stdout);
}

void json_point(const RunInfo& run, const Point& p) {
  const double f = link_fraction(run, p);
  std::string out;
  JsonWriter w(out);
  w.begin_object()
      .field("record", "point")
      .field("op", to_string(run.op))
      .field("size", p.size)
      .field("rails", run.rails.size())
      .field("provider", run.provider)
      .field("mode", run.mode)
      .field("lat_us_p50", JsonFixed{p.p50_us, 3})
      .field("lat_us_p99", JsonFixed{p.p99_us, 3})
      .field("lat_us_max", JsonFixed{p.max_us, 3})
      .field("lat_us_mean", JsonFixed{p.mean_us, 3})
      .field("bw_bytes_per_s", JsonFixed{p.bw, 0})
      .field("msg_per_s", JsonFixed{p.rate, 0})
      .field_or_null("link_bits_per_s", run.link_bits_per_s != 0, run.link_bits_per_s)
      .field_or_null("link_fraction", f >= 0, JsonFixed{f, 4})
      .field("iterations", p.iterations)
      .field("warmup", p.warmup)
      .field("depth", p.depth)
      .field("check", run.check)
      .field("sliding", run.sliding);
  strings(w, "rail_names", run.rails);
  if (!run.pattern.empty()) {
    w.field("pattern", run.pattern).field("ranks", run.ranks).field("streams", p.streams);
  }
  const xport::PoolStats& q = run.pool;
  w.field("memory", run.cuda ? "cuda" : "host")
      .field("initiator", run.device ? "device" : "host")
      .field("round_trip", run.round_trip)
      .field("comms", run.comms)
      .begin_object("pool")
      .field("groups", q.groups)
      .field("channels_per_group", q.channels_per_group)
      .field("channels", q.channels)
      .field("cqs", q.cqs)
      .field("comms_attached", q.comms_attached)
      .field("primaries", q.primaries)
      .field("secondaries", q.secondaries)
      .field("routing_misses", q.routing_misses)
      .field("channel_ops", q.channel_ops)
      .field("busiest_channel_ops", q.busiest_channel_ops)
      .end_object();
  if (p.slots > 0) w.field("slots", p.slots);  // put and get
  if (p.call_ns >= 0) {
    w.begin_object("time_calls")
        .field("call_ns", JsonFixed{p.call_ns, 1})
        .field("wait_ns", JsonFixed{p.wait_ns, 1})
        .end_object();
  }
  const RunInfo::Progress& g = run.progress;
  w.begin_object("progress")
      .field("cq_polls", g.cq_polls)
      .field("cq_empty_polls", g.cq_empty_polls)
      .field("cq_completions", g.cq_completions)
      .field("posts", g.posts)
      .field("eagain_retries", g.eagain_retries)
      .field("window_ops_held", g.window_ops_held)
      .field("deferred_posts", g.deferred_posts)
      .end_object()
      .end_object();
  print_json(out);
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
    std::string out;
    JsonWriter w(out);
    w.begin_object()
        .field("record", "header")
        .field("tool", "xport-bench")
        .field("version", xport::version())
        .field("build", xport::build_id())
        .field("libfabric", fi.runtime_version)
        .field("host", host)
        .field("time", utc_now());
    strings(w, "argv", argv);
    w.field("op", to_string(run.op)).field("mode", run.mode).field("provider", run.provider);
    strings(w, "rails", run.rails);
    w.field_or_null("link_bits_per_s", run.link_bits_per_s != 0, run.link_bits_per_s)
        .field("points", planned)
        .begin_object("knobs");
    for (const auto& k : xport::knob_list()) w.field(k.name, k.value);
    w.end_object().end_object();
    print_json(out);
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
    std::string out;
    JsonWriter(out)
        .begin_object()
        .field("record", "end")
        .field("tool", "xport-bench")
        .field("status", to_string(status))
        .field("error", status == EndStatus::complete ? std::string() : line)
        .field("points", printed_)
        .field("planned", planned_)
        .field("elapsed_s", JsonFixed{s, 3})
        .field("exit_status", exit_status)
        .end_object();
    print_json(out);
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
