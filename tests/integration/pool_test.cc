// The channel pool between two processes: 64 communicators to one peer over shared channels
// (XPORT_POOL_GROUPS 0, 1, 2 and 4, channels per group so that 4 channels carry them), sends of
// random sizes interleaved across the communicators, receives interleaved at the peer, every
// byte verified and matched per communicator in posting order (pool-recv in peer_main.cc).
// The pool counters of both ends are checked against what the test did: on connected
// endpoints (tcp) the channels are connections, 4 of them (64 without sharing); on RDM
// providers every communicator shares the rail's endpoints, and without sharing (8
// communicators there) each opens endpoints of its own. The pool-strict test runs it over
// the strict provider as hardware would be: 4-byte remote CQ data, FI_MR_ENDPOINT, completions
// reordered and delayed.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/knob.hpp"
#include "harness.hpp"
#include "provider_fixture.hpp"
#include "xport/xport.hpp"

namespace xport {
namespace {

using namespace std::chrono_literals;

constexpr size_t kManyComms = 64;
// RDM without sharing every communicator opens endpoints of its own, which cost tens of MiB
// each in the provider (docs/benchmarks.md): 8 of them there.
constexpr size_t kOwnEndpointComms = 8;
constexpr size_t kMessages = 40;  // per communicator
constexpr size_t kMax = 96 * 1024;
constexpr size_t kDepth = 4;

struct PoolParam {
  const char* provider;
  int groups;
};

std::string param_name(const ::testing::TestParamInfo<PoolParam>& info) {
  return test::param_safe(std::string(info.param.provider) + "_groups" +
                          std::to_string(info.param.groups));
}

class Pool : public ::testing::TestWithParam<PoolParam> {
 protected:
  // Channels per group: 4 channels carry the 64 communicators whatever the groups.
  static int channels_per_group(int groups) { return groups == 0 ? 1 : 4 / groups; }

  void SetUp() override {
    const bool strict = std::string(GetParam().provider) == "strict";
    if (strict != (std::getenv("FI_PROVIDER_PATH") != nullptr)) {
      GTEST_SKIP() << (strict ? "the strict provider runs only in the pool-strict test"
                              : "the pool-strict test runs only the strict provider");
    }
    setenv("XPORT_PROVIDER", GetParam().provider, 1);
    setenv("XPORT_POOL_GROUPS", std::to_string(GetParam().groups).c_str(), 1);
    setenv("XPORT_POOL_CHANNELS", std::to_string(channels_per_group(GetParam().groups)).c_str(),
           1);
    core::reload_knobs();
    test::open_context_and_device(GetParam().provider, ctx_, dev_);
  }
  void TearDown() override {
    dev_.reset();
    ctx_.reset();
    for (const char* k : {"XPORT_PROVIDER", "XPORT_POOL_GROUPS", "XPORT_POOL_CHANNELS"}) {
      unsetenv(k);
    }
    core::reload_knobs();
  }

  test::ChildProcess peer(const std::vector<std::string>& args) { return test::spawn_peer(args); }
  std::string expect_line(test::ChildProcess& p, const std::string& prefix, int ms = 60000) {
    return test::expect_peer_line(p, *dev_, prefix, ms);
  }
  // `n` communicators to the listener of `handle`, appended to `comms`.
  void connect_many(const std::vector<uint8_t>& handle, size_t n,
                    std::vector<std::unique_ptr<SendComm>>& comms) {
    for (size_t i = 0; i < n; ++i) {
      auto c = dev_->connect(handle, Deadline::after(30s));
      ASSERT_TRUE(c.ok()) << "connect " << i << ": " << c.status().to_string();
      comms.push_back(std::move(c).value());
    }
  }

  bool connected_endpoints() const { return std::string(GetParam().provider) == "tcp"; }
  // RDM without sharing: each communicator opens data endpoints of its own (not under
  // FI_MR_ENDPOINT, which the strict provider requires).
  bool own_endpoints() const {
    return !connected_endpoints() && GetParam().groups == 0 &&
           std::string(GetParam().provider) != "strict";
  }
  size_t comm_count() const { return own_endpoints() ? kOwnEndpointComms : kManyComms; }

  std::unique_ptr<Context> ctx_;
  std::unique_ptr<Device> dev_;
};

TEST_P(Pool, SixtyFourCommunicatorsShareFourChannelsEveryMessageItsOwn) {
  const size_t kComms = comm_count();
  const uint32_t seed = 4242;
  auto p = peer({"pool-recv", std::to_string(kComms), std::to_string(kMessages),
                 std::to_string(seed), std::to_string(kMax)});
  ASSERT_TRUE(p.started());
  const auto handle = test::from_hex(expect_line(p, "HANDLE "));
  std::vector<std::unique_ptr<SendComm>> comms;
  const size_t stride = kMax + 1;
  std::vector<uint8_t> mem(kComms * kDepth * stride);
  auto reg = dev_->register_memory(mem.data(), mem.size());
  ASSERT_TRUE(reg.ok()) << reg.status().to_string();
  // Heads: each communicator says which it is (the peer accepts them in any order), as soon as
  // it is connected: the peer waits at most 20 s for each one's head, whatever all the connects
  // take (unshared RDM communicators open endpoints at both ends; ThreadSanitizer).
  std::vector<Request> heads;
  for (size_t o = 0; o < kComms; ++o) {
    ASSERT_NO_FATAL_FAILURE(connect_many(handle, 1, comms));
    uint8_t* b = mem.data() + o * kDepth * stride;
    const uint64_t ordinal = o;
    std::memcpy(b, &ordinal, sizeof(ordinal));
    auto r = comms[o]->isend(b, sizeof(ordinal), *reg);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    heads.push_back(*r);
  }
  for (size_t o = 0; o < kComms; ++o) {
    auto got = comms[o]->wait(heads[o], Deadline::after(30s));
    ASSERT_TRUE(got.ok()) << "head " << o << ": " << got.status().to_string();
  }
  // Messages: the communicators in random order, up to kDepth in flight on each.
  std::vector<std::vector<size_t>> sizes(kComms);
  for (size_t o = 0; o < kComms; ++o) sizes[o] = test::message_sizes(seed + o, kMessages, kMax);
  std::vector<size_t> posted(kComms), done(kComms);
  std::vector<std::array<Request, kDepth>> reqs(kComms);
  std::mt19937 rng(seed * 7);
  size_t total = 0;
  const auto until = Deadline::after(120s);
  while (total < kComms * kMessages) {
    ASSERT_FALSE(until.expired()) << "only " << total << " of " << kComms * kMessages
                                  << " sends completed within 120 s";
    const size_t o = rng() % kComms;
    SendComm& c = *comms[o];
    if (posted[o] < kMessages && posted[o] - done[o] < kDepth) {
      const size_t k = posted[o];
      uint8_t* b = mem.data() + (o * kDepth + k % kDepth) * stride;
      test::fill(b, sizes[o][k], o * 100000 + k);
      auto r = c.isend(b, sizes[o][k], *reg);
      ASSERT_TRUE(r.ok()) << "isend " << o << "/" << k << ": " << r.status().to_string();
      reqs[o][k % kDepth] = *r;
      ++posted[o];
    }
    if (done[o] == posted[o]) continue;
    auto t = c.test(reqs[o][done[o] % kDepth]);
    ASSERT_TRUE(t.ok()) << "send " << o << "/" << done[o] << ": " << t.status().to_string();
    if (!t->done) continue;
    ASSERT_EQ(t->bytes, sizes[o][done[o]]);
    ++done[o];
    ++total;
  }
  // The peer verified every message; its pool counters and ours against what was done.
  std::istringstream in(expect_line(p, "STATS "));
  std::map<std::string, uint64_t> peer_pool;
  for (std::string key; in >> key;) in >> peer_pool[key];
  EXPECT_EQ(expect_line(p, "OK "), std::to_string(kComms * kMessages));
  const PoolStats mine = dev_->stats().pool;
  EXPECT_EQ(mine.groups, static_cast<uint32_t>(GetParam().groups));
  EXPECT_EQ(mine.comms_attached, kComms);
  EXPECT_EQ(mine.routing_misses, 0u);
  EXPECT_EQ(peer_pool["misses"], 0u);
  EXPECT_EQ(peer_pool["attached"], kComms);
  EXPECT_EQ(mine.primaries + mine.secondaries, kComms);
  EXPECT_EQ(peer_pool["primaries"] + peer_pool["secondaries"], kComms);
  EXPECT_GE(mine.channel_ops, kComms * (kMessages + 1));
  if (connected_endpoints()) {
    // A channel is a connection: 4 carry the 64 communicators (64 without sharing).
    const uint64_t expected = GetParam().groups == 0 ? kComms : 4;
    EXPECT_EQ(mine.channels, expected) << "connections at the connecting end";
    EXPECT_EQ(mine.primaries, expected);
    EXPECT_EQ(peer_pool["channels"], expected) << "connections at the accepting end";
    EXPECT_EQ(peer_pool["primaries"], expected);
    EXPECT_LE(mine.busiest_channel_ops, mine.channel_ops);
    // Shared connections post more receive buffers (XPORT_POOL_DEPTH_MULTIPLIER): never more
    // than the endpoint's receive queue takes, or progress retries the rest for ever.
    uint64_t eagain = 0;
    for (const EndpointStats& e : dev_->stats().endpoints) eagain += e.eagain_retries;
    EXPECT_LT(eagain, 10000u) << "posts refused with -FI_EAGAIN on the connections";
  } else if (own_endpoints()) {
    // RDM without sharing: every communicator has a data endpoint of its own on each rail, at
    // both ends (besides the peer's shared channels, which carry control messages).
    const uint64_t rails = dev_->stats().rails.size();
    EXPECT_EQ(mine.primaries, kComms);
    EXPECT_EQ(peer_pool["primaries"], kComms);
    EXPECT_GE(mine.channels, kComms * rails);
    EXPECT_LE(mine.channels, kComms * rails + 2 * rails);
    EXPECT_GE(peer_pool["channels"], kComms * rails);
    EXPECT_GE(dev_->stats().endpoints.size(), kComms * rails);
    EXPECT_GE(peer_pool["endpoints"], kComms * rails);
  } else {
    // RDM: the rail's endpoints carry every communicator; the first made the peer's channels.
    EXPECT_EQ(mine.primaries, 1u);
    EXPECT_EQ(peer_pool["primaries"], 1u);
    EXPECT_GE(mine.channels, 1u);
    EXPECT_LE(mine.channels, 2u * dev_->stats().rails.size());
  }
  comms.clear();
  ASSERT_TRUE(p.write_line("bye"));
  EXPECT_EQ(p.wait_exit(30000), 0);
  // Every channel goes with its last communicator (the accepting end's with the connector's
  // shutdown).
  if (connected_endpoints()) {
    const auto gone = Deadline::after(10s);
    while (dev_->stats().pool.channels != 0 && !gone.expired()) (void)dev_->progress();
    EXPECT_EQ(dev_->stats().pool.channels, 0u) << "connections left after every comm closed";
  } else if (own_endpoints()) {
    // The communicators' own endpoints close with them; the peer's shared channels stay until
    // it is retired.
    const uint64_t rails = dev_->stats().rails.size();
    const uint64_t shared_endpoints = dev_->stats().rails.size() * 2;
    const auto gone = Deadline::after(10s);
    while ((dev_->stats().pool.channels > 2 * rails ||
            dev_->stats().endpoints.size() > shared_endpoints) &&
           !gone.expired()) {
      (void)dev_->progress();
    }
    EXPECT_LE(dev_->stats().pool.channels, 2 * rails) << "own channels left after every comm closed";
    EXPECT_LE(dev_->stats().endpoints.size(), shared_endpoints)
        << "own endpoints left after every comm closed";
  }
}

// What sharing saves, both ends: file descriptors, endpoints and registered bounce buffers grow
// with the channels, not with the communicators. On connected endpoints (tcp) a channel is a
// connection: 256 communicators over 8 against 256 connections. On RDM providers shared
// communicators use the rail's endpoints whatever their number; unshared ones open endpoints of
// their own (8 of them here: each costs the provider tens of MiB). The figures are printed
// ("[ footprint ]") and recorded in docs/benchmarks.md.
TEST_P(Pool, FootprintGrowsWithChannelsNotCommunicators) {
  const bool strict = std::string(GetParam().provider) == "strict";
  if (GetParam().groups > 1 || strict) {
    GTEST_SKIP() << "measured with one group and without sharing, not on the strict provider";
  }
  const bool rdm = !connected_endpoints();
  const size_t kMany = rdm ? kOwnEndpointComms : 256;
  const bool shared = GetParam().groups == 1;
  // 8 channels in the group (the device is reopened with it; the peer inherits it, and a
  // backlog that holds every connection until the peer takes them).
  setenv("XPORT_POOL_CHANNELS", "8", 1);
  setenv("XPORT_LISTEN_BACKLOG", "512", 1);
  // Unshared, every connection posts its own receive buffers to the rail's CQ: 256 of them
  // need more CQ room than the default (which holds about 60).
  setenv("XPORT_CQ_ENTRIES", "65536", 1);
  core::reload_knobs();
  dev_.reset();
  auto dev = ctx_->open_device();
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  dev_ = std::move(dev).value();
  const size_t base_fds = test::open_fds();
  const size_t base_endpoints = dev_->stats().endpoints.size();
  const size_t base_rss = test::resident_kib();
  constexpr size_t kSlot = 4096 + 16;  // message_sizes() gives small sizes up to 4 KiB
  auto p = peer({"pool-recv", std::to_string(kMany), "1", "99", "4096"});
  ASSERT_TRUE(p.started());
  const auto handle = test::from_hex(expect_line(p, "HANDLE "));
  std::vector<std::unique_ptr<SendComm>> comms;
  std::vector<uint8_t> mem(kMany * kSlot);
  auto reg = dev_->register_memory(mem.data(), mem.size());
  ASSERT_TRUE(reg.ok());
  // Each communicator names its ordinal once connected: the peer accepts them one at a time and
  // waits at most 20 s for each one's first message, whatever the 256 connects take in all
  // (ThreadSanitizer: more than 20 s). All of them stay open for the measurement.
  for (size_t o = 0; o < kMany; ++o) {
    ASSERT_NO_FATAL_FAILURE(connect_many(handle, 1, comms));
    uint8_t* b = mem.data() + o * kSlot;
    const uint64_t ordinal = o;
    std::memcpy(b, &ordinal, sizeof(ordinal));
    auto r = comms[o]->isend(b, sizeof(ordinal), *reg);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_TRUE(comms[o]->wait(*r, Deadline::after(30s)).ok());
  }
  for (size_t o = 0; o < kMany; ++o) {
    uint8_t* b = mem.data() + o * kSlot;
    const size_t len = test::message_sizes(static_cast<uint32_t>(99 + o), 1, 4096)[0];
    test::fill(b + 8, len, o * 100000);
    auto r = comms[o]->isend(b + 8, len, *reg);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_TRUE(comms[o]->wait(*r, Deadline::after(30s)).ok());
  }
  std::istringstream in(expect_line(p, "STATS "));
  std::map<std::string, uint64_t> theirs;
  for (std::string key; in >> key;) in >> theirs[key];
  EXPECT_EQ(expect_line(p, "OK "), std::to_string(kMany));
  const Stats st = dev_->stats();
  const size_t fds = test::open_fds() - base_fds;
  const size_t endpoints = st.endpoints.size() - base_endpoints;
  const size_t rss = test::resident_kib();
  const uint64_t peer_fds = theirs["fds"] - theirs["base_fds"];
  std::cout << "[ footprint ] " << GetParam().provider << ", " << kMany << " comms, "
            << (shared ? "shared" : "unshared") << ": connecting end " << st.pool.channels
            << " channels, " << endpoints << " endpoints, " << fds << " fds, "
            << st.pool.registered_bytes << " bounce-buffer bytes, resident "
            << (rss > base_rss ? rss - base_rss : 0) << " KiB more; accepting end "
            << theirs["channels"] << " channels, " << theirs["endpoints"] << " endpoints, "
            << peer_fds << " fds, " << theirs["buffer_bytes"] << " bounce-buffer bytes, resident "
            << (theirs["rss_kib"] > theirs["base_rss_kib"]
                    ? theirs["rss_kib"] - theirs["base_rss_kib"]
                    : 0)
            << " KiB more\n";
  const uint64_t rails = st.rails.size();
  if (!rdm) {
    const uint64_t channels = shared ? 8 : kMany;
    EXPECT_EQ(st.pool.channels, channels);
    EXPECT_EQ(theirs["channels"], channels);
    EXPECT_EQ(endpoints, channels);
    // A connection costs a few descriptors (socket, event fds) whatever its sharing.
    EXPECT_GE(fds, channels);
    EXPECT_LE(fds, 4 * channels + 8);
    EXPECT_GE(peer_fds, channels);
    EXPECT_LE(peer_fds, 4 * channels + 8);
    // Bounce buffers: a few MiB per connection (its depth, times XPORT_POOL_DEPTH_MULTIPLIER
    // when shared), whatever the communicators on it.
    EXPECT_LE(st.pool.registered_bytes, channels * (8u << 20));
    EXPECT_LE(theirs["buffer_bytes"], channels * (8u << 20));
  } else if (shared) {
    // The rail's endpoints carry every communicator: nothing was opened for them.
    EXPECT_EQ(endpoints, 0u);
    EXPECT_LE(st.pool.channels, 2 * rails);
    EXPECT_LE(theirs["channels"], 2 * rails);
    EXPECT_LE(theirs["endpoints"], 2 * rails);
    EXPECT_EQ(st.pool.registered_bytes, 0u);
    EXPECT_EQ(theirs["buffer_bytes"], 0u);
    EXPECT_LE(fds, 8u);
  } else {
    // An endpoint (and its buffers) per communicator and rail, at both ends.
    EXPECT_EQ(endpoints, kMany * rails);
    EXPECT_GE(theirs["endpoints"], kMany * rails);
    EXPECT_LE(theirs["endpoints"], kMany * rails + 2 * rails);
    EXPECT_GE(st.pool.channels, kMany * rails);
    EXPECT_GE(st.pool.registered_bytes, kMany * rails * 8192);
    EXPECT_GE(theirs["buffer_bytes"], kMany * rails * 8192);
  }
  comms.clear();
  ASSERT_TRUE(p.write_line("bye"));
  EXPECT_EQ(p.wait_exit(30000), 0);
  unsetenv("XPORT_LISTEN_BACKLOG");
  unsetenv("XPORT_CQ_ENTRIES");
}

// Communicators opened and closed in random order under traffic, from two threads sharing the
// device, over 4 channels as above (or one per communicator): primaries
// close while their secondaries carry on, new communicators join connections whose first users
// are gone. Every message is verified at the peer; every channel goes with its last user, at
// both ends.
TEST_P(Pool, CommunicatorsComeAndGoInRandomOrderUnderTraffic) {
  constexpr size_t kThreads = 2;
  // Unshared on RDM each communicator opens (and closes) endpoints of its own at both ends.
  const size_t kPerThread = own_endpoints() ? 12 : 100;
  constexpr size_t kLive = 8;  // per thread
  auto p = peer({"pool-churn", std::to_string(kThreads * kPerThread)});
  ASSERT_TRUE(p.started());
  const auto handle = test::from_hex(expect_line(p, "HANDLE "));
  std::atomic<size_t> sent{0};
  std::vector<std::string> errors(kThreads);
  auto run = [&](size_t t) {
    struct Live {
      std::unique_ptr<SendComm> comm;
      uint64_t id = 0;
      std::vector<size_t> sizes;
      size_t posted = 0, done = 0;  // message 0 is the head
      std::array<Request, kDepth> reqs{};
      std::vector<uint8_t> mem;
      std::unique_ptr<Region> reg;
    };
    std::mt19937 rng(static_cast<uint32_t>(77 + t));
    std::vector<std::unique_ptr<Live>> live;
    size_t opened = 0;
    const auto until = Deadline::after(180s);
    while (opened < kPerThread || !live.empty()) {
      if (until.expired()) {
        errors[t] = "thread " + std::to_string(t) + ": not done in 180 s";
        return;
      }
      const uint32_t action = rng() % 8;
      if (action == 0 && opened < kPerThread && live.size() < kLive) {
        auto l = std::make_unique<Live>();
        auto c = dev_->connect(handle, Deadline::after(30s));
        if (!c.ok()) {
          errors[t] = "connect: " + c.status().to_string();
          return;
        }
        l->comm = std::move(c).value();
        l->id = 1 + t * 1000 + opened++;
        l->sizes = test::message_sizes(static_cast<uint32_t>(l->id), 1 + rng() % 16, 64 << 10);
        l->mem.resize(kDepth * ((64 << 10) + 16));
        auto reg = dev_->register_memory(l->mem.data(), l->mem.size());
        if (!reg.ok()) {
          errors[t] = "register: " + reg.status().to_string();
          return;
        }
        l->reg = std::make_unique<Region>(std::move(reg).value());
        live.push_back(std::move(l));
        continue;
      }
      if (live.empty()) continue;
      const size_t i = rng() % live.size();
      Live& l = *live[i];
      const size_t total = l.sizes.size() + 1;
      if (l.done == total) {
        if (action < 3) live.erase(live.begin() + static_cast<long>(i));  // closes it, at random
        continue;
      }
      if (l.posted < total && l.posted - l.done < kDepth) {
        uint8_t* b = l.mem.data() + (l.posted % kDepth) * ((64 << 10) + 16);
        size_t len = 0;
        if (l.posted == 0) {
          const uint64_t head[2] = {l.id, l.sizes.size()};
          std::memcpy(b, head, sizeof(head));
          len = sizeof(head);
        } else {
          len = l.sizes[l.posted - 1];
          test::fill(b, len, l.id * 1000 + (l.posted - 1));
        }
        auto r = l.comm->isend(b, len, *l.reg);
        if (!r.ok()) {
          errors[t] = "isend: " + r.status().to_string();
          return;
        }
        l.reqs[l.posted % kDepth] = *r;
        ++l.posted;
      }
      auto c = l.comm->test(l.reqs[l.done % kDepth]);
      if (!c.ok()) {
        errors[t] = "send " + std::to_string(l.id) + "/" + std::to_string(l.done) + ": " +
                    c.status().to_string();
        return;
      }
      if (c->done) {
        ++l.done;
        if (l.done > 1) sent.fetch_add(1);
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 0; t < kThreads; ++t) threads.emplace_back(run, t);
  for (auto& th : threads) th.join();
  for (const auto& e : errors) EXPECT_EQ(e, "");
  std::istringstream in(expect_line(p, "STATS ", 120000));
  std::map<std::string, uint64_t> peer_stats;
  for (std::string key; in >> key;) in >> peer_stats[key];
  EXPECT_EQ(peer_stats["done"], kThreads * kPerThread);
  EXPECT_EQ(peer_stats["received"], sent.load());
  // Misses only of traffic for communicators closed meanwhile (an RDM sender's id goes at its
  // close, before the receiver's CLOSE comes): nothing misrouted, nothing forged.
  const Stats st = dev_->stats();
  EXPECT_EQ(st.pool.routing_misses, 0u);
  EXPECT_EQ(st.routing_misses, st.late_arrivals);
  EXPECT_EQ(peer_stats["misses"], peer_stats["late"]);
  const PoolStats mine = st.pool;
  EXPECT_EQ(mine.primaries + mine.secondaries, kThreads * kPerThread);
  if (connected_endpoints()) {
    const auto gone = Deadline::after(10s);
    while (dev_->stats().pool.channels != 0 && !gone.expired()) (void)dev_->progress();
    EXPECT_EQ(dev_->stats().pool.channels, 0u) << "connections left after every comm closed";
    if (GetParam().groups != 0) {
      EXPECT_GT(mine.secondaries, 0u) << "no communicator joined a shared connection";
    }
    ASSERT_TRUE(p.write_line("channels"));
    EXPECT_EQ(expect_line(p, "CHANNELS ", 30000), "0") << "connections left at the peer";
  }
  ASSERT_TRUE(p.write_line("bye"));
  EXPECT_EQ(p.wait_exit(30000), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Providers, Pool,
    ::testing::Values(PoolParam{"tcp", 0}, PoolParam{"tcp", 1}, PoolParam{"tcp", 2},
                      PoolParam{"tcp", 4}, PoolParam{"tcp;ofi_rxm", 0},
                      PoolParam{"tcp;ofi_rxm", 1}, PoolParam{"tcp;ofi_rxm", 4},
                      PoolParam{"shm", 0}, PoolParam{"shm", 1}, PoolParam{"shm", 2},
                      PoolParam{"strict", 0},
                      PoolParam{"strict", 1}),
    param_name);

}  // namespace
}  // namespace xport
