// Multi-rail between two processes in two network namespaces joined by veth pairs (one tcp
// rail per pair, run_netns.sh): striped messages and puts land verified and every rail carries
// stripes; a peer with fewer rails is paired over the common ones.
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>

#include "../integration/harness.hpp"
#include "core/knob.hpp"
#include "xport/xport.hpp"

namespace xport {
namespace {

std::vector<std::string> split(const char* s) {
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
    core::reload_knobs();
    auto ctx = Context::open();
    ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
    ctx_ = std::move(ctx).value();
    auto dev = ctx_->open_device();
    ASSERT_TRUE(dev.ok()) << dev.status().to_string();
    dev_ = std::move(dev).value();
    rails_ = split(std::getenv("XPORT_RAILS"));
    ASSERT_GE(rails_.size(), 2u) << "the multi-rail tests need at least two rails";
    ASSERT_EQ(dev_->rails(), rails_);
  }

  test::ChildProcess peer(const std::vector<std::string>& args, const std::string& peer_rails) {
    std::vector<std::string> argv{std::getenv("XTEST_PEER_BIN")};
    argv.insert(argv.end(), args.begin(), args.end());
    return test::ChildProcess::spawn(argv, {"XPORT_RAILS=" + peer_rails});
  }
  std::string all_peer_rails() { return std::getenv("XTEST_PEER_RAILS"); }

  std::string expect_line(test::ChildProcess& p, const std::string& prefix) {
    std::string err;
    std::string line = p.read_line(60000, &err);
    EXPECT_EQ(line.rfind(prefix, 0), 0u) << "expected '" << prefix << "...' from the peer, got '"
                                         << line << "' " << err;
    return line.size() > prefix.size() ? line.substr(prefix.size()) : "";
  }

  void send_stream(SendComm& comm, uint32_t seed, size_t count, size_t max) {
    const auto sizes = test::message_sizes(seed, count, max);
    constexpr size_t kDepth = 8;
    std::vector<std::vector<uint8_t>> bufs(kDepth, std::vector<uint8_t>(max + 1));
    std::vector<Region> regs;
    for (auto& b : bufs) regs.push_back(*dev_->register_memory(b.data(), b.size()));
    std::vector<Request> reqs(kDepth);
    size_t posted = 0, done = 0;
    while (done < count) {
      while (posted < count && posted - done < kDepth) {
        test::fill(bufs[posted % kDepth].data(), sizes[posted], posted);
        auto r = comm.isend(bufs[posted % kDepth].data(), sizes[posted], regs[posted % kDepth]);
        ASSERT_TRUE(r.ok()) << "isend " << posted << ": " << r.status().to_string();
        reqs[posted % kDepth] = *r;
        ++posted;
      }
      auto got = comm.wait(reqs[done % kDepth], Deadline::after(std::chrono::seconds(60)));
      ASSERT_TRUE(got.ok()) << "send " << done << ": " << got.status().to_string();
      ++done;
    }
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
};

TEST_F(MultiRail, StripedMessagesLandVerifiedAndEveryRailCarriesStripes) {
  auto p = peer({"recv-stream", "21", "300", std::to_string(4 << 20)}, all_peer_rails());
  ASSERT_TRUE(p.started());
  auto comm = dev_->connect(test::from_hex(expect_line(p, "HANDLE ")),
                            Deadline::after(std::chrono::seconds(30)));
  ASSERT_TRUE(comm.ok()) << comm.status().to_string();
  send_stream(**comm, 21, 300, 4 << 20);
  expect_line(p, "OK 300");  // the peer verified every byte of every message, in order
  p.write_line("bye");
  EXPECT_EQ(p.wait_exit(30000), 0);
  Stats st = dev_->stats();
  ASSERT_EQ(st.rails.size(), rails_.size());
  for (const auto& r : st.rails) {
    EXPECT_GT(r.stripes_out, 0u) << "rail " << r.name << " carried no stripe";
    EXPECT_GT(data_bytes_on(st, r.name), 0u) << "rail " << r.name << " moved no data";
    EXPECT_EQ(r.state, "up");
  }
}

TEST_F(MultiRail, StripedPutsAndGetsVerified) {
  constexpr size_t kSize = 4 << 20;
  auto p = peer({"target", std::to_string(kSize)}, all_peer_rails());
  ASSERT_TRUE(p.started());
  std::string handle = expect_line(p, "HANDLE ");
  std::string key = expect_line(p, "KEY ");
  auto comm = dev_->connect(test::from_hex(handle), Deadline::after(std::chrono::seconds(30)));
  ASSERT_TRUE(comm.ok()) << comm.status().to_string();
  auto remote = dev_->import_key(test::from_hex(key));
  ASSERT_TRUE(remote.ok()) << remote.status().to_string();
  auto win = Window::open(**comm);
  ASSERT_TRUE(win.ok());
  std::vector<uint8_t> local(kSize);
  auto reg = dev_->register_memory(local.data(), kSize);
  ASSERT_TRUE(reg.ok());
  ASSERT_TRUE((*win)->get(*reg, 0, *remote, 0, kSize).ok());
  Status q = (*win)->quiet(Deadline::after(std::chrono::seconds(60)));
  ASSERT_TRUE(q.ok()) << q.to_string();
  EXPECT_EQ(test::first_mismatch(local.data(), kSize, 1000), -1) << "striped get";
  EXPECT_GE((*win)->issued(), rails_.size()) << "a 4 MiB get is cut into one stripe per rail";
  test::fill(local.data(), kSize, 2000);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE((*win)->put(*reg, 0, *remote, 0, kSize).ok());
  q = (*win)->quiet(Deadline::after(std::chrono::seconds(60)));
  ASSERT_TRUE(q.ok()) << q.to_string();
  auto f = (*comm)->isend(local.data(), 1, *reg);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*comm)->wait(*f, Deadline::after(std::chrono::seconds(30))).ok());
  EXPECT_EQ(expect_line(p, "OK "), "target");  // the target saw the new pattern, every byte
  p.write_line("bye");
  EXPECT_EQ(p.wait_exit(30000), 0);
  for (const auto& r : dev_->stats().rails) EXPECT_GT(r.stripes_out, 0u) << r.name;
}

TEST_F(MultiRail, PeerWithFewerRailsIsPairedOverTheCommonRails) {
  // The documented behaviour (docs/semantics.md): rail i pairs with the peer's rail i over the
  // rails both have; traffic never touches the extra rails.
  const std::string first = split(all_peer_rails().c_str())[0];
  auto p = peer({"recv-stream", "9", "40", std::to_string(2 << 20)}, first);
  ASSERT_TRUE(p.started());
  auto comm = dev_->connect(test::from_hex(expect_line(p, "HANDLE ")),
                            Deadline::after(std::chrono::seconds(30)));
  ASSERT_TRUE(comm.ok()) << comm.status().to_string();
  send_stream(**comm, 9, 40, 2 << 20);
  expect_line(p, "OK 40");
  p.write_line("bye");
  EXPECT_EQ(p.wait_exit(30000), 0);
  Stats st = dev_->stats();
  EXPECT_GT(data_bytes_on(st, rails_[0]), 0u);
  for (size_t i = 1; i < rails_.size(); ++i) {
    EXPECT_EQ(data_bytes_on(st, rails_[i]), 0u) << "rail " << rails_[i] << " is not shared";
    EXPECT_EQ(st.rails[i].stripes_out, 0u);
  }
}

TEST_F(MultiRail, UnknownRailNamesAreRefusedByName) {
  DeviceOptions o;
  o.rails = {rails_[0], "no-such-nic"};
  auto d = ctx_->open_device(o);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("'no-such-nic'"), std::string::npos) << d.status().message();
  EXPECT_NE(d.status().message().find(rails_[0]), std::string::npos) << "lists what exists";
  o.rails = {rails_[0], rails_[0]};
  EXPECT_FALSE(ctx_->open_device(o).ok()) << "a rail listed twice";
}

}  // namespace
}  // namespace xport
