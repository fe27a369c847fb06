// A GIN team of N ranks (XTEST_GIN_TEAM_RANKS, default 64), each a process of its own, driven
// through the plugin's GIN table as NCCL 2.28.9 drives it (issue 41 item 5): rank 0 (the test)
// re-executes this binary with --gin-team-rank for ranks 1..N-1; a star of pipes through rank 0
// carries the handles NCCL would allgather and the barriers. Every rank listens, connects with
// every rank's handle (NCCL's collective connect), registers symmetric host memory and runs a
// put+signal alltoall twice: a 4 KiB slot to every rank, itself included, with iputSignal (INC),
// every request tested to completion with ginProgress as NCCL's proxy does; then it waits until its
// own signal words show all N ranks' puts and checks every byte. A rank that fails says why on
// its pipe; rank 0 collects and asserts. Rank 0 prints the team's connect time. meson.build
// also runs it with XPORT_CQ_ENTRIES=64: 64 window streams into 48 entries of CQ room (credits
// granted on demand, docs/semantics.md "Credits").
// tcp;ofi_rxm runs with small rxm/tcp queues and buffers (meson.build: FI_OFI_RXM_BUFFER_SIZE=4096,
// FI_OFI_RXM_RX_SIZE=64, FI_OFI_RXM_TX_SIZE=64, FI_OFI_RXM_MSG_RX_SIZE=16,
// FI_OFI_RXM_MSG_TX_SIZE=16, FI_TCP_RX_SIZE=64, FI_TCP_TX_SIZE=64): the 64 processes, each with
// connections to every rank, took about 1.3 GB with them here, about 10 GB without.
#include <gtest/gtest.h>

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "../integration/harness.hpp"
#include "driver.hpp"
#include "gin_fixture.hpp"

namespace {

using namespace xport::nccl_test;
using namespace std::chrono_literals;
using Idle = std::function<void()>;

constexpr size_t kSlot = 4096;  // bytes each rank puts to each rank per round
constexpr int kRounds = 2;
// The most any phase may take (connect's own deadline is XPORT_TIMEOUT_MS, 90 s in meson.build:
// 64 ranks connected within 11 s on this loaded 2-core machine, 30 s would be a thin margin).
constexpr auto kPhase = 120s;

int team_ranks() {
  const char* v = std::getenv("XTEST_GIN_TEAM_RANKS");
  const int n = v != nullptr ? std::atoi(v) : 64;
  return n >= 1 && n <= 1024 ? n : 64;
}

// Names round, source and target: a slot that lands in the wrong place differs.
uint64_t pattern(int round, int src, int dst) {
  return (static_cast<uint64_t>(round) << 40) | (static_cast<uint64_t>(src) << 20) |
         static_cast<uint64_t>(dst);
}
// A round's slot for rank r (in the source: to r; in the receive area: from r).
size_t slot(int round, int n, int r) { return (static_cast<size_t>(round) * n + r) * kSlot; }

int64_t now_us() {  // CLOCK_MONOTONIC: comparable across the team's processes
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch())
      .count();
}

uint64_t load(const uint64_t* w) {
  return std::atomic_ref<const uint64_t>(*w).load(std::memory_order_acquire);
}

struct Member {
  Plugin* p = nullptr;
  int rank = 0, n = 0;
  void* listen = nullptr;
  void* coll = nullptr;
  std::vector<uint8_t> src, dst;
  std::vector<uint64_t> sig;  // word s: signals from rank s (one INC a round)
  void *src_mh = nullptr, *dst_mh = nullptr, *sig_mh = nullptr;
  void progress() const {
    if (coll != nullptr) p->gin->ginProgress(coll);
  }
};

std::string who(const Member& m) { return "rank " + std::to_string(m.rank) + ": "; }

std::string listen(Member& m, std::vector<uint8_t>* handle) {
  int ndev = 0;
  if (m.p->gin->devices(&ndev) != ncclSuccess || ndev < 1)
    return who(m) + "devices: " + warned_since(0);
  handle->assign(NCCL_NET_HANDLE_MAXSIZE, 0);
  if (m.p->gin->listen(m.p->gin_ctx, 0, handle->data(), &m.listen) != ncclSuccess) {
    return who(m) + "listen: " + warned_since(0);
  }
  return "";
}

// NCCL's collective connect: every rank's handle, in rank order, to every rank.
std::string connect(Member& m, const std::vector<uint8_t>& all) {
  std::vector<void*> handles(static_cast<size_t>(m.n));
  for (int r = 0; r < m.n; ++r) {
    handles[static_cast<size_t>(r)] =
        const_cast<uint8_t*>(all.data()) + r * NCCL_NET_HANDLE_MAXSIZE;
  }
  if (m.p->gin->connect(m.p->gin_ctx, handles.data(), m.n, m.rank, m.listen, &m.coll) !=
          ncclSuccess ||
      m.coll == nullptr) {
    return who(m) + "connect: " + warned_since(0);
  }
  if (m.p->gin->closeListen(m.listen) != ncclSuccess)
    return who(m) + "closeListen: " + warned_since(0);
  m.listen = nullptr;
  return "";
}

// Collective, in the same order on every rank.
std::string register_all(Member& m) {
  ncclGin_v11_t* g = m.p->gin;
  m.src.assign(slot(kRounds, m.n, 0), 0);
  m.dst.assign(slot(kRounds, m.n, 0), 0);
  m.sig.assign(static_cast<size_t>(m.n), 0);
  void* gh = nullptr;
  if (g->regMrSym(m.coll, m.src.data(), m.src.size(), NCCL_PTR_HOST, 0, &m.src_mh, &gh) !=
          ncclSuccess ||
      g->regMrSym(m.coll, m.dst.data(), m.dst.size(), NCCL_PTR_HOST, 0, &m.dst_mh, &gh) !=
          ncclSuccess ||
      g->regMrSym(m.coll, m.sig.data(), m.sig.size() * 8, NCCL_PTR_HOST, NCCL_NET_MR_FLAG_FORCE_SO,
                  &m.sig_mh, &gh) != ncclSuccess) {
    return who(m) + "regMrSym: " + warned_since(0);
  }
  return "";
}

// Every byte of every round up to `round` from every rank in place?
std::string verify(const Member& m, int round) {
  for (int r = 0; r <= round; ++r) {
    for (int s = 0; s < m.n; ++s) {
      const long long bad =
          xport::test::first_mismatch(m.dst.data() + slot(r, m.n, s), kSlot, pattern(r, s, m.rank));
      if (bad >= 0) {
        return who(m) + "round " + std::to_string(r) + ": rank " + std::to_string(s) +
               "'s slot differs at byte " + std::to_string(bad) + " (checked after round " +
               std::to_string(round) + ")";
      }
    }
  }
  return "";
}

// One alltoall: a slot to every rank (from the next one round, itself last) with iputSignal,
// every request tested until done with ginProgress between passes, until every rank's signal
// word here reads round + 1; then every byte checked.
std::string alltoall(Member& m, int round) {
  ncclGin_v11_t* g = m.p->gin;
  for (int t = 0; t < m.n; ++t) {
    xport::test::fill(m.src.data() + slot(round, m.n, t), kSlot, pattern(round, m.rank, t));
  }
  std::vector<void*> reqs;
  for (int i = 1; i <= m.n; ++i) {
    const int t = (m.rank + i) % m.n;
    void* req = nullptr;
    if (g->iputSignal(m.coll, slot(round, m.n, t), m.src_mh, kSlot, slot(round, m.n, m.rank),
                      m.dst_mh, static_cast<uint32_t>(t), 8 * static_cast<uint64_t>(m.rank),
                      m.sig_mh, 0, NCCL_NET_SIGNAL_OP_INC, &req) != ncclSuccess ||
        req == nullptr) {
      return who(m) + "round " + std::to_string(round) + ": iputSignal to rank " +
             std::to_string(t) + ": " + warned_since(0);
    }
    reqs.push_back(req);
  }
  const uint64_t want = static_cast<uint64_t>(round) + 1;
  const auto until = Clock::now() + kPhase;
  for (;;) {
    for (size_t i = 0; i < reqs.size();) {
      int done = 0;
      if (g->test(m.coll, reqs[i], &done) != ncclSuccess)
        return who(m) + "test: " + warned_since(0);
      if (done) {
        reqs[i] = reqs.back();
        reqs.pop_back();
      } else {
        ++i;
      }
    }
    if (g->ginProgress(m.coll) != ncclSuccess) return who(m) + "ginProgress: " + warned_since(0);
    int in = 0;
    for (int s = 0; s < m.n; ++s) {
      const uint64_t v = load(&m.sig[static_cast<size_t>(s)]);
      if (v > want) {
        return who(m) + "round " + std::to_string(round) + ": rank " + std::to_string(s) +
               "'s signal word is " + std::to_string(v) + ", more than the " +
               std::to_string(want) + " it was sent";
      }
      in += v == want;
    }
    if (reqs.empty() && in == m.n) break;
    if (Clock::now() > until) {
      std::string missing;
      for (int s = 0; s < m.n && missing.size() < 200; ++s) {
        if (load(&m.sig[static_cast<size_t>(s)]) != want) missing += " " + std::to_string(s);
      }
      return who(m) + "round " + std::to_string(round) + " not done within " +
             std::to_string(kPhase.count()) + " s: " + std::to_string(reqs.size()) +
             " requests not done, signals of " + std::to_string(m.n - in) + " ranks missing (" +
             missing + " ): " + warned_since(0);
    }
    std::this_thread::yield();  // (2 shared cores, N processes)
  }
  return verify(m, round);
}

std::string close(Member& m) {
  std::string e;
  ncclGin_v11_t* g = m.p->gin;
  for (void* mh : {m.src_mh, m.dst_mh, m.sig_mh}) {
    if (mh != nullptr && g->deregMrSym(m.coll, mh) != ncclSuccess && e.empty()) {
      e = who(m) + "deregMrSym: " + warned_since(0);
    }
  }
  if (m.coll != nullptr && g->closeColl(m.coll) != ncclSuccess && e.empty()) {
    e = who(m) + "closeColl: " + warned_since(0);
  }
  if (m.listen != nullptr) g->closeListen(m.listen);
  m.coll = m.listen = nullptr;
  return e;
}

// A child's next line from rank 0 within kPhase (`idle` between short polls), or "" and *err.
std::string from_rank0(std::string& buf, std::string* err, const Idle& idle) {
  const auto until = Clock::now() + kPhase;
  for (;;) {
    const size_t nl = buf.find('\n');
    if (nl != std::string::npos) {
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      return line;
    }
    if (Clock::now() > until) {
      *err = "no line from rank 0 within " + std::to_string(kPhase.count()) + " s";
      return "";
    }
    pollfd in{0, POLLIN, 0};
    if (poll(&in, 1, idle ? 1 : 100) <= 0) {
      if (idle) idle();
      continue;
    }
    char b[65536];
    const ssize_t k = ::read(0, b, sizeof(b));
    if (k <= 0) {
      *err = "stdin ended (rank 0 gone)";
      return "";
    }
    buf.append(b, static_cast<size_t>(k));
  }
}

void say(const std::string& line) { std::cout << line << std::endl; }

// Rank r of n (a process of its own): every step's outcome on stdout, a line each.
int team_rank_main(int rank, int n) {
  Plugin p;
  if (!p.load_gin()) {
    say("FAILED rank " + std::to_string(rank) + ": " + p.error);
    return 1;
  }
  Member m;
  m.p = &p;
  m.rank = rank;
  m.n = n;
  std::string buf, err;
  auto run = [&]() -> std::string {
    std::vector<uint8_t> handle;
    std::string e = listen(m, &handle);
    if (!e.empty()) return e;
    say("HANDLE " + xport::test::to_hex(handle));
    const std::string line = from_rank0(buf, &err, {});
    if (line.rfind("HANDLES ", 0) != 0) return "STOP";
    e = connect(m, xport::test::from_hex(line.substr(8)));
    if (!e.empty()) return e;
    say("CONNECTED " + std::to_string(now_us()));
    if (!(e = register_all(m)).empty()) return e;
    for (int round = 0; round < kRounds; ++round) {
      e = alltoall(m, round);
      say("ROUND " + std::to_string(round) + " " + (e.empty() ? "OK" : e));
      if (!e.empty()) return e;
      // Barrier: peers may still need this rank's progress (their signals applied here).
      if (from_rank0(buf, &err, [&] { m.progress(); }) != "GO") return "STOP";
    }
    return "";
  };
  std::string e = run();
  const std::string c = close(m);
  if (e.empty()) e = c;
  p.unload();
  if (e == "STOP") e = "stopped by rank 0 (" + (err.empty() ? "another rank failed" : err) + ")";
  say(e.empty() ? "PASSED" : "FAILED " + e);
  return e.empty() ? 0 : 1;
}

class GinTeamTest : public GinFixture {};

// What a child said instead of `want` (a prefix), or "" when it said it.
// `until`: one deadline for the phase, whichever child is late.
std::string expect_line(xport::test::ChildProcess& c, int rank, const std::string& want,
                        std::string* line, const Idle& idle, Clock::time_point until) {
  std::string err;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
  *line = c.read_line(std::max<int>(1, static_cast<int>(left.count())), &err, idle);
  if (line->rfind(want, 0) == 0) return "";
  return "rank " + std::to_string(rank) + " said '" + *line + "' ('" + want + "...' expected) " +
         err;
}

// The first few of what went wrong, rank by rank (often every rank fails once one has).
std::string summary(const std::vector<std::string>& failed) {
  std::string s = std::to_string(failed.size()) + " failure(s):";
  for (size_t i = 0; i < failed.size() && i < 3; ++i) s += "\n  " + failed[i];
  return s;
}

TEST_P(GinTeamTest, PutSignalAlltoallOfNRanksEveryByteVerified) {
  const char* self = std::getenv("XTEST_SELF");
  ASSERT_NE(self, nullptr) << "XTEST_SELF (this test binary's path) is not set";
  const int n = team_ranks();
  std::vector<std::string> env = {std::string("XPORT_PROVIDER=") + GetParam().provider};
  if (*GetParam().domain != 0) env.push_back(std::string("XPORT_DOMAIN=") + GetParam().domain);
  std::vector<xport::test::ChildProcess> kids;
  kids.reserve(static_cast<size_t>(n));
  for (int r = 1; r < n; ++r) {
    kids.push_back(xport::test::ChildProcess::spawn(
        {self, "--gin-team-rank", std::to_string(r), std::to_string(n)}, env));
    ASSERT_TRUE(kids.back().started()) << "rank " << r;
  }
  auto kid = [&](int r) -> xport::test::ChildProcess& { return kids[static_cast<size_t>(r - 1)]; };
  Member m;
  m.p = &p_;
  m.n = n;
  std::vector<std::string> failed;  // what went wrong, rank by rank
  // Tells every child to stop and collects what each says last.
  auto stop_all = [&] {
    for (int r = 1; r < n; ++r) kid(r).write_line("STOP");
    const auto until = Clock::now() + kPhase;
    for (int r = 1; r < n; ++r) {
      std::string line;
      for (int i = 0; i < 4 && line.rfind("FAILED", 0) != 0 && line != "PASSED"; ++i) {
        std::string e = expect_line(
            kid(r), r, "FAILED", &line, [&] { m.progress(); }, until);
        if (!e.empty() && line.empty()) break;
      }
      // (its own failure; not the "stopped" of one that only heard STOP)
      if (line.rfind("FAILED", 0) == 0 && line.find("stopped by rank 0") == std::string::npos) {
        failed.push_back(line);
      }
    }
  };
  std::vector<uint8_t> all;
  std::string e = listen(m, &all);
  ASSERT_EQ(e, "");
  all.resize(static_cast<size_t>(n) * NCCL_NET_HANDLE_MAXSIZE);
  auto until = Clock::now() + kPhase;
  for (int r = 1; r < n; ++r) {
    std::string line;
    e = expect_line(kid(r), r, "HANDLE ", &line, {}, until);
    if (!e.empty()) {
      failed.push_back(e);
      continue;
    }
    const std::vector<uint8_t> h = xport::test::from_hex(line.substr(7));
    if (h.size() != NCCL_NET_HANDLE_MAXSIZE) {
      failed.push_back("rank " + std::to_string(r) + "'s handle");
    } else {
      std::copy(h.begin(), h.end(), all.begin() + r * NCCL_NET_HANDLE_MAXSIZE);
    }
  }
  if (!failed.empty()) {
    stop_all();
    FAIL() << summary(failed);
  }
  // The allgather's result to every rank, then rank 0's own connect.
  const std::string handles = "HANDLES " + xport::test::to_hex(all);
  const int64_t t0 = now_us();
  for (int r = 1; r < n; ++r) kid(r).write_line(handles);
  e = connect(m, all);
  const int64_t t_rank0 = now_us() - t0;
  const Idle idle = [&] { m.progress(); };
  int64_t t_last = t_rank0;
  until = Clock::now() + kPhase;
  for (int r = 1; r < n && e.empty(); ++r) {
    std::string line;
    e = expect_line(kid(r), r, "CONNECTED ", &line, idle, until);
    if (e.empty()) t_last = std::max<int64_t>(t_last, std::stoll(line.substr(10)) - t0);
  }
  if (e.empty()) e = register_all(m);
  if (!e.empty()) {
    failed.push_back(e);
    stop_all();
    close(m);
    FAIL() << summary(failed);
  }
  std::printf(
      "GIN team of %d ranks on %s: rank 0 connected in %.1f ms, every rank within %.1f ms "
      "of the handles going out\n",
      n, GetParam().provider, t_rank0 / 1000.0, t_last / 1000.0);
  for (int round = 0; round < kRounds && failed.empty(); ++round) {
    const int64_t start = now_us();
    e = alltoall(m, round);
    if (!e.empty()) failed.push_back(e);
    until = Clock::now() + kPhase;
    for (int r = 1; r < n; ++r) {
      std::string line;
      const std::string ok = "ROUND " + std::to_string(round) + " OK";
      e = expect_line(kid(r), r, ok, &line, idle, until);
      if (!e.empty()) failed.push_back(line.empty() ? e : line);
    }
    if (!failed.empty()) break;
    std::printf(
        "  round %d: %d x %d puts of %zu bytes with signals, every byte verified, all ranks "
        "through in %.1f ms\n",
        round, n, n, kSlot, (now_us() - start) / 1000.0);
    for (int r = 1; r < n; ++r) kid(r).write_line("GO");
  }
  if (!failed.empty()) {
    stop_all();
    close(m);
    FAIL() << summary(failed);
  }
  EXPECT_EQ(close(m), "");
  until = Clock::now() + kPhase;
  for (int r = 1; r < n; ++r) {
    std::string line;
    EXPECT_EQ(expect_line(kid(r), r, "PASSED", &line, {}, until), "");
    EXPECT_EQ(kid(r).wait_exit(30000), 0) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Providers, GinTeamTest, gin_cases(), gin_case_name);

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 4 && std::string(argv[1]) == "--gin-team-rank") {
    return team_rank_main(std::atoi(argv[2]), std::atoi(argv[3]));
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
