// xport-gin-nccl's output: the table rank 0 prints (the launcher shows it) and the JSON file with
// every number.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "gin_nccl.hpp"

namespace gin_nccl {
namespace {

std::string cell(bool measured, double v, const char* format) {
  if (!measured) return "-";
  char text[32];
  std::snprintf(text, sizeof text, format, v);
  return text;
}

std::string ratio(bool a_measured, double a, bool b_measured, double b) {
  if (!a_measured || !b_measured || b == 0) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", a / b);
  return text;
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", c);
      out += esc;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

void latency_json(std::ostream& o, const Latency& l) {
  if (!l.measured) {
    o << "null";
    return;
  }
  o << "{\"iterations\": " << l.iterations << ", \"samples\": " << l.samples
    << ", \"avg_us\": " << l.avg_us << ", \"p50_us\": " << l.p50_us << ", \"p99_us\": " << l.p99_us
    << ", \"min_us\": " << l.min_us << ", \"max_us\": " << l.max_us
    << ", \"tag_mismatches\": " << l.tag_mismatches << ", \"bytes_checked\": " << l.bytes_checked
    << "}";
}

void bandwidth_json(std::ostream& o, const Bandwidth& b) {
  if (!b.measured) {
    o << "null";
    return;
  }
  o << "{\"iterations\": " << b.iterations << ", \"time_us\": " << b.time_us
    << ", \"algbw_GBps\": " << b.algbw_GBps << ", \"busbw_GBps\": " << b.busbw_GBps
    << ", \"bytes_checked\": " << b.bytes_checked << "}";
}

}  // namespace

void print_table(const Report& rep, const Options& opt) {
  if (rep.gin_type.empty())
    std::printf("%s (rank 0; NCCL %d.%d.%d; GIN not used)\n", kResultsBegin,
                rep.nccl_version / 10000, rep.nccl_version / 100 % 100, rep.nccl_version % 100);
  else
    std::printf("%s (rank 0; NCCL %d.%d.%d; GIN %s, %d context(s); %s barrier)\n", kResultsBegin,
                rep.nccl_version / 10000, rep.nccl_version / 100 % 100, rep.nccl_version % 100,
                rep.gin_type.c_str(), rep.gin_contexts, opt.nccl_barrier ? "NCCL's" : "bounded");
  for (const std::string& g : rep.gpus) std::printf("GPU %s\n", g.c_str());
  for (const auto& [name, value] : rep.env) std::printf("%s=%s\n", name.c_str(), value.c_str());
  if (!rep.pingpong.empty()) {
    std::printf(
        "\nping-pong round trip, us. GIN: put + SignalInc each way, all rounds in one kernel "
        "(avg), then rounds timed one by one on the GPU (p50, p99); send/recv: ncclSend then "
        "ncclRecv, each round trip waited for on the host\n");
    std::printf("%8s %7s | %9s %9s %9s | %9s %9s %9s | %12s\n", "size", "rounds", "GIN avg", "p50",
                "p99", "s/r avg", "p50", "p99", "GIN/s/r p50");
    for (const PingPongRow& row : rep.pingpong) {
      const Latency& g = row.gin;
      const Latency& s = row.sendrecv;
      const int rounds = g.measured ? g.iterations : s.iterations;
      std::printf(
          "%8s %7d | %9s %9s %9s | %9s %9s %9s | %12s\n", size_text(row.size).c_str(), rounds,
          cell(g.measured, g.avg_us, "%.2f").c_str(), cell(g.measured, g.p50_us, "%.2f").c_str(),
          cell(g.measured, g.p99_us, "%.2f").c_str(), cell(s.measured, s.avg_us, "%.2f").c_str(),
          cell(s.measured, s.p50_us, "%.2f").c_str(), cell(s.measured, s.p99_us, "%.2f").c_str(),
          ratio(g.measured, g.p50_us, s.measured, s.p50_us).c_str());
    }
  }
  if (!rep.alltoall.empty()) {
    std::printf(
        "\nalltoall, 2 ranks; chunk = bytes to each rank; the slower rank's time. algbw: "
        "bytes to the other rank / time; busbw (nccl-tests): (n-1)/n x bytes sent / time "
        "(the same for 2 ranks). GIN: all iterations in one kernel, a barrier between "
        "them; send/recv: grouped ncclSend/ncclRecv, enqueued back to back\n");
    std::printf("%8s %6s | %10s %9s | %10s %9s | %12s\n", "chunk", "iters", "GIN us", "busbw",
                "s/r us", "busbw", "GIN/s/r bw");
    for (const AlltoallRow& row : rep.alltoall) {
      const Bandwidth& g = row.gin;
      const Bandwidth& s = row.sendrecv;
      std::printf("%8s %6d | %10s %9s | %10s %9s | %12s\n", size_text(row.chunk).c_str(),
                  g.measured ? g.iterations : s.iterations,
                  cell(g.measured, g.time_us, "%.2f").c_str(),
                  cell(g.measured, g.busbw_GBps, "%.3f").c_str(),
                  cell(s.measured, s.time_us, "%.2f").c_str(),
                  cell(s.measured, s.busbw_GBps, "%.3f").c_str(),
                  ratio(g.measured, g.busbw_GBps, s.measured, s.busbw_GBps).c_str());
    }
    std::printf("(busbw in GB/s)\n");
  }
  std::printf("\nfailed checks: %d on all ranks\n", rep.failures_all_ranks);
  for (const std::string& f : rep.failures) std::printf("  rank 0: %s\n", f.c_str());
  std::printf("%s\n", kResultsEnd);
  std::fflush(stdout);
}

bool write_json(const Report& rep, const Options& opt, const std::string& path) {
  std::ostringstream o;
  o.precision(6);
  o << "{\n  \"program\": \"xport-gin-nccl\",\n  \"nccl_version\": " << rep.nccl_version
    << ",\n  \"nccl_headers\": " << NCCL_VERSION_CODE << ",\n  \"gpus\": [";
  for (size_t i = 0; i < rep.gpus.size(); ++i) o << (i ? ", " : "") << quoted(rep.gpus[i]);
  o << "],\n  \"env\": {";
  for (size_t i = 0; i < rep.env.size(); ++i)
    o << (i ? ", " : "") << quoted(rep.env[i].first) << ": " << quoted(rep.env[i].second);
  o << "},\n  \"gin\": {\"type\": " << quoted(rep.gin_type)
    << ", \"contexts\": " << rep.gin_contexts
    << ", \"barrier\": " << quoted(opt.nccl_barrier ? "nccl" : "bounded")
    << "},\n  \"options\": {\"mode\": " << quoted(opt.mode_text)
    << ", \"iterations\": " << opt.iterations << ", \"bw_iterations\": " << opt.bw_iterations
    << ", \"latency_samples\": " << opt.latency_samples
    << ", \"wait_timeout_s\": " << opt.wait_timeout_s << "},\n  \"pingpong\": [";
  for (size_t i = 0; i < rep.pingpong.size(); ++i) {
    const PingPongRow& row = rep.pingpong[i];
    o << (i ? "," : "") << "\n    {\"size\": " << row.size << ", \"gin\": ";
    latency_json(o, row.gin);
    o << ", \"sendrecv\": ";
    latency_json(o, row.sendrecv);
    o << "}";
  }
  o << "\n  ],\n  \"alltoall\": [";
  for (size_t i = 0; i < rep.alltoall.size(); ++i) {
    const AlltoallRow& row = rep.alltoall[i];
    o << (i ? "," : "") << "\n    {\"chunk\": " << row.chunk << ", \"ranks\": 2, \"gin\": ";
    bandwidth_json(o, row.gin);
    o << ", \"sendrecv\": ";
    bandwidth_json(o, row.sendrecv);
    o << "}";
  }
  o << "\n  ],\n  \"failures_rank0\": [";
  for (size_t i = 0; i < rep.failures.size(); ++i) o << (i ? ", " : "") << quoted(rep.failures[i]);
  o << "],\n  \"failures_all_ranks\": " << rep.failures_all_ranks
    << ",\n  \"passed\": " << (rep.failures_all_ranks == 0 ? "true" : "false") << "\n}\n";

  // Whole or not at all: a reader never sees half a file.
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream f(tmp);
    f << o.str();
    if (!f.good()) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

}  // namespace gin_nccl
