// Host-memory bandwidth through the NCCL plugin, driven as NCCL's proxy drives it: one thread
// per process polls every communicator, `window` requests of `size` bytes in flight on each (NCCL
// keeps NCCL_STEPS = 8 chunks of 512 KiB per channel with its default 4 MiB buffers), in both
// directions at once (a 2-rank all_reduce sends and receives the same amount) or one.
//   XTEST_NCCL_PLUGIN=build/plugins/nccl/libnccl-net-xport.so XPORT_PROVIDER='tcp;ofi_rxm'
//   XPORT_DOMAIN=lo build/tests/nccl_plugin/xport-nccl-plugin-tests --bench
//     [--size 512K] [--comms 2] [--window 8] [--bytes 4G] [--uni]   (one command line)
// Prints one line per direction and process: "bench <role> <provider> size=... comms=...
// window=... bytes=... seconds=... GB/s=...".
// --p2p BYTES [--iters N]: NCCL's p2p pattern (a sendrecv of BYTES each way, as nccl-tests times
// it) instead of a stream: each iteration moves BYTES each way, split over the comms in chunks of
// --size (NCCL_P2P_NET_CHUNKSIZE, 128K), at most --window (NCCL_STEPS) in flight per comm, both
// directions at once; the next iteration starts when this one's sends and receives are all
// done. Prints "p2p <role> <provider> bytes=... chunk=... comms=... window=... iters=...
// us/iter median=... mean=... min=... us/chunk=... GB/s=..." (GB/s: BYTES / median, nccl-tests'
// sendrecv bus bandwidth). --one-process: both ranks in this process, as nccl-tests -g 2 runs
// them (every comm on one plugin instance, its lanes shared), a polling thread per rank as NCCL
// has a proxy thread per GPU.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "driver.hpp"

using namespace xport::nccl_test;

namespace {

struct Options {
  size_t size = 512 * 1024;
  int comms = 2;
  int window = 8;
  uint64_t bytes = uint64_t{4} << 30;  // per direction
  bool bidir = true;
  uint64_t p2p = 0;  // --p2p: bytes per iteration and direction (0: the stream)
  int iters = 200;
  bool one_process = false;
};

uint64_t parse_size(const std::string& s) {
  size_t end = 0;
  uint64_t v = std::stoull(s, &end);
  if (end < s.size()) {
    switch (s[end]) {
      case 'K': case 'k': v <<= 10; break;
      case 'M': case 'm': v <<= 20; break;
      case 'G': case 'g': v <<= 30; break;
    }
  }
  return v;
}

Options parse(int argc, char** argv, int first) {
  Options o;
  bool sized = false;
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string("0"); };
    if (a == "--size") o.size = parse_size(next()), sized = true;
    else if (a == "--comms") o.comms = std::stoi(next());
    else if (a == "--window") o.window = std::stoi(next());
    else if (a == "--bytes") o.bytes = parse_size(next());
    else if (a == "--uni") o.bidir = false;
    else if (a == "--p2p") o.p2p = parse_size(next());
    else if (a == "--iters") o.iters = std::stoi(next());
    else if (a == "--one-process") o.one_process = true;
  }
  // (p2p chunks default to NCCL_P2P_NET_CHUNKSIZE's 128K)
  if (o.p2p > 0 && !sized) o.size = 128 * 1024;
  if (o.p2p > 0) o.size = std::min<uint64_t>(o.size, o.p2p / o.comms);
  return o;
}

struct Side {
  void* comm = nullptr;
  void* mh = nullptr;
  std::vector<uint8_t> arena;
  std::vector<void*> reqs;
  uint64_t posted = 0, done = 0;  // requests
};

int die(const std::string& why) {
  std::printf("FAIL %s\n", why.c_str());
  std::fflush(stdout);
  return 1;
}

// Listens `n` times; the handles as one line of hex.
bool listen_all(Plugin& p, int n, std::vector<void*>& listens, std::string& line) {
  listens.assign(n, nullptr);
  for (int i = 0; i < n; ++i) {
    char h[NCCL_NET_HANDLE_MAXSIZE];
    if (p.net->listen(p.ctx, 0, h, &listens[i]) != ncclSuccess) return false;
    line += ' ';  // (not " " + hex(): GCC 12 -O3 warns -Wrestrict on it)
    line += hex(h, sizeof(h));
  }
  return true;
}

std::vector<std::vector<uint8_t>> parse_handles(const std::string& line) {
  std::vector<std::vector<uint8_t>> out;
  for (size_t pos = line.find(' '); pos != std::string::npos && pos + 1 < line.size();) {
    size_t sp = line.find(' ', pos + 1);
    out.push_back(xport::test::from_hex(line.substr(pos + 1, sp == std::string::npos
                                                                 ? std::string::npos
                                                                 : sp - pos - 1)));
    out.back().resize(NCCL_NET_HANDLE_MAXSIZE, 0);
    pos = sp;
  }
  return out;
}

// Connects to `handles` and accepts on `listens`, polled together from this thread.
bool connect_all(Plugin& p, std::vector<std::vector<uint8_t>>& handles,
                 std::vector<void*>& listens, std::vector<Side>& sends, std::vector<Side>& recvs) {
  sends.resize(handles.size());
  recvs.resize(listens.size());
  return poll_until([&] {
    bool all = true;
    for (size_t i = 0; i < handles.size(); ++i) {
      if (sends[i].comm == nullptr &&
          p.net->connect(p.ctx, 0, handles[i].data(), &sends[i].comm, nullptr) != ncclSuccess) {
        return true;
      }
      all = all && sends[i].comm != nullptr;
    }
    for (size_t i = 0; i < listens.size(); ++i) {
      if (recvs[i].comm == nullptr &&
          p.net->accept(listens[i], &recvs[i].comm, nullptr) != ncclSuccess) {
        return true;
      }
      all = all && recvs[i].comm != nullptr;
    }
    return all;
  }, 60s);
}

// The proxy loop: every send and receive kept `window` deep until `bytes` moved each way.
std::string run(Plugin& p, const Options& o, std::vector<Side>& sends, std::vector<Side>& recvs,
                double* send_s, double* recv_s) {
  const uint64_t per_comm = (o.bytes / o.size + o.comms - 1) / o.comms;
  for (auto* v : {&sends, &recvs}) {
    for (Side& s : *v) {
      s.arena.assign(o.size * o.window, 1);
      s.reqs.assign(o.window, nullptr);
      if (p.net->regMr(s.comm, s.arena.data(), s.arena.size(), NCCL_PTR_HOST, &s.mh) !=
          ncclSuccess) {
        return "regMr: " + warned_since(0);
      }
    }
  }
  const auto t0 = Clock::now();
  auto until = t0 + 600s;
  bool sends_done = sends.empty(), recvs_done = recvs.empty();
  uint64_t events = 0, seen = 0;  // posts and completions: a pass with none yields, as NCCL's
                                  // proxy thread does when idle
  while (!sends_done || !recvs_done) {
    if (Clock::now() > until) return "no completion within 600 s";
    if (events == seen) std::this_thread::yield();
    seen = events;
    if (!sends_done) {
      sends_done = true;
      for (Side& s : sends) {
        if (s.posted < per_comm && s.posted - s.done < static_cast<uint64_t>(o.window)) {
          void*& r = s.reqs[s.posted % o.window];
          if (p.net->isend(s.comm, s.arena.data() + (s.posted % o.window) * o.size, o.size, 0,
                           s.mh, nullptr, &r) != ncclSuccess) {
            return "isend: " + warned_since(0);
          }
          if (r != nullptr) ++s.posted, ++events;
        }
        if (s.done < s.posted) {
          int d = 0, size = 0;
          if (p.net->test(s.reqs[s.done % o.window], &d, &size) != ncclSuccess) {
            return "test (send): " + warned_since(0);
          }
          if (d) ++s.done, ++events;
        }
        sends_done = sends_done && s.done == per_comm;
      }
      if (sends_done) *send_s = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    if (!recvs_done) {
      recvs_done = true;
      for (Side& s : recvs) {
        if (s.posted < per_comm && s.posted - s.done < static_cast<uint64_t>(o.window)) {
          void* data = s.arena.data() + (s.posted % o.window) * o.size;
          size_t size = o.size;
          int tag = 0;
          void*& r = s.reqs[s.posted % o.window];
          if (p.net->irecv(s.comm, 1, &data, &size, &tag, &s.mh, nullptr, &r) != ncclSuccess) {
            return "irecv: " + warned_since(0);
          }
          if (r != nullptr) ++s.posted, ++events;
        }
        if (s.done < s.posted) {
          int d = 0, size = 0;
          if (p.net->test(s.reqs[s.done % o.window], &d, &size) != ncclSuccess) {
            return "test (recv): " + warned_since(0);
          }
          if (d) {
            if (static_cast<size_t>(size) != o.size) return "a receive of the wrong size";
            ++s.done;
            ++events;
          }
        }
        recvs_done = recvs_done && s.done == per_comm;
      }
      if (recvs_done) *recv_s = std::chrono::duration<double>(Clock::now() - t0).count();
    }
  }
  return "";
}

// --p2p: what NCCL's proxy does for a sendrecv of o.p2p bytes each way, iteration after iteration
// (nccl-tests' loop): per comm, the iteration's chunks posted in order with at most `window` in
// flight, the oldest tested, every comm of both directions in one polling loop.
struct P2pStats {
  std::vector<double> us;  // per iteration
  uint64_t refused = 0;    // isend / irecv calls that gave no request (NCCL calls again)
  uint64_t tests = 0;      // test() calls
  uint64_t chunks = 0;     // requests completed
};

std::string run_p2p(Plugin& p, const Options& o, std::vector<Side>& sends,
                    std::vector<Side>& recvs, P2pStats& st) {
  const uint64_t per_comm = o.p2p / o.comms;
  const uint64_t chunks = (per_comm + o.size - 1) / o.size;
  auto chunk_size = [&](uint64_t step) {
    const uint64_t k = step % chunks;
    return static_cast<size_t>(std::min<uint64_t>(o.size, per_comm - k * o.size));
  };
  for (auto* v : {&sends, &recvs}) {
    for (Side& s : *v) {
      s.arena.assign(o.size * o.window, 1);
      s.reqs.assign(o.window, nullptr);
      if (p.net->regMr(s.comm, s.arena.data(), s.arena.size(), NCCL_PTR_HOST, &s.mh) !=
          ncclSuccess) {
        return "regMr: " + warned_since(0);
      }
    }
  }
  const auto until = Clock::now() + 600s;
  for (int it = 0; it < o.iters; ++it) {
    const uint64_t goal = (it + 1) * chunks;
    const auto t0 = Clock::now();
    bool all = false;
    uint64_t events = 0, seen = 0;
    while (!all) {
      if (Clock::now() > until) return "no completion within 600 s";
      if (events == seen) std::this_thread::yield();  // (NCCL's proxy yields when idle)
      seen = events;
      all = true;
      for (Side& s : sends) {
        if (s.posted < goal && s.posted - s.done < static_cast<uint64_t>(o.window)) {
          void*& r = s.reqs[s.posted % o.window];
          if (p.net->isend(s.comm, s.arena.data() + (s.posted % o.window) * o.size,
                           chunk_size(s.posted), 0, s.mh, nullptr, &r) != ncclSuccess) {
            return "isend: " + warned_since(0);
          }
          if (r != nullptr) ++s.posted, ++events;
          else ++st.refused;
        }
        if (s.done < s.posted) {
          int d = 0, size = 0;
          if (p.net->test(s.reqs[s.done % o.window], &d, &size) != ncclSuccess) {
            return "test (send): " + warned_since(0);
          }
          ++st.tests;
          if (d) ++s.done, ++events;
        }
        all = all && s.done == goal;
      }
      for (Side& s : recvs) {
        if (s.posted < goal && s.posted - s.done < static_cast<uint64_t>(o.window)) {
          void* data = s.arena.data() + (s.posted % o.window) * o.size;
          size_t size = o.size;
          int tag = 0;
          void*& r = s.reqs[s.posted % o.window];
          if (p.net->irecv(s.comm, 1, &data, &size, &tag, &s.mh, nullptr, &r) != ncclSuccess) {
            return "irecv: " + warned_since(0);
          }
          if (r != nullptr) ++s.posted, ++events;
          else ++st.refused;
        }
        if (s.done < s.posted) {
          int d = 0, size = 0;
          if (p.net->test(s.reqs[s.done % o.window], &d, &size) != ncclSuccess) {
            return "test (recv): " + warned_since(0);
          }
          ++st.tests;
          if (d) {
            if (static_cast<size_t>(size) != chunk_size(s.done)) {
              return "a receive of the wrong size";
            }
            ++s.done;
            ++events;
          }
        }
        all = all && s.done == goal;
      }
    }
    st.us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  st.chunks = o.iters * chunks * (sends.size() + recvs.size());
  return "";
}

void report_p2p(const char* role, const Options& o, const P2pStats& st) {
  const char* prov = std::getenv("XPORT_PROVIDER");
  std::vector<double> us = st.us;
  // The first tenth is warm-up (connections' first writes, pools growing).
  us.erase(us.begin(), us.begin() + static_cast<long>(us.size() / 10));
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double u : us) sum += u;
  const double med = us[us.size() / 2];
  const uint64_t chunks = (o.p2p / o.comms + o.size - 1) / o.size;
  std::printf("p2p %s %s bytes=%llu chunk=%zu comms=%d window=%d iters=%zu us/iter median=%.1f "
              "mean=%.1f min=%.1f us/chunk=%.1f GB/s=%.3f refused/req=%.2f tests/req=%.1f\n", role,
              prov ? prov : "(default)", static_cast<unsigned long long>(o.p2p), o.size, o.comms,
              o.window, us.size(), med, sum / us.size(), us.front(), med / chunks,
              o.p2p / med / 1e3, static_cast<double>(st.refused) / st.chunks,
              static_cast<double>(st.tests) / st.chunks);
  std::fflush(stdout);
}

void report(const char* role, const Options& o, uint64_t bytes, double seconds) {
  const char* prov = std::getenv("XPORT_PROVIDER");
  std::printf("bench %s %s size=%zu comms=%d window=%d bytes=%llu seconds=%.3f GB/s=%.3f\n", role,
              prov ? prov : "(default)", o.size, o.comms, o.window,
              static_cast<unsigned long long>(bytes), seconds, bytes / seconds / 1e9);
  std::fflush(stdout);
}

// What one direction moves: every communicator gets an equal whole number of messages.
uint64_t bytes_moved(const Options& o) {
  return (o.bytes / o.size + o.comms - 1) / o.comms * o.comms * o.size;
}

// Deregisters and closes every communicator and listener.
void close_all_but_unload(Plugin& p, std::vector<Side>& sends, std::vector<Side>& recvs,
                          std::vector<void*>& listens) {
  for (auto* v : {&sends, &recvs}) {
    for (Side& s : *v) {
      p.net->deregMr(s.comm, s.mh);
      if (v == &sends) p.net->closeSend(s.comm);
      else p.net->closeRecv(s.comm);
    }
  }
  for (void* l : listens) p.net->closeListen(l);
}

// ... and unloads the plugin.
void close_all(Plugin& p, std::vector<Side>& sends, std::vector<Side>& recvs,
               std::vector<void*>& listens) {
  close_all_but_unload(p, sends, recvs, listens);
  p.unload();
}

int bench_peer(const Options& o) {
  Plugin p;
  if (!p.load()) return die(p.error);
  std::string line;
  if (!std::getline(std::cin, line)) return die("no handles");
  auto handles = parse_handles(line);
  std::vector<void*> listens;
  std::string mine = "HANDLES";
  if ((o.bidir || o.p2p > 0) && !listen_all(p, o.comms, listens, mine)) {
    return die("listen: " + warned_since(0));
  }
  std::printf("%s\n", mine.c_str());
  std::fflush(stdout);
  std::vector<Side> sends, recvs;
  if (!connect_all(p, handles, listens, sends, recvs)) return die("connect: " + warned_since(0));
  std::printf("READY\n");
  std::fflush(stdout);
  if (!std::getline(std::cin, line)) return die("no start");
  if (o.p2p > 0) {
    P2pStats st;
    std::string err = run_p2p(p, o, sends, recvs, st);
    if (!err.empty()) return die(err);
    report_p2p("peer", o, st);
    std::getline(std::cin, line);
    close_all(p, sends, recvs, listens);
    return 0;
  }
  double ss = 0, rs = 0;
  std::string err = run(p, o, sends, recvs, &ss, &rs);
  if (!err.empty()) return die(err);
  const uint64_t moved = bytes_moved(o);
  report("peer-send", o, moved, ss);
  if (o.bidir) report("peer-recv", o, moved, rs);
  std::getline(std::cin, line);
  close_all(p, sends, recvs, listens);
  return 0;
}

// --p2p --one-process: rank r's send comm i connects to rank 1-r's listener i; both ranks' comms
// connected in one polling loop, then a thread per rank runs the p2p loop.
int bench_one_process(const Options& o) {
  Plugin p;
  if (!p.load()) return die(p.error);
  std::vector<void*> listens[2];
  std::string lines[2] = {"HANDLES", "HANDLES"};
  for (int r = 0; r < 2; ++r) {
    if (!listen_all(p, o.comms, listens[r], lines[r])) return die("listen: " + warned_since(0));
  }
  auto handles = parse_handles(lines[1]);  // rank 0's connects, then rank 1's
  for (auto& h : parse_handles(lines[0])) handles.push_back(h);
  std::vector<void*> all_listens = listens[0];
  all_listens.insert(all_listens.end(), listens[1].begin(), listens[1].end());
  std::vector<Side> sends, recvs;
  if (!connect_all(p, handles, all_listens, sends, recvs)) {
    return die("connect: " + warned_since(0));
  }
  std::vector<Side> rank_sends[2], rank_recvs[2];
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < o.comms; ++i) {
      rank_sends[r].push_back(std::move(sends[r * o.comms + i]));
      rank_recvs[r].push_back(std::move(recvs[r * o.comms + i]));
    }
  }
  P2pStats st[2];
  std::string err[2];
  std::thread ranks[2];
  for (int r = 0; r < 2; ++r) {
    ranks[r] = std::thread([&, r] { err[r] = run_p2p(p, o, rank_sends[r], rank_recvs[r], st[r]); });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    if (!err[r].empty()) return die("rank " + std::to_string(r) + ": " + err[r]);
  }
  report_p2p("rank0", o, st[0]);
  report_p2p("rank1", o, st[1]);
  for (int r = 0; r < 2; ++r) close_all_but_unload(p, rank_sends[r], rank_recvs[r], listens[r]);
  p.unload();
  return 0;
}

}  // namespace

int bench_main(int argc, char** argv) {
  const bool peer = std::string(argv[1]) == "--bench-peer";
  Options o = parse(argc, argv, 2);
  if (peer) return bench_peer(o);
  if (o.p2p > 0 && o.one_process) return bench_one_process(o);
  const char* self = std::getenv("XTEST_SELF");
  std::string me = self != nullptr ? self : argv[0];
  std::vector<std::string> args = {me, "--bench-peer"};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  auto child = xport::test::ChildProcess::spawn(args, {});
  if (!child.started()) return die("cannot start the peer process");
  Plugin p;
  if (!p.load()) return die(p.error);
  std::vector<void*> listens;
  std::string line = "HANDLES";
  if (!listen_all(p, o.comms, listens, line)) return die("listen: " + warned_since(0));
  child.write_line(line);
  std::string err;
  std::string theirs = child.read_line(60000, &err);
  if (theirs.rfind("HANDLES", 0) != 0) return die("peer: " + theirs + err);
  auto handles = parse_handles(theirs);
  std::vector<Side> sends, recvs;
  if (!connect_all(p, handles, listens, sends, recvs)) return die("connect: " + warned_since(0));
  std::string ready = child.read_line(60000, &err);
  if (ready != "READY") return die("peer: " + ready + err);
  child.write_line("GO");
  if (o.p2p > 0) {
    P2pStats st;
    err = run_p2p(p, o, sends, recvs, st);
    if (!err.empty()) return die(err);
    report_p2p("self", o, st);
    std::string l = child.read_line(600000, &err);
    std::printf("%s\n", l.empty() ? ("peer: " + err).c_str() : l.c_str());
    child.write_line("DONE");
    child.wait_exit(30000);
    close_all(p, sends, recvs, listens);
    return 0;
  }
  double ss = 0, rs = 0;
  err = run(p, o, sends, recvs, &ss, &rs);
  if (!err.empty()) return die(err);
  const uint64_t moved = bytes_moved(o);
  report("recv", o, moved, rs);
  if (o.bidir) report("send", o, moved, ss);
  for (int i = 0; i < (o.bidir ? 2 : 1); ++i) {
    std::string l = child.read_line(600000, &err);
    std::printf("%s\n", l.empty() ? ("peer: " + err).c_str() : l.c_str());
  }
  child.write_line("DONE");
  child.wait_exit(30000);
  close_all(p, sends, recvs, listens);
  return 0;
}
