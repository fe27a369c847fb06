// The plugin's GIN table (ncclGinPlugin_v11) driven the way NCCL 2.28.9's GIN proxy drives it,
// without NCCL and without a GPU (host memory): this program dlopens libnccl-net-xport.so
// (XTEST_NCCL_PLUGIN), initialises the net table and then the GIN table, and two processes
// (this one rank 0, a copy of it started with --gin-peer rank 1) listen, exchange handles over a
// pipe, connect as a collective, register symmetric memory and put to each other and to
// themselves with iput / iputSignal (INC, ADD, size 0 = signal only), testing every request
// and calling ginProgress as NCCL's progress thread does. The ordering NCCL relies on is
// checked as it happens: whenever a rank sees the peer's signal word reach v, every put the
// peer issued before its v-th signal must already be in place, byte for byte. Bad input gets
// NCCL error codes and a message, never a crash.
#include <gtest/gtest.h>

#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "../integration/harness.hpp"
#include "driver.hpp"
#include "gin_fixture.hpp"

namespace {

using namespace xport::nccl_test;
using namespace std::chrono_literals;

constexpr int kOps = 240;                 // operations each rank issues
constexpr size_t kSlot = 256 * 1024;      // bytes a slot holds (some puts fill it)
constexpr size_t kInflight = 48;          // requests outstanding per rank
constexpr uint64_t kFinalAdd = 1000;      // the last signal: ADD, size 0, covers everything

struct Op {
  int target = 0;
  size_t len = 0;
  bool signal = false;
};

// Rank r's script (both processes derive both scripts from the seed). Every 5th op goes to the
// rank itself; every 3rd carries a signal (INC); the last op of each target is followed by the
// final ADD (not in the script).
std::vector<Op> script(uint32_t seed, int r) {
  std::mt19937 rng(seed ^ (0x9E3779B9u * static_cast<uint32_t>(r + 1)));
  std::vector<Op> ops(kOps);
  for (int i = 0; i < kOps; ++i) {
    ops[i].target = i % 5 == 4 ? r : 1 - r;
    switch (rng() % 6) {
      case 0: ops[i].len = 0; break;                       // nothing but the signal (or nothing)
      case 1: ops[i].len = 1 + rng() % 64; break;          // inject-sized
      case 2: ops[i].len = kSlot; break;                   // striped where there are rails
      default: ops[i].len = rng() % (64 * 1024); break;
    }
    ops[i].signal = i % 3 == 2;
  }
  return ops;
}

uint64_t msg(int sender, int i) { return (static_cast<uint64_t>(sender) << 32) | static_cast<uint32_t>(i); }
// Rank `sender`'s slot i in a target's data region: half `sender`, slot i.
size_t slot_offset(int sender, int i) { return (static_cast<size_t>(sender) * kOps + i) * kSlot; }

struct Rank {
  Plugin* p = nullptr;
  int rank = 0;
  void* coll = nullptr;
  std::vector<uint8_t> src, data;
  std::vector<uint64_t> signals;  // word s: signals from sender s
  void *src_mh = nullptr, *data_mh = nullptr, *sig_mh = nullptr;
};

uint64_t load(const uint64_t* w) { return std::atomic_ref<const uint64_t>(*w).load(std::memory_order_acquire); }

// Every op of `sender` to rank t.rank with index < upto that has data: in place?
std::string verify(const Rank& t, int sender, const std::vector<Op>& ops, int upto) {
  for (int i = 0; i < upto; ++i) {
    if (ops[i].target != t.rank || ops[i].len == 0) continue;
    long long bad = xport::test::first_mismatch(t.data.data() + slot_offset(sender, i), ops[i].len, msg(sender, i));
    if (bad >= 0) {
      return "rank " + std::to_string(t.rank) + ": rank " + std::to_string(sender) + "'s put " +
             std::to_string(i) + " (" + std::to_string(ops[i].len) + " bytes) differs at byte " +
             std::to_string(bad);
    }
  }
  return "";
}

// Issues this rank's script and checks the peer's as its signals arrive; "" or what failed.
std::string run_rank(Rank& k, uint32_t seed) {
  ncclGin_v11_t* g = k.p->gin;
  const int me = k.rank, peer = 1 - me;
  const std::vector<Op> mine = script(seed, me), theirs = script(seed, peer);
  // Signals each sender gives each target (INC), and the index of its v-th signal op.
  auto signal_ops = [](const std::vector<Op>& ops, int target) {
    std::vector<int> idx;
    for (int i = 0; i < kOps; ++i) if (ops[i].target == target && ops[i].signal) idx.push_back(i);
    return idx;
  };
  const std::vector<int> peer_sigs = signal_ops(theirs, me), self_sigs = signal_ops(mine, me);
  for (int i = 0; i < kOps; ++i) {
    if (mine[i].len > 0) xport::test::fill(k.src.data() + slot_offset(me, i), mine[i].len, msg(me, i));
  }
  std::vector<void*> reqs;
  int next = 0;
  bool finals_sent = false;
  size_t checked_sigs = 0;
  const auto until = Clock::now() + 120s;
  for (;;) {
    if (Clock::now() > until) {
      return "rank " + std::to_string(me) + ": not done within 120 s (issued " + std::to_string(next) +
             ", outstanding " + std::to_string(reqs.size()) + ", peer signal word " +
             std::to_string(load(&k.signals[peer])) + "): " + warned_since(0);
    }
    while (next < kOps && reqs.size() < kInflight) {
      const Op& o = mine[next];
      const uint64_t off = slot_offset(me, next);
      void* req = nullptr;
      ncclResult_t r;
      if (o.signal) {
        r = g->iputSignal(k.coll, off, k.src_mh, o.len, off, k.data_mh, o.target, 8 * me, k.sig_mh,
                          0, NCCL_NET_SIGNAL_OP_INC, &req);
      } else {
        r = g->iput(k.coll, off, k.src_mh, o.len, off, k.data_mh, o.target, &req);
      }
      if (r != ncclSuccess || req == nullptr) {
        return "rank " + std::to_string(me) + ": op " + std::to_string(next) + " returned " +
               std::to_string(r) + ": " + warned_since(0);
      }
      reqs.push_back(req);
      ++next;
    }
    if (next == kOps && !finals_sent) {
      // The final ADD to the peer and to itself: size 0, strong, behind every earlier op.
      for (int t : {peer, me}) {
        void* req = nullptr;
        if (g->iputSignal(k.coll, 0, nullptr, 0, 0, nullptr, t, 8 * me, k.sig_mh, kFinalAdd,
                          NCCL_NET_SIGNAL_OP_ADD, &req) != ncclSuccess || req == nullptr) {
          return "rank " + std::to_string(me) + ": final ADD: " + warned_since(0);
        }
        reqs.push_back(req);
      }
      finals_sent = true;
    }
    for (size_t i = 0; i < reqs.size();) {
      int done = 0;
      if (g->test(k.coll, reqs[i], &done) != ncclSuccess) {
        return "rank " + std::to_string(me) + ": test: " + warned_since(0);
      }
      if (done) {
        reqs[i] = reqs.back();
        reqs.pop_back();
      } else {
        ++i;
      }
    }
    if (g->ginProgress(k.coll) != ncclSuccess) return "ginProgress: " + warned_since(0);
    // The ordering NCCL relies on: the peer's v-th signal visible => its puts before it landed.
    const uint64_t v = load(&k.signals[peer]);
    const size_t seen = std::min<uint64_t>(v, peer_sigs.size());
    if (seen > checked_sigs) {
      std::string e = verify(k, peer, theirs, peer_sigs[seen - 1] + 1);
      if (!e.empty()) return e + " after the peer's signal " + std::to_string(seen) + " was visible";
      checked_sigs = seen;
    }
    if (v > peer_sigs.size() + kFinalAdd) {
      return "rank " + std::to_string(me) + ": the peer's signal word is " + std::to_string(v) +
             ", more than the " + std::to_string(peer_sigs.size()) + " + " +
             std::to_string(kFinalAdd) + " it was sent";
    }
    const bool all_in = v == peer_sigs.size() + kFinalAdd &&
                        load(&k.signals[me]) == self_sigs.size() + kFinalAdd;
    if (finals_sent && reqs.empty() && all_in) break;
  }
  std::string e = verify(k, peer, theirs, kOps);
  if (e.empty()) e = verify(k, me, mine, kOps);
  return e;
}

// Both processes: init, listen, connect with the two handles, register, run, close. `exchange`
// sends this rank's handle and returns the other's (hex lines over the pipe).
template <typename Exchange, typename Barrier>
std::string rank_main(Plugin& p, int rank, uint32_t seed, Exchange exchange, Barrier barrier) {
  ncclGin_v11_t* g = p.gin;
  int ndev = 0;
  if (g->devices(&ndev) != ncclSuccess || ndev < 1) return "devices: " + warned_since(0);
  char mine[NCCL_NET_HANDLE_MAXSIZE];
  void* listen = nullptr;
  if (g->listen(p.gin_ctx, 0, mine, &listen) != ncclSuccess) return "listen: " + warned_since(0);
  std::vector<uint8_t> other = exchange(std::vector<uint8_t>(mine, mine + sizeof(mine)));
  if (other.size() != NCCL_NET_HANDLE_MAXSIZE) return "the peer's handle did not come";
  void* handles[2];
  handles[rank] = mine;
  handles[1 - rank] = other.data();
  Rank k;
  k.p = &p;
  k.rank = rank;
  if (g->connect(p.gin_ctx, handles, 2, rank, listen, &k.coll) != ncclSuccess || k.coll == nullptr) {
    return "connect: " + warned_since(0);
  }
  if (g->closeListen(listen) != ncclSuccess) return "closeListen: " + warned_since(0);
  k.src.assign(2 * kOps * kSlot, 0);
  k.data.assign(2 * kOps * kSlot, 0);
  k.signals.assign(2, 0);
  void* gh = nullptr;
  if (g->regMrSym(k.coll, k.src.data(), k.src.size(), NCCL_PTR_HOST, 0, &k.src_mh, &gh) != ncclSuccess ||
      gh != k.src_mh) {
    return "regMrSym (source): " + warned_since(0);
  }
  if (g->regMrSym(k.coll, k.data.data(), k.data.size(), NCCL_PTR_HOST, 0, &k.data_mh, &gh) != ncclSuccess) {
    return "regMrSym (data): " + warned_since(0);
  }
  if (g->regMrSym(k.coll, k.signals.data(), 16, NCCL_PTR_HOST, NCCL_NET_MR_FLAG_FORCE_SO, &k.sig_mh,
                  &gh) != ncclSuccess) {
    return "regMrSym (signals): " + warned_since(0);
  }
  std::string e = run_rank(k, seed);
  // Neither closes while the other may still need its progress, and both keep driving it while
  // they wait for the other: a rank whose last signals arrived may still owe the peer the
  // acknowledgements of the peer's last puts, sent by a later pass (NCCL's proxy thread calls
  // ginProgress until it finalizes). Waiting without progress here hung about one run in 20
  // on shm: the peer's test() saw nothing for 30 s and declared this rank lost.
  std::string b = barrier(e.empty() ? "OK" : "FAILED", [&] { (void)g->ginProgress(k.coll); });
  if (e.empty() && b != "OK") e = "the peer: " + b;
  for (void* mh : {k.src_mh, k.data_mh, k.sig_mh}) {
    if (g->deregMrSym(k.coll, mh) != ncclSuccess && e.empty()) e = "deregMrSym: " + warned_since(0);
  }
  if (g->closeColl(k.coll) != ncclSuccess && e.empty()) e = "closeColl: " + warned_since(0);
  return e;
}

int gin_peer_main(uint32_t seed) {
  Plugin p;
  if (!p.load_gin()) {
    std::cout << "FAILED " << p.error << std::endl;
    return 1;
  }
  auto exchange = [](const std::vector<uint8_t>& mine) {
    std::cout << "HANDLE " << xport::test::to_hex(mine) << std::endl;
    std::string line;
    if (!std::getline(std::cin, line) || line.rfind("HANDLE ", 0) != 0) return std::vector<uint8_t>();
    return xport::test::from_hex(line.substr(7));
  };
  auto barrier = [](const std::string& mine, const std::function<void()>& idle) {
    std::cout << "RESULT " << mine << std::endl;
    // The parent writes its RESULT line in one write: once stdin is readable, the line is whole.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(150);
    while (std::cin.rdbuf()->in_avail() <= 0) {
      pollfd in{0, POLLIN, 0};
      if (poll(&in, 1, 1) > 0) break;
      if (std::chrono::steady_clock::now() > until) return std::string("no RESULT within 150 s");
      idle();
    }
    std::string line;
    if (!std::getline(std::cin, line) || line.rfind("RESULT ", 0) != 0) return std::string("gone");
    return line.substr(7);
  };
  std::string e = rank_main(p, 1, seed, exchange, barrier);
  p.unload();
  std::cout << (e.empty() ? "PASSED" : "FAILED " + e) << std::endl;
  return e.empty() ? 0 : 1;
}

class GinTest : public GinFixture {
 protected:
  // A team of one rank (this process): the loopback only.
  void* solo(void** listen) {
    char h[NCCL_NET_HANDLE_MAXSIZE];
    EXPECT_EQ(p_.gin->listen(p_.gin_ctx, 0, h, listen), ncclSuccess) << warned_since(0);
    void* handles[1] = {h};
    void* coll = nullptr;
    EXPECT_EQ(p_.gin->connect(p_.gin_ctx, handles, 1, 0, *listen, &coll), ncclSuccess) << warned_since(0);
    return coll;
  }
};

TEST_P(GinTest, TableAndPropertiesAreWhatNcclsGinProxyExpects) {
  ncclGin_v11_t* g = p_.gin;
  EXPECT_STREQ(g->name, "xport");
  for (void* f : {(void*)g->init, (void*)g->devices, (void*)g->getProperties, (void*)g->listen,
                  (void*)g->connect, (void*)g->createContext, (void*)g->regMrSym,
                  (void*)g->regMrSymDmaBuf, (void*)g->deregMrSym, (void*)g->destroyContext,
                  (void*)g->closeColl, (void*)g->closeListen, (void*)g->iput, (void*)g->iputSignal,
                  (void*)g->test, (void*)g->ginProgress, (void*)g->queryLastError,
                  (void*)g->finalize}) {
    EXPECT_NE(f, nullptr);
  }
  int ndev = 0, net_ndev = 0;
  ASSERT_EQ(g->devices(&ndev), ncclSuccess);
  ASSERT_EQ(p_.net->devices(&net_ndev), ncclSuccess);
  EXPECT_EQ(ndev, net_ndev) << "the net table's numbering";
  ncclNetProperties_v11_t props, net;
  ASSERT_EQ(g->getProperties(0, &props), ncclSuccess) << warned_since(0);
  ASSERT_EQ(p_.net->getProperties(0, &net), ncclSuccess);
  EXPECT_EQ(props.netDeviceType, NCCL_NET_DEVICE_GIN_PROXY);
  EXPECT_EQ(props.netDeviceVersion, NCCL_GIN_PROXY_VERSION);
  EXPECT_STREQ(props.name, net.name);
  EXPECT_EQ(props.speed, net.speed);
  EXPECT_TRUE(props.ptrSupport & NCCL_PTR_HOST);
  // NCCL sizes each rank's descriptor queue as 32 x maxRecvs and wants a power of two.
  EXPECT_GT(props.maxRecvs, 0);
  EXPECT_EQ(props.maxRecvs & (props.maxRecvs - 1), 0);
  EXPECT_NE(g->getProperties(ndev, &props), ncclSuccess) << "a device that does not exist";
  // Proxy type: NCCL makes the device context itself; the plugin's createContext refuses.
  void* ctx = nullptr;
  ncclNetDeviceHandle_v11_t* dh = nullptr;
  setenv("XTEST_QUIET_WARN", "1", 1);
  EXPECT_EQ(g->createContext(nullptr, 1, 1, &ctx, &dh), ncclInvalidUsage);
  unsetenv("XTEST_QUIET_WARN");
  EXPECT_EQ(g->finalize(nullptr), ncclSuccess) << "a NULL context is legal";
  // A second init (NCCL inits once per communicator and once per GIN connection) shares it.
  void* ctx2 = nullptr;
  ASSERT_EQ(g->init(&ctx2, 7, logger), ncclSuccess);
  EXPECT_EQ(g->finalize(ctx2), ncclSuccess);
  EXPECT_EQ(g->devices(&ndev), ncclSuccess) << "the first context is still there";
}

// Rank 0 here, rank 1 a child started with `env`: the script, every byte and the signal order
// checked.
void two_ranks(Plugin& p, const std::vector<std::string>& env) {
  const char* self = std::getenv("XTEST_SELF");
  ASSERT_NE(self, nullptr) << "XTEST_SELF (this test binary's path) is not set";
  const uint32_t seed = 20261126;
  auto child = xport::test::ChildProcess::spawn({self, "--gin-peer", std::to_string(seed)}, env);
  ASSERT_TRUE(child.started());
  std::string err;
  auto exchange = [&](const std::vector<uint8_t>& mine) { return exchange_handle(child, mine, &err); };
  auto barrier = [&](const std::string& mine, const std::function<void()>& idle) {
    child.write_line("RESULT " + mine);
    std::string line = child.read_line(150000, &err, idle);
    return line.rfind("RESULT ", 0) == 0 ? line.substr(7) : "'" + line + "' " + err;
  };
  const std::string e = rank_main(p, 0, seed, exchange, barrier);
  EXPECT_EQ(e, "") << err;
  const std::string last = child.read_line(30000, &err);
  EXPECT_EQ(last, "PASSED") << err;
  EXPECT_EQ(child.wait_exit(30000), 0);
  std::printf("2 ranks x %d operations (a fifth to themselves), every byte verified, signal order "
              "checked as each signal became visible\n", kOps);
}

TEST_P(GinTest, TwoRanksPutAndSignalInOrderEveryByteVerified) { two_ranks(p_, peer_env()); }

// Lanes (XPORT_NCCL_GIN_LANES): meson's nccl-gin-lanes-* run every case with three lanes (asked
// for, or the auto choice beside three net lanes) and puts from 4 KiB split over them, each lane
// driven by a thread of its own; a signal still covers every put before it, on any lane.
class GinLanesTest : public GinTest {};

TEST_P(GinLanesTest, PutsSplitOverLanesLandBeforeTheirSignals) {
  const char* asked = std::getenv("XPORT_NCCL_GIN_LANES");
  const char* net = std::getenv("XPORT_NCCL_LANES");
  ASSERT_TRUE((asked != nullptr && std::string(asked) == "3") ||
              (asked == nullptr && net != nullptr && std::string(net) == "3"))
      << "meson's nccl-gin-lanes-* ask for 3 GIN lanes, or 3 net lanes and GIN lanes auto";
  size_t mark = 0;
  {
    std::lock_guard<std::mutex> l(g_log_mu);
    mark = g_log.size();
  }
  two_ranks(p_, peer_env());
  // The puts went over the lanes: the comm says how many it split when it closes.
  bool split = false;
  std::lock_guard<std::mutex> l(g_log_mu);
  for (size_t i = mark; i < g_log.size(); ++i) {
    if (g_log[i].find("puts were split over 3 lanes") != std::string::npos &&
        g_log[i].find("GIN closeColl: 0 puts") == std::string::npos) {
      split = true;
    }
  }
  EXPECT_TRUE(split) << "no 'GIN closeColl: N puts were split over 3 lanes' with N > 0 logged";
}

TEST_P(GinTest, OneRankTeamPutsAndSignalsToItself) {
  ncclGin_v11_t* g = p_.gin;
  void* listen = nullptr;
  void* coll = solo(&listen);
  ASSERT_NE(coll, nullptr);
  std::vector<uint8_t> buf(2 * 65536, 0);
  std::vector<uint64_t> sig(4, 0);
  void *mh = nullptr, *smh = nullptr, *gh = nullptr;
  ASSERT_EQ(g->regMrSym(coll, buf.data(), buf.size(), NCCL_PTR_HOST, 0, &mh, &gh), ncclSuccess);
  EXPECT_EQ(gh, mh) << "the same pointer as mhandle and gin handle";
  ASSERT_EQ(g->regMrSym(coll, sig.data(), 32, NCCL_PTR_HOST, NCCL_NET_MR_FLAG_FORCE_SO, &smh, &gh),
            ncclSuccess);
  xport::test::fill(buf.data(), 65536, 42);
  void* reqs[3] = {};
  ASSERT_EQ(g->iputSignal(coll, 0, mh, 65536, 65536, mh, 0, 8, smh, 0, NCCL_NET_SIGNAL_OP_INC, &reqs[0]),
            ncclSuccess) << warned_since(0);
  ASSERT_EQ(g->iputSignal(coll, 0, nullptr, 0, 0, nullptr, 0, 16, smh, 41, NCCL_NET_SIGNAL_OP_ADD, &reqs[1]),
            ncclSuccess) << warned_since(0);
  ASSERT_EQ(g->iput(coll, 0, mh, 0, 0, mh, 0, &reqs[2]), ncclSuccess) << "an empty put";
  for (void* r : reqs) {
    ASSERT_NE(r, nullptr);
    int done = 0;
    ASSERT_TRUE(poll_until([&] {
      return g->test(coll, r, &done) != ncclSuccess || done;
    }, 20s));
    EXPECT_EQ(done, 1) << warned_since(0);
  }
  EXPECT_EQ(xport::test::first_mismatch(buf.data() + 65536, 65536, 42), -1);
  EXPECT_EQ(load(&sig[1]), 1u);
  EXPECT_EQ(load(&sig[2]), 41u);
  bool has_error = true;
  EXPECT_EQ(g->queryLastError(coll, &has_error), ncclSuccess);
  EXPECT_FALSE(has_error);
  EXPECT_EQ(g->deregMrSym(coll, mh), ncclSuccess);
  EXPECT_EQ(g->deregMrSym(coll, smh), ncclSuccess);
  EXPECT_EQ(g->closeColl(coll), ncclSuccess);
  EXPECT_EQ(g->closeListen(listen), ncclSuccess);
}

// Two ranks in one process (nccl-tests -g 2: one process driving two GPUs), each through a GIN
// init context of its own, as NCCL inits per communicator: each rank's comm is on a libxport
// device of its own (their progress threads do not take turns on one device's lock), and they
// put and signal to each other.
TEST_P(GinTest, TwoRanksOfOneProcessEachGetADeviceOfTheirOwn) {
  ncclGin_v11_t* g = p_.gin;
  void* ctx[2] = {p_.gin_ctx, nullptr};
  ASSERT_EQ(g->init(&ctx[1], 8, logger), ncclSuccess) << warned_since(0);
  char h[2][NCCL_NET_HANDLE_MAXSIZE];
  void* listen[2] = {};
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(g->listen(ctx[r], 0, h[r], &listen[r]), ncclSuccess) << warned_since(0);
  }
  void* handles[2] = {h[0], h[1]};
  void* coll[2] = {};
  size_t mark = 0;
  {
    std::lock_guard<std::mutex> l(g_log_mu);
    mark = g_log.size();
  }
  ncclResult_t got[2] = {ncclInternalError, ncclInternalError};
  std::thread t1([&] { got[1] = g->connect(ctx[1], handles, 2, 1, listen[1], &coll[1]); });
  got[0] = g->connect(ctx[0], handles, 2, 0, listen[0], &coll[0]);
  t1.join();
  ASSERT_EQ(got[0], ncclSuccess) << warned_since(0);
  ASSERT_EQ(got[1], ncclSuccess) << warned_since(0);
  std::string device[2];
  {
    std::lock_guard<std::mutex> l(g_log_mu);
    for (size_t i = mark; i < g_log.size(); ++i) {
      for (int r = 0; r < 2; ++r) {
        const std::string key = "GIN connect: rank " + std::to_string(r) + " of 2 on libxport device ";
        const size_t at = g_log[i].find(key);
        if (at != std::string::npos) device[r] = g_log[i].substr(at + key.size()).substr(0, 18);
      }
    }
  }
  ASSERT_FALSE(device[0].empty() || device[1].empty()) << "both connects log their device";
  EXPECT_NE(device[0].substr(0, device[0].find(',')), device[1].substr(0, device[1].find(',')))
      << "the two ranks' comms share a libxport device";
  // Rank 0 puts 4 KiB and a signal into rank 1's memory; both ranks' calls drive progress.
  std::vector<uint8_t> buf[2] = {std::vector<uint8_t>(4096), std::vector<uint8_t>(4096, 0)};
  std::vector<uint64_t> sig[2] = {std::vector<uint64_t>(1, 0), std::vector<uint64_t>(1, 0)};
  void* mh[2] = {};
  void* smh[2] = {};
  void* gh = nullptr;
  std::thread r1([&] {
    (void)g->regMrSym(coll[1], buf[1].data(), 4096, NCCL_PTR_HOST, 0, &mh[1], &gh);
    (void)g->regMrSym(coll[1], sig[1].data(), 8, NCCL_PTR_HOST, 0, &smh[1], &gh);
  });
  void* gh0 = nullptr;
  EXPECT_EQ(g->regMrSym(coll[0], buf[0].data(), 4096, NCCL_PTR_HOST, 0, &mh[0], &gh0), ncclSuccess);
  EXPECT_EQ(g->regMrSym(coll[0], sig[0].data(), 8, NCCL_PTR_HOST, 0, &smh[0], &gh0), ncclSuccess);
  r1.join();
  ASSERT_NE(mh[0], nullptr) << warned_since(0);
  ASSERT_NE(smh[0], nullptr) << warned_since(0);
  ASSERT_NE(mh[1], nullptr) << warned_since(0);
  ASSERT_NE(smh[1], nullptr) << warned_since(0);
  xport::test::fill(buf[0].data(), 4096, 77);
  void* req = nullptr;
  ASSERT_EQ(g->iputSignal(coll[0], 0, mh[0], 4096, 0, mh[0], 1, 0, smh[0], 0,
                          NCCL_NET_SIGNAL_OP_INC, &req), ncclSuccess) << warned_since(0);
  int done = 0;
  EXPECT_TRUE(poll_until([&] {
    (void)g->ginProgress(coll[1]);
    return g->test(coll[0], req, &done) != ncclSuccess || done;
  }, 20s));
  EXPECT_EQ(done, 1) << warned_since(0);
  EXPECT_EQ(load(&sig[1][0]), 1u);
  EXPECT_EQ(xport::test::first_mismatch(buf[1].data(), 4096, 77), -1);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(g->deregMrSym(coll[r], mh[r]), ncclSuccess);
    EXPECT_EQ(g->deregMrSym(coll[r], smh[r]), ncclSuccess);
    EXPECT_EQ(g->closeColl(coll[r]), ncclSuccess);
    EXPECT_EQ(g->closeListen(listen[r]), ncclSuccess);
  }
  EXPECT_EQ(g->finalize(ctx[1]), ncclSuccess);
}

// More operations outstanding than a window has contexts (NCCL's queue holds 32 x maxRecvs per
// rank, a window 256 provider operations): the plugin queues what the window refuses and issues
// it in order from later calls; iput never refuses, every request completes, every byte lands.
TEST_P(GinTest, MoreOperationsThanAWindowTakesAreQueuedInOrder) {
  ncclGin_v11_t* g = p_.gin;
  void* listen = nullptr;
  void* coll = solo(&listen);
  ASSERT_NE(coll, nullptr);
  constexpr int kMany = 1500;
  constexpr size_t kLen = 48;
  std::vector<uint8_t> src(kMany * kLen), dst(kMany * kLen, 0);
  std::vector<uint64_t> sig(1, 0);
  void *smh = nullptr, *dmh = nullptr, *gmh = nullptr, *gh = nullptr;
  ASSERT_EQ(g->regMrSym(coll, src.data(), src.size(), NCCL_PTR_HOST, 0, &smh, &gh), ncclSuccess);
  ASSERT_EQ(g->regMrSym(coll, dst.data(), dst.size(), NCCL_PTR_HOST, 0, &dmh, &gh), ncclSuccess);
  ASSERT_EQ(g->regMrSym(coll, sig.data(), 8, NCCL_PTR_HOST, 0, &gmh, &gh), ncclSuccess);
  for (int i = 0; i < kMany; ++i) xport::test::fill(src.data() + i * kLen, kLen, 9000 + i);
  std::vector<void*> reqs(kMany, nullptr);
  for (int i = 0; i < kMany; ++i) {
    // Without testing in between: the window's contexts run out and the rest wait in order.
    ASSERT_EQ(g->iputSignal(coll, i * kLen, smh, kLen, i * kLen, dmh, 0, 0, gmh, 0,
                            NCCL_NET_SIGNAL_OP_INC, &reqs[i]), ncclSuccess) << "op " << i << ": "
                                                                          << warned_since(0);
    ASSERT_NE(reqs[i], nullptr) << "op " << i << ": iput must not refuse (NCCL never retries)";
  }
  size_t left = kMany;
  ASSERT_TRUE(poll_until([&] {
    for (void*& r : reqs) {
      if (r == nullptr) continue;
      int done = 0;
      if (g->test(coll, r, &done) != ncclSuccess) return true;
      if (done) {
        r = nullptr;
        --left;
      }
    }
    g->ginProgress(coll);
    return left == 0;
  }, 60s)) << left << " requests not done: " << warned_since(0);
  EXPECT_EQ(left, 0u);
  EXPECT_EQ(load(&sig[0]), static_cast<uint64_t>(kMany));
  for (int i = 0; i < kMany; ++i) {
    ASSERT_EQ(xport::test::first_mismatch(dst.data() + i * kLen, kLen, 9000 + i), -1) << "op " << i;
  }
  for (void* mh : {smh, dmh, gmh}) EXPECT_EQ(g->deregMrSym(coll, mh), ncclSuccess);
  EXPECT_EQ(g->closeColl(coll), ncclSuccess);
  EXPECT_EQ(g->closeListen(listen), ncclSuccess);
}

TEST_P(GinTest, BadInputGetsNcclErrorsAndAMessage) {
  setenv("XTEST_QUIET_WARN", "1", 1);
  ncclGin_v11_t* g = p_.gin;
  void* listen = nullptr;
  void* coll = solo(&listen);
  ASSERT_NE(coll, nullptr);
  std::vector<uint8_t> buf(4096, 0);
  std::vector<uint64_t> sig(2, 0);
  void *mh = nullptr, *smh = nullptr, *gh = nullptr;
  ASSERT_EQ(g->regMrSym(coll, buf.data(), buf.size(), NCCL_PTR_HOST, 0, &mh, &gh), ncclSuccess);
  ASSERT_EQ(g->regMrSym(coll, sig.data(), 16, NCCL_PTR_HOST, 0, &smh, &gh), ncclSuccess);
  uint64_t foreign[8] = {};
  void* req = nullptr;
  struct Case {
    const char* what;
    std::function<ncclResult_t()> call;
    ncclResult_t want;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"a rank outside the team", [&] { return g->iput(coll, 0, mh, 8, 0, mh, 1, &req); },
       ncclInvalidArgument, "rank 1 of 1"},
      {"a NULL source", [&] { return g->iput(coll, 0, nullptr, 8, 0, mh, 0, &req); },
       ncclInvalidArgument, "NULL source"},
      {"a foreign mhandle", [&] { return g->iput(coll, 0, foreign, 8, 0, mh, 0, &req); },
       ncclInvalidArgument, "not a live registration"},
      {"past the destination", [&] { return g->iput(coll, 0, mh, 8, 4090, mh, 0, &req); },
       ncclInvalidArgument, "outside"},
      {"past the source", [&] { return g->iput(coll, 4096, mh, 1, 0, mh, 0, &req); },
       ncclInvalidArgument, "outside"},
      {"an unaligned signal", [&] {
         return g->iputSignal(coll, 0, mh, 8, 0, mh, 0, 4, smh, 1, NCCL_NET_SIGNAL_OP_ADD, &req); },
       ncclInvalidArgument, "8-byte aligned"},
      {"a signal past its region", [&] {
         return g->iputSignal(coll, 0, mh, 8, 0, mh, 0, 16, smh, 1, NCCL_NET_SIGNAL_OP_ADD, &req); },
       ncclInvalidArgument, "8-byte aligned"},
      {"an unknown signal op", [&] {
         return g->iputSignal(coll, 0, mh, 8, 0, mh, 0, 0, smh, 1, 7, &req); },
       ncclInvalidArgument, "signal op 7"},
      {"a foreign request", [&] { int d = 0; return g->test(coll, foreign, &d); },
       ncclInvalidArgument, "not a live GIN request"},
      {"a comm that is not one", [&] { return g->ginProgress(foreign); },
       ncclInvalidArgument, "not a GIN comm"},
      {"a pointer type NCCL does not have", [&] {
         void *m2 = nullptr, *g2 = nullptr;
         return g->regMrSym(coll, buf.data(), 64, 99, 0, &m2, &g2); },
       ncclInvalidArgument, "pointer type 99"},
      {"a handle of no listener", [&] {
         return g->connect(p_.gin_ctx, nullptr, 1, 0, foreign, &req); },
       ncclInvalidArgument, "not a GIN listener"},
  };
  for (const Case& c : cases) {
    const size_t mark = log_mark();
    req = nullptr;
    EXPECT_EQ(c.call(), c.want) << c.what;
    EXPECT_NE(warned_since(mark).find(c.says), std::string::npos)
        << c.what << ": the message was '" << warned_since(mark) << "'";
  }
  // Nothing was sent: the word and the buffer are as they were, and the comm still works.
  EXPECT_EQ(load(&sig[0]), 0u);
  ASSERT_EQ(g->iputSignal(coll, 0, mh, 8, 8, mh, 0, 0, smh, 5, NCCL_NET_SIGNAL_OP_ADD, &req), ncclSuccess);
  int done = 0;
  ASSERT_TRUE(poll_until([&] { return g->test(coll, req, &done) != ncclSuccess || done; }, 20s));
  EXPECT_EQ(load(&sig[0]), 5u);
  EXPECT_EQ(g->deregMrSym(coll, mh), ncclSuccess);
  EXPECT_EQ(g->deregMrSym(coll, mh), ncclInvalidArgument) << "deregistered twice";
  EXPECT_EQ(g->iput(coll, 0, mh, 8, 0, smh, 0, &req), ncclInvalidArgument) << "a deregistered source";
  EXPECT_EQ(g->deregMrSym(coll, smh), ncclSuccess);
  EXPECT_EQ(g->closeColl(coll), ncclSuccess);
  EXPECT_EQ(g->closeListen(listen), ncclSuccess);
  unsetenv("XTEST_QUIET_WARN");
}

INSTANTIATE_TEST_SUITE_P(Providers, GinTest, gin_cases(), gin_case_name);
INSTANTIATE_TEST_SUITE_P(Providers, GinLanesTest, gin_cases(), gin_case_name);

}  // namespace

namespace xport::nccl_test {
int gin_failing_peer_main(bool close_comm);  // gin_failure_test.cc
}

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "--gin-peer") return gin_peer_main(std::stoul(argv[2]));
  if (argc >= 2 && std::string(argv[1]) == "--gin-failing-peer") {
    return xport::nccl_test::gin_failing_peer_main(argc >= 3 && std::string(argv[2]) == "closed");
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
