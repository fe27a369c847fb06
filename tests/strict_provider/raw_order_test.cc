// Raw libfabric through the strict provider with reordered and delayed completions and delayed
// posts: STRICT_FI_REORDER shuffles completions of different endpoints sharing a CQ while each
// endpoint's receive completions keep their order; STRICT_FI_DELAY_US holds completions back and
// STRICT_FI_DELAY_POST_US lands data late, but everything arrives, in order where it must, with
// its data; STRICT_FI_DELAY_DOMAIN limits the delays to one NIC.
#include <algorithm>
#include <cstring>

#include "raw_fixture.hpp"

namespace strict_test {
namespace {

using std::chrono::milliseconds;

class Order : public RawRig {
 protected:
  struct Seen {
    void* ctx;
    uint64_t flags, data;
  };

  void open(const RigOptions& o = RigOptions()) {
    ASSERT_TRUE(open_rig(o));
    for (int i = 0; i < 2; ++i) {
      src_[i].resize(kN * kSlot);
      dst_[i].assign(kN * kSlot, 0);
      win_[i].assign(kN * kSlot, 0);
      for (size_t k = 0; k < src_[i].size(); ++k)
        src_[i][k] = static_cast<uint8_t>(k * 13 + static_cast<size_t>(i) * 101 + 1);
      msrc_[i] = reg(src_[i].data(), src_[i].size(), i, 50 + static_cast<uint64_t>(i));
      mdst_[i] = reg(dst_[i].data(), dst_[i].size(), i, 52 + static_cast<uint64_t>(i));
      mwin_[i] = reg(win_[i].data(), win_[i].size(), i, 54 + static_cast<uint64_t>(i));
      ASSERT_TRUE(msrc_[i] && mdst_[i] && mwin_[i]);
    }
  }

  bool landed(int to, size_t slot, size_t len) const {
    const int from = 1 - to;
    return std::memcmp(dst_[to].data() + slot * kSlot, src_[from].data() + slot * kSlot, len) == 0;
  }
  bool written(int to, size_t slot, size_t len) const {
    const int from = 1 - to;
    return std::memcmp(win_[to].data() + slot * kSlot, src_[from].data() + slot * kSlot, len) == 0;
  }

  // ep_[from] sends kN operations to ep_[to]: even ones messages, odd ones writes, all with CQ
  // data base + i; the receives are posted first. Returns once every payload landed, with every
  // completion taken into the strict CQ but none read (count-0 reads only).
  void burst(int from, int to, uint64_t base) {
    for (size_t i = 0; i < kN; i += 2)
      ASSERT_EQ(fi_recv(ep_[to], dst_[to].data() + i * kSlot, kSlot, fi_mr_desc(mdst_[to]),
                        FI_ADDR_UNSPEC, &rctx_[to][i]),
                0);
    for (size_t i = 0; i < kN; ++i) {
      uint8_t* s = src_[from].data() + i * kSlot;
      void* d = fi_mr_desc(msrc_[from]);
      const uint64_t data = base + i;
      ssize_t ret =
          i % 2 == 0 ? retry([&] {
            return fi_senddata(ep_[from], s, kSlot, d, data, addr_[to], &sctx_[from][i]);
          })
                     : retry([&] {
                         return fi_writedata(ep_[from], s, kSlot, d, data, addr_[to],
                                             raddr(win_[to].data(), win_[to].data() + i * kSlot),
                                             fi_mr_key(mwin_[to]), &sctx_[from][i]);
                       });
      ASSERT_EQ(ret, 0) << "post " << i;
    }
    ASSERT_TRUE(progress_until([&] {
      for (size_t i = 0; i < kN; ++i)
        if (!(i % 2 == 0 ? landed(to, i, kSlot) : written(to, i, kSlot))) return false;
      return true;
    })) << "the burst's data did not land within 5 s";
    progress();
  }

  // Reads `n` completions off cq_, in the order they come.
  std::vector<Seen> drain(size_t n) {
    std::vector<Seen> seen;
    while (seen.size() < n) {
      Completion c = next();
      EXPECT_EQ(c.ret, 1) << "completion " << seen.size() << " of " << n << ": " << c.text;
      if (c.ret != 1) break;
      seen.push_back({c.entry.op_context, c.entry.flags, c.entry.data});
    }
    return seen;
  }

  static bool is_rx(const Seen& s) { return (s.flags & (FI_RECV | FI_REMOTE_WRITE)) != 0; }

  static constexpr size_t kN = 100;
  static constexpr size_t kSlot = 64;
  std::vector<uint8_t> src_[2], dst_[2], win_[2];
  fid_mr* msrc_[2] = {};
  fid_mr* mdst_[2] = {};
  fid_mr* mwin_[2] = {};
  fi_context2 sctx_[2][kN] = {};
  fi_context2 rctx_[2][kN] = {};
};

// Two bursts, ep0 -> ep1 then ep1 -> ep0, each fully taken into the CQ before the next: in
// arrival order every completion of the first leaves before any of the second.
TEST_F(Order, WithoutReorderCompletionsLeaveInArrivalOrder) {
  ScopedEnv env{{"STRICT_FI_REORDER", "0"}, {"STRICT_FI_DELAY_US", "0"}};
  open();
  burst(0, 1, 0);
  burst(1, 0, 1000);
  std::vector<Seen> seen = drain(4 * kN);
  ASSERT_EQ(seen.size(), 4 * kN);
  size_t last_first = 0, first_second = seen.size();
  for (size_t i = 0; i < seen.size(); ++i) {
    if (!is_rx(seen[i])) continue;
    if (seen[i].data < 1000) last_first = i;
    if (seen[i].data >= 1000) first_second = std::min(first_second, i);
  }
  EXPECT_LT(last_first, first_second) << "without STRICT_FI_REORDER the order of arrival holds";
}

TEST_F(Order, ReorderShufflesEndpointsButKeepsEachEndpointsReceives) {
  ScopedEnv env{{"STRICT_FI_REORDER", "1"}, {"STRICT_FI_DELAY_US", "0"}};
  open();
  burst(0, 1, 0);
  burst(1, 0, 1000);
  std::vector<Seen> seen = drain(4 * kN);
  ASSERT_EQ(seen.size(), 4 * kN);
  // Receive side of each endpoint (messages and writes with data): in order.
  uint64_t next_rx[2] = {1000, 0};  // endpoint 0 receives 1000.., endpoint 1 receives 0..
  size_t last_first = 0, first_second = seen.size();
  size_t tx_inversions = 0;
  long last_tx = -1;
  for (size_t i = 0; i < seen.size(); ++i) {
    const Seen& s = seen[i];
    if (is_rx(s)) {
      const int ep = s.data >= 1000 ? 0 : 1;
      EXPECT_EQ(s.data, next_rx[ep]) << "endpoint " << ep << "'s receive completions out of order";
      next_rx[ep] = s.data + 1;
      if (ep == 1) last_first = i;
      if (ep == 0) first_second = std::min(first_second, i);
      continue;
    }
    // ep0's transmit completions, in the order of their posts or not.
    auto* c = static_cast<fi_context2*>(s.ctx);
    if (c >= sctx_[0] && c < sctx_[0] + kN) {
      const long k = c - sctx_[0];
      if (k < last_tx) ++tx_inversions;
      last_tx = k;
    }
  }
  EXPECT_EQ(next_rx[1], kN) << "every receive completion of endpoint 1 came";
  EXPECT_EQ(next_rx[0], 1000 + kN) << "every receive completion of endpoint 0 came";
  EXPECT_LT(first_second, last_first)
      << "endpoint 0's completions never overtook endpoint 1's older ones: no reordering";
  EXPECT_GT(tx_inversions, 0u) << "transmit completions came in posting order: no reordering";
  for (size_t i = 0; i < kN; ++i) {
    EXPECT_TRUE(i % 2 == 0 ? landed(1, i, kSlot) : written(1, i, kSlot)) << "data " << i;
    EXPECT_TRUE(i % 2 == 0 ? landed(0, i, kSlot) : written(0, i, kSlot)) << "data " << i;
  }
}

TEST_F(Order, DelayedCompletionsArriveLateButAllArriveInOrder) {
  ScopedEnv env{{"STRICT_FI_DELAY_US", "20000"}, {"STRICT_FI_REORDER", "0"}};
  RigOptions o;
  o.cq_per_endpoint = true;
  open(o);
  // One at a time: how long after its data landed does each receive completion become readable?
  Clock::duration longest{};
  for (size_t i = 0; i < 20; ++i) {
    fi_context2 r{}, s{};
    ASSERT_EQ(fi_recv(ep_[1], dst_[1].data() + i * kSlot, kSlot, fi_mr_desc(mdst_[1]),
                      FI_ADDR_UNSPEC, &r),
              0);
    ASSERT_EQ(retry([&] {
                return fi_senddata(ep_[0], src_[0].data() + i * kSlot, kSlot, fi_mr_desc(msrc_[0]),
                                   i, addr_[1], &s);
              }),
              0);
    ASSERT_TRUE(progress_until([&] { return landed(1, i, kSlot); }))
        << "message " << i << " did not land within 5 s";
    const auto t_landed = Clock::now();
    Completion c = next(cqs_[1], milliseconds(2000));
    ASSERT_EQ(c.ret, 1) << "the completion of message " << i << " never became readable";
    longest = std::max(longest, Clock::now() - t_landed);
    EXPECT_EQ(c.entry.op_context, &r);
    EXPECT_EQ(c.entry.data, i);
    Completion t = next(cqs_[0], milliseconds(2000));
    ASSERT_EQ(t.ret, 1) << "the send completion of message " << i << " never came";
    EXPECT_EQ(t.entry.op_context, &s);
  }
  EXPECT_GE(longest, milliseconds(2)) << "20 completions with 0..20 ms delays: none was late";

  // Back to back: each draws its own delay, yet the receive completions keep their order.
  for (size_t i = 0; i < kN; ++i)
    ASSERT_EQ(fi_recv(ep_[1], dst_[1].data() + i * kSlot, kSlot, fi_mr_desc(mdst_[1]),
                      FI_ADDR_UNSPEC, &rctx_[1][i]),
              0);
  for (size_t i = 0; i < kN; ++i)
    ASSERT_EQ(retry([&] {
                return fi_senddata(ep_[0], src_[0].data() + i * kSlot, 8, fi_mr_desc(msrc_[0]),
                                   100 + i, addr_[1], &sctx_[0][i]);
              }),
              0);
  for (size_t i = 0; i < kN; ++i) {
    Completion c = next(cqs_[1], milliseconds(3000));
    ASSERT_EQ(c.ret, 1) << "receive " << i << " never completed: " << c.text;
    EXPECT_EQ(c.entry.op_context, &rctx_[1][i]) << "receive completions out of order";
    EXPECT_EQ(c.entry.data, 100 + i);
  }
  for (size_t i = 0; i < kN; ++i)
    ASSERT_EQ(next(cqs_[0], milliseconds(3000)).ret, 1) << "send completion " << i;
}

TEST_F(Order, DelayedPostsLandLateInOrderWithTheirData) {
  ScopedEnv env{{"STRICT_FI_DELAY_POST_US", "50000"}, {"STRICT_FI_REORDER", "0"}};
  RigOptions o;
  o.cq_per_endpoint = true;
  open(o);
  constexpr size_t kPosts = 10;
  for (size_t i = 0; i < kPosts; ++i)
    ASSERT_EQ(fi_recv(ep_[1], dst_[1].data() + i * kSlot, kSlot, fi_mr_desc(mdst_[1]),
                      FI_ADDR_UNSPEC, &rctx_[1][i]),
              0);
  const auto t0 = Clock::now();
  for (size_t i = 0; i < kPosts; ++i)
    ASSERT_EQ(retry([&] {
                return fi_senddata(ep_[0], src_[0].data() + i * kSlot, kSlot, fi_mr_desc(msrc_[0]),
                                   i, addr_[1], &sctx_[0][i]);
              }),
              0);
  ASSERT_TRUE(progress_until([&] {
    for (size_t i = 0; i < kPosts; ++i)
      if (!landed(1, i, kSlot)) return false;
    return true;
  })) << "delayed sends did not land within 5 s";
  EXPECT_GE(Clock::now() - t0, milliseconds(5))
      << "10 sends delayed by 0..50 ms each, in order, all landed within 5 ms";
  for (size_t i = 0; i < kPosts; ++i) {
    Completion c = next(cqs_[1]);
    ASSERT_EQ(c.ret, 1) << c.text;
    EXPECT_EQ(c.entry.op_context, &rctx_[1][i]) << "delayed posts keep their order";
    EXPECT_EQ(c.entry.data, i);
  }
  for (size_t i = 0; i < kPosts; ++i) ASSERT_EQ(next(cqs_[0]).ret, 1) << "send completion " << i;

  // RMA: a delayed write lands its data, a delayed read brings it back.
  fi_context2 w{}, r{};
  ASSERT_EQ(retry([&] {
              return fi_write(ep_[0], src_[0].data(), 4096, fi_mr_desc(msrc_[0]), addr_[1],
                              raddr(win_[1].data()), fi_mr_key(mwin_[1]), &w);
            }),
            0);
  Completion cw = next(cqs_[0]);
  ASSERT_EQ(cw.ret, 1) << cw.text;
  EXPECT_EQ(cw.entry.op_context, &w);
  ASSERT_TRUE(progress_until([&] { return written(1, 0, 4096); })) << "the delayed write";
  std::memset(dst_[0].data(), 0, 4096);
  ASSERT_EQ(retry([&] {
              return fi_read(ep_[0], dst_[0].data(), 4096, fi_mr_desc(mdst_[0]), addr_[1],
                             raddr(win_[1].data()), fi_mr_key(mwin_[1]), &r);
            }),
            0);
  Completion cr = next(cqs_[0]);
  ASSERT_EQ(cr.ret, 1) << cr.text;
  EXPECT_EQ(cr.entry.op_context, &r);
  EXPECT_EQ(std::memcmp(dst_[0].data(), src_[0].data(), 4096), 0) << "the delayed read's data";
}

TEST_F(Order, DelayedPostsGoOutWithoutCallsUnderAutoProgress) {
  // FI_PROGRESS_AUTO promises progress without the application's calls: a slow NIC still
  // delivers while nobody calls into its domain. The receiver is another domain, polled alone.
  ScopedEnv env{{"STRICT_TEST_PROGRESS", "auto"}, {"STRICT_FI_DELAY_POST_US", "5000"}};
  {
    fi_info* hints = strict_hints(kMrModes);
    fi_info* list = nullptr;
    const int ret = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list);
    fi_freeinfo(hints);
    fi_freeinfo(list);
    if (ret == -FI_ENODATA) GTEST_SKIP() << "the base offers no FI_PROGRESS_AUTO";
  }
  open();
  ASSERT_EQ(info_->domain_attr->data_progress, FI_PROGRESS_AUTO);
  std::vector<uint8_t> rbuf(2 * kSlot, 0);
  PeerDomain* peer = nullptr;
  {
    ScopedEnv undelayed{{"STRICT_FI_DELAY_POST_US", "0"}};
    peer = open_peer(rbuf.data(), rbuf.size());
  }
  ASSERT_NE(peer, nullptr);
  PeerDomain& p = *peer;
  fi_context2 r[2]{}, s[2]{};
  for (size_t i = 0; i < 2; ++i)
    ASSERT_EQ(fi_recv(p.ep.get(), rbuf.data() + i * kSlot, kSlot, fi_mr_desc(p.mr.get()),
                      FI_ADDR_UNSPEC, &r[i]),
              0);
  auto peer_completion = [&] {
    fi_cq_data_entry e{};
    const auto until = Clock::now() + std::chrono::seconds(5);
    while (Clock::now() < until)
      if (fi_cq_read(p.cq.get(), &e, 1) == 1) return true;
    return false;
  };
  // A first message while both sides are driven, so that the connection is up.
  ASSERT_EQ(retry([&] {
              (void)fi_cq_read(p.cq.get(), nullptr, 0);
              return fi_send(ep_[0], src_[0].data(), kSlot, fi_mr_desc(msrc_[0]), p.from_rig,
                             &s[0]);
            }),
            0);
  bool first = false;
  const auto until = Clock::now() + std::chrono::seconds(5);
  while (!first && Clock::now() < until) {
    progress();
    fi_cq_data_entry e{};
    first = fi_cq_read(p.cq.get(), &e, 1) == 1;
  }
  ASSERT_TRUE(first) << "the first message never arrived";
  ASSERT_EQ(next().ret, 1) << "the first send's completion";
  // The second: after fi_send returns, no call into the sender's domain until it arrived.
  ASSERT_EQ(fi_send(ep_[0], src_[0].data() + kSlot, kSlot, fi_mr_desc(msrc_[0]), p.from_rig, &s[1]),
            0);
  EXPECT_TRUE(peer_completion())
      << "a delayed post on an auto-progress domain never went out while nobody called it";
  EXPECT_EQ(std::memcmp(rbuf.data() + kSlot, src_[0].data() + kSlot, kSlot), 0);
  ASSERT_EQ(next().ret, 1) << "the second send's completion";
}

TEST_F(Order, DelayedPostsToAStalledPeerHoldBackOnlyThatPeer) {
  ScopedEnv env{{"STRICT_FI_DELAY_POST_US", "1000"}};
  open();
  // The address of an endpoint that is gone: the base can never deliver there. (shm 1.17
  // crashes sending to a closed endpoint of its own process: there, a name that never existed.)
  fi_addr_t gone = FI_ADDR_NOTAVAIL;
  const char* base = std::getenv("STRICT_FI_BASE");
  if (base != nullptr && std::strcmp(base, "shm") == 0) {
    char name[64] = "strict-no-such-peer";
    ASSERT_EQ(fi_av_insert(av_, name, 1, &gone, 0, nullptr), 1);
  } else {
    raw_fabric::Fid<fid_ep> tmp;
    const raw_fabric::Outcome o = raw_fabric::open_endpoint(domain_, info_, cq_, cq_, av_, &tmp);
    ASSERT_TRUE(o.ok()) << o.call << ": " << fi_strerror(-o.ret);
    raw_fabric::Address name;
    ASSERT_TRUE(raw_fabric::get_address(tmp.get(), &name).ok());
    ASSERT_TRUE(raw_fabric::insert_address(av_, name.bytes, &gone).ok());
    ASSERT_EQ(tmp.close(), 0);
  }
  fi_context2 dead[3]{};
  for (auto& c : dead) {
    const ssize_t ret = fi_send(ep_[0], src_[0].data(), kSlot, fi_mr_desc(msrc_[0]), gone, &c);
    ASSERT_TRUE(ret == 0 || ret == -FI_EAGAIN) << fi_strerror(static_cast<int>(-ret));
  }
  ASSERT_EQ(
      fi_recv(ep_[1], dst_[1].data(), kSlot, fi_mr_desc(mdst_[1]), FI_ADDR_UNSPEC, &rctx_[1][0]),
      0);
  ASSERT_EQ(retry([&] {
              return fi_send(ep_[0], src_[0].data() + kSlot, kSlot, fi_mr_desc(msrc_[0]), addr_[1],
                             &sctx_[0][0]);
            }),
            0);
  EXPECT_TRUE(progress_until(
      [&] { return std::memcmp(dst_[1].data(), src_[0].data() + kSlot, kSlot) == 0; },
      std::chrono::seconds(3)))
      << "posts to a live peer waited behind posts to a dead one";
}

TEST_F(Order, DelaysApplyOnlyToTheNamedDomain) {
  // Delays of up to 10 s on a NIC that is not this one: nothing here may wait for them.
  ScopedEnv env{{"STRICT_FI_DELAY_US", "10000000"},
                {"STRICT_FI_DELAY_POST_US", "10000000"},
                {"STRICT_FI_DELAY_DOMAIN", "no-such-nic"}};
  open();
  for (size_t i = 0; i < 5; ++i) {
    fi_context2 r{}, s{};
    ASSERT_EQ(fi_recv(ep_[1], dst_[1].data(), kSlot, fi_mr_desc(mdst_[1]), FI_ADDR_UNSPEC, &r), 0);
    ASSERT_EQ(retry([&] {
                return fi_send(ep_[0], src_[0].data(), kSlot, fi_mr_desc(msrc_[0]), addr_[1], &s);
              }),
              0);
    for (int k = 0; k < 2; ++k)
      ASSERT_EQ(next(cq_, milliseconds(2000)).ret, 1)
          << "a completion on another NIC than STRICT_FI_DELAY_DOMAIN was delayed";
  }
}

TEST_F(Order, DelaysApplyToTheNamedDomain) {
  std::string name;
  {
    // The rig opens the first "lo" of an IPv4 fabric, else the first entry: learn its name.
    fi_info* hints = strict_hints(kMrModes);
    fi_info* list = nullptr;
    ASSERT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list), 0);
    fi_freeinfo(hints);
    name = rig_entry(list)->domain_attr->name;
    fi_freeinfo(list);
  }
  ScopedEnv env{{"STRICT_FI_DELAY_POST_US", "100000"}, {"STRICT_FI_DELAY_DOMAIN", name.c_str()}};
  open();
  ASSERT_STREQ(info_->domain_attr->name, name.c_str());
  for (size_t i = 0; i < 5; ++i)
    ASSERT_EQ(fi_recv(ep_[1], dst_[1].data() + i * kSlot, kSlot, fi_mr_desc(mdst_[1]),
                      FI_ADDR_UNSPEC, &rctx_[1][i]),
              0);
  const auto t0 = Clock::now();
  for (size_t i = 0; i < 5; ++i)
    ASSERT_EQ(retry([&] {
                return fi_send(ep_[0], src_[0].data() + i * kSlot, kSlot, fi_mr_desc(msrc_[0]),
                               addr_[1], &sctx_[0][i]);
              }),
              0);
  ASSERT_TRUE(progress_until([&] {
    for (size_t i = 0; i < 5; ++i)
      if (!landed(1, i, kSlot)) return false;
    return true;
  })) << "delayed sends on "
      << name << " did not land within 5 s";
  EXPECT_GE(Clock::now() - t0, milliseconds(10))
      << "5 sends delayed by 0..100 ms on " << name << " all landed within 10 ms";
  for (size_t i = 0; i < 10; ++i) ASSERT_EQ(next().ret, 1) << "completion " << i;
}

}  // namespace
}  // namespace strict_test
