// The host API GPU backends share (xport/gpu_host.hpp) on every provider: three ranks (threads,
// each with its own GpuHost) connect all-to-all, register symmetric regions, and each rank's
// proxy backend context carries put_signals to every rank, its own included (a CPU producer stands in for the
// kernels, the stand-in CUDA driver for the GPU); a peer that never joins ends connect with a
// timeout naming what is missing; two teams forming at once on one listener each get their own
// connections, and a stranger claiming a rank is refused; two ranks of one team form it from
// one host; lanes are devices of their own, on which teams form from handles gathered over
// lane 0's; the direct backend is refused by name.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "../unit/gpu/fake_driver.hpp"
#include "gpu/proxy_ring.hpp"
#include "harness.hpp"
#include "initiator.hpp"
#include "provider_fixture.hpp"
#include "xport/gpu_host.hpp"

namespace xport {
namespace {

using namespace std::chrono_literals;
using gpu_ring::Descriptor;
using gpu_ring::Op;

class GpuHostTest : public test::ProviderTest {
 protected:
  test::FakeGpuScope gpu_;
};

// A host per rank (each its own process, in a thread here), listening on device 0: its handle.
void open_ranks(std::vector<std::unique_ptr<GpuHost>>& hosts,
                std::vector<ConnectionHandle>& handles) {
  for (size_t r = 0; r < hosts.size(); ++r) {
    auto h = GpuHost::init();
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    hosts[r] = std::move(h).value();
    ASSERT_GE(hosts[r]->devices(), 1);
    auto l = hosts[r]->listen(0);
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    handles[r] = *l;
  }
}

// n ranks of one host, a thread each: a listener of its own and its handle, data (n slots of
// len) and n signal words per rank, and what failed.
struct HostRanks {
  HostRanks(int n, size_t len)
      : listeners(n), handles(n), data(n, std::vector<uint8_t>(n * len, 0)),
        signals(n, std::vector<uint64_t>(n, 0)), failures(n) {}
  std::vector<std::unique_ptr<Listener>> listeners;
  std::vector<ConnectionHandle> handles;
  std::vector<std::vector<uint8_t>> data;
  std::vector<std::vector<uint64_t>> signals;
  std::vector<std::string> failures;
};

// Every rank's listener on device `index`, and its handle.
void open_listeners(GpuHost& host, int index, HostRanks& k) {
  for (size_t r = 0; r < k.listeners.size(); ++r) {
    auto l = host.open_listener(index);
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    k.listeners[r] = std::move(l).value();
    k.handles[r] = k.listeners[r]->handle();
  }
}

// Rank r of `team` (n ranks): registers data (n slots of len) and n signal words, puts its slot
// (filled with `tag + r`) with a signal to every rank, itself included, waits for every rank's
// signal, quiets, and stays until every rank is done with its memory. "" or what failed.
std::string put_to_each_other(GpuHost& host, GpuTeam& team, int r, int n, size_t len,
                              std::vector<uint8_t>& data, std::vector<uint64_t>& signals,
                              uint64_t tag) {
  auto fail = [](const std::string& what, const Status& st) { return what + ": " + st.to_string(); };
  auto d = host.register_symmetric(team, data.data(), data.size(), Deadline::after(20s));
  if (!d.ok()) return fail("register data", d.status());
  auto sg = host.register_symmetric(team, signals.data(), n * 8, Deadline::after(20s));
  if (!sg.ok()) return fail("register signals", sg.status());
  test::fill(data.data() + r * len, len, tag + r);
  for (int p = 0; p < n; ++p) {  // the other ranks, and this one through its loopback
    auto t = team.window(p)->put_signal(d->local, r * len, d->remote[p], r * len, len,
                                        sg->remote[p], 8 * r, 1);
    if (!t.ok()) return fail("put_signal to rank " + std::to_string(p), t.status());
  }
  for (int p = 0; p < n; ++p) {
    Status w = team.window(p)->wait_signal(sg->local, 8 * p, 1, Deadline::after(20s));
    if (!w.ok()) return fail("signal of rank " + std::to_string(p), w);
  }
  for (int p = 0; p < n; ++p) {
    Status q = team.window(p)->quiet(Deadline::after(20s));
    if (!q.ok()) return fail("quiet to rank " + std::to_string(p), q);
  }
  uint64_t word = 0;  // stay until the other ranks are done with this one's memory
  auto bye = host.register_symmetric(team, &word, sizeof(word), Deadline::after(20s));
  if (!bye.ok()) return fail("closing exchange", bye.status());
  return "";
}

// What put_to_each_other left at every rank: every rank's slot and one signal from each.
void expect_everyone_put(const std::vector<std::vector<uint8_t>>& data,
                         const std::vector<std::vector<uint64_t>>& signals, size_t len,
                         uint64_t tag, const std::string& where) {
  const int n = static_cast<int>(data.size());
  for (int r = 0; r < n; ++r) {
    for (int p = 0; p < n; ++p) {
      EXPECT_EQ(test::first_mismatch(data[r].data() + p * len, len, tag + p), -1)
          << where << "rank " << r << ", slot of rank " << p;
      EXPECT_EQ(signals[r][p], 1u) << where << "rank " << r << ", from " << p;
    }
  }
}

TEST_P(GpuHostTest, ThreeRanksPutSignalToEveryPeerThroughTheirProxyContexts) {
  constexpr int n = 3;
  constexpr size_t slice = 4096;
  std::vector<std::unique_ptr<GpuHost>> hosts(n);
  std::vector<ConnectionHandle> handles(n);
  ASSERT_NO_FATAL_FAILURE(open_ranks(hosts, handles));
  std::vector<std::vector<uint8_t>> data(n, std::vector<uint8_t>(n * slice, 0));
  std::vector<std::vector<uint64_t>> signals(n, std::vector<uint64_t>(n, 0));
  std::vector<std::string> failures(n);
  auto rank_main = [&](int r) {
    auto fail = [&](const std::string& what, const Status& s) {
      failures[r] = what + ": " + s.to_string();
    };
    auto team = hosts[r]->connect(0, handles, r, Deadline::after(30s));
    if (!team.ok()) return fail("connect", team.status());
    if ((*team)->size() != n || (*team)->rank() != r || (*team)->window(r) == nullptr ||
        (*team)->window(n) != nullptr) {
      failures[r] = "the team's shape";
      return;
    }
    test::fill(data[r].data() + r * slice, slice, 100 + r);  // this rank's slot
    auto d = hosts[r]->register_symmetric(**team, data[r].data(), data[r].size(), Deadline::after(30s));
    if (!d.ok()) return fail("register data", d.status());
    auto s = hosts[r]->register_symmetric(**team, signals[r].data(), n * 8, Deadline::after(30s));
    if (!s.ok()) return fail("register signals", s.status());
    auto backend = GpuBackend::open(GpuBackendKind::proxy);
    if (!backend.ok()) return fail("backend", backend.status());
    if ((*backend)->properties(**team).name != "proxy") failures[r] = "backend name";
    const SymmetricRegion* regions[] = {&*d, &*s};
    GpuProxyOptions o;
    o.capacity = 16;
    auto ctx = (*backend)->create_context(**team, regions, o);
    if (!ctx.ok()) return fail("create_context", ctx.status());
    auto producer = gpu::RingProducer::attach((*ctx)->ring().header);
    if (!producer.ok()) return fail("producer", producer.status());
    uint64_t last = 0;
    for (int p = 0; p < n; ++p) {  // this rank too, through the loopback window
      Descriptor x{};
      x.op = static_cast<uint8_t>(Op::put_signal);
      x.window = static_cast<uint16_t>(p);
      x.local_region = 0;
      x.local_offset = r * slice;
      x.remote_region = static_cast<uint16_t>(0 * n + p);  // region 0 at peer p
      x.remote_offset = r * slice;
      x.length = slice;
      x.signal_region = static_cast<uint16_t>(1 * n + p);  // region 1 at peer p
      x.signal_offset = 8 * r;
      x.value = 1;
      auto pos = producer->push(x, Deadline::after(30s));
      if (!pos.ok()) return fail("push", pos.status());
      last = *pos;
    }
    Status done = producer->wait_completed(last, Deadline::after(30s));
    if (!done.ok()) return fail("descriptors (" + (*ctx)->last_error().to_string() + ")", done);
    // Every peer's signal, then its bytes.
    for (int p = 0; p < n; ++p) {
      Status w = (*team)->window(p)->wait_signal(s->local, 8 * p, 1, Deadline::after(30s));
      if (!w.ok()) return fail("signal of rank " + std::to_string(p), w);
    }
    // Stay (and progress) until every rank is done with this one's memory: a last exchange.
    auto bye = hosts[r]->register_symmetric(**team, signals[r].data(), 8, Deadline::after(30s));
    if (!bye.ok()) return fail("closing exchange", bye.status());
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(rank_main, r);
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
  for (int r = 0; r < n; ++r) {
    for (int p = 0; p < n; ++p) {
      EXPECT_EQ(test::first_mismatch(data[r].data() + p * slice, slice, 100 + p), -1)
          << "rank " << r << ", slot of rank " << p;
      EXPECT_EQ(signals[r][p], 1u) << "rank " << r << ", signal of rank " << p;
    }
  }
}

// A team of more ranks than a listener holds waiting (XPORT_LISTEN_BACKLOG) forms: every rank's
// requests reach every other at once; each rank takes the connections its listener accepted
// after every progress pass, and asks again where a listener refused it for a full backlog (a
// device progressing in a thread of its own admits more between two takes; connected endpoints
// count handshakes under way too). Here 12 ranks with a backlog of 4 and 4 completions a pass
// (XPORT_CQ_BATCH). Before: connect took one accepted connection per round of polls (a progress
// pass for each rank) and gave up at the first refusal; teams of more than 128 ranks failed at
// the default backlog ("the listener's backlog is full"). On tcp it also holds an accepted
// connection whose first message (the team's hello) comes before the listener's FI_CONNECTED
// event is read: that message was dropped as a routing miss and the rank waited out its deadline
// for a connection its connector had made ("heard from 10 of 12 ranks").
TEST_P(GpuHostTest, ATeamOfMoreRanksThanTheBacklogForms) {
  test::ScopedKnobs knobs{{"XPORT_LISTEN_BACKLOG", "4"}, {"XPORT_CQ_BATCH", "4"}};
  constexpr int n = 12;
  std::vector<std::unique_ptr<GpuHost>> hosts(n);
  std::vector<ConnectionHandle> handles(n);
  ASSERT_NO_FATAL_FAILURE(open_ranks(hosts, handles));
  std::vector<std::vector<uint64_t>> words(n, std::vector<uint64_t>(1, 0));
  std::vector<std::string> failures(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto team = hosts[r]->connect(0, handles, r, Deadline::after(60s));
      if (!team.ok()) {
        failures[r] = "connect: " + team.status().to_string();
        return;
      }
      for (int p = 0; p < n; ++p) {
        if ((*team)->window(p) == nullptr) failures[r] += " no window to rank " + std::to_string(p);
      }
      // An exchange over every connection, which also keeps this rank until all are done.
      auto x = hosts[r]->register_symmetric(**team, words[r].data(), 8, Deadline::after(60s));
      if (!x.ok()) failures[r] += "exchange: " + x.status().to_string();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
}

// Rank 1 of a two-rank team, in its own thread: connect, register `buf` symmetrically, then a
// closing exchange (rank 0 puts into `buf` in between and quiets before it joins the exchange).
void second_rank(GpuHost& host, const std::vector<ConnectionHandle>& handles,
                 std::vector<uint8_t>& buf, std::string& failure) {
  auto team = host.connect(0, handles, 1, Deadline::after(20s));
  if (!team.ok()) {
    failure = "connect: " + team.status().to_string();
    return;
  }
  auto sym = host.register_symmetric(**team, buf.data(), buf.size(), Deadline::after(20s));
  if (!sym.ok()) {
    failure = "register: " + sym.status().to_string();
    return;
  }
  uint64_t word = 0;
  auto bye = host.register_symmetric(**team, &word, sizeof(word), Deadline::after(20s));
  if (!bye.ok()) failure = "closing exchange: " + bye.status().to_string();
}

// Rank 0's side: registers `buf`, puts `fill` into rank 1's region through the team's window
// and quiets, then the closing exchange. A team holding another team's connection gets that
// team's key for rank 1, and the put is refused ("exported by another device").
Status first_rank_puts(GpuHost& host, GpuTeam& team, std::vector<uint8_t>& buf, int fill) {
  auto sym = host.register_symmetric(team, buf.data(), buf.size(), Deadline::after(20s));
  if (!sym.ok()) return sym.status().with_context("register");
  test::fill(buf.data(), buf.size(), fill);
  Status s = team.window(1)->put(sym->local, 0, sym->remote[1], 0, buf.size()).status();
  if (s.ok()) s = team.window(1)->quiet(Deadline::after(20s));
  if (!s.ok()) return s.with_context("put to rank 1");
  uint64_t word = 0;
  return host.register_symmetric(team, &word, sizeof(word), Deadline::after(20s))
      .status()
      .with_context("closing exchange");
}

// Host A is rank 0 of two teams on its one listen(0) listener: {A, B} and {A, C}. B's and C's
// connections are both in A's backlog when A forms the first team (C's team is forming too:
// its connect waits for A's). Before teams carried a nonce, A took whichever came first and
// believed the rank in it: both claimed rank 1 (or C's stood in for B's).
TEST_P(GpuHostTest, TwoTeamsFormingAtOnceOnOneListenerEachGetTheirOwnConnections) {
  auto a = GpuHost::init();
  auto b = GpuHost::init();
  auto c = GpuHost::init();
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  auto ha = (*a)->listen(0);
  auto hb = (*b)->listen(0);
  auto hc = (*c)->listen(0);
  ASSERT_TRUE(ha.ok() && hb.ok() && hc.ok());
  const std::vector<ConnectionHandle> team_b{*ha, *hb}, team_c{*ha, *hc};
  std::vector<uint8_t> buf_a1(4096), buf_a2(4096), buf_b(4096, 0), buf_c(4096, 0);
  std::string fail_b, fail_c;
  std::thread tb([&] { second_rank(**b, team_b, buf_b, fail_b); });
  std::thread tc([&] { second_rank(**c, team_c, buf_c, fail_c); });
  struct Join {  // (on an early failure too: the ranks end at their deadlines)
    std::thread& x;
    std::thread& y;
    ~Join() {
      if (x.joinable()) x.join();
      if (y.joinable()) y.join();
    }
  } join{tb, tc};
  // A answers both connection requests (its device's progress) before it forms either team.
  auto dev_a = (*a)->device(0);
  ASSERT_TRUE(dev_a.ok());
  const auto until = std::chrono::steady_clock::now() + 20s;
  while ((*dev_a)->stats().comms_open < 2 && std::chrono::steady_clock::now() < until) {
    ASSERT_TRUE((*a)->progress().ok());
  }
  ASSERT_GE((*dev_a)->stats().comms_open, 2u) << "B's and C's connections never reached A";
  auto t1 = (*a)->connect(0, team_b, 0, Deadline::after(20s));
  ASSERT_TRUE(t1.ok()) << "the team with B: " << t1.status().to_string();
  auto t2 = (*a)->connect(0, team_c, 0, Deadline::after(20s));
  ASSERT_TRUE(t2.ok()) << "the team with C: " << t2.status().to_string();
  Status s1 = first_rank_puts(**a, **t1, buf_a1, 11);
  Status s2 = first_rank_puts(**a, **t2, buf_a2, 22);
  EXPECT_TRUE(s1.ok()) << "the team with B: " << s1.to_string();
  EXPECT_TRUE(s2.ok()) << "the team with C: " << s2.to_string();
  tb.join();
  tc.join();
  EXPECT_EQ(fail_b, "");
  EXPECT_EQ(fail_c, "");
  EXPECT_EQ(test::first_mismatch(buf_b.data(), buf_b.size(), 11), -1) << "B got the wrong bytes";
  EXPECT_EQ(test::first_mismatch(buf_c.data(), buf_c.size(), 22), -1) << "C got the wrong bytes";
}

// The same two teams, A forming both from two threads at once (the host is shared by them):
// whichever call accepts a connection, each team ends with its own.
TEST_P(GpuHostTest, TwoTeamsFormedFromTwoThreadsOfOneHostEachGetTheirOwnConnections) {
  auto a = GpuHost::init();
  auto b = GpuHost::init();
  auto c = GpuHost::init();
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  auto ha = (*a)->listen(0);
  auto hb = (*b)->listen(0);
  auto hc = (*c)->listen(0);
  ASSERT_TRUE(ha.ok() && hb.ok() && hc.ok());
  const std::vector<ConnectionHandle> team_b{*ha, *hb}, team_c{*ha, *hc};
  std::vector<uint8_t> buf_a1(4096), buf_a2(4096), buf_b(4096, 0), buf_c(4096, 0);
  std::string fail_a1, fail_a2, fail_b, fail_c;
  auto first = [&](const std::vector<ConnectionHandle>& handles, std::vector<uint8_t>& buf,
                   int fill, std::string& failure) {
    auto team = (*a)->connect(0, handles, 0, Deadline::after(20s));
    Status s = team.ok() ? first_rank_puts(**a, **team, buf, fill) : team.status();
    if (!s.ok()) failure = s.to_string();
  };
  std::vector<std::thread> threads;
  threads.emplace_back([&] { second_rank(**b, team_b, buf_b, fail_b); });
  threads.emplace_back([&] { second_rank(**c, team_c, buf_c, fail_c); });
  threads.emplace_back([&] { first(team_b, buf_a1, 44, fail_a1); });
  threads.emplace_back([&] { first(team_c, buf_a2, 55, fail_a2); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(fail_a1, "") << "A's team with B";
  EXPECT_EQ(fail_a2, "") << "A's team with C";
  EXPECT_EQ(fail_b, "");
  EXPECT_EQ(fail_c, "");
  EXPECT_EQ(test::first_mismatch(buf_b.data(), buf_b.size(), 44), -1) << "B got the wrong bytes";
  EXPECT_EQ(test::first_mismatch(buf_c.data(), buf_c.size(), 55), -1) << "C got the wrong bytes";
}

// A process that is no member connects to rank 0's listener first and claims rank 1 the way
// ranks once announced themselves (a 4-byte rank on the team's tag), before the team forms:
// it is refused, and the team forms with its real rank 1. (Before: rank 0 took the stranger
// as rank 1.)
TEST_P(GpuHostTest, AStrangerClaimingARankIsRefused) {
  auto a = GpuHost::init();
  auto b = GpuHost::init();
  auto x = GpuHost::init();
  ASSERT_TRUE(a.ok() && b.ok() && x.ok());
  auto ha = (*a)->listen(0);
  auto hb = (*b)->listen(0);
  ASSERT_TRUE(ha.ok() && hb.ok());
  auto stranger = (*x)->device(0);
  ASSERT_TRUE(stranger.ok());
  auto pending = (*stranger)->start_connect(*ha, Deadline::after(20s));
  ASSERT_TRUE(pending.ok()) << pending.status().to_string();
  std::unique_ptr<SendComm> sc;
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (!sc && std::chrono::steady_clock::now() < until) {
    auto r = (*pending)->poll();
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    sc = std::move(r).value();
    if (!sc) {
      ASSERT_TRUE((*a)->progress().ok());  // rank 0's device answers
    }
  }
  ASSERT_TRUE(sc) << "the stranger never connected";
  int claim = 1;
  auto reg = (*stranger)->register_memory(&claim, sizeof(claim));
  ASSERT_TRUE(reg.ok());
  auto sent = sc->isend(&claim, sizeof(claim), *reg, 0x7e01);
  ASSERT_TRUE(sent.ok()) << sent.status().to_string();
  const std::vector<ConnectionHandle> handles{*ha, *hb};
  std::vector<uint8_t> buf_a(4096), buf_b(4096, 0);
  std::string fail_b;
  std::thread tb([&] { second_rank(**b, handles, buf_b, fail_b); });
  struct Join {
    std::thread& t;
    ~Join() {
      if (t.joinable()) t.join();
    }
  } join{tb};
  auto team = (*a)->connect(0, handles, 0, Deadline::after(20s));
  ASSERT_TRUE(team.ok()) << team.status().to_string();
  Status s = first_rank_puts(**a, **team, buf_a, 33);
  EXPECT_TRUE(s.ok()) << s.to_string();
  tb.join();
  EXPECT_EQ(fail_b, "");
  EXPECT_EQ(test::first_mismatch(buf_b.data(), buf_b.size(), 33), -1) << "B got the wrong bytes";
}

TEST_P(GpuHostTest, APeerThatNeverJoinsEndsConnectWithATimeoutNamingIt) {
  if (std::string(GetParam().provider) == "shm") {
    // Both hosts live in this process: libfabric 1.17's shm faults in the closing host when the
    // other one (never having answered) is gone. Processes of their own do not share that.
    GTEST_SKIP() << "shm: two hosts of one process, one never answering";
  }
  if (std::string(GetParam().provider) == "tcp;ofi_rxm") {
    // libfabric 1.17's rxm leaks (LeakSanitizer: 376 bytes in 2 callocs of libfabric) the
    // connection request of a peer whose endpoint closes without ever having progressed it;
    // tcp (connected endpoints) runs the same test.
    GTEST_SKIP() << "tcp;ofi_rxm: the never-progressed peer's connection request leaks in rxm";
  }
  auto a = GpuHost::init();
  auto b = GpuHost::init();
  ASSERT_TRUE(a.ok() && b.ok());
  auto ha = (*a)->listen(0);
  auto hb = (*b)->listen(0);
  ASSERT_TRUE(ha.ok() && hb.ok());
  std::vector<ConnectionHandle> handles{*ha, *hb};
  auto team = (*a)->connect(0, handles, 0, Deadline::after(300ms));  // b never calls connect
  ASSERT_EQ(team.status().code(), Code::timeout) << team.status().to_string();
  EXPECT_NE(team.status().message().find("rank 1"), std::string::npos)
      << team.status().to_string();
  EXPECT_EQ((*a)->connect(0, handles, 2, Deadline::after(1s)).status().code(),
            Code::invalid_argument) << "rank 2 of a team of 2";
  EXPECT_EQ((*a)->device(7).status().code(), Code::invalid_argument);
  auto direct = GpuBackend::open(GpuBackendKind::direct);
  EXPECT_EQ(direct.status().code(), Code::unsupported);
  EXPECT_NE(direct.status().message().find("proxy"), std::string::npos);
}

// NCCL's one process driving two GPUs (nccl-tests -g 2 with GIN): both ranks of a team form it
// from one host, a thread each, each accepting on a listener of its own, twice (a second team
// with the same handles, as NCCL's GIN contexts are). Until the host counted its teams per rank,
// the second rank to call connect derived another nonce and both timed out ("refused 1
// stranger(s)").
TEST_P(GpuHostTest, TwoRanksOfOneTeamInOneHostFormItTwiceAndPutToEachOther) {
  auto host = GpuHost::init();
  ASSERT_TRUE(host.ok()) << host.status().to_string();
  constexpr int n = 2;
  constexpr size_t len = 4096;
  for (int round = 0; round < 2; ++round) {
    HostRanks k(n, len);
    open_listeners(**host, 0, k);
    if (HasFatalFailure()) return;
    auto rank_main = [&](int r) {
      auto team = (*host)->connect(0, k.handles, r, Deadline::after(20s), k.listeners[r].get());
      if (!team.ok()) {
        k.failures[r] = "connect: " + team.status().to_string();
        return;
      }
      k.failures[r] = put_to_each_other(**host, **team, r, n, len, k.data[r], k.signals[r], 10 * round + 1);
    };
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) threads.emplace_back(rank_main, r);
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) EXPECT_EQ(k.failures[r], "") << "round " << round << ", rank " << r;
    expect_everyone_put(k.data, k.signals, len, 10 * round + 1, "round " + std::to_string(round) + ", ");
  }
}

// Lanes (GpuHostLanes): each a Device of its own over the same rails. Two ranks of one host form
// a team on lane 0, gather their lane-2 handles over it (GpuHost::all_gather), form a team on
// lane 2 and put to each other there.
TEST_P(GpuHostTest, LanesAreDevicesOfTheirOwnAndTeamsFormOnThemFromHandlesGatheredOverLaneZero) {
  for (int bad : {0, 17}) {
    auto h = GpuHost::init({}, GpuHostDevices::one, GpuHostLanes{bad});
    ASSERT_FALSE(h.ok()) << bad << " lanes";
    EXPECT_EQ(h.status().code(), Code::invalid_argument);
    EXPECT_NE(h.status().message().find("lanes"), std::string::npos) << h.status().to_string();
  }
  auto host = GpuHost::init({}, GpuHostDevices::one, GpuHostLanes{3});
  ASSERT_TRUE(host.ok()) << host.status().to_string();
  EXPECT_EQ((*host)->devices(), 1);
  EXPECT_EQ((*host)->lanes(), 3);
  std::vector<Device*> devs;
  for (int i = 0; i < 3; ++i) {
    auto d = (*host)->device(i);
    ASSERT_TRUE(d.ok()) << i << ": " << d.status().to_string();
    for (Device* o : devs) EXPECT_NE(*d, o) << "lane " << i << " is a device of its own";
    devs.push_back(*d);
  }
  EXPECT_EQ((*host)->device(3).status().code(), Code::invalid_argument);
  constexpr int n = 2;
  constexpr size_t len = 8192;
  HostRanks k(n, len);
  open_listeners(**host, 0, k);
  if (HasFatalFailure()) return;
  auto rank_main = [&](int r) {
    auto fail = [&](const std::string& what, const Status& st) {
      k.failures[r] = what + ": " + st.to_string();
    };
    auto team = (*host)->connect(0, k.handles, r, Deadline::after(20s), k.listeners[r].get());
    if (!team.ok()) return fail("connect lane 0", team.status());
    const std::vector<uint8_t> too_big(4097, 1);
    auto refused = GpuHost::all_gather(**team, too_big, Deadline::after(20s));
    if (refused.ok() || refused.status().code() != Code::invalid_argument) {
      return fail("all_gather of 4097 bytes was not refused", refused.status());
    }
    auto lane = (*host)->open_listener(2);
    if (!lane.ok()) return fail("listener on lane 2", lane.status());
    auto gathered = GpuHost::all_gather(**team, (*lane)->handle(), Deadline::after(20s));
    if (!gathered.ok()) return fail("all_gather", gathered.status());
    if (gathered->size() != n || (*gathered)[static_cast<size_t>(r)] != (*lane)->handle()) {
      return fail("all_gather: not every rank's handle in rank order", Status::success());
    }
    auto lane_team = (*host)->connect(2, *gathered, r, Deadline::after(20s), lane->get());
    if (!lane_team.ok()) return fail("connect lane 2", lane_team.status());
    if (&(*lane_team)->device() != devs[2]) return fail("lane 2's team", Status::success());
    k.failures[r] = put_to_each_other(**host, **lane_team, r, n, len, k.data[r], k.signals[r], 7);
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(rank_main, r);
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(k.failures[r], "") << "rank " << r;
  expect_everyone_put(k.data, k.signals, len, 7, "");
}

INSTANTIATE_TEST_SUITE_P(Providers, GpuHostTest,
                         ::testing::Values(test::ProviderParam{"shm", "auto"},
                                           test::ProviderParam{"tcp;ofi_rxm", "manual"},
                                           test::ProviderParam{"tcp", "auto"}),
                         test::provider_param_name);

}  // namespace
}  // namespace xport
