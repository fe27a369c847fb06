// Raw libfabric through the strict provider with every hardware-like mode at once: 4-byte CQ
// data, FI_RX_CQ_DATA, FI_MR_ENDPOINT, reordered and delayed completions, delayed posts, the CQ
// size enforced and -FI_EAGAIN injected. Traffic both ways (messages and writes with data) over
// one shared CQ must arrive complete, with each endpoint's receives consumed in arrival order.
#include <cstring>

#include "raw_fixture.hpp"

namespace strict_test {
namespace {

class Combined : public RawRig {
 protected:
  static constexpr size_t kOps = 100;  // per direction: even ones messages, odd ones writes
  static constexpr size_t kSlot = 64;

  void SetUp() override {
    RigOptions o;
    // Each side: kOps receives and kOps transmits outstanding at most.
    o.cq_size = 4 * kOps;
    ASSERT_TRUE(open_rig(o));
    for (int i = 0; i < 2; ++i) {
      src_[i].resize(kOps * kSlot);
      for (size_t k = 0; k < src_[i].size(); ++k)
        src_[i][k] = static_cast<uint8_t>(k * 29 + static_cast<size_t>(i) * 7 + 3);
      rbuf_[i].assign(kOps * kSlot, 0);
      win_[i].assign(kOps * kSlot, 0);
      msrc_[i] = reg(src_[i].data(), src_[i].size(), i, 70 + static_cast<uint64_t>(i));
      mrbuf_[i] = reg(rbuf_[i].data(), rbuf_[i].size(), i, 72 + static_cast<uint64_t>(i));
      mwin_[i] = reg(win_[i].data(), win_[i].size(), i, 74 + static_cast<uint64_t>(i));
      ASSERT_TRUE(msrc_[i] && mrbuf_[i] && mwin_[i]);
    }
  }

  void post_receives(int to) {
    for (size_t k = 0; k < kOps; ++k)
      ASSERT_EQ(retry([&] {
                  return fi_recv(ep_[to], rbuf_[to].data() + k * kSlot, kSlot,
                                 fi_mr_desc(mrbuf_[to]), FI_ADDR_UNSPEC, &rctx_[to][k]);
                }),
                0)
          << "receive " << k;
  }

  void post_traffic(int from, uint64_t base) {
    const int to = 1 - from;
    void* d = fi_mr_desc(msrc_[from]);
    for (size_t k = 0; k < kOps; ++k) {
      uint8_t* s = src_[from].data() + k * kSlot;
      const uint64_t data = base + k;
      ssize_t ret =
          k % 2 == 0 ? retry([&] {
            return fi_senddata(ep_[from], s, kSlot, d, data, addr_[to], &sctx_[from][k]);
          })
                     : retry([&] {
                         return fi_writedata(ep_[from], s, kSlot, d, data, addr_[to],
                                             raddr(win_[to].data(), win_[to].data() + k * kSlot),
                                             fi_mr_key(mwin_[to]), &sctx_[from][k]);
                       });
      ASSERT_EQ(ret, 0) << "post " << k << " from endpoint " << from;
    }
  }

  std::vector<uint8_t> src_[2], rbuf_[2], win_[2];
  fid_mr* msrc_[2] = {};
  fid_mr* mrbuf_[2] = {};
  fid_mr* mwin_[2] = {};
  fi_context2 sctx_[2][kOps] = {};
  fi_context2 rctx_[2][kOps] = {};
  ScopedEnv env_{{"STRICT_FI_MR_ENDPOINT", "1"}, {"STRICT_FI_CQ_DATA_SIZE", "4"},
                 {"STRICT_FI_RX_CQ_DATA", "1"},  {"STRICT_FI_REORDER", "1"},
                 {"STRICT_FI_DELAY_US", "300"},  {"STRICT_FI_DELAY_POST_US", "300"},
                 {"STRICT_FI_CQ_OVERRUN", "1"},  {"STRICT_FI_EAGAIN_EVERY", "7"}};
};

TEST_F(Combined, EveryModeAtOnceMovesVerifiedDataInArrivalOrder) {
  post_receives(0);
  post_receives(1);
  post_traffic(0, 0);
  post_traffic(1, 1000);
  size_t next_rx[2] = {0, 0};  // endpoint -> index of the next receive it must complete
  size_t tx_done = 0;
  while (next_rx[0] + next_rx[1] + tx_done < 4 * kOps) {
    Completion c = next(cq_, std::chrono::seconds(5));
    ASSERT_EQ(c.ret, 1) << "completion " << next_rx[0] + next_rx[1] + tx_done << " of " << 4 * kOps
                        << " did not come within 5 s: " << c.text;
    auto* ctx = static_cast<fi_context2*>(c.entry.op_context);
    bool tx = false;
    for (int e = 0; e < 2; ++e) tx = tx || (ctx >= sctx_[e] && ctx < sctx_[e] + kOps);
    if (tx) {
      ++tx_done;
      continue;
    }
    const int ep = ctx >= rctx_[0] && ctx < rctx_[0] + kOps ? 0 : 1;
    ASSERT_TRUE(ctx >= rctx_[ep] && ctx < rctx_[ep] + kOps) << "a completion of no operation";
    const size_t k = next_rx[ep]++;
    EXPECT_EQ(ctx, &rctx_[ep][k]) << "endpoint " << ep << " consumed its receives out of order";
    const uint64_t base = ep == 1 ? 0 : 1000;
    EXPECT_EQ(c.entry.data, base + k) << "endpoint " << ep << " arrival " << k;
    EXPECT_TRUE(c.entry.flags & FI_REMOTE_CQ_DATA);
    EXPECT_EQ(bool(c.entry.flags & FI_REMOTE_WRITE), k % 2 == 1) << "arrival " << k;
  }
  for (int to = 0; to < 2; ++to) {
    const int from = 1 - to;
    for (size_t k = 0; k < kOps; ++k) {
      const uint8_t* got = (k % 2 == 0 ? rbuf_[to].data() : win_[to].data()) + k * kSlot;
      EXPECT_EQ(std::memcmp(got, src_[from].data() + k * kSlot, kSlot), 0)
          << "data of operation " << k << " to endpoint " << to;
    }
  }
  EXPECT_EQ(next(cq_, std::chrono::milliseconds(100)).ret, -FI_EAGAIN) << "nothing more";
}

}  // namespace
}  // namespace strict_test
