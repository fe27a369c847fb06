// Tags and grouped receives through the public API, one device connected to itself, on every
// provider (and, through integration-eager-header, with eager messages behind a header): a
// grouped receive takes the sender's next n messages and places the k-th message with tag t in
// its k-th buffer with tag t; sizes per buffer come back from test(); a message whose tag fits
// no buffer fails that receive (and a rendezvous send) and nothing else; bad input is named.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "harness.hpp"
#include "provider_fixture.hpp"
#include "xport/xport.hpp"

namespace xport {
namespace {

using namespace std::chrono_literals;

Deadline soon() { return Deadline::after(20s); }

struct SelfPair {
  std::unique_ptr<Listener> listener;
  std::unique_ptr<SendComm> send;
  std::unique_ptr<RecvComm> recv;
};

// Connects a device to itself without blocking calls: start_connect, then poll and try_accept
// from this one thread until both ends are there.
SelfPair self_pair(Device& dev) {
  SelfPair p;
  auto l = dev.listen();
  EXPECT_TRUE(l.ok()) << l.status().to_string();
  if (!l.ok()) return p;
  p.listener = std::move(l).value();
  auto pending = dev.start_connect(p.listener->handle(), soon());
  EXPECT_TRUE(pending.ok()) << pending.status().to_string();
  if (!pending.ok()) return p;
  const auto until = std::chrono::steady_clock::now() + 20s;
  while ((!p.send || !p.recv) && std::chrono::steady_clock::now() < until) {
    if (!p.send) {
      auto s = (*pending)->poll();
      EXPECT_TRUE(s.ok()) << s.status().to_string();
      if (!s.ok()) return p;
      p.send = std::move(s).value();
    }
    if (!p.recv) {
      auto r = p.listener->try_accept();
      EXPECT_TRUE(r.ok()) << r.status().to_string();
      if (!r.ok()) return p;
      p.recv = std::move(r).value();
    }
  }
  EXPECT_TRUE(p.send && p.recv) << "no connection within 20 s";
  return p;
}

class Matching : public test::ProviderTest {
 protected:
  void SetUp() override {
    test::ProviderTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    p_ = self_pair(*dev_);
    ASSERT_TRUE(p_.send && p_.recv);
    arena_.assign(kArena, 0);
    auto reg = dev_->register_memory(arena_.data(), arena_.size());
    ASSERT_TRUE(reg.ok()) << reg.status().to_string();
    region_ = std::move(reg).value();
  }
  void TearDown() override {
    region_ = Region();
    p_ = SelfPair();
    test::ProviderTest::TearDown();
  }

  static constexpr size_t kArena = 16 << 20;
  static constexpr size_t kSlot = 1 << 20;  // each buffer gets its own MiB of the arena
  uint8_t* src(size_t i) { return arena_.data() + i * kSlot; }
  uint8_t* dst(size_t i) { return arena_.data() + (8 + i) * kSlot; }

  SelfPair p_;
  std::vector<uint8_t> arena_;
  Region region_;
};

struct Msg {
  uint32_t tag;
  size_t len;
};

// Sizes on both sides of the eager limit (8 KiB), some striped-size.
constexpr size_t kEager = 100, kEager2 = 4000, kRndv = 300000, kRndv2 = 20000;

TEST_P(Matching, GroupedReceivePlacesEachMessageByTag) {
  // Buffers' tags 7, 3, 7, 5; the sender's messages come with tags 3, 7, 5, 7: message 0 lands
  // in buffer 1, message 1 in buffer 0, message 2 in buffer 3, message 3 in buffer 2.
  const uint32_t tags[4] = {7, 3, 7, 5};
  const Msg msgs[4] = {{3, kRndv}, {7, kEager}, {5, kEager2}, {7, kRndv2}};
  const size_t want_buffer[4] = {1, 0, 3, 2};
  for (bool receive_first : {true, false}) {
    SCOPED_TRACE(receive_first ? "receive posted first" : "messages sent first");
    std::vector<RecvBuffer> bufs;
    for (size_t i = 0; i < 4; ++i) {
      std::memset(dst(i), 0, kSlot);
      bufs.push_back({dst(i), kSlot, &region_, tags[i]});
    }
    Result<Request> r = Status(Code::internal, "not posted");
    if (receive_first) r = p_.recv->irecv(bufs);
    std::vector<Request> sends;
    for (size_t m = 0; m < 4; ++m) {
      test::fill(src(m), msgs[m].len, 100 + m);
      auto s = p_.send->isend(src(m), msgs[m].len, region_, msgs[m].tag);
      ASSERT_TRUE(s.ok()) << s.status().to_string();
      sends.push_back(*s);
    }
    if (!receive_first) {
      // Let the eager messages and requests-to-send arrive before the receive is posted.
      for (int i = 0; i < 200; ++i) (void)dev_->progress();
      r = p_.recv->irecv(bufs);
    }
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    Completion c;
    const auto until = std::chrono::steady_clock::now() + 20s;
    while (!c.done && std::chrono::steady_clock::now() < until) {
      auto t = p_.recv->test(*r);
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      c = *t;
    }
    ASSERT_TRUE(c.done) << "grouped receive not done within 20 s";
    EXPECT_EQ(c.count, 4u);
    size_t total = 0;
    for (size_t m = 0; m < 4; ++m) {
      const size_t b = want_buffer[m];
      EXPECT_EQ(c.sizes[b], msgs[m].len) << "buffer " << b << " (message " << m << ")";
      EXPECT_EQ(test::first_mismatch(dst(b), msgs[m].len, 100 + m), -1)
          << "message " << m << " in buffer " << b;
      total += msgs[m].len;
    }
    EXPECT_EQ(c.bytes, total);
    for (Request s : sends) ASSERT_TRUE(p_.send->wait(s, soon()).ok());
  }
}

TEST_P(Matching, GroupOfOneTagTakesMessagesInOrder) {
  // Eight buffers, one tag (NCCL's case): message i in buffer i, sizes per buffer.
  std::vector<RecvBuffer> bufs;
  for (size_t i = 0; i < kMaxGroupedRecvs; ++i) bufs.push_back({dst(i), kSlot, &region_, 42});
  auto r = p_.recv->irecv(bufs);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const size_t lens[8] = {0, 1, kEager2, 8192, 8193, kRndv, kSlot, 77};
  for (size_t m = 0; m < 8; ++m) {
    test::fill(src(m), lens[m], m);
    auto s = p_.send->isend(src(m), lens[m], region_, 42);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
  }
  auto got = p_.recv->wait(*r, soon());
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  auto again = p_.recv->test(*r);
  EXPECT_FALSE(again.ok()) << "a completed grouped receive is not outstanding any more";
  // wait() reported the total; the sizes came with the completion: test a second group.
  auto r2 = p_.recv->irecv(std::span(bufs).first(3));
  ASSERT_TRUE(r2.ok()) << r2.status().to_string();
  for (size_t m = 0; m < 3; ++m) {
    test::fill(src(m), lens[5 - m], 5 - m);
    ASSERT_TRUE(p_.send->isend(src(m), lens[5 - m], region_, 42).ok());
  }
  Completion c;
  while (!c.done) {
    auto t = p_.recv->test(*r2);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    c = *t;
  }
  EXPECT_EQ(c.count, 3u);
  for (size_t m = 0; m < 3; ++m) {
    EXPECT_EQ(c.sizes[m], lens[5 - m]);
    EXPECT_EQ(test::first_mismatch(dst(m), lens[5 - m], 5 - m), -1) << "buffer " << m;
  }
  size_t total = 0;
  for (size_t m = 0; m < 8; ++m) total += lens[m];
  EXPECT_EQ(*got, total);
}

// Tags that do not fit: the receive (and a rendezvous send, which never writes) fails with
// invalid_argument naming both tags; the communicator goes on.
TEST_P(Matching, AMessageOfAnotherTagFailsItsReceiveOnly) {
  for (size_t len : {kEager, kRndv}) {
    SCOPED_TRACE(len == kEager ? "eager" : "rendezvous");
    std::memset(dst(0), 0xee, kSlot);
    auto r = p_.recv->irecv(dst(0), kSlot, region_, 1);
    ASSERT_TRUE(r.ok());
    test::fill(src(0), len, 5);
    auto s = p_.send->isend(src(0), len, region_, 2);
    ASSERT_TRUE(s.ok());
    auto got = p_.recv->wait(*r, soon());
    ASSERT_FALSE(got.ok()) << "a message of tag 2 was taken by a receive of tag 1";
    EXPECT_EQ(got.status().code(), Code::invalid_argument) << got.status().to_string();
    EXPECT_NE(got.status().message().find("tag"), std::string::npos) << got.status().message();
    auto sent = p_.send->wait(*s, soon());
    if (len == kRndv) {
      ASSERT_FALSE(sent.ok()) << "a rendezvous send to a receive of another tag completed";
      EXPECT_EQ(sent.status().code(), Code::invalid_argument) << sent.status().to_string();
      EXPECT_EQ(dst(0)[0], 0xee) << "the refused message was written";
    } else {
      EXPECT_TRUE(sent.ok()) << "an eager send completes locally: " << sent.status().to_string();
    }
    // The next message of the right tag goes through.
    auto r2 = p_.recv->irecv(dst(1), kSlot, region_, 1);
    ASSERT_TRUE(r2.ok());
    test::fill(src(1), len, 6);
    auto s2 = p_.send->isend(src(1), len, region_, 1);
    ASSERT_TRUE(s2.ok());
    auto got2 = p_.recv->wait(*r2, soon());
    ASSERT_TRUE(got2.ok()) << got2.status().to_string();
    EXPECT_EQ(*got2, len);
    EXPECT_EQ(test::first_mismatch(dst(1), len, 6), -1);
    ASSERT_TRUE(p_.send->wait(*s2, soon()).ok());
  }
}

TEST_P(Matching, AGroupRefusesATagNoBufferIsLeftFor) {
  // Buffers of tags 1 and 2, messages of tags 1 and 1: the second has nowhere to go. A
  // rendezvous sender is told (REFUSE) instead of waiting for a clear-to-send forever.
  RecvBuffer bufs[2] = {{dst(0), kSlot, &region_, 1}, {dst(1), kSlot, &region_, 2}};
  auto r = p_.recv->irecv(bufs);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  test::fill(src(0), kEager, 1);
  test::fill(src(1), kRndv, 2);
  auto s0 = p_.send->isend(src(0), kEager, region_, 1);
  auto s1 = p_.send->isend(src(1), kRndv, region_, 1);
  ASSERT_TRUE(s0.ok() && s1.ok());
  auto got = p_.recv->wait(*r, soon());
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Code::invalid_argument) << got.status().to_string();
  EXPECT_NE(got.status().message().find("no buffer left"), std::string::npos)
      << got.status().message();
  EXPECT_TRUE(p_.send->wait(*s0, soon()).ok());
  auto sent = p_.send->wait(*s1, soon());
  ASSERT_FALSE(sent.ok());
  EXPECT_EQ(sent.status().code(), Code::invalid_argument) << sent.status().to_string();
  EXPECT_NE(sent.status().message().find("refused"), std::string::npos) << sent.status().message();
  EXPECT_EQ(test::first_mismatch(dst(0), kEager, 1), -1) << "the first message found its buffer";
}

TEST_P(Matching, TagsBeyondSixteenBitsTravelToo) {
  // Headerless eager messages carry 16 bits of tag: larger tags go with a header.
  for (uint32_t tag : {0u, 0xffffu, 0x10000u, 0xfffffffeu}) {
    auto r = p_.recv->irecv(dst(0), kSlot, region_, tag);
    ASSERT_TRUE(r.ok());
    test::fill(src(0), kEager, tag);
    ASSERT_TRUE(p_.send->isend(src(0), kEager, region_, tag).ok());
    auto got = p_.recv->wait(*r, soon());
    ASSERT_TRUE(got.ok()) << "tag " << tag << ": " << got.status().to_string();
    EXPECT_EQ(test::first_mismatch(dst(0), kEager, tag), -1);
  }
}

TEST_P(Matching, BadGroupsAreRefusedBeforeAnythingIsPosted) {
  std::vector<RecvBuffer> nine(9, RecvBuffer{dst(0), 64, &region_, 0});
  auto r = p_.recv->irecv(nine);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::invalid_argument);
  EXPECT_NE(r.status().message().find("1..8"), std::string::npos) << r.status().message();
  r = p_.recv->irecv(std::span<const RecvBuffer>());
  EXPECT_EQ(r.status().code(), Code::invalid_argument) << r.status().to_string();
  RecvBuffer no_region[2] = {{dst(0), 64, &region_, 0}, {dst(1), 64, nullptr, 0}};
  r = p_.recv->irecv(no_region);
  EXPECT_NE(r.status().message().find("buffer 1 names no Region"), std::string::npos)
      << r.status().to_string();
  std::vector<uint8_t> outside(64);
  RecvBuffer stray[2] = {{dst(0), 64, &region_, 0}, {outside.data(), 64, &region_, 0}};
  r = p_.recv->irecv(stray);
  EXPECT_EQ(r.status().code(), Code::invalid_argument);
  EXPECT_NE(r.status().message().find("buffer 1"), std::string::npos) << r.status().message();
  // None of these took a sequence number: the next message still goes to the next receive.
  auto ok = p_.recv->irecv(dst(0), 64, region_, 3);
  ASSERT_TRUE(ok.ok());
  test::fill(src(0), 64, 3);
  ASSERT_TRUE(p_.send->isend(src(0), 64, region_, 3).ok());
  auto got = p_.recv->wait(*ok, soon());
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(test::first_mismatch(dst(0), 64, 3), -1);
}

TEST_P(Matching, IflushIsARequest) {
  auto r = p_.recv->irecv(dst(0), kSlot, region_);
  ASSERT_TRUE(r.ok());
  test::fill(src(0), kRndv, 9);
  ASSERT_TRUE(p_.send->isend(src(0), kRndv, region_).ok());
  ASSERT_TRUE(p_.recv->wait(*r, soon()).ok());
  auto f = p_.recv->iflush(dst(0), kRndv, region_);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->kind, Request::Kind::flush);
  Completion c;
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (!c.done && std::chrono::steady_clock::now() < until) {
    auto t = p_.recv->test(*f);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    c = *t;
  }
  EXPECT_TRUE(c.done);
  // Several at once, independent of each other; a flush request is no message request.
  auto f1 = p_.recv->iflush(dst(0), 64, region_);
  auto f2 = p_.recv->iflush(dst(0), 4096, region_);
  ASSERT_TRUE(f1.ok() && f2.ok());
  EXPECT_TRUE(p_.recv->wait(*f2, soon()).ok());
  EXPECT_TRUE(p_.recv->wait(*f1, soon()).ok());
  auto stale = p_.recv->test(*f1);
  if (f1->seq != 0) {
    EXPECT_EQ(stale.status().code(), Code::invalid_argument) << "a finished flush tested again";
  }
  std::vector<uint8_t> outside(64);
  auto bad = p_.recv->iflush(outside.data(), 64, region_);
  EXPECT_EQ(bad.status().code(), Code::invalid_argument) << bad.status().to_string();
}

INSTANTIATE_TEST_SUITE_P(Providers, Matching, test::all_providers(), test::provider_param_name);

}  // namespace
}  // namespace xport
