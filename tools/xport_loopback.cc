// xport-loopback: the main job on one machine. Two devices of one context (two endpoints), a
// peer thread on the receiving side; send/recv and put/get from 1 B up to --bytes, every byte
// verified; prints the counters and the bandwidth. Exit 0 only when everything matched.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <thread>
#include <vector>

#include "common/cli.hpp"
#include "common/tool.hpp"
#include "core/json.hpp"
#include "xport/xport.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string provider;
  size_t max_bytes = 4 << 20;
  int iterations = 8;
  bool json = false;
  double duration = 0;  // seconds of steady load (rounds of every phase); 0: one round
  double hold = 0;      // seconds to keep the devices open after the summary
};

uint8_t pattern(size_t size, int iter, size_t i) {
  return static_cast<uint8_t>((i * 131 + size * 7 + iter * 29 + 1) & 0xff);
}

std::vector<size_t> sizes_up_to(size_t max) {
  std::vector<size_t> out;
  for (size_t s = 1; s <= max; s *= 4) out.push_back(s);
  if (out.empty() || out.back() != max) out.push_back(max);
  return out;
}

struct Failure {
  std::string what;
};

template <typename T>
T must(xport::Result<T> r, const std::string& what) {
  if (!r.ok()) throw Failure{what + ": " + r.status().to_string()};
  return std::move(r).value();
}
void must(const xport::Status& s, const std::string& what) {
  if (!s.ok()) throw Failure{what + ": " + s.to_string()};
}

struct Phase {
  std::string name;
  uint64_t bytes = 0;
  uint64_t ops = 0;
  double seconds = 0;
};

// Adds one round's phase to the totals of the phase of that name.
void add_phase(std::vector<Phase>& phases, const Phase& p) {
  for (auto& q : phases) {
    if (q.name == p.name) {
      q.bytes += p.bytes;
      q.ops += p.ops;
      q.seconds += p.seconds;
      return;
    }
  }
  phases.push_back(p);
}

using xport::core::JsonGeneral;
using xport::core::JsonWriter;

// "pool: groups 1 x 4 channels, 2 channels, 1 CQ, 2 comms attached (1 primary, 1 secondary),
// 0 routing misses, 1234 ops (busiest channel 800)"
std::string pool_line(const xport::PoolStats& p) {
  auto n = [](uint64_t v, const char* one, const char* many) {
    return std::to_string(v) + " " + (v == 1 ? one : many);
  };
  std::ostringstream os;
  os << "pool: groups " << p.groups;
  if (p.groups == 0) {
    os << " (no sharing), ";
  } else {
    os << " x " << p.channels_per_group << " channels, ";
  }
  os << n(p.channels, "channel", "channels") << ", " << n(p.cqs, "CQ", "CQs") << ", "
     << n(p.comms_attached, "comm attached", "comms attached") << " ("
     << n(p.primaries, "primary", "primaries") << ", "
     << n(p.secondaries, "secondary", "secondaries") << "), "
     << n(p.routing_misses, "routing miss", "routing misses") << ", "
     << n(p.channel_ops, "op", "ops") << " (busiest channel " << p.busiest_channel_ops << ")";
  return os.str();
}

// One device's counters in the JSON's "stats" array.
void json_stats(JsonWriter& w, const std::string& device, const xport::Stats& st) {
  w.begin_object().field("device", device).begin_array("endpoints");
  for (const auto& e : st.endpoints) {
    w.begin_object().field("name", e.name);
    for (int op = 0; op < xport::kStatOps; ++op) {
      const std::string name = xport::stat_op_name(op);
      w.field(name + "_ops", e.ops[op]).field(name + "_bytes", e.bytes[op]);
    }
    w.field("posted", e.posted)
        .field("completed", e.completed)
        .field("error_completions", e.error_completions)
        .field("eagain_retries", e.eagain_retries)
        .end_object();
  }
  w.end_array().begin_array("cqs");
  for (const auto& c : st.cqs) {
    w.begin_object()
        .field("name", c.name)
        .field("polls", c.polls)
        .field("empty_polls", c.empty_polls)
        .field("completions", c.completions)
        .field("error_completions", c.error_completions)
        .field("max_batch", c.max_batch)
        .end_object();
  }
  const auto& p = st.pool;
  w.end_array()
      .field("routing_misses", st.routing_misses)
      .begin_object("pool")
      .field("groups", p.groups)
      .field("channels_per_group", p.channels_per_group)
      .field("channels", p.channels)
      .field("cqs", p.cqs)
      .field("comms_attached", p.comms_attached)
      .field("primaries", p.primaries)
      .field("secondaries", p.secondaries)
      .field("routing_misses", p.routing_misses)
      .field("channel_ops", p.channel_ops)
      .field("busiest_channel_ops", p.busiest_channel_ops)
      .field("registered_bytes", p.registered_bytes)
      .end_object()
      .end_object();
}

void print_stats(const std::string& device, const xport::Stats& st, std::ostream& os) {
  char line[256];
  os << "device " << device << "\n";
  for (const auto& e : st.endpoints) {
    std::snprintf(line, sizeof(line),
                  "  %s: posted %llu completed %llu error completions %llu eagain retries %llu\n",
                  e.name.c_str(), static_cast<unsigned long long>(e.posted),
                  static_cast<unsigned long long>(e.completed),
                  static_cast<unsigned long long>(e.error_completions),
                  static_cast<unsigned long long>(e.eagain_retries));
    os << line;
    for (int op = 0; op < xport::kStatOps; ++op) {
      if (e.ops[op] == 0) continue;
      std::snprintf(line, sizeof(line), "    %-6s %10llu ops %14llu bytes\n",
                    xport::stat_op_name(op), static_cast<unsigned long long>(e.ops[op]),
                    static_cast<unsigned long long>(e.bytes[op]));
      os << line;
    }
  }
  for (const auto& c : st.cqs) {
    std::snprintf(line, sizeof(line),
                  "  %-26s polls %llu empty %llu completions %llu errors %llu max_batch %llu\n",
                  c.name.c_str(), static_cast<unsigned long long>(c.polls),
                  static_cast<unsigned long long>(c.empty_polls),
                  static_cast<unsigned long long>(c.completions),
                  static_cast<unsigned long long>(c.error_completions),
                  static_cast<unsigned long long>(c.max_batch));
    os << line;
  }
  os << "  routing misses " << st.routing_misses << "\n";
  os << "  " << pool_line(st.pool) << "\n";
}

int run(const Options& opt) {
  xport::ContextOptions co;
  co.provider = opt.provider;
  co.peers_on_host = true;
  auto ctx = must(xport::Context::open(co), "opening the context");
  const auto& rep = ctx->provider();
  auto dev_a = must(ctx->open_device(), "opening device A");
  auto dev_b = must(ctx->open_device(), "opening device B");

  const size_t max = opt.max_bytes;
  // B receives messages into dst; puts land in target, a separate buffer, so A's one-sided phase
  // never races B's verification of the last message.
  std::vector<uint8_t> src(max), dst(max), check(max), target(max);
  auto reg_src = must(dev_a->register_memory(src.data(), max), "registering A's buffer");
  auto reg_chk = must(dev_a->register_memory(check.data(), max), "registering A's check buffer");
  auto reg_dst = must(dev_b->register_memory(dst.data(), max), "registering B's buffer");
  auto reg_target = must(dev_b->register_memory(target.data(), max), "registering B's target");

  auto listener = must(dev_b->listen(), "listening on B");
  const auto handle = listener->handle();
  const auto sizes = sizes_up_to(max);
  const auto deadline = [] { return xport::Deadline::from_knob(); };

  // Peer thread: accepts, then receives and verifies every message in order.
  std::string peer_error;
  uint64_t peer_bytes = 0;
  std::thread peer([&] {
    try {
      auto recv = must(listener->accept(deadline()), "accept on B");
      for (;;) {
        for (size_t size : sizes) {
          for (int it = 0; it < opt.iterations; ++it) {
            auto req = must(recv->irecv(dst.data(), size, reg_dst), "irecv");
            size_t got = must(recv->wait(req, deadline()), "receive of " + std::to_string(size) +
                                                               " bytes");
            if (got != size) {
              throw Failure{"received " + std::to_string(got) + " bytes, expected " +
                            std::to_string(size)};
            }
            for (size_t i = 0; i < size; ++i) {
              if (dst[i] != pattern(size, it, i)) {
                throw Failure{"send/recv data mismatch at byte " + std::to_string(i) + " of a " +
                              std::to_string(size) + "-byte message"};
              }
            }
            peer_bytes += got;
          }
        }
        // Stay open (and progressing) until A finished its one-sided phase. A round's final
        // byte is 2 when another round follows (--duration).
        auto done_req = must(recv->irecv(dst.data(), 1, reg_dst), "final irecv");
        must(recv->wait(done_req, deadline()), "final message");
        if (dst[0] != 2) break;
      }
    } catch (const Failure& f) {
      peer_error = f.what;
    }
  });

  std::vector<Phase> phases;
  uint64_t rounds = 0;
  std::string error;
  try {
    auto send = must(dev_a->connect(handle, deadline()), "connecting A to B");
    // --duration: rounds of every phase until the time is up (a steady load for exporters).
    const auto load_start = Clock::now();
    for (;;) {
      Phase two{"send/recv"};
      auto t0 = Clock::now();
      for (size_t size : sizes) {
        for (int it = 0; it < opt.iterations; ++it) {
          for (size_t i = 0; i < size; ++i) src[i] = pattern(size, it, i);
          auto req = must(send->isend(src.data(), size, reg_src), "isend");
          must(send->wait(req, deadline()), "send of " + std::to_string(size) + " bytes");
          two.bytes += size;
          two.ops += 1;
        }
      }
      two.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      add_phase(phases, two);

      // One-sided: B's buffer is the target; its key travels out of band (here: memory).
      auto remote = must(dev_a->import_key(reg_target.export_key()), "importing B's key");
      auto win = must(xport::Window::open(*send), "opening a window");
      Phase put{"put"}, get{"get"};
      for (size_t size : sizes) {
        for (int it = 0; it < opt.iterations; ++it) {
          for (size_t i = 0; i < size; ++i) src[i] = pattern(size, it + 1000, i);
          auto p0 = Clock::now();
          must(win->put(reg_src, 0, remote, 0, size), "put");
          must(win->quiet(deadline()), "quiet after put");
          put.seconds += std::chrono::duration<double>(Clock::now() - p0).count();
          put.bytes += size;
          put.ops += 1;
          auto g0 = Clock::now();
          must(win->get(reg_chk, 0, remote, 0, size), "get");
          must(win->quiet(deadline()), "quiet after get");
          get.seconds += std::chrono::duration<double>(Clock::now() - g0).count();
          get.bytes += size;
          get.ops += 1;
          if (std::memcmp(check.data(), src.data(), size) != 0) {
            throw Failure{"put/get data mismatch for a " + std::to_string(size) + "-byte transfer"};
          }
        }
      }
      add_phase(phases, put);
      add_phase(phases, get);
      ++rounds;
      const bool more = std::chrono::duration<double>(Clock::now() - load_start).count() <
                        opt.duration;
      src[0] = more ? 2 : 1;
      auto fin = must(send->isend(src.data(), 1, reg_src), "final isend");
      must(send->wait(fin, deadline()), "final send");
      if (!more) break;
    }
  } catch (const Failure& f) {
    error = f.what;
  }
  peer.join();
  if (!peer_error.empty()) error = error.empty() ? "peer: " + peer_error
                                                  : error + " (peer: " + peer_error + ")";

  std::ostringstream os;
  if (opt.json) {
    std::string out;
    JsonWriter w(out);
    w.begin_object()
        .field("provider", rep.caps.provider)
        .field("domain", rep.caps.domain)
        .field("reason", rep.reason)
        .field("ok", error.empty())
        .field("error", error)
        .field("rounds", rounds)
        .begin_array("phases");
    for (const auto& p : phases) {
      // Seconds and bandwidth as iostreams print a double (%.6g), as they always were.
      w.begin_object()
          .field("name", p.name)
          .field("ops", p.ops)
          .field("bytes", p.bytes)
          .field("seconds", JsonGeneral{p.seconds})
          .field("bw_bytes_per_s",
                 JsonGeneral{p.seconds > 0 ? static_cast<double>(p.bytes) / p.seconds : 0})
          .end_object();
    }
    w.end_array().begin_array("stats");
    json_stats(w, "A", dev_a->stats());
    json_stats(w, "B", dev_b->stats());
    w.end_array().end_object();
    os << out << "\n";
  } else {
    os << "xport-loopback " << xport::version() << ": provider " << rep.caps.provider
       << " domain " << rep.caps.domain << "\n  why: " << rep.reason << "\n";
    os << "sizes 1 B .. " << max << " B, " << opt.iterations << " iterations each\n\n";
    char line[160];
    std::snprintf(line, sizeof(line), "%-10s %8s %14s %10s %12s\n", "phase", "ops", "bytes",
                  "seconds", "MB/s");
    os << line;
    for (const auto& p : phases) {
      std::snprintf(line, sizeof(line), "%-10s %8llu %14llu %10.4f %12.1f\n", p.name.c_str(),
                    static_cast<unsigned long long>(p.ops),
                    static_cast<unsigned long long>(p.bytes), p.seconds,
                    p.seconds > 0 ? p.bytes / p.seconds / 1e6 : 0.0);
      os << line;
    }
    os << "\n";
    print_stats("A", dev_a->stats(), os);
    print_stats("B", dev_b->stats(), os);
    os << (error.empty() ? "\nOK: every byte verified\n" : "\nFAILED: " + error + "\n");
  }
  std::cout << os.str() << std::flush;
  if (!error.empty()) std::cerr << "xport-loopback: " << error << "\n";
  // --hold: the devices stay open, so scrapers read the final counters before they vanish.
  if (opt.hold > 0) std::this_thread::sleep_for(std::chrono::duration<double>(opt.hold));
  return error.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"xport-loopback: send/recv and put/get through every layer on this host, verified"};
  Options opt;
  std::string bytes = "4M";
  xport::tool::plain_help(app, 26);
  app.add_option("--provider", opt.provider, "libfabric provider (default: XPORT_PROVIDER, else "
                                             "shm or the best local provider)")
      ->type_name("NAME");
  app.add_option("--bytes", bytes, "largest transfer (e.g. 4M, 64K, 1000; default 4M)")
      ->type_name("SIZE");
  app.add_option("--iterations", opt.iterations, "transfers per size, 1 to 100000 (default 8)")
      ->type_name("N")
      ->check(xport::tool::number_in(1, 100000, "", true));
  app.add_flag("--json", opt.json, "one JSON object instead of tables");
  xport::tool::add_version(app, "xport-loopback");
  app.add_option("--duration", opt.duration,
                 "seconds of steady load: repeat every phase (verified) until then, then the "
                 "summary (default 0: once)")
      ->type_name("SECONDS")
      ->check(xport::tool::number_in(0, 86400, "seconds"));
  app.add_option("--hold", opt.hold,
                 "seconds to keep the devices open after the summary, so xport-exporter reads "
                 "the final counters (default 0)")
      ->type_name("SECONDS")
      ->check(xport::tool::number_in(0, 86400, "seconds"));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return xport::tool::usage_exit(app, e, "xport-loopback");
  }
  char* end = nullptr;
  unsigned long long v = std::strtoull(bytes.c_str(), &end, 10);
  std::string suf(end);
  if (suf == "K" || suf == "k") v <<= 10;
  else if (suf == "M") v <<= 20;
  else if (suf == "G") v <<= 30;
  else if (!suf.empty() || end == bytes.c_str() || v == 0) {
    std::cerr << "xport-loopback: --bytes '" << bytes << "' is not a size (examples: 8, 4K, 1M)\n";
    return 2;
  }
  if (v > (1ull << 32)) {
    std::cerr << "xport-loopback: --bytes " << bytes << " is larger than 4 GiB\n";
    return 2;
  }
  opt.max_bytes = v;
  try {
    return run(opt);
  } catch (const Failure& f) {  // set-up failed (a failure of the traffic itself is reported)
    return xport::tool::early_failure("xport-loopback", opt.json, f.what);
  }
}
