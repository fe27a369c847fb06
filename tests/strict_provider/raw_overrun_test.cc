// Raw libfabric through the strict provider with the application's CQ size enforced
// (STRICT_FI_CQ_OVERRUN=1): posted operations, posted receives and unread remote writes with data
// count against it; one too many overruns the CQ as on hardware (the post and every later read
// fail with -FI_EOVERRUN, the domain's later posts with -FI_EIO); reads free room.
#include <cstring>

#include "raw_fixture.hpp"

namespace strict_test {
namespace {

class Overrun : public RawRig {
 protected:
  void SetUp() override {
    // Endpoint 1 alone on a CQ of 16; endpoint 0 on a large one.
    RigOptions o;
    o.cq_per_endpoint = true;
    o.cq_size = 1024;
    o.cq1_size = 16;
    ASSERT_TRUE(open_rig(o));
    src_.assign(4096, 0x42);
    dst_.assign(64 * 64, 0);
    msrc_ = reg(src_.data(), src_.size(), 0, 61);
    mdst_ = reg(dst_.data(), dst_.size(), 1, 62);
    ASSERT_TRUE(msrc_ && mdst_);
  }

  ssize_t post_recv(size_t i) {
    return fi_recv(ep_[1], dst_.data() + (i % 64) * 64, 64, fi_mr_desc(mdst_), FI_ADDR_UNSPEC,
                   &rctx_[i % 64]);
  }

  void send(size_t n) {
    for (size_t i = 0; i < n; ++i) {
      fi_context2 ctx{};
      ASSERT_EQ(
          retry([&] { return fi_send(ep_[0], src_.data(), 8, fi_mr_desc(msrc_), addr_[1], &ctx); }),
          0);
      Completion c = next(cqs_[0]);
      ASSERT_EQ(c.ret, 1) << "send " << i << ": " << c.text;
    }
  }

  void write_data(size_t n) {
    for (size_t i = 0; i < n; ++i) {
      fi_context2 ctx{};
      ASSERT_EQ(retry([&] {
                  return fi_writedata(ep_[0], src_.data(), 8, fi_mr_desc(msrc_), i, addr_[1],
                                      raddr(dst_.data()), fi_mr_key(mdst_), &ctx);
                }),
                0);
      Completion c = next(cqs_[0]);
      ASSERT_EQ(c.ret, 1) << "write " << i << ": " << c.text;
    }
  }

  // The overrun as the application sees it on endpoint 1's CQ.
  void expect_overrun(const char* count) {
    fi_cq_data_entry e{};
    EXPECT_EQ(fi_cq_read(cqs_[1], &e, 1), -FI_EOVERRUN) << "every read of an overrun CQ fails";
    EXPECT_EQ(fi_cq_read(cqs_[1], &e, 1), -FI_EOVERRUN) << "every read of an overrun CQ fails";
    fi_cq_err_entry err{};
    ASSERT_EQ(fi_cq_readerr(cqs_[1], &err, 0), 1);
    EXPECT_EQ(err.err, FI_EOVERRUN);
    char buf[256] = {0};
    const char* t = fi_cq_strerror(cqs_[1], err.prov_errno, err.err_data, buf, sizeof(buf));
    const std::string text = t != nullptr ? t : "";
    const std::string want =
        std::string("CQ overrun: ") + count + " completions can be outstanding on a CQ of size 16";
    EXPECT_NE(text.find(want), std::string::npos) << text;
    // The NIC is in error: the domain's later posts fail, on every endpoint.
    EXPECT_EQ(fi_inject(ep_[0], src_.data(), 8, addr_[1]), -FI_EIO);
    EXPECT_EQ(post_recv(0), -FI_EIO);
  }

  std::vector<uint8_t> src_, dst_;
  fid_mr* msrc_ = nullptr;
  fid_mr* mdst_ = nullptr;
  fi_context2 rctx_[64] = {};
  ScopedEnv env_{{"STRICT_FI_CQ_OVERRUN", "1"}, {"STRICT_FI_MR_ENDPOINT", "1"}};
};

TEST_F(Overrun, SeventeenReceivesOverrunACqOfSixteen) {
  for (size_t i = 0; i < 16; ++i) ASSERT_EQ(post_recv(i), 0) << "receive " << i << " fits";
  EXPECT_EQ(post_recv(16), -FI_EOVERRUN) << "the 17th receive on a CQ of 16 overruns it";
  expect_overrun("17");
}

TEST_F(Overrun, SixteenFitAndReadsFreeRoom) {
  for (size_t i = 0; i < 16; ++i) ASSERT_EQ(post_recv(i), 0) << "receive " << i;
  send(16);
  for (size_t i = 0; i < 16; ++i) {
    Completion c = next(cqs_[1]);
    ASSERT_EQ(c.ret, 1) << "receive " << i << ": " << c.text;
  }
  // Read, so room again for 16, and only 16.
  for (size_t i = 16; i < 32; ++i) ASSERT_EQ(post_recv(i), 0) << "receive " << i;
  send(4);
  for (size_t i = 0; i < 4; ++i) ASSERT_EQ(next(cqs_[1]).ret, 1) << "receive " << 16 + i;
  for (size_t i = 32; i < 36; ++i) ASSERT_EQ(post_recv(i), 0) << "receive " << i;
  EXPECT_EQ(post_recv(36), -FI_EOVERRUN);
  expect_overrun("17");
}

TEST_F(Overrun, UnreadWritesWithDataCountUntilRead) {
  // 14 receives and 2 writes with data: 16 entries can appear, which fits.
  for (size_t i = 0; i < 14; ++i) ASSERT_EQ(post_recv(i), 0);
  write_data(2);
  for (int k = 0; k < 2; ++k) {
    Completion c = next(cqs_[1]);
    ASSERT_EQ(c.ret, 1) << "write " << k << ": " << c.text;
    EXPECT_TRUE(c.entry.flags & FI_REMOTE_CQ_DATA);
  }
  // Read: 14 can still appear. Three more writes, not read (count-0 reads only take them
  // in): the third is the 17th possible entry and overruns the CQ when it arrives.
  write_data(3);
  ssize_t ret = -FI_EAGAIN;
  auto until = Clock::now() + std::chrono::seconds(5);
  while (ret != -FI_EOVERRUN && Clock::now() < until) ret = fi_cq_read(cqs_[1], nullptr, 0);
  EXPECT_EQ(ret, -FI_EOVERRUN) << "three unread writes with data on top of 14 receives";
  fi_cq_err_entry err{};
  ASSERT_EQ(fi_cq_readerr(cqs_[1], &err, 0), 1);
  EXPECT_EQ(err.err, FI_EOVERRUN);
}

}  // namespace
}  // namespace strict_test
