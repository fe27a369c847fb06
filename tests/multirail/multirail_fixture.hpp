// The multi-rail tests' fixture (multirail_test.cc, window_rail_test.cc): a device over every
// rail run_netns.sh gives this namespace, the peer in the other one, links set down and up.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../integration/harness.hpp"
#include "../integration/stream.hpp"
#include "core/knob.hpp"
#include "xport/xport.hpp"

// (Not in an anonymous namespace: gtest wants one fixture class for a suite across files.)
namespace xport::multirail {

inline std::vector<std::string> split(const char* s) {
  std::vector<std::string> out;
  std::stringstream ss(s != nullptr ? s : "");
  std::string t;
  while (std::getline(ss, t, ',')) out.push_back(t);
  return out;
}

class MultiRail : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::getenv("XTEST_PEER_WRAP") == nullptr) {
      GTEST_SKIP() << "run through tests/multirail/run_netns.sh (needs network namespaces)";
    }
    // A link an earlier test took down (and could not restore, having failed) must be up again
    // before this test's device lists its rails: the provider lists only running interfaces.
    rails_ = split(std::getenv("XPORT_RAILS"));
    for (const auto& r : rails_) {
      ASSERT_TRUE(link_is_up_within(r, std::chrono::seconds(20)))
          << "rail " << r << " is not up (operstate '" << operstate(r) << "') 20 s after the test began";
    }
    core::reload_knobs();
    auto ctx = Context::open();
    ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
    ctx_ = std::move(ctx).value();
    auto dev = ctx_->open_device();
    ASSERT_TRUE(dev.ok()) << dev.status().to_string();
    dev_ = std::move(dev).value();
    ASSERT_GE(rails_.size(), 2u) << "the multi-rail tests need at least two rails";
    ASSERT_EQ(dev_->rails(), rails_);
  }

  // `env`: more variables for the peer (its knobs).
  test::ChildProcess peer(const std::vector<std::string>& args, const std::string& peer_rails,
                          std::vector<std::string> env = {}) {
    std::vector<std::string> argv{std::getenv("XTEST_PEER_BIN")};
    argv.insert(argv.end(), args.begin(), args.end());
    env.push_back("XPORT_RAILS=" + peer_rails);
    return test::ChildProcess::spawn(argv, env);
  }
  std::string all_peer_rails() { return std::getenv("XTEST_PEER_RAILS"); }

  std::string expect_line(test::ChildProcess& p, const std::string& prefix) {
    std::string err;
    std::string line = p.read_line(60000, &err);
    EXPECT_EQ(line.rfind(prefix, 0), 0u) << "expected '" << prefix << "...' from the peer, got '"
                                         << line << "' " << err;
    return line.size() > prefix.size() ? line.substr(prefix.size()) : "";
  }

  void send_stream(SendComm& comm, uint32_t seed, size_t count, size_t max,
                   std::atomic<size_t>* progress = nullptr) {
    test::send_stream(*dev_, comm, seed, count, max, 8, std::chrono::seconds(60), progress);
  }

  // Polls the device (progress drives the link checks) until `pred` holds or 15 s pass.
  template <typename Pred>
  bool eventually(Pred pred) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (std::chrono::steady_clock::now() < until) {
      (void)dev_->progress();
      if (pred(dev_->stats())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling pace, not a sync
    }
    return false;
  }

  void TearDown() override {
    // Whatever a test left down (it failed before it restored its links) comes back up.
    for (const auto& ifname : std::set<std::string>(down_)) (void)set_link(ifname, true);
  }

  static std::string operstate(const std::string& ifname) {
    std::ifstream f("/sys/class/net/" + ifname + "/operstate");
    std::string s;
    std::getline(f, s);
    return s;
  }

  // Polls the interface's operational state (carrier comes back asynchronously after
  // `ip link set up`) until it is "up" or `limit` has passed.
  static bool link_is_up_within(const std::string& ifname, std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    for (;;) {
      if (operstate(ifname) == "up") return true;
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling a link, not a sync
    }
  }

  // Sets a rail's link down or up; up returns only once the link is operational again (or
  // fails after 20 s), so that the provider lists the interface to the next device opened,
  // unless `wait` is false (the caller watches what happens from the moment it is set up).
  int set_link(const std::string& ifname, bool up, bool wait = true) {
    const std::string cmd = "ip link set " + ifname + (up ? " up" : " down");
    const int rc = std::system(cmd.c_str());
    if (rc != 0) return rc;
    if (!up) {
      down_.insert(ifname);
      return 0;
    }
    down_.erase(ifname);
    if (wait && !link_is_up_within(ifname, std::chrono::seconds(20))) {
      ADD_FAILURE() << "link " << ifname << " not operational 20 s after 'ip link set up' "
                    << "(operstate '" << operstate(ifname) << "')";
      return 1;
    }
    return 0;
  }

  uint64_t data_bytes_on(const Stats& st, const std::string& rail) {
    uint64_t b = 0;
    for (const auto& e : st.endpoints) {
      if (e.rail == rail && e.name.find(" data") != std::string::npos) b += e.bytes[2] + e.bytes[0];
    }
    return b;
  }

  std::unique_ptr<Context> ctx_;
  std::unique_ptr<Device> dev_;
  std::vector<std::string> rails_;
  std::set<std::string> down_;
};

}  // namespace xport::multirail
