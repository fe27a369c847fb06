// Eager credits and request-to-send, in one process (a device connected to itself, so the test
// decides exactly when receives are posted): unexpected eager messages are bounded by the
// communicator's depth, a rendezvous message finds a receive posted with an eager-sized buffer,
// and messages larger than the receive buffer fail where the semantics say.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <thread>
#include <atomic>

#include "provider_fixture.hpp"
#include "xport/xport.hpp"

namespace xport {
namespace {

constexpr int kDepth = 8;  // XPORT_MAX_REQUESTS for these tests: credits = depth

Deadline soon() { return Deadline::after(std::chrono::seconds(20)); }

class FlowControl : public test::ProviderTest {
 protected:
  std::vector<std::pair<std::string, std::string>> extra_knobs() const override {
    return {{"XPORT_MAX_REQUESTS", std::to_string(depth())}};
  }
  virtual int depth() const { return kDepth; }
  void SetUp() override {
    ProviderTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto listener = dev_->listen();
    ASSERT_TRUE(listener.ok()) << listener.status().to_string();
    listener_ = std::move(listener).value();
    auto send = dev_->connect(listener_->handle(), soon());
    ASSERT_TRUE(send.ok()) << send.status().to_string();
    send_ = std::move(send).value();
    auto recv = listener_->accept(soon());
    ASSERT_TRUE(recv.ok()) << recv.status().to_string();
    recv_ = std::move(recv).value();
    src_.resize(1 << 20);
    dst_.resize(1 << 20);
    auto a = dev_->register_memory(src_.data(), src_.size());
    auto b = dev_->register_memory(dst_.data(), dst_.size());
    ASSERT_TRUE(a.ok() && b.ok());
    src_reg_ = std::move(a).value();
    dst_reg_ = std::move(b).value();
  }
  void TearDown() override {
    recv_.reset();  // the communicators go before the device
    send_.reset();
    listener_.reset();
    ProviderTest::TearDown();
  }

  // Drives progress until `req` is done or the deadline passes.
  bool done_within(SendComm& c, Request req, std::chrono::milliseconds limit) {
    const auto until = Deadline::after(limit);
    while (!until.expired()) {
      auto t = c.test(req);
      if (!t.ok() || t->done) return true;
    }
    return false;
  }

  // Received-message counter of the device's endpoints (control traffic included).
  uint64_t messages_in() const {
    uint64_t n = 0;
    for (const auto& e : dev_->stats().endpoints) n += e.ops[1];
    return n;
  }

  std::unique_ptr<Listener> listener_;
  std::unique_ptr<SendComm> send_;
  std::unique_ptr<RecvComm> recv_;
  std::vector<uint8_t> src_, dst_;
  Region src_reg_, dst_reg_;
};

TEST_P(FlowControl, UnexpectedEagerMessagesAreBoundedByCredits) {
  // kDepth messages go out with no receive posted (the receiver holds them); the next ones wait
  // for credit, which only receives being posted can give.
  constexpr int kExtra = 4;
  std::vector<Request> sends;
  for (int i = 0; i < kDepth + kExtra; ++i) {
    src_[i * 8] = static_cast<uint8_t>(i + 1);
    if (i == kDepth) {
      // Free the slots of the first kDepth, which completed without any receive posted.
      for (int j = 0; j < kDepth; ++j) {
        auto w = send_->wait(sends[j], soon());
        ASSERT_TRUE(w.ok()) << "eager message " << j << " needs no receive to complete locally: "
                            << w.status().to_string();
      }
    }
    auto s = send_->isend(src_.data() + i * 8, 8, src_reg_);
    ASSERT_TRUE(s.ok()) << "message " << i << ": " << s.status().to_string();
    sends.push_back(*s);
  }
  // Credit for message kDepth needs receive 0 posted: none is, so it must not go out. (A bounded
  // wait cannot prove "never"; 200 ms of progress passes is far beyond a loopback delivery.)
  EXPECT_FALSE(done_within(*send_, sends[kDepth], std::chrono::milliseconds(200)))
      << "message " << kDepth << " was sent beyond the receiver's credit";
  // Posting receives grants credit in batches of depth/2; every message arrives, in order.
  for (int i = 0; i < kDepth + kExtra; ++i) {
    auto r = recv_->irecv(dst_.data() + i * 8, 8, dst_reg_);
    ASSERT_TRUE(r.ok()) << "receive " << i << ": " << r.status().to_string();
    auto got = recv_->wait(*r, soon());
    ASSERT_TRUE(got.ok()) << "receive " << i << ": " << got.status().to_string();
    EXPECT_EQ(*got, 8u);
    EXPECT_EQ(dst_[i * 8], static_cast<uint8_t>(i + 1)) << "message " << i << " out of order";
  }
  for (int i = kDepth; i < kDepth + kExtra; ++i) {
    auto w = send_->wait(sends[i], soon());
    EXPECT_TRUE(w.ok()) << "message " << i << ": " << w.status().to_string();
  }
}

TEST_P(FlowControl, RendezvousFindsAnEagerSizedReceive) {
  // The receive is posted first with a buffer no larger than XPORT_EAGER_MAX: no CTS goes out
  // for it until the sender's request-to-send asks, then the message is truncated at both ends.
  auto r = recv_->irecv(dst_.data(), 64, dst_reg_);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto s = send_->isend(src_.data(), 65536, src_reg_);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  auto sent = send_->wait(*s, soon());
  ASSERT_FALSE(sent.ok()) << "a 65536-byte message into a 64-byte receive must fail";
  EXPECT_EQ(sent.status().code(), Code::truncated) << sent.status().to_string();
  EXPECT_NE(sent.status().message().find("64 bytes"), std::string::npos)
      << sent.status().message();
  auto got = recv_->wait(*r, soon());
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Code::truncated) << got.status().to_string();
  // The communicator goes on: the next rendezvous message lands whole.
  std::iota(src_.begin(), src_.begin() + 65536, uint8_t{3});
  r = recv_->irecv(dst_.data(), 65536, dst_reg_);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  s = send_->isend(src_.data(), 65536, src_reg_);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_TRUE(send_->wait(*s, soon()).ok());
  got = recv_->wait(*r, soon());
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, 65536u);
  EXPECT_EQ(std::memcmp(src_.data(), dst_.data(), 65536), 0);
}

TEST_P(FlowControl, RequestToSendBeforeTheReceiveIsPosted) {
  // The sender's RTS arrives while no receive is posted. A large receive posted afterwards gets
  // the message; an eager-sized one after an early RTS must answer it (and fail cleanly at both
  // ends) rather than leave the sender waiting for a CTS that never comes.
  std::iota(src_.begin(), src_.end(), uint8_t{7});
  const uint64_t before = messages_in();
  auto s = send_->isend(src_.data(), 200000, src_reg_);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  const auto until = Deadline::after(std::chrono::seconds(20));
  while (messages_in() == before && !until.expired()) ASSERT_TRUE(dev_->progress().ok());
  ASSERT_GT(messages_in(), before) << "the request-to-send never arrived";
  auto r = recv_->irecv(dst_.data(), dst_.size(), dst_reg_);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(send_->wait(*s, soon()).ok());
  auto got = recv_->wait(*r, soon());
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, 200000u);
  EXPECT_EQ(std::memcmp(src_.data(), dst_.data(), 200000), 0);

  const uint64_t before2 = messages_in();
  s = send_->isend(src_.data(), 200000, src_reg_);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  const auto until2 = Deadline::after(std::chrono::seconds(20));
  while (messages_in() == before2 && !until2.expired()) ASSERT_TRUE(dev_->progress().ok());
  r = recv_->irecv(dst_.data(), 100, dst_reg_);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto sent = send_->wait(*s, soon());
  EXPECT_EQ(sent.status().code(), Code::truncated) << sent.status().to_string();
  got = recv_->wait(*r, soon());
  EXPECT_EQ(got.status().code(), Code::truncated) << got.status().to_string();
}

TEST_P(FlowControl, EagerMessageLargerThanTheReceiveFailsTheReceive) {
  // Eager messages do not wait for the receiver: the sender completes, the receive reports the
  // truncation (docs/semantics.md), and the next message is unaffected.
  auto r = recv_->irecv(dst_.data(), 16, dst_reg_);
  ASSERT_TRUE(r.ok());
  auto s = send_->isend(src_.data(), 100, src_reg_);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(send_->wait(*s, soon()).ok());
  auto got = recv_->wait(*r, soon());
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Code::truncated) << got.status().to_string();
  EXPECT_NE(got.status().message().find("100 bytes"), std::string::npos)
      << got.status().message();
  src_[0] = 0x42;
  r = recv_->irecv(dst_.data(), 16, dst_reg_);
  ASSERT_TRUE(r.ok());
  s = send_->isend(src_.data(), 1, src_reg_);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(send_->wait(*s, soon()).ok());
  got = recv_->wait(*r, soon());
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, 1u);
  EXPECT_EQ(dst_[0], 0x42);
}

TEST_P(FlowControl, MessagesSentBeforeCloseAreStillReceived) {
  // CLOSE says how many messages were sent: receives of those complete (even when CLOSE arrives
  // first, as it may over another endpoint), the next receive fails with Code::closed.
  constexpr int kSent = 5;
  std::vector<Request> sends;
  for (int i = 0; i < kSent; ++i) {
    src_[i * 8] = static_cast<uint8_t>(0x60 + i);
    auto s = send_->isend(src_.data() + i * 8, 8, src_reg_);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    sends.push_back(*s);
  }
  for (auto& s : sends) ASSERT_TRUE(send_->wait(s, soon()).ok());
  send_.reset();  // closes: CLOSE(sent = 5)
  for (int i = 0; i < kSent; ++i) {
    auto r = recv_->irecv(dst_.data() + i * 8, 8, dst_reg_);
    ASSERT_TRUE(r.ok()) << "receive " << i << ": " << r.status().to_string();
    auto got = recv_->wait(*r, soon());
    ASSERT_TRUE(got.ok()) << "message " << i << " was sent before the close: "
                          << got.status().to_string();
    EXPECT_EQ(dst_[i * 8], static_cast<uint8_t>(0x60 + i));
  }
  // The CLOSE itself may still be on its way: drive progress until a receive reports it.
  Status last;
  const auto until = Deadline::after(std::chrono::seconds(20));
  while (!until.expired()) {
    auto r = recv_->irecv(dst_.data(), 8, dst_reg_);
    if (!r.ok()) {
      last = r.status();
      break;
    }
    auto got = recv_->wait(*r, Deadline::after(std::chrono::milliseconds(100)));
    if (!got.ok() && got.status().code() != Code::timeout) {
      last = got.status();
      break;
    }
    ASSERT_FALSE(got.ok()) << "a sixth message arrived that was never sent";
  }
  EXPECT_EQ(last.code(), Code::closed) << last.to_string();
  EXPECT_NE(last.message().find("after 5 messages"), std::string::npos) << last.message();
}

// An 8-byte send within credit is injected: done before isend returns, its slot free, and
// reported from a ticket that test() and wait() read without the engine lock. What the caller
// sees stays that of any send: reported done once, with its length; asked again, not
// outstanding; and until reported it is one of the depth outstanding sends.
TEST_P(FlowControl, InjectedSendsAreReportedOnceAndStayOutstandingUntilThen) {
  std::vector<Request> sends;
  for (int i = 0; i < kDepth; ++i) {
    auto s = send_->isend(src_.data() + i * 8, 8, src_reg_);
    ASSERT_TRUE(s.ok()) << "message " << i << ": " << s.status().to_string();
    sends.push_back(*s);
  }
  // Every slot's send unreported: one more is refused, as for sends still in flight.
  auto over = send_->isend(src_.data(), 8, src_reg_);
  ASSERT_FALSE(over.ok()) << "a send beyond " << kDepth << " unreported ones was taken";
  EXPECT_EQ(over.status().code(), Code::again) << over.status().to_string();
  // Reported by test(), then by wait(), then by a test() that makes no progress pass.
  auto t = send_->test(sends[3]);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_TRUE(t->done) << "an injected send is done when isend returns";
  EXPECT_EQ(t->bytes, 8u);
  EXPECT_EQ(t->count, 1u);
  auto w = send_->wait(sends[5], soon());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(*w, 8u);
  auto o = send_->test(sends[6], TestMode::observe);
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_TRUE(o->done);
  EXPECT_EQ(o->bytes, 8u);
  // Asked again: not outstanding, by test() (both modes) and wait().
  for (int k : {3, 5, 6}) {
    auto again = send_->test(sends[k]);
    ASSERT_FALSE(again.ok()) << "send " << k << " reported done twice";
    EXPECT_EQ(again.status().code(), Code::invalid_argument);
    EXPECT_NE(again.status().message().find("not outstanding"), std::string::npos)
        << again.status().to_string();
    EXPECT_FALSE(send_->test(sends[k], TestMode::observe).ok()) << "send " << k;
    auto again_wait = send_->wait(sends[k], soon());
    ASSERT_FALSE(again_wait.ok()) << "send " << k << " waited for twice";
    EXPECT_EQ(again_wait.status().code(), Code::invalid_argument);
  }
  // Message kDepth takes slot 0, still held by unreported send 0; reporting send 3 frees
  // slot 3, not slot 0.
  over = send_->isend(src_.data(), 8, src_reg_);
  ASSERT_FALSE(over.ok()) << "slot 0 was reused while send 0 was unreported";
  EXPECT_EQ(over.status().code(), Code::again);
  // Every other send reported once: then message kDepth is taken (and waits for credit).
  for (int k : {0, 1, 2, 4, 7}) {
    auto r = send_->wait(sends[k], soon());
    ASSERT_TRUE(r.ok()) << "send " << k << ": " << r.status().to_string();
    EXPECT_EQ(*r, 8u);
  }
  auto next = send_->isend(src_.data() + kDepth * 8, 8, src_reg_);
  ASSERT_TRUE(next.ok()) << next.status().to_string();
  for (int i = 0; i <= kDepth; ++i) {
    auto r = recv_->irecv(dst_.data() + i * 8, 8, dst_reg_);
    ASSERT_TRUE(r.ok()) << "receive " << i << ": " << r.status().to_string();
    auto got = recv_->wait(*r, soon());
    ASSERT_TRUE(got.ok()) << "receive " << i << ": " << got.status().to_string();
  }
  ASSERT_TRUE(send_->wait(*next, soon()).ok());
}

// Threads asking about one injected send at once, 1,000 times: exactly one hears it is done,
// the others that it is not outstanding (the lock-free report takes the ticket once), and the
// messages all arrive.
TEST_P(FlowControl, ThreadsTestingOneInjectedSendHearItDoneOnce) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 1000;
  std::vector<uint64_t> seqs(kRounds);
  std::atomic<uint64_t> posted{0};  // rounds whose send is out (UINT64_MAX: stop)
  std::atomic<int> answered{0}, done{0}, refused{0}, other{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        const auto until = Deadline::after(std::chrono::seconds(20));
        uint64_t p = 0;
        while ((p = posted.load(std::memory_order_acquire)) <= uint64_t(round)) {
          if (until.expired()) return;  // the main thread reports the round that stalled
          std::this_thread::yield();
        }
        if (p == UINT64_MAX) return;
        const Request req{seqs[round]};
        // Threads ask by wait() or test() (each mode), a different mix each round; a test()
        // that says "not done yet" (a send beyond the credit) is asked again.
        Status st;
        bool is_done = false;
        const int how = (round + t) % 3;
        if (how == 0) {
          auto w = send_->wait(req, soon());
          st = w.status();
          is_done = w.ok();
        } else {
          for (;;) {
            auto c = send_->test(req, how == 1 ? TestMode::progress : TestMode::observe);
            st = c.status();
            if (!c.ok() || c->done || until.expired()) {
              is_done = c.ok() && c->done;
              break;
            }
          }
        }
        if (is_done) {
          done.fetch_add(1);
          if (send_->test(req).ok()) other.fetch_add(1);  // never reported twice
        } else if (st.code() == Code::invalid_argument) {
          refused.fetch_add(1);
        } else {
          other.fetch_add(1);
        }
        answered.fetch_add(1, std::memory_order_acq_rel);
      }
    });
  }
  bool stalled = false;
  for (int round = 0; round < kRounds && !stalled; ++round) {
    auto r = recv_->irecv(dst_.data(), 8, dst_reg_);
    ASSERT_TRUE(r.ok()) << "receive " << round << ": " << r.status().to_string();
    std::memcpy(src_.data(), &round, sizeof(round));
    const int before = answered.load();
    auto s = send_->isend(src_.data(), 8, src_reg_);
    ASSERT_TRUE(s.ok()) << "message " << round << ": " << s.status().to_string();
    seqs[round] = s->seq;
    posted.store(uint64_t(round) + 1, std::memory_order_release);
    const auto until = Deadline::after(std::chrono::seconds(20));
    while (answered.load(std::memory_order_acquire) < before + kThreads) {
      if (until.expired()) {
        stalled = true;
        ADD_FAILURE() << "round " << round << ": " << answered.load() - before << " of "
                      << kThreads << " threads answered within 20 s";
        break;
      }
      std::this_thread::yield();
    }
    auto got = recv_->wait(*r, soon());
    if (!got.ok()) {
      ADD_FAILURE() << "receive " << round << ": " << got.status().to_string();
      stalled = true;
      break;
    }
    int seen = -1;
    std::memcpy(&seen, dst_.data(), sizeof(seen));
    EXPECT_EQ(seen, round) << "message " << round;
    if (done.load() != round + 1) {
      ADD_FAILURE() << "round " << round << ": sends reported done " << done.load()
                    << " times over " << round + 1 << " rounds";
      stalled = true;
    }
  }
  if (stalled) posted.store(UINT64_MAX);
  for (auto& th : threads) th.join();
  if (stalled) return;
  EXPECT_EQ(done.load(), kRounds);
  EXPECT_EQ(refused.load(), kRounds * (kThreads - 1));
  EXPECT_EQ(other.load(), 0) << "answers neither done nor not outstanding, or done twice";
}

// A depth that is not a power of two: slots are sequence numbers modulo the depth, a mask only
// where the depth is a power of two (the default). Messages of every protocol, some before their
// receive, wrap the slot ring many times and arrive intact and in order; the credit bound is
// the odd depth.
class OddDepth : public FlowControl {
 protected:
  int depth() const override { return 6; }
};

TEST_P(OddDepth, MessagesWrapTheSlotRingIntactAndCreditsAreTheDepth) {
  constexpr int kOdd = 6;
  // Credit: kOdd eager messages complete with no receive posted; the next one waits.
  std::vector<Request> early;
  for (int i = 0; i <= kOdd; ++i) {
    src_[i] = static_cast<uint8_t>(0xA0 + i);
    auto s = send_->isend(src_.data() + i, 1, src_reg_);
    ASSERT_TRUE(s.ok()) << "message " << i << ": " << s.status().to_string();
    if (i < kOdd) {
      auto w = send_->wait(*s, soon());
      ASSERT_TRUE(w.ok()) << "eager message " << i << " within the credit: "
                          << w.status().to_string();
    }
    early.push_back(*s);
  }
  EXPECT_FALSE(done_within(*send_, early[kOdd], std::chrono::milliseconds(200)))
      << "message " << kOdd << " was sent beyond a depth of " << kOdd;
  for (int i = 0; i <= kOdd; ++i) {
    auto r = recv_->irecv(dst_.data() + i, 1, dst_reg_);
    ASSERT_TRUE(r.ok()) << "receive " << i << ": " << r.status().to_string();
    auto got = recv_->wait(*r, soon());
    ASSERT_TRUE(got.ok()) << "receive " << i << ": " << got.status().to_string();
    EXPECT_EQ(dst_[i], static_cast<uint8_t>(0xA0 + i)) << "early message " << i;
  }
  ASSERT_TRUE(send_->wait(early[kOdd], soon()).ok());

  // 150 messages (0 bytes, 8 bytes, 4 KiB, and 96 KiB by rendezvous), up to kOdd receives and
  // kOdd sends outstanding, receives posted before or after their messages.
  const size_t sizes[] = {8, 0, 4096, 96 * 1024, 8, 4096};
  constexpr int kMessages = 150;
  constexpr size_t kStride = 128 * 1024;
  std::vector<uint8_t> src(kOdd * kStride), dst(kOdd * kStride);
  auto sr = dev_->register_memory(src.data(), src.size());
  auto dr = dev_->register_memory(dst.data(), dst.size());
  ASSERT_TRUE(sr.ok() && dr.ok());
  std::vector<Request> sends(kMessages), recvs(kMessages);
  int next_send = 0, next_recv = 0, done_send = 0, done_recv = 0;
  auto fill = [&](int m) {
    uint8_t* p = src.data() + (m % kOdd) * kStride;
    for (size_t k = 0; k < sizes[m % 6]; ++k) p[k] = static_cast<uint8_t>(m * 31 + k);
  };
  while (done_recv < kMessages) {
    // Receives run ahead of sends on odd rounds, behind on even ones.
    const bool recv_first = (done_recv / kOdd) % 2 == 1;
    for (int pass = 0; pass < 2; ++pass) {
      if ((pass == 0) == recv_first) {
        while (next_recv < kMessages && next_recv - done_recv < kOdd) {
          auto r = recv_->irecv(dst.data() + (next_recv % kOdd) * kStride, kStride, *dr);
          ASSERT_TRUE(r.ok()) << "receive " << next_recv << ": " << r.status().to_string();
          recvs[next_recv++] = *r;
        }
      } else {
        while (next_send < kMessages && next_send - done_send < kOdd &&
               next_send - done_recv < kOdd) {
          fill(next_send);
          auto s = send_->isend(src.data() + (next_send % kOdd) * kStride, sizes[next_send % 6],
                                *sr);
          ASSERT_TRUE(s.ok()) << "message " << next_send << ": " << s.status().to_string();
          sends[next_send++] = *s;
        }
      }
    }
    ASSERT_LT(done_recv, next_recv);
    auto got = recv_->wait(recvs[done_recv], soon());
    ASSERT_TRUE(got.ok()) << "message " << done_recv << ": " << got.status().to_string();
    ASSERT_EQ(*got, sizes[done_recv % 6]) << "message " << done_recv;
    const uint8_t* p = dst.data() + (done_recv % kOdd) * kStride;
    for (size_t k = 0; k < *got; ++k) {
      ASSERT_EQ(p[k], static_cast<uint8_t>(done_recv * 31 + k))
          << "message " << done_recv << ", byte " << k;
    }
    ++done_recv;
    while (done_send < next_send && done_send < done_recv) {
      auto w = send_->wait(sends[done_send], soon());
      ASSERT_TRUE(w.ok()) << "send " << done_send << ": " << w.status().to_string();
      ++done_send;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Providers, OddDepth, test::all_providers(), test::provider_param_name);

INSTANTIATE_TEST_SUITE_P(Providers, FlowControl, test::all_providers(),
                         test::provider_param_name);

}  // namespace
}  // namespace xport
