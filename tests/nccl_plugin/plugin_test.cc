// The NCCL plugin driven the way NCCL drives it, without NCCL and without a GPU: this program
// dlopens libnccl-net-xport.so (XTEST_NCCL_PLUGIN), finds ncclNetPlugin_v11 and calls its
// table as NCCL's proxy threads do, across two processes (this one receives, a copy of it
// started with --peer sends): handles exchanged over a pipe, connect and accept polled, grouped
// receives with tags, sizes from test(), every byte verified, one thread per communicator.
// Bad input (corrupt handle, NULL or foreign mhandle, a send larger than its receive, bad
// requests) must give NCCL error codes and a message in NCCL's log, never a crash.
// With --bench it measures host-memory bandwidth through the plugin instead (README of
// docs/benchmarks.md, "NCCL plugin").
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <future>
#include <iostream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../integration/harness.hpp"
#include "driver.hpp"

namespace {

using namespace xport::nccl_test;
using namespace std::chrono_literals;

// The lanes the loaded plugin opened, as its init logged them ("... N lanes: why)"); 0 before
// an init logged it. XPORT_NCCL_LANES unset or 0 lets the plugin choose.
int lanes() {
  std::lock_guard<std::mutex> l(g_log_mu);
  for (const std::string& line : g_log) {
    const size_t at = line.find(" lanes: ");
    if (at == std::string::npos || line.rfind("INFO ", 0) != 0) continue;
    const size_t from = line.rfind(' ', at - 1);
    return std::atoi(line.c_str() + from + 1);
  }
  return 0;
}

// ---- the traffic plan both processes derive from one seed ----

constexpr int kComms = 3;
constexpr int kRounds = 64;
constexpr int kWindow = 4;  // rounds in flight per communicator
constexpr size_t kMaxCap = 512 * 1024;
constexpr int kMaxN = 8;

struct Round {
  int n = 1;
  uint32_t tags[kMaxN] = {};
  size_t caps[kMaxN] = {};
  uint32_t msg_tag[kMaxN] = {};  // message k's tag (the sender's order)
  int target[kMaxN] = {};        // the buffer message k lands in
  size_t len[kMaxN] = {};
};

Round plan(uint32_t seed, int comm, int round) {
  std::mt19937 rng(seed ^ (comm * 0x9E3779B9u) ^ (round * 0x85EBCA6Bu));
  Round r;
  r.n = 1 + round % kMaxN;
  for (int j = 0; j < r.n; ++j) {
    r.tags[j] = rng() % 3;  // few tags: groups with repeats and with several
    switch (rng() % 4) {
      case 0: r.caps[j] = rng() % 4097; break;             // eager
      case 1: r.caps[j] = 4096 + rng() % 61440; break;     // around the eager limit
      default: r.caps[j] = 65536 + rng() % (kMaxCap - 65536 + 1); break;  // rendezvous
    }
  }
  int perm[kMaxN];
  for (int k = 0; k < r.n; ++k) perm[k] = k;
  std::shuffle(perm, perm + r.n, rng);
  bool taken[kMaxN] = {};
  for (int k = 0; k < r.n; ++k) {
    r.msg_tag[k] = r.tags[perm[k]];
    // The k-th message with tag t lands in the k-th buffer with tag t.
    int j = 0;
    while (taken[j] || r.tags[j] != r.msg_tag[k]) ++j;
    taken[j] = true;
    r.target[k] = j;
    r.len[k] = rng() % 8 == 0 ? 0 : rng() % (r.caps[j] + 1);
  }
  return r;
}

uint64_t msg_id(int comm, int round, int k) {
  return (static_cast<uint64_t>(comm) << 32) | (static_cast<uint64_t>(round) << 8) | k;
}

// ---- the two roles ----

struct Comm {
  void* comm = nullptr;
  void* mh = nullptr;
  std::vector<uint8_t> arena;
};

// Sends every round of one communicator, kWindow rounds in flight; "" or what failed.
std::string run_sender(ncclNet_v11_t* net, Comm& c, uint32_t seed, int comm, uint64_t* bytes) {
  struct Pending {
    void* req = nullptr;
    size_t len = 0;
  };
  std::vector<std::vector<Pending>> inflight(kWindow, std::vector<Pending>(kMaxN));
  int next = 0, done = 0;
  const auto until = Clock::now() + 120s;
  while (done < kRounds) {
    if (Clock::now() > until) return "sender: no progress within 120 s at round " + std::to_string(done);
    if (next < kRounds && next - done < kWindow) {
      const Round r = plan(seed, comm, next);
      auto& slots = inflight[next % kWindow];
      for (int k = 0; k < r.n; ++k) {
        uint8_t* buf = c.arena.data() + ((next % kWindow) * kMaxN + k) * kMaxCap;
        xport::test::fill(buf, r.len[k], msg_id(comm, next, k));
        void* req = nullptr;
        // isend may say "not now" (NULL request): NCCL calls again.
        if (!poll_until([&] {
              ncclResult_t e = net->isend(c.comm, buf, r.len[k], static_cast<int>(r.msg_tag[k]),
                                          c.mh, nullptr, &req);
              if (e != ncclSuccess) return true;
              return req != nullptr;
            }, 60s) || req == nullptr) {
          return "sender: isend of round " + std::to_string(next) + " message " +
                 std::to_string(k) + " failed: " + warned_since(0);
        }
        slots[k] = {req, r.len[k]};
      }
      ++next;
      continue;
    }
    const Round r = plan(seed, comm, done);
    auto& slots = inflight[done % kWindow];
    bool all = true;
    for (int k = 0; k < r.n; ++k) {
      if (slots[k].req == nullptr) continue;
      int d = 0, size = -1;
      if (net->test(slots[k].req, &d, &size) != ncclSuccess) {
        return "sender: test of round " + std::to_string(done) + " failed: " + warned_since(0);
      }
      if (!d) {
        all = false;
        continue;
      }
      if (static_cast<size_t>(size) != slots[k].len) {
        return "sender: round " + std::to_string(done) + " message " + std::to_string(k) +
               " reports " + std::to_string(size) + " bytes sent, expected " +
               std::to_string(slots[k].len);
      }
      *bytes += slots[k].len;
      slots[k].req = nullptr;
    }
    if (all) ++done;
  }
  return "";
}

std::string run_receiver(ncclNet_v11_t* net, Comm& c, uint32_t seed, int comm, uint64_t* bytes) {
  std::vector<void*> reqs(kWindow, nullptr);
  int next = 0, done = 0;
  const auto until = Clock::now() + 120s;
  while (done < kRounds) {
    if (Clock::now() > until) return "receiver: no progress within 120 s at round " + std::to_string(done);
    if (next < kRounds && next - done < kWindow) {
      const Round r = plan(seed, comm, next);
      void* data[kMaxN];
      size_t sizes[kMaxN];
      int tags[kMaxN];
      void* mhs[kMaxN];
      for (int j = 0; j < r.n; ++j) {
        data[j] = c.arena.data() + ((next % kWindow) * kMaxN + j) * kMaxCap;
        std::memset(data[j], 0xa5, r.caps[j]);
        sizes[j] = r.caps[j];
        tags[j] = static_cast<int>(r.tags[j]);
        mhs[j] = c.mh;
      }
      void* req = nullptr;
      if (net->irecv(c.comm, r.n, data, sizes, tags, mhs, nullptr, &req) != ncclSuccess) {
        return "receiver: irecv of round " + std::to_string(next) + " failed: " + warned_since(0);
      }
      if (req != nullptr) {  // (NULL: not now, called again)
        reqs[next % kWindow] = req;
        ++next;
        continue;
      }
    }
    if (done == next) continue;
    int d = 0;
    int sizes[kMaxN];
    for (int& s : sizes) s = -1;
    if (net->test(reqs[done % kWindow], &d, sizes) != ncclSuccess) {
      return "receiver: test of round " + std::to_string(done) + " failed: " + warned_since(0);
    }
    if (!d) continue;
    const Round r = plan(seed, comm, done);
    for (int k = 0; k < r.n; ++k) {
      const int j = r.target[k];
      if (static_cast<size_t>(sizes[j]) != r.len[k]) {
        return "receiver: round " + std::to_string(done) + " buffer " + std::to_string(j) +
               " (tag " + std::to_string(r.tags[j]) + ") got " + std::to_string(sizes[j]) +
               " bytes, expected message " + std::to_string(k) + "'s " + std::to_string(r.len[k]);
      }
      const auto* p = c.arena.data() + ((done % kWindow) * kMaxN + j) * kMaxCap;
      long long bad = xport::test::first_mismatch(p, r.len[k], msg_id(comm, done, k));
      if (bad >= 0) {
        return "receiver: round " + std::to_string(done) + " buffer " + std::to_string(j) +
               " differs at byte " + std::to_string(bad);
      }
      *bytes += r.len[k];
    }
    ++done;
  }
  return "";
}

int fail(const std::string& why) {
  std::printf("FAIL %s\n", why.c_str());
  std::fflush(stdout);
  return 1;
}

// The sending process: connects to the handles it is given (polled), sends every round of every
// communicator from its own thread, reports its bytes, closes when told.
int peer_main(uint32_t seed) {
  Plugin p;
  if (!p.load()) return fail(p.error);
  std::string line;
  if (!std::getline(std::cin, line) || line.rfind("HANDLES ", 0) != 0) return fail("no handles");
  std::vector<std::vector<uint8_t>> handles;
  for (size_t pos = 8; pos < line.size();) {
    size_t sp = line.find(' ', pos);
    if (sp == std::string::npos) sp = line.size();
    handles.push_back(xport::test::from_hex(line.substr(pos, sp - pos)));
    pos = sp + 1;
  }
  if (handles.size() != kComms) return fail("expected " + std::to_string(kComms) + " handles");
  ncclNetProperties_v11_t props;
  if (p.net->getProperties(0, &props) != ncclSuccess || props.maxRecvs != 8) {
    return fail("maxRecvs " + std::to_string(props.maxRecvs) + " with XPORT_NCCL_MAX_RECVS=8");
  }
  std::vector<Comm> comms(kComms);
  for (auto& h : handles) h.resize(NCCL_NET_HANDLE_MAXSIZE, 0);
  // Every connect polled from one thread, as NCCL's proxy does, until each has its comm.
  const bool connected = poll_until([&] {
    bool all = true;
    for (int i = 0; i < kComms; ++i) {
      if (comms[i].comm != nullptr) continue;
      if (p.net->connect(p.ctx, 0, handles[i].data(), &comms[i].comm, nullptr) != ncclSuccess) {
        return true;
      }
      all = all && comms[i].comm != nullptr;
    }
    return all;
  }, 30s);
  for (auto& c : comms) {
    if (!connected || c.comm == nullptr) return fail("connect: " + warned_since(0));
  }
  for (auto& c : comms) {
    c.arena.assign(kWindow * kMaxN * kMaxCap, 0);
    if (p.net->regMr(c.comm, c.arena.data(), c.arena.size(), NCCL_PTR_HOST, &c.mh) != ncclSuccess) {
      return fail("regMr: " + warned_since(0));
    }
  }
  std::vector<std::string> errors(kComms);
  std::vector<uint64_t> bytes(kComms, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < kComms; ++i) {
    threads.emplace_back([&, i] { errors[i] = run_sender(p.net, comms[i], seed, i, &bytes[i]); });
  }
  for (auto& t : threads) t.join();
  uint64_t total = 0;
  for (int i = 0; i < kComms; ++i) {
    if (!errors[i].empty()) return fail("comm " + std::to_string(i) + ": " + errors[i]);
    total += bytes[i];
  }
  std::printf("SENT %llu\n", static_cast<unsigned long long>(total));
  std::fflush(stdout);
  std::getline(std::cin, line);  // the receiver is done
  for (auto& c : comms) {
    if (p.net->deregMr(c.comm, c.mh) != ncclSuccess) return fail("deregMr: " + warned_since(0));
    if (p.net->closeSend(c.comm) != ncclSuccess) return fail("closeSend: " + warned_since(0));
  }
  p.unload();
  return 0;
}

// ---- the tests (this process receives) ----

struct ProviderCase {
  const char* provider;
  const char* domain;
};

class PluginTest : public ::testing::TestWithParam<ProviderCase> {
 protected:
  void SetUp() override {
    setenv("XPORT_PROVIDER", GetParam().provider, 1);
    if (*GetParam().domain != 0) setenv("XPORT_DOMAIN", GetParam().domain, 1);
    ASSERT_TRUE(p_.load()) << p_.error;
  }
  void TearDown() override {
    p_.unload();
    unsetenv("XPORT_PROVIDER");
    unsetenv("XPORT_DOMAIN");
  }
  std::vector<std::string> peer_env() const {
    std::vector<std::string> env = {std::string("XPORT_PROVIDER=") + GetParam().provider,
                                    "XPORT_NCCL_MAX_RECVS=8"};
    if (*GetParam().domain != 0) env.push_back(std::string("XPORT_DOMAIN=") + GetParam().domain);
    return env;
  }
  // A send and a receive comm of this process connected to each other (polled, one thread).
  void self_connect(void** send, void** recv) {
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void* listen = nullptr;
    ASSERT_EQ(p_.net->listen(p_.ctx, 0, handle, &listen), ncclSuccess) << warned_since(0);
    const bool ok = poll_until([&] {
      if (*send == nullptr &&
          p_.net->connect(p_.ctx, 0, handle, send, nullptr) != ncclSuccess) {
        return true;
      }
      if (*recv == nullptr && p_.net->accept(listen, recv, nullptr) != ncclSuccess) return true;
      return *send != nullptr && *recv != nullptr;
    }, 20s);
    ASSERT_TRUE(ok && *send != nullptr && *recv != nullptr) << warned_since(0);
    EXPECT_EQ(p_.net->closeListen(listen), ncclSuccess);
  }
  Plugin p_;
};

TEST_P(PluginTest, TableAndPropertiesAreWhatNcclExpects) {
  ncclNet_v11_t* n = p_.net;
  EXPECT_STREQ(n->name, "xport");
  for (void* f : {(void*)n->init, (void*)n->devices, (void*)n->getProperties, (void*)n->listen,
                  (void*)n->connect, (void*)n->accept, (void*)n->regMr, (void*)n->regMrDmaBuf,
                  (void*)n->deregMr, (void*)n->isend, (void*)n->irecv, (void*)n->iflush,
                  (void*)n->test, (void*)n->closeSend, (void*)n->closeRecv,
                  (void*)n->closeListen, (void*)n->finalize}) {
    EXPECT_NE(f, nullptr);
  }
  int ndev = 0;
  ASSERT_EQ(n->devices(&ndev), ncclSuccess);
  ASSERT_GE(ndev, 1);
  ncclNetProperties_v11_t props;
  std::memset(&props, 0xff, sizeof(props));
  ASSERT_EQ(n->getProperties(0, &props), ncclSuccess);
  ASSERT_NE(props.name, nullptr);
  EXPECT_GT(std::strlen(props.name), 0u);
  EXPECT_EQ(props.ptrSupport, NCCL_PTR_HOST) << "host memory only: NCCL stages GPU data";
  // Lanes (XPORT_NCCL_LANES > 1) are libxport devices of their own: registrations per comm.
  ASSERT_GE(lanes(), 1) << "init logged no lane count";
  const char* asked = std::getenv("XPORT_NCCL_LANES");
  if (asked != nullptr && std::atoi(asked) > 0) {
    EXPECT_EQ(lanes(), std::atoi(asked));
  }
  EXPECT_EQ(props.regIsGlobal, lanes() == 1 ? 1 : 0);
  EXPECT_EQ(props.forceFlush, 0);
  EXPECT_GT(props.speed, 0);
  EXPECT_EQ(props.maxRecvs, 1) << "XPORT_NCCL_MAX_RECVS's default (the peer process sets 8)";
  EXPECT_GT(props.maxComms, 0);
  EXPECT_EQ(props.netDeviceType, NCCL_NET_DEVICE_HOST);
  EXPECT_GT(props.maxP2pBytes, 0u);
  EXPECT_LE(props.maxP2pBytes, static_cast<size_t>(NCCL_MAX_NET_SIZE_BYTES));
  EXPECT_NE(n->getProperties(ndev, &props), ncclSuccess) << "a device that does not exist";
  // init/finalize are per NCCL communicator: a second one shares the devices.
  void* ctx2 = nullptr;
  ncclNetCommConfig_v11_t config{NCCL_NET_TRAFFIC_CLASS_UNDEF};
  ASSERT_EQ(n->init(&ctx2, 99, &config, logger, nullptr), ncclSuccess);
  int ndev2 = 0;
  EXPECT_EQ(n->devices(&ndev2), ncclSuccess);
  EXPECT_EQ(ndev2, ndev);
  EXPECT_EQ(n->finalize(ctx2), ncclSuccess);
  EXPECT_EQ(n->devices(&ndev2), ncclSuccess) << "the first context is still there";
  // NCCL may keep the strings getProperties gave after the last finalize closed the device.
  const std::string name = props.name;
  const char* kept = props.name;
  ASSERT_EQ(n->finalize(p_.ctx), ncclSuccess);
  p_.ctx = nullptr;
  EXPECT_EQ(name, kept);
  EXPECT_NE(n->devices(&ndev2), ncclSuccess) << "devices after the last finalize";
  ASSERT_EQ(n->init(&p_.ctx, 0x1234, &config, logger, nullptr), ncclSuccess) << "init again";
  ncclNetProperties_v11_t again;
  ASSERT_EQ(n->getProperties(0, &again), ncclSuccess);
  EXPECT_STREQ(again.name, name.c_str());
}

TEST_P(PluginTest, TwoProcessesGroupedReceivesEveryByteVerified) {
  const char* self = std::getenv("XTEST_SELF");
  ASSERT_NE(self, nullptr) << "XTEST_SELF (this test binary's path) is not set";
  const uint32_t seed = 20261122;
  auto child = xport::test::ChildProcess::spawn({self, "--peer", std::to_string(seed)}, peer_env());
  ASSERT_TRUE(child.started());
  std::vector<Comm> comms(kComms);
  std::vector<void*> listens(kComms, nullptr);
  std::string line = "HANDLES";
  for (int i = 0; i < kComms; ++i) {
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    ASSERT_EQ(p_.net->listen(p_.ctx, 0, handle, &listens[i]), ncclSuccess) << warned_since(0);
    line += " " + hex(handle, sizeof(handle));
  }
  ASSERT_TRUE(child.write_line(line));
  // accept polled, as NCCL does, while the peer polls its connects.
  const bool accepted = poll_until([&] {
    bool all = true;
    for (int i = 0; i < kComms; ++i) {
      if (comms[i].comm != nullptr) continue;
      if (p_.net->accept(listens[i], &comms[i].comm, nullptr) != ncclSuccess) return true;
      all = all && comms[i].comm != nullptr;
    }
    return all;
  }, 30s);
  if (!accepted) {
    std::string err;
    const std::string peer = child.read_line(2000, &err);
    FAIL() << "no connection within 30 s; here: " << warned_since(0) << "; the peer: " << peer
           << err;
  }
  for (auto& c : comms) {
    ASSERT_NE(c.comm, nullptr) << warned_since(0);
    c.arena.assign(kWindow * kMaxN * kMaxCap, 0);
    ASSERT_EQ(p_.net->regMr(c.comm, c.arena.data(), c.arena.size(), NCCL_PTR_HOST, &c.mh),
              ncclSuccess) << warned_since(0);
  }
  for (void* l : listens) EXPECT_EQ(p_.net->closeListen(l), ncclSuccess);
  std::vector<std::string> errors(kComms);
  std::vector<uint64_t> bytes(kComms, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < kComms; ++i) {
    threads.emplace_back([&, i] { errors[i] = run_receiver(p_.net, comms[i], seed, i, &bytes[i]); });
  }
  for (auto& t : threads) t.join();
  uint64_t total = 0;
  for (int i = 0; i < kComms; ++i) {
    EXPECT_EQ(errors[i], "") << "comm " << i;
    total += bytes[i];
  }
  std::string err;
  std::string sent = child.read_line(60000, &err);
  EXPECT_EQ(sent, "SENT " + std::to_string(total)) << err;
  child.write_line("DONE");
  EXPECT_EQ(child.wait_exit(30000), 0);
  for (auto& c : comms) {
    EXPECT_EQ(p_.net->deregMr(c.comm, c.mh), ncclSuccess) << warned_since(0);
    EXPECT_EQ(p_.net->closeRecv(c.comm), ncclSuccess);
  }
  std::printf("%d communicators, %d grouped receives each, %llu bytes verified\n", kComms, kRounds,
              static_cast<unsigned long long>(total));
}

// NCCL's proxy thread posts and tests while the lanes' threads drive their devices: every isend
// and irecv gives a request (NCCL never has more than NCCL_STEPS outstanding per comm here), and
// the messages arrive whole, in order. Before (issue 42) a lane's device was taken by the proxy
// thread's calls only while its thread did not hold it, and a thread spinning on progress
// passes holds it nearly always: posts were refused (NCCL calls again) and tests answered "not
// done" until a call happened to fall between two passes.
TEST_P(PluginTest, PostsAreTakenWhileTheLanesDriveTheirDevices) {
  ncclNet_v11_t* n = p_.net;
  void* send = nullptr;
  void* recv = nullptr;
  self_connect(&send, &recv);
  ASSERT_TRUE(send && recv);
  constexpr size_t kChunk = 128 * 1024;  // NCCL_P2P_NET_CHUNKSIZE
  constexpr uint64_t kWindow = 8;        // NCCL_STEPS
  constexpr uint64_t kMessages = 256;
  std::vector<uint8_t> sbuf(kChunk * kWindow), rbuf(kChunk * kWindow);
  void* smh = nullptr;
  void* rmh = nullptr;
  ASSERT_EQ(n->regMr(send, sbuf.data(), sbuf.size(), NCCL_PTR_HOST, &smh), ncclSuccess);
  ASSERT_EQ(n->regMr(recv, rbuf.data(), rbuf.size(), NCCL_PTR_HOST, &rmh), ncclSuccess);
  void* sreqs[kWindow] = {};
  void* rreqs[kWindow] = {};
  uint64_t sposted = 0, sdone = 0, rposted = 0, rdone = 0, refused = 0, tests = 0;
  std::string err;
  const bool finished = poll_until([&] {
    if (rposted < kMessages && rposted - rdone < kWindow) {
      void* data = rbuf.data() + (rposted % kWindow) * kChunk;
      size_t size = kChunk;
      int tag = 7;
      if (n->irecv(recv, 1, &data, &size, &tag, &rmh, nullptr, &rreqs[rposted % kWindow]) !=
          ncclSuccess) {
        err = "irecv: " + warned_since(0);
        return true;
      }
      if (rreqs[rposted % kWindow] == nullptr) ++refused;
      else ++rposted;
    }
    if (sposted < kMessages && sposted - sdone < kWindow) {
      uint8_t* data = sbuf.data() + (sposted % kWindow) * kChunk;
      std::memset(data, static_cast<int>(sposted * 37 + 1), kChunk);
      if (n->isend(send, data, kChunk, 7, smh, nullptr, &sreqs[sposted % kWindow]) !=
          ncclSuccess) {
        err = "isend: " + warned_since(0);
        return true;
      }
      if (sreqs[sposted % kWindow] == nullptr) ++refused;
      else ++sposted;
    }
    if (sdone < sposted) {
      int d = 0, size = 0;
      ++tests;
      if (n->test(sreqs[sdone % kWindow], &d, &size) != ncclSuccess) {
        err = "test (send): " + warned_since(0);
        return true;
      }
      if (d) ++sdone;
    }
    if (rdone < rposted) {
      int d = 0, size = 0;
      ++tests;
      if (n->test(rreqs[rdone % kWindow], &d, &size) != ncclSuccess) {
        err = "test (recv): " + warned_since(0);
        return true;
      }
      if (d) {
        const uint8_t* data = rbuf.data() + (rdone % kWindow) * kChunk;
        const auto want = static_cast<uint8_t>(rdone * 37 + 1);
        if (size != static_cast<int>(kChunk)) err = "message " + std::to_string(rdone) + ": " +
                                                    std::to_string(size) + " bytes";
        for (size_t i = 0; i < kChunk && err.empty(); i += 4093) {
          if (data[i] != want || data[kChunk - 1] != want) {
            err = "message " + std::to_string(rdone) + ": wrong bytes";
          }
        }
        if (!err.empty()) return true;
        ++rdone;
      }
    }
    return sdone == kMessages && rdone == kMessages;
  }, 60s);
  EXPECT_TRUE(finished) << sdone << " sends and " << rdone << " receives of " << kMessages
                        << " done in 60 s";
  EXPECT_EQ(err, "");
  EXPECT_EQ(refused, 0u) << "isend/irecv calls that gave no request, with fewer than "
                         << kWindow << " outstanding on the comm (" << lanes() << " lanes)";
  std::printf("%d lanes: %llu messages of %zu bytes, %llu posts refused, %.1f tests per "
              "request\n", lanes(), static_cast<unsigned long long>(kMessages), kChunk,
              static_cast<unsigned long long>(refused), tests / (2.0 * kMessages));
  EXPECT_EQ(n->deregMr(send, smh), ncclSuccess);
  EXPECT_EQ(n->deregMr(recv, rmh), ncclSuccess);
  EXPECT_EQ(n->closeSend(send), ncclSuccess);
  EXPECT_EQ(n->closeRecv(recv), ncclSuccess);
}

// NCCL may finalize with comms it never closed and requests still outstanding on them (an
// aborted communicator): finalize returns, whatever the lanes (a lane's helper thread stops
// with requests still counted).
TEST_P(PluginTest, FinalizeWithARequestOutstandingReturns) {
  ncclNet_v11_t* n = p_.net;
  void* send = nullptr;
  void* recv = nullptr;
  self_connect(&send, &recv);
  ASSERT_TRUE(send && recv);
  // Never freed: NCCL does not close the comms either (kept reachable for LeakSanitizer, by
  // pointers that no static destructor clears before it looks).
  static auto* kept = new std::vector<std::vector<uint8_t>>;
  static auto* kept_comms = new std::vector<void*>;
  kept->emplace_back(1 << 20, 3);
  std::vector<uint8_t>& buf = kept->back();
  void* mh = nullptr;
  ASSERT_EQ(n->regMr(send, buf.data(), buf.size(), NCCL_PTR_HOST, &mh), ncclSuccess);
  void* sreq = nullptr;
  ASSERT_TRUE(poll_until([&] {  // a rendezvous-sized send nobody receives
    return n->isend(send, buf.data(), buf.size(), 0, mh, nullptr, &sreq) != ncclSuccess ||
           sreq != nullptr;
  }, 20s));
  ASSERT_NE(sreq, nullptr) << warned_since(0);
  kept_comms->insert(kept_comms->end(), {send, recv, mh, sreq});
  int done = 1;
  ASSERT_EQ(n->test(sreq, &done, nullptr), ncclSuccess);
  EXPECT_EQ(done, 0);
  auto finished = std::make_shared<std::promise<void>>();
  std::future<void> fin = finished->get_future();
  std::thread([this, finished] {
    p_.unload();
    finished->set_value();
  }).detach();
  if (fin.wait_for(20s) != std::future_status::ready) {
    // (A hung finalize cannot be undone: the process ends here, saying why.)
    std::fprintf(stderr, "FAILED: finalize with a request outstanding did not return within "
                 "20 s\n");
    std::fflush(stderr);
    std::_Exit(1);
  }
}

// connect keeps its attempt in the handle's last 24 bytes (NCCL calls again with the same
// buffer): a record with the plugin's tag but a bogus id (once a raw PendingConnect*, called
// through) is refused with an error, and a live attempt's record copied onto another handle
// is refused without disturbing the attempt.
TEST_P(PluginTest, ConnectRecordsInHandlesAreCheckedNeverCalledThrough) {
  setenv("XTEST_QUIET_WARN", "1", 1);
  ncclNet_v11_t* n = p_.net;
  constexpr size_t kRecord = NCCL_NET_HANDLE_MAXSIZE - 24;
  constexpr uint64_t kTag = 0x4547415453525058ull;  // "XPRSTAGE", the plugin's tag
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* listen = nullptr;
  ASSERT_EQ(n->listen(p_.ctx, 0, handle, &listen), ncclSuccess) << warned_since(0);
  for (uint64_t bogus : {uint64_t{0x10}, uint64_t{0x4141414141414141}, uint64_t{0}}) {
    char forged[NCCL_NET_HANDLE_MAXSIZE];
    std::memcpy(forged, handle, sizeof(forged));
    const uint64_t record[3] = {kTag, bogus, bogus};
    std::memcpy(forged + kRecord, record, sizeof(record));
    void* send = nullptr;
    const size_t mark = log_mark();
    EXPECT_EQ(n->connect(p_.ctx, 0, forged, &send, nullptr), ncclInvalidArgument) << bogus;
    EXPECT_EQ(send, nullptr);
    EXPECT_NE(warned_since(mark).find("connect"), std::string::npos) << warned_since(mark);
  }
  // A live attempt's record on another listener's handle.
  char other[NCCL_NET_HANDLE_MAXSIZE];
  void* listen2 = nullptr;
  ASSERT_EQ(n->listen(p_.ctx, 0, other, &listen2), ncclSuccess) << warned_since(0);
  char a[NCCL_NET_HANDLE_MAXSIZE];
  std::memcpy(a, handle, sizeof(a));
  void* send = nullptr;
  ASSERT_EQ(n->connect(p_.ctx, 0, a, &send, nullptr), ncclSuccess) << warned_since(0);
  if (send == nullptr) {
    uint64_t tag = 0;
    std::memcpy(&tag, a + kRecord, sizeof(tag));
    EXPECT_EQ(tag, kTag) << "an attempt in progress keeps its record in the handle";
    std::memcpy(other + kRecord, a + kRecord, 24);
    void* stolen = nullptr;
    const size_t mark = log_mark();
    EXPECT_EQ(n->connect(p_.ctx, 0, other, &stolen, nullptr), ncclInvalidArgument);
    EXPECT_EQ(stolen, nullptr);
    EXPECT_NE(warned_since(mark).find("another handle"), std::string::npos) << warned_since(mark);
  } else {
    std::cout << "(the connect completed in its first call: no record to copy)\n";
  }
  void* recv = nullptr;
  const bool ok = poll_until([&] {
    if (send == nullptr && n->connect(p_.ctx, 0, a, &send, nullptr) != ncclSuccess) return true;
    if (recv == nullptr && n->accept(listen, &recv, nullptr) != ncclSuccess) return true;
    return send != nullptr && recv != nullptr;
  }, 20s);
  EXPECT_TRUE(ok && send != nullptr && recv != nullptr) << "the attempt itself went on: "
                                                         << warned_since(0);
  if (send != nullptr) {
    EXPECT_EQ(n->closeSend(send), ncclSuccess);
  }
  if (recv != nullptr) {
    EXPECT_EQ(n->closeRecv(recv), ncclSuccess);
  }
  EXPECT_EQ(n->closeListen(listen), ncclSuccess);
  EXPECT_EQ(n->closeListen(listen2), ncclSuccess);
  unsetenv("XTEST_QUIET_WARN");
}

TEST_P(PluginTest, BadInputGetsNcclErrorsAndAMessage) {
  setenv("XTEST_QUIET_WARN", "1", 1);
  ncclNet_v11_t* n = p_.net;
  // A corrupted handle: refused by connect with a reason, before anything is sent.
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* listen = nullptr;
  ASSERT_EQ(n->listen(p_.ctx, 0, handle, &listen), ncclSuccess);
  for (size_t at : {size_t{0}, size_t{9}, size_t{20}, size_t{40}, size_t{100}}) {
    char bad[NCCL_NET_HANDLE_MAXSIZE];
    std::memcpy(bad, handle, sizeof(bad));
    bad[at] ^= 0x5a;
    void* send = nullptr;
    const size_t mark = log_mark();
    ncclResult_t r = n->connect(p_.ctx, 0, bad, &send, nullptr);
    EXPECT_EQ(r, ncclInvalidArgument) << "byte " << at;
    EXPECT_EQ(send, nullptr);
    EXPECT_NE(warned_since(mark).find("handle"), std::string::npos) << warned_since(mark);
  }
  EXPECT_EQ(n->closeListen(listen), ncclSuccess);
  void* send = nullptr;
  void* recv = nullptr;
  self_connect(&send, &recv);
  ASSERT_TRUE(send && recv);
  std::vector<uint8_t> buf(1 << 20, 7);
  void* mh = nullptr;
  ASSERT_EQ(n->regMr(send, buf.data(), buf.size(), NCCL_PTR_HOST, &mh), ncclSuccess);
  void* req = nullptr;
  // NULL, foreign and stale mhandles.
  size_t mark = log_mark();
  EXPECT_EQ(n->isend(send, buf.data(), 64, 0, nullptr, nullptr, &req), ncclInvalidArgument);
  EXPECT_NE(warned_since(mark).find("NULL mhandle"), std::string::npos) << warned_since(mark);
  uint64_t fake[8] = {0x21524d54524f5058ull, 1, 2, 3, 4, 5, 6, 7};  // looks like one, is not
  mark = log_mark();
  EXPECT_EQ(n->isend(send, buf.data(), 64, 0, fake, nullptr, &req), ncclInvalidArgument);
  EXPECT_NE(warned_since(mark).find("not a registration"), std::string::npos) << warned_since(mark);
  void* stale = nullptr;
  ASSERT_EQ(n->regMr(recv, buf.data(), 4096, NCCL_PTR_HOST, &stale), ncclSuccess);
  ASSERT_EQ(n->deregMr(recv, stale), ncclSuccess);
  size_t sz = 64;
  int tag = 0;
  void* data = buf.data();
  EXPECT_EQ(n->irecv(recv, 1, &data, &sz, &tag, &stale, nullptr, &req), ncclInvalidArgument);
  EXPECT_EQ(n->deregMr(recv, stale), ncclInvalidArgument) << "deregistered twice";
  EXPECT_EQ(req, nullptr);
  if (lanes() > 1) {
    // The two comms are on different lanes (taken in turn): a registration made through one is
    // refused on the other, with a reason.
    mark = log_mark();
    EXPECT_EQ(n->irecv(recv, 1, &data, &sz, &tag, &mh, nullptr, &req), ncclInvalidArgument);
    EXPECT_NE(warned_since(mark).find("lane"), std::string::npos) << warned_since(mark);
    EXPECT_EQ(req, nullptr);
  }
  // Buffers outside their registration, bad counts, CUDA memory, bad requests and comms.
  EXPECT_EQ(n->isend(send, buf.data() + buf.size() - 8, 64, 0, mh, nullptr, &req),
            ncclInvalidArgument);
  void* mhs[9] = {mh, mh, mh, mh, mh, mh, mh, mh, mh};
  void* datas[9] = {data, data, data, data, data, data, data, data, data};
  size_t sizes[9] = {64, 64, 64, 64, 64, 64, 64, 64, 64};
  int tags[9] = {};
  EXPECT_EQ(n->irecv(recv, 9, datas, sizes, tags, mhs, nullptr, &req), ncclInvalidArgument);
  EXPECT_EQ(n->irecv(recv, 0, datas, sizes, tags, mhs, nullptr, &req), ncclInvalidArgument);
  void* cuda = nullptr;
  mark = log_mark();
  EXPECT_EQ(n->regMr(send, buf.data(), buf.size(), NCCL_PTR_CUDA, &cuda), ncclInvalidUsage);
  EXPECT_NE(warned_since(mark).find("host memory only"), std::string::npos) << warned_since(mark);
  EXPECT_EQ(n->regMr(send, nullptr, 0, NCCL_PTR_HOST, &cuda), ncclInvalidArgument);
  int done = 0;
  EXPECT_EQ(n->test(nullptr, &done, nullptr), ncclInvalidArgument);
  EXPECT_EQ(n->test(fake, &done, nullptr), ncclInvalidArgument);
  EXPECT_EQ(n->isend(fake, buf.data(), 64, 0, mh, nullptr, &req), ncclInvalidArgument);
  EXPECT_EQ(n->closeSend(recv), ncclInvalidArgument) << "a recv comm closed as a send comm";
  // A send larger than its receive: the receive fails (and a rendezvous send too); the comms
  // go on.
  void* rmh = nullptr;
  ASSERT_EQ(n->regMr(recv, buf.data(), buf.size(), NCCL_PTR_HOST, &rmh), ncclSuccess);
  for (size_t len : {size_t{1000}, size_t{300000}}) {
    void* rreq = nullptr;
    void* sreq = nullptr;
    size_t cap = len / 2;
    // (A NULL request means "not now": NCCL calls again, as with lanes while the lane's
    // helper holds its device.)
    ASSERT_TRUE(poll_until([&] {
      return n->irecv(recv, 1, &data, &cap, &tag, &rmh, nullptr, &rreq) != ncclSuccess ||
             rreq != nullptr;
    }, 20s));
    ASSERT_NE(rreq, nullptr);
    ASSERT_TRUE(poll_until([&] {
      return n->isend(send, buf.data() + 500000, len, 0, mh, nullptr, &sreq) != ncclSuccess ||
             sreq != nullptr;
    }, 20s));
    ASSERT_NE(sreq, nullptr);
    ncclResult_t rr = ncclSuccess, sr = ncclSuccess;
    int rdone = 0, sdone = 0;
    mark = log_mark();
    ASSERT_TRUE(poll_until([&] {
      if (!rdone && rr == ncclSuccess) rr = n->test(rreq, &rdone, nullptr);
      if (!sdone && sr == ncclSuccess) sr = n->test(sreq, &sdone, nullptr);
      return (rdone || rr != ncclSuccess) && (sdone || sr != ncclSuccess);
    }, 20s)) << len << " bytes into " << cap;
    EXPECT_EQ(rr, ncclInvalidUsage) << len << " bytes into " << cap << ": " << warned_since(mark);
    if (len > 8192) {
      EXPECT_EQ(sr, ncclInvalidUsage) << "a rendezvous send into a smaller receive";
    } else {
      EXPECT_EQ(sr, ncclSuccess) << "an eager send completes locally";
    }
    EXPECT_NE(warned_since(mark).find("bytes"), std::string::npos) << warned_since(mark);
  }
  // ... and the next exchange works.
  void* rreq = nullptr;
  void* sreq = nullptr;
  size_t cap = 4096;
  ASSERT_TRUE(poll_until([&] {
    return n->irecv(recv, 1, &data, &cap, &tag, &rmh, nullptr, &rreq) != ncclSuccess ||
           rreq != nullptr;
  }, 20s));
  ASSERT_NE(rreq, nullptr);
  ASSERT_TRUE(poll_until([&] {
    return n->isend(send, buf.data() + 500000, 4096, 0, mh, nullptr, &sreq) != ncclSuccess ||
           sreq != nullptr;
  }, 20s));
  int rdone = 0, sdone = 0, rsize = 0;
  ASSERT_TRUE(poll_until([&] {
    if (!rdone) {
      EXPECT_EQ(n->test(rreq, &rdone, &rsize), ncclSuccess);
    }
    if (!sdone) {
      EXPECT_EQ(n->test(sreq, &sdone, nullptr), ncclSuccess);
    }
    return rdone && sdone;
  }, 20s));
  EXPECT_EQ(rsize, 4096);
  // iflush of what was received: a request test() completes; nothing received, no request.
  void* freq = nullptr;
  int fsize = rsize;
  ASSERT_EQ(n->iflush(recv, 1, &data, &fsize, &rmh, &freq), ncclSuccess) << warned_since(0);
  ASSERT_NE(freq, nullptr);
  int fdone = 0;
  ASSERT_TRUE(poll_until([&] {
    return n->test(freq, &fdone, nullptr) != ncclSuccess || fdone;
  }, 20s));
  EXPECT_EQ(fdone, 1) << warned_since(0);
  int zero = 0;
  freq = &zero;
  EXPECT_EQ(n->iflush(recv, 1, &data, &zero, &rmh, &freq), ncclSuccess);
  EXPECT_EQ(freq, nullptr) << "nothing to flush: NULL request";
  EXPECT_EQ(n->iflush(send, 1, &data, &fsize, &rmh, &freq), ncclInvalidArgument)
      << "iflush on a send comm";
  EXPECT_EQ(n->deregMr(send, mh), ncclSuccess);
  EXPECT_EQ(n->deregMr(recv, rmh), ncclSuccess);
  EXPECT_EQ(n->closeSend(send), ncclSuccess);
  EXPECT_EQ(n->closeRecv(recv), ncclSuccess);
  unsetenv("XTEST_QUIET_WARN");
}

INSTANTIATE_TEST_SUITE_P(Providers, PluginTest,
                         ::testing::Values(ProviderCase{"shm", ""},
                                           ProviderCase{"tcp;ofi_rxm", "lo"}),
                         [](const ::testing::TestParamInfo<ProviderCase>& i) {
                           return std::string(i.param.provider) == "shm" ? "shm" : "tcp_ofi_rxm";
                         });

}  // namespace

int bench_main(int argc, char** argv);

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "--peer") return peer_main(std::stoul(argv[2]));
  if (argc >= 2 && std::string(argv[1]).rfind("--bench", 0) == 0) return bench_main(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
