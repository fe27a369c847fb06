// Raw libfabric through the strict provider in FI_RX_CQ_DATA mode (STRICT_FI_RX_CQ_DATA=1), as on
// verbs: a remote write with CQ data consumes a receive posted on the target endpoint and is
// reported with that receive's context; with none posted it waits until one is; messages and such
// writes take the endpoint's receives in arrival order; fi_cancel and truncation of held receives.
#include <cstring>

#include "raw_fixture.hpp"

namespace strict_test {
namespace {

using Raw = RawRig;

constexpr uint64_t kRxWriteFlags = FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA;

TEST_F(Raw, RxCqDataIsAdvertisedAndRequiredOfTheApplication) {
  ScopedEnv env{{"STRICT_FI_RX_CQ_DATA", "1"}};
  fi_info* hints = strict_hints(kMrModes);
  fi_info* list = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list), 0);
  for (fi_info* i = list; i != nullptr; i = i->next) {
    EXPECT_TRUE(i->mode & FI_RX_CQ_DATA);
    EXPECT_TRUE(i->rx_attr->mode & FI_RX_CQ_DATA);
    EXPECT_LE(i->ep_attr->max_msg_size, 65536u) << "messages land in 64 KiB internal buffers";
  }
  fi_freeinfo(list);
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list), -FI_ENODATA)
      << "an application that cannot post a receive for each write with data gets nothing";
  fi_freeinfo(hints);
}

class RxCqData : public RawRig {
 protected:
  void SetUp() override {
    ASSERT_TRUE(open_rig(per_endpoint()));
    src_.resize(kSize);
    for (size_t i = 0; i < kSize; ++i) src_[i] = static_cast<uint8_t>(i * 7 + 1);
    target_.assign(kSize, 0);
    rbuf_.assign(kSize, 0);
    msrc_ = reg(src_.data(), src_.size(), 0, 41);
    mtarget_ = reg(target_.data(), target_.size(), 1, 42);
    mrbuf_ = reg(rbuf_.data(), rbuf_.size(), 1, 43);
    ASSERT_TRUE(msrc_ && mtarget_ && mrbuf_);
  }

  static RigOptions per_endpoint() {
    RigOptions o;
    o.cq_per_endpoint = true;  // the target's CQ sees only the target's completions
    return o;
  }

  // Sends `len` bytes from src_+off with CQ data, and waits for the initiator's completion.
  void send_data(size_t off, size_t len, uint64_t data) {
    fi_context2 ctx{};
    ASSERT_EQ(retry([&] {
                return fi_senddata(ep_[0], src_.data() + off, len, fi_mr_desc(msrc_), data,
                                   addr_[1], &ctx);
              }),
              0);
    expect_initiator(&ctx);
  }

  // Writes `len` bytes from src_+off to target_+off with CQ data, waits for the initiator.
  void write_data(size_t off, size_t len, uint64_t data) {
    fi_context2 ctx{};
    ASSERT_EQ(retry([&] {
                return fi_writedata(ep_[0], src_.data() + off, len, fi_mr_desc(msrc_), data,
                                    addr_[1], raddr(target_.data(), target_.data() + off),
                                    fi_mr_key(mtarget_), &ctx);
              }),
              0);
    expect_initiator(&ctx);
  }

  void expect_initiator(void* ctx) {
    Completion c = next(cqs_[0]);
    ASSERT_EQ(c.ret, 1) << "the initiator's completion did not come within 2 s: " << c.text;
    EXPECT_EQ(c.entry.op_context, ctx);
  }

  void post_recv(size_t off, size_t len, fi_context2* ctx) {
    ASSERT_EQ(fi_recv(ep_[1], rbuf_.data() + off, len, fi_mr_desc(mrbuf_), FI_ADDR_UNSPEC, ctx), 0);
  }

  static constexpr size_t kSize = 8192;
  std::vector<uint8_t> src_, target_, rbuf_;
  fid_mr* msrc_ = nullptr;
  fid_mr* mtarget_ = nullptr;
  fid_mr* mrbuf_ = nullptr;
  ScopedEnv env_{{"STRICT_FI_RX_CQ_DATA", "1"},
                 {"STRICT_FI_MR_ENDPOINT", "1"},
                 {"STRICT_FI_CQ_DATA_SIZE", "4"}};
};

TEST_F(RxCqData, WriteWithDataWaitsForAReceiveAndTakesItsContext) {
  write_data(0, 100, 0xc0ffee);
  ASSERT_TRUE(progress_until([&] { return target_[99] == src_[99]; }))
      << "the written data did not land within 5 s";
  // The data is there, but with no receive posted on the target the completion must wait.
  Completion early = next(cqs_[1], std::chrono::milliseconds(200));
  EXPECT_EQ(early.ret, -FI_EAGAIN)
      << "a write with data completed at the target before a receive was posted there";

  fi_context2 rctx{};
  post_recv(0, 64, &rctx);
  Completion c = next(cqs_[1]);
  ASSERT_EQ(c.ret, 1) << "the write's completion did not follow the receive within 2 s: " << c.text;
  EXPECT_EQ(c.entry.op_context, &rctx) << "reported with the consumed receive's context";
  EXPECT_EQ(c.entry.flags & kRxWriteFlags, kRxWriteFlags);
  EXPECT_FALSE(c.entry.flags & FI_RECV);
  EXPECT_EQ(c.entry.data, 0xc0ffeeu);
  EXPECT_TRUE(c.entry.len == 0 || c.entry.len == 100) << "len as the base reports it";
  EXPECT_EQ(rbuf_[0], 0) << "a write does not write into the receive's buffer";
}

TEST_F(RxCqData, MessagesAndWritesConsumeReceivesInArrivalOrder) {
  // Arrivals first, receives after: each receive takes the oldest arrival.
  send_data(0, 32, 100);
  write_data(1024, 64, 101);
  send_data(256, 48, 102);
  write_data(2048, 64, 103);
  fi_context2 r[7]{};
  for (int i = 0; i < 2; ++i) post_recv(static_cast<size_t>(i) * 256, 256, &r[i]);
  // Receives first, arrivals after.
  for (int i = 2; i < 7; ++i) post_recv(static_cast<size_t>(i) * 256, 256, &r[i]);
  {
    fi_context2 ctx{};
    ASSERT_EQ(retry([&] {
                return fi_send(ep_[0], src_.data() + 512, 40, fi_mr_desc(msrc_), addr_[1], &ctx);
              }),
              0);
    expect_initiator(&ctx);
  }
  write_data(3072, 64, 105);
  send_data(768, 16, 106);

  struct Want {
    bool write;
    uint64_t data;
    size_t len, src_off;
  };
  const Want want[7] = {{false, 100, 32, 0},  {true, 101, 64, 0},  {false, 102, 48, 256},
                        {true, 103, 64, 0},   {false, 0, 40, 512}, {true, 105, 64, 0},
                        {false, 106, 16, 768}};
  for (int i = 0; i < 7; ++i) {
    Completion c = next(cqs_[1]);
    ASSERT_EQ(c.ret, 1) << "receive " << i << " did not complete within 2 s: " << c.text;
    EXPECT_EQ(c.entry.op_context, &r[i]) << "receives are consumed in the order they were posted";
    if (want[i].write) {
      EXPECT_EQ(c.entry.flags & kRxWriteFlags, kRxWriteFlags) << "receive " << i;
      EXPECT_EQ(c.entry.data, want[i].data) << "receive " << i;
    } else {
      EXPECT_TRUE(c.entry.flags & FI_RECV) << "receive " << i;
      EXPECT_EQ(c.entry.len, want[i].len) << "receive " << i;
      EXPECT_EQ(bool(c.entry.flags & FI_REMOTE_CQ_DATA), want[i].data != 0) << "receive " << i;
      if (want[i].data != 0) {
        EXPECT_EQ(c.entry.data, want[i].data) << "receive " << i;
      }
      EXPECT_EQ(std::memcmp(rbuf_.data() + static_cast<size_t>(i) * 256,
                            src_.data() + want[i].src_off, want[i].len),
                0)
          << "payload of receive " << i;
    }
  }
  EXPECT_EQ(std::memcmp(target_.data() + 1024, src_.data() + 1024, 64), 0);
  EXPECT_EQ(std::memcmp(target_.data() + 3072, src_.data() + 3072, 64), 0);
  EXPECT_EQ(next(cqs_[1], std::chrono::milliseconds(100)).ret, -FI_EAGAIN) << "nothing more";
}

TEST_F(RxCqData, CancelTakesBackAHeldReceive) {
  fi_context2 r0{}, r1{};
  post_recv(0, 256, &r0);
  post_recv(256, 256, &r1);
  ASSERT_EQ(fi_cancel(&ep_[1]->fid, &r0), 0);
  Completion c = next(cqs_[1]);
  ASSERT_EQ(c.ret, -FI_EAVAIL) << "a canceled receive completes in error";
  EXPECT_EQ(c.err.op_context, &r0);
  EXPECT_EQ(c.err.err, FI_ECANCELED);
  EXPECT_TRUE(c.err.flags & FI_RECV);
  send_data(0, 24, 7);
  Completion m = next(cqs_[1]);
  ASSERT_EQ(m.ret, 1) << m.text;
  EXPECT_EQ(m.entry.op_context, &r1) << "the canceled receive takes nothing";
  EXPECT_EQ(std::memcmp(rbuf_.data() + 256, src_.data(), 24), 0);
}

TEST_F(RxCqData, LongMessageIsTruncatedIntoAShortReceive) {
  fi_context2 r{};
  post_recv(0, 16, &r);
  send_data(0, 100, 9);
  Completion c = next(cqs_[1]);
  ASSERT_EQ(c.ret, -FI_EAVAIL) << "a message longer than its receive completes in error";
  EXPECT_EQ(c.err.op_context, &r);
  EXPECT_EQ(c.err.err, FI_ETRUNC);
  EXPECT_EQ(c.err.olen, 84u);
  EXPECT_NE(c.text.find("truncated"), std::string::npos) << c.text;
  EXPECT_EQ(std::memcmp(rbuf_.data(), src_.data(), 16), 0);
  EXPECT_EQ(rbuf_[16], 0) << "nothing beyond the receive's length";
}

TEST_F(RxCqData, ManyArrivalsBeforeAnyReceiveWaitAndArriveInOrder) {
  // Many arrivals (within the internal receives' reach) and no receive: they wait, none is lost,
  // the order holds.
  constexpr int kN = 200;
  for (int i = 0; i < kN; ++i) {
    fi_context2 ctx{};
    const auto off = static_cast<size_t>(i % 32) * 64;
    if (i % 3 == 0)
      ASSERT_EQ(retry([&] {
                  return fi_writedata(ep_[0], src_.data() + off, 64, fi_mr_desc(msrc_),
                                      static_cast<uint64_t>(i), addr_[1],
                                      raddr(target_.data(), target_.data() + off),
                                      fi_mr_key(mtarget_), &ctx);
                }),
                0);
    else
      ASSERT_EQ(retry([&] {
                  return fi_senddata(ep_[0], src_.data() + off, 8, fi_mr_desc(msrc_),
                                     static_cast<uint64_t>(i), addr_[1], &ctx);
                }),
                0);
    expect_initiator(&ctx);
  }
  std::vector<fi_context2> r(kN);
  for (int i = 0; i < kN; ++i) {
    ASSERT_EQ(fi_recv(ep_[1], rbuf_.data() + static_cast<size_t>(i % 64) * 64, 64,
                      fi_mr_desc(mrbuf_), FI_ADDR_UNSPEC, &r[static_cast<size_t>(i)]),
              0);
    Completion c = next(cqs_[1]);
    ASSERT_EQ(c.ret, 1) << "arrival " << i << " did not complete within 2 s: " << c.text;
    EXPECT_EQ(c.entry.op_context, &r[static_cast<size_t>(i)]);
    EXPECT_EQ(c.entry.data, static_cast<uint64_t>(i)) << "arrivals are taken in order";
    EXPECT_EQ(bool(c.entry.flags & FI_REMOTE_WRITE), i % 3 == 0) << "arrival " << i;
  }
}

}  // namespace
}  // namespace strict_test
