// Raw libfabric through the strict provider with 4-byte CQ data (STRICT_FI_CQ_DATA_SIZE=4), as on
// EFA and verbs: what is advertised, every post that carries data above the low 32 bits is
// refused, the low 32 bits arrive intact, and a target never sees more than 32 bits even from a
// peer whose NIC carries 8.
#include <cstring>

#include "raw_fixture.hpp"

namespace strict_test {
namespace {

using Raw = RawRig;

constexpr uint64_t kWide = (uint64_t{1} << 32) | 7;  // one bit above the low 32

TEST_F(Raw, CqDataSizeFourIsAdvertisedAndOnlyFourOrEightAccepted) {
  ScopedEnv env{{"STRICT_FI_CQ_DATA_SIZE", "4"}};
  fi_info* hints = strict_hints(kMrModes);
  fi_info* list = nullptr;
  ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list), 0);
  for (fi_info* i = list; i != nullptr; i = i->next)
    EXPECT_EQ(i->domain_attr->cq_data_size, 4u) << "a 4-byte NIC advertises 4 bytes";
  fi_freeinfo(list);

  hints->domain_attr->cq_data_size = 8;
  EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list), -FI_ENODATA)
      << "an application that needs 8 bytes of CQ data gets nothing from a 4-byte NIC";
  {
    ScopedEnv eight{{"STRICT_FI_CQ_DATA_SIZE", "8"}};
    ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list), 0);
    for (fi_info* i = list; i != nullptr; i = i->next) EXPECT_EQ(i->domain_attr->cq_data_size, 8u);
    fi_freeinfo(list);
  }
  hints->domain_attr->cq_data_size = 0;
  for (const char* bad : {"2", "16", "four"}) {
    ScopedEnv b{{"STRICT_FI_CQ_DATA_SIZE", bad}};
    EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list), -FI_ENODATA)
        << "STRICT_FI_CQ_DATA_SIZE=" << bad << " must not silently run as 8";
  }
  fi_freeinfo(hints);
}

TEST_F(Raw, CqDataAboveTheLow32BitsIsRefusedOnEveryPost) {
  ScopedEnv env{{"STRICT_FI_MR_ENDPOINT", "1"}, {"STRICT_FI_CQ_DATA_SIZE", "4"}};
  ASSERT_TRUE(open_rig());
  std::vector<uint8_t> a(4096, 0x5a), b(4096, 0), r(4096, 0);
  fid_mr* ma = reg(a.data(), a.size(), 0, 21);
  fid_mr* mb = reg(b.data(), b.size(), 1, 22);
  fid_mr* mr = reg(r.data(), r.size(), 1, 23);
  ASSERT_TRUE(ma && mb && mr);
  void* da = fi_mr_desc(ma);
  fi_context2 ctx{};
  EXPECT_EQ(fi_senddata(ep_[0], a.data(), 8, da, kWide, addr_[1], &ctx), -FI_EINVAL)
      << "fi_senddata";
  EXPECT_EQ(fi_injectdata(ep_[0], a.data(), 8, kWide, addr_[1]), -FI_EINVAL) << "fi_injectdata";
  EXPECT_EQ(
      fi_writedata(ep_[0], a.data(), 8, da, kWide, addr_[1], raddr(b.data()), fi_mr_key(mb), &ctx),
      -FI_EINVAL)
      << "fi_writedata";
  EXPECT_EQ(
      fi_inject_writedata(ep_[0], a.data(), 8, kWide, addr_[1], raddr(b.data()), fi_mr_key(mb)),
      -FI_EINVAL)
      << "fi_inject_writedata";
  iovec iov{a.data(), 8};
  fi_msg msg{&iov, &da, 1, addr_[1], &ctx, kWide};
  EXPECT_EQ(fi_sendmsg(ep_[0], &msg, FI_REMOTE_CQ_DATA), -FI_EINVAL) << "fi_sendmsg";
  fi_rma_iov rma{raddr(b.data()), 8, fi_mr_key(mb)};
  fi_msg_rma rmsg{&iov, &da, 1, addr_[1], &rma, 1, &ctx, kWide};
  EXPECT_EQ(fi_writemsg(ep_[0], &rmsg, FI_REMOTE_CQ_DATA), -FI_EINVAL) << "fi_writemsg";
  fi_ioc ioc{a.data(), 1};
  fi_rma_ioc rioc{raddr(b.data()), 1, fi_mr_key(mb)};
  fi_msg_atomic amsg{&ioc, &da, 1, addr_[1], &rioc, 1, FI_UINT64, FI_SUM, &ctx, kWide};
  EXPECT_EQ(fi_atomicmsg(ep_[0], &amsg, FI_REMOTE_CQ_DATA), -FI_EINVAL) << "fi_atomicmsg";
  Completion none = next(cq_, std::chrono::milliseconds(100));
  EXPECT_EQ(none.ret, -FI_EAGAIN) << "a refused post must leave nothing behind";

  // The low 32 bits, all of them set, pass and arrive intact, on a message and on a write.
  fi_context2 rctx{}, sctx{}, wctx{};
  ASSERT_EQ(fi_recv(ep_[1], r.data(), 64, fi_mr_desc(mr), FI_ADDR_UNSPEC, &rctx), 0);
  ASSERT_EQ(
      retry([&] { return fi_senddata(ep_[0], a.data(), 16, da, 0xfedcba98u, addr_[1], &sctx); }),
      0);
  ASSERT_EQ(retry([&] {
              return fi_writedata(ep_[0], a.data(), 32, da, 0xffffffffu, addr_[1], raddr(b.data()),
                                  fi_mr_key(mb), &wctx);
            }),
            0);
  bool got_msg = false, got_write = false;
  for (int i = 0; i < 4; ++i) {
    Completion c = next();
    ASSERT_EQ(c.ret, 1) << "completion " << i << ": " << c.text;
    if (c.entry.op_context == &rctx) {
      got_msg = true;
      EXPECT_TRUE(c.entry.flags & FI_REMOTE_CQ_DATA);
      EXPECT_EQ(c.entry.data, 0xfedcba98u);
      EXPECT_EQ(r[15], 0x5a);
    } else if (c.entry.flags & FI_REMOTE_WRITE) {
      got_write = true;
      EXPECT_EQ(c.entry.data, 0xffffffffu);
    }
  }
  EXPECT_TRUE(got_msg && got_write) << "both targets must see their 32-bit data";
  EXPECT_EQ(b[31], 0x5a);
}

TEST_F(Raw, TargetSeesOnlyTheLow32BitsEvenFromAWiderPeer) {
  // The rig's domain is a 4-byte NIC; the peer's domain carries 8 bytes (as a base would): what
  // the target reads must still be the low 32 bits only.
  ScopedEnv env{{"STRICT_FI_CQ_DATA_SIZE", "4"}, {"STRICT_FI_MR_ENDPOINT", "0"}};
  ASSERT_TRUE(open_rig(kMrModes & ~FI_MR_ENDPOINT));
  std::vector<uint8_t> a(4096, 0x33), b(4096, 0), r(4096, 0);
  fid_mr* mb = reg(b.data(), b.size(), -1, 31);
  fid_mr* mr = reg(r.data(), r.size(), -1, 32);
  ASSERT_TRUE(mb && mr);

  ScopedEnv wide{{"STRICT_FI_CQ_DATA_SIZE", "8"}};
  PeerDomain* peer = open_peer(a.data(), a.size());
  ASSERT_NE(peer, nullptr);
  PeerDomain& p = *peer;
  p.to = p.to_ep1;

  fi_context2 rctx{}, sctx{}, wctx{};
  ASSERT_EQ(fi_recv(ep_[1], r.data(), 64, fi_mr_desc(mr), FI_ADDR_UNSPEC, &rctx), 0);
  auto drive = [&] {
    (void)fi_cq_read(p.cq.get(), nullptr, 0);
    progress();
  };
  auto post = [&](auto&& f) {
    ssize_t ret;
    auto until = Clock::now() + std::chrono::seconds(2);
    while ((ret = f()) == -FI_EAGAIN && Clock::now() < until) drive();
    return ret;
  };
  ASSERT_EQ(post([&] {
              return fi_senddata(p.ep.get(), a.data(), 16, fi_mr_desc(p.mr.get()),
                                 0x1122334455667788ull, p.to, &sctx);
            }),
            0)
      << "the 8-byte peer accepts 64-bit data";
  ASSERT_EQ(post([&] {
              return fi_writedata(p.ep.get(), a.data(), 16, fi_mr_desc(p.mr.get()),
                                  0xaabbccdd00000001ull, p.to, raddr(b.data()), fi_mr_key(mb),
                                  &wctx);
            }),
            0);
  bool got_msg = false, got_write = false;
  auto until = Clock::now() + std::chrono::seconds(5);
  while (!(got_msg && got_write) && Clock::now() < until) {
    drive();
    fi_cq_data_entry e{};
    if (fi_cq_read(cq_, &e, 1) != 1) continue;
    if (e.op_context == &rctx) {
      got_msg = true;
      EXPECT_EQ(e.data, 0x55667788u) << "only the low 32 bits may reach a 4-byte target";
    } else if (e.flags & FI_REMOTE_WRITE) {
      got_write = true;
      EXPECT_EQ(e.data, 0x00000001u) << "only the low 32 bits may reach a 4-byte target";
    }
  }
  EXPECT_TRUE(got_msg) << "the message with data did not arrive within 5 s";
  EXPECT_TRUE(got_write) << "the write with data did not arrive within 5 s";
  // Let the peer's own completions come back before it closes.
  for (int n = 0; n < 2 && Clock::now() < until;) {
    fi_cq_data_entry e{};
    if (fi_cq_read(p.cq.get(), &e, 1) == 1) ++n;
    progress();
  }
}

}  // namespace
}  // namespace strict_test
