// libxport's public API under injected faults of the strict provider: an error completion fails
// exactly the one request it hits (with the provider's message) and the window keeps working;
// a dead domain turns outstanding and new operations into errors within the deadline, not hangs.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../integration/harness.hpp"
#include "xport/xport.hpp"

namespace xport {
namespace {

constexpr size_t kSize = 65536;

// The peer in its "target" role: a window target of `bytes` bytes.
test::ChildProcess spawn_target(size_t bytes) {
  const char* bin = std::getenv("XTEST_PEER_BIN");
  return test::ChildProcess::spawn(
      {bin != nullptr ? bin : "xport-test-peer", "target", std::to_string(bytes)}, {});
}

// The target's first two lines: its connection handle and its buffer's key (hex, prefixes off).
::testing::AssertionResult read_target(test::ChildProcess& peer, std::string* handle,
                                       std::string* key) {
  std::string err;
  *handle = peer.read_line(30000, &err);
  if (handle->rfind("HANDLE ", 0) != 0) {
    return ::testing::AssertionFailure() << "the peer's handle line: " << *handle << err;
  }
  *key = peer.read_line(30000, &err);
  if (key->rfind("KEY ", 0) != 0) {
    return ::testing::AssertionFailure() << "the peer's key line: " << *key << err;
  }
  *handle = handle->substr(7);
  *key = key->substr(4);
  return ::testing::AssertionSuccess();
}

class Injection : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("XPORT_PROVIDER", "strict", 1);
    // The peer is spawned before the fault is configured, so it runs clean.
    peer_ = std::make_unique<test::ChildProcess>(spawn_target(kSize));
    ASSERT_TRUE(peer_->started());
  }

  void TearDown() override {
    win_.reset();
    comm_.reset();
    dev_.reset();
    ctx_.reset();
    if (peer_) peer_->kill_now();
    for (const char* v : {"STRICT_FI_ERROR_AT", "STRICT_FI_ERROR_OP", "STRICT_FI_DEAD_DOMAIN_AT"})
      unsetenv(v);
  }

  // Opens libxport (after the test configured the fault) and a window onto the peer's buffer.
  void open_window() {
    std::string handle, key;
    ASSERT_TRUE(read_target(*peer_, &handle, &key));
    ContextOptions o;
    o.peers_on_host = true;
    auto ctx = Context::open(o);
    ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
    ctx_ = std::move(ctx).value();
    auto dev = ctx_->open_device();
    ASSERT_TRUE(dev.ok()) << dev.status().to_string();
    dev_ = std::move(dev).value();
    auto comm =
        dev_->connect(test::from_hex(handle), Deadline::after(std::chrono::seconds(20)));
    ASSERT_TRUE(comm.ok()) << comm.status().to_string();
    comm_ = std::move(comm).value();
    auto remote = dev_->import_key(test::from_hex(key));
    ASSERT_TRUE(remote.ok()) << remote.status().to_string();
    remote_ = std::make_unique<RemoteRegion>(std::move(remote).value());
    auto win = Window::open(*comm_);
    ASSERT_TRUE(win.ok()) << win.status().to_string();
    win_ = std::move(win).value();
    auto reg = dev_->register_memory(local_.data(), local_.size());
    ASSERT_TRUE(reg.ok()) << reg.status().to_string();
    reg_ = std::make_unique<Region>(std::move(reg).value());
  }

  // First wrong byte of local_[off, off+len) against the peer's pattern, or -1.
  long long piece_mismatch(size_t off, size_t len) const {
    for (size_t j = off; j < off + len; ++j)
      if (local_[j] != test::pattern_byte(1000, j)) return static_cast<long long>(j);
    return -1;
  }

  Status get_and_quiet(size_t off, size_t len) {
    Status s = win_->get(*reg_, off, *remote_, off, len).status();
    if (s.ok()) s = win_->quiet(Deadline::after(std::chrono::seconds(10)));
    return s;
  }

  std::unique_ptr<test::ChildProcess> peer_;
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<Device> dev_;
  std::unique_ptr<SendComm> comm_;
  std::unique_ptr<RemoteRegion> remote_;
  std::unique_ptr<Region> reg_;
  std::unique_ptr<Window> win_;
  std::vector<uint8_t> local_ = std::vector<uint8_t>(kSize);
};

// What makes the transfer suite's pass meaningful: libxport really ran on "strict" with
// FI_MR_ENDPOINT in its domain's MR mode (so every MR it used was bound and enabled).
TEST_F(Injection, LibxportSeesTheStrictProviderWithMrEndpoint) {
  ASSERT_NO_FATAL_FAILURE(open_window());
  const Capabilities& caps = dev_->capabilities();
  EXPECT_EQ(caps.provider, "strict");
  const char* enforced = std::getenv("STRICT_FI_MR_ENDPOINT");
  if (enforced == nullptr || std::string(enforced) != "1") GTEST_SKIP() << "not enforced here";
  bool mr_endpoint = false;
  for (const auto& m : caps.mr_mode) mr_endpoint = mr_endpoint || m == "FI_MR_ENDPOINT";
  EXPECT_TRUE(mr_endpoint) << to_string(caps);
  EXPECT_TRUE(get_and_quiet(0, kSize).ok());
  EXPECT_EQ(piece_mismatch(0, kSize), -1);
}

TEST_F(Injection, ErrorCompletionFailsExactlyOneRequestWithTheProvidersMessage) {
  setenv("STRICT_FI_ERROR_OP", "read", 1);
  setenv("STRICT_FI_ERROR_AT", "3", 1);
  ASSERT_NO_FATAL_FAILURE(open_window());
  const size_t piece = kSize / 4;
  std::vector<Status> results;
  for (size_t i = 0; i < 4; ++i) results.push_back(get_and_quiet(i * piece, piece));
  for (size_t i = 0; i < 4; ++i) {
    if (i == 2) continue;
    EXPECT_TRUE(results[i].ok()) << "get " << i << ": " << results[i].to_string();
    EXPECT_EQ(piece_mismatch(i * piece, piece), -1) << "get " << i << " data";
  }
  const Status& failed = results[2];
  ASSERT_FALSE(failed.ok()) << "the third read must fail";
  EXPECT_NE(failed.message().find("get: completion error"), std::string::npos)
      << failed.to_string();
  EXPECT_NE(failed.message().find("injected error completion on read #3"), std::string::npos)
      << "the provider's message must reach the caller: " << failed.to_string();
  EXPECT_EQ(win_->issued(), 4u);
  EXPECT_EQ(win_->completed(), 4u);
  uint64_t errors = 0;
  for (const auto& e : dev_->stats().endpoints) errors += e.error_completions;
  EXPECT_EQ(errors, 1u) << "exactly one error completion";
}

TEST_F(Injection, DeadDomainGivesErrorsNotHangs) {
  // Opening a device posts a few hundred receive buffers; the gets come after.
  setenv("STRICT_FI_DEAD_DOMAIN_AT", "1500", 1);
  ASSERT_NO_FATAL_FAILURE(open_window());
  Status first_failure;
  int ok = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 5000 && first_failure.ok(); ++i) {
    Status s = get_and_quiet(0, 64);
    if (s.ok())
      ++ok;
    else
      first_failure = s;
  }
  ASSERT_FALSE(first_failure.ok())
      << "the domain must die after 1500 operations (" << ok << " gets succeeded)";
  RecordProperty("first_failure", first_failure.to_string());
  EXPECT_NE(first_failure.code(), Code::timeout) << first_failure.to_string();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
  // The dead domain's rail is quarantined (a fatal error), and everything after fails at once.
  Stats st = dev_->stats();
  ASSERT_FALSE(st.rails.empty());
  EXPECT_EQ(st.rails[0].state, "quarantined") << "a dead domain must quarantine its rail";
  EXPECT_GE(st.rails[0].quarantine_events, 1u);
  const auto t1 = std::chrono::steady_clock::now();
  Status again = get_and_quiet(0, 64);
  EXPECT_FALSE(again.ok());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), 10.0)
      << again.to_string();
}

}  // namespace
}  // namespace xport

namespace xport {
namespace {

// A device on the strict provider refusing every other post (-FI_EAGAIN) from the moment it
// is open, and a connected communicator pair on it.
struct RefusingPair {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Device> dev;
  std::unique_ptr<Listener> listener;
  std::unique_ptr<SendComm> send;
  std::unique_ptr<RecvComm> recv;
};

void open_refusing_pair(RefusingPair* p) {
  setenv("XPORT_PROVIDER", "strict", 1);
  setenv("STRICT_FI_EAGAIN_EVERY", "2", 1);
  ContextOptions o;
  o.peers_on_host = true;
  auto ctx = Context::open(o);
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  p->ctx = std::move(ctx).value();
  auto dev = p->ctx->open_device();
  unsetenv("STRICT_FI_EAGAIN_EVERY");
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  p->dev = std::move(dev).value();
  auto listener = p->dev->listen();
  ASSERT_TRUE(listener.ok());
  p->listener = std::move(listener).value();
  auto send = p->dev->connect(p->listener->handle(), Deadline::after(std::chrono::seconds(20)));
  ASSERT_TRUE(send.ok()) << send.status().to_string();
  p->send = std::move(send).value();
  auto recv = p->listener->accept(Deadline::after(std::chrono::seconds(20)));
  ASSERT_TRUE(recv.ok()) << recv.status().to_string();
  p->recv = std::move(recv).value();
}

// Sends that a close cancels are never posted afterwards: with the provider refusing every
// other post (-FI_EAGAIN), eager sends wait in the engine's queue; closing the communicator
// cancels them, and no progress pass posts them later from a buffer the caller was told is free.
TEST(StrictClosing, SendsCancelledByCloseAreNeverPostedLater) {
  RefusingPair p;
  ASSERT_NO_FATAL_FAILURE(open_refusing_pair(&p));
  // Above shm's inject size: each is one post from the caller's buffer, queued when refused.
  constexpr size_t kLen = 6000;
  std::vector<uint8_t> buf(30 * kLen);
  auto reg = p.dev->register_memory(buf.data(), buf.size());
  ASSERT_TRUE(reg.ok());
  for (int i = 0; i < 30; ++i) {
    auto s = p.send->isend(buf.data() + i * kLen, kLen, *reg);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
  }
  auto data_sends = [&] {
    uint64_t n = 0;
    for (const auto& e : p.dev->stats().endpoints) {
      if (e.name.find(" data") != std::string::npos) n += e.ops[0];
    }
    return n;
  };
  const uint64_t deferred = p.dev->stats().deferred_posts;
  ASSERT_GT(deferred, 0u) << "no send met -FI_EAGAIN: the test proves nothing";
  p.send.reset();  // closes: the queued sends are cancelled
  const uint64_t at_close = data_sends();
  for (auto d = Deadline::after(std::chrono::milliseconds(500)); !d.expired();) {
    (void)p.dev->progress();
  }
  EXPECT_EQ(data_sends(), at_close) << "sends were posted after their communicator closed";
}

// A small send the provider refuses (-FI_EAGAIN) is queued for progress, not offered to the busy
// provider again inside the same isend: each isend makes one provider call at most. With the
// provider refusing every other post, the messages still all arrive, intact and in order.
TEST(StrictEagain, RefusedInjectIsQueuedNotRetriedAtOnce) {
  RefusingPair p;
  ASSERT_NO_FATAL_FAILURE(open_refusing_pair(&p));
  const size_t inject = p.ctx->provider().caps.inject_size;
  ASSERT_GE(inject, 8u) << "the strict provider offers no inject: the test proves nothing";
  constexpr int kMessages = 40;
  constexpr size_t kLen = 8;
  std::vector<uint8_t> out(kMessages * kLen), in(kMessages * kLen, 0);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 7 + 1);
  auto out_reg = p.dev->register_memory(out.data(), out.size());
  auto in_reg = p.dev->register_memory(in.data(), in.size());
  ASSERT_TRUE(out_reg.ok() && in_reg.ok());
  std::vector<Request> rx;
  for (int i = 0; i < kMessages; ++i) {
    auto r = p.recv->irecv(in.data() + i * kLen, kLen, *in_reg);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    rx.push_back(*r);
  }
  // Provider calls on the data endpoints: posts it took, and posts it refused.
  auto data_calls = [&] {
    uint64_t n = 0;
    for (const auto& e : p.dev->stats().endpoints) {
      if (e.name.find(" data") != std::string::npos) n += e.ops[0] + e.eagain_retries;
    }
    return n;
  };
  const uint64_t deferred_before = p.dev->stats().deferred_posts;
  std::vector<Request> tx;
  for (int i = 0; i < kMessages; ++i) {
    const uint64_t before = data_calls();
    auto s = p.send->isend(out.data() + i * kLen, kLen, *out_reg);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_LE(data_calls() - before, 1u)
        << "isend of message " << i << " called the provider " << data_calls() - before
        << " times: a refused inject was offered to the busy provider again at once";
    tx.push_back(*s);
  }
  EXPECT_GT(p.dev->stats().deferred_posts, deferred_before)
      << "no isend met -FI_EAGAIN: the test proves nothing";
  const Deadline d = Deadline::after(std::chrono::seconds(30));
  for (int i = 0; i < kMessages; ++i) {
    auto w = p.send->wait(tx[i], d);
    ASSERT_TRUE(w.ok()) << "send " << i << ": " << w.status().to_string();
  }
  for (int i = 0; i < kMessages; ++i) {
    auto w = p.recv->wait(rx[i], d);
    ASSERT_TRUE(w.ok()) << "receive " << i << ": " << w.status().to_string();
    EXPECT_EQ(*w, kLen) << "message " << i;
  }
  EXPECT_EQ(in, out) << "messages arrived damaged or out of order";
}

}  // namespace
}  // namespace xport

namespace xport {
namespace {

// A device closed with operations still in flight (puts to a peer that stopped answering)
// closes its endpoints before it frees their contexts: the strict provider writes into the
// contexts of what it still owns when an endpoint closes (STRICT_FI_SCRIBBLE, as providers in
// FI_CONTEXT2 mode may), and AddressSanitizer would catch a context freed before that.
TEST(StrictTeardown, ContextsOutliveTheEndpointsThatOwnThem) {
  setenv("XPORT_PROVIDER", "strict", 1);
  setenv("STRICT_FI_SCRIBBLE", "1", 1);
  constexpr size_t kBig = 32 << 20;
  auto peer = spawn_target(kBig);
  ASSERT_TRUE(peer.started());
  std::string handle, key;
  ASSERT_TRUE(read_target(peer, &handle, &key));
  // This side's posts go out up to 2 s late (the peer, already running, is not delayed): the
  // puts are still the provider's when everything is dropped.
  setenv("STRICT_FI_DELAY_POST_US", "2000000", 1);
  {
    ContextOptions o;
    o.peers_on_host = true;
    auto ctx = Context::open(o);
    ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
    auto dev = (*ctx)->open_device();
    ASSERT_TRUE(dev.ok()) << dev.status().to_string();
    auto comm = (*dev)->connect(test::from_hex(handle),
                                Deadline::after(std::chrono::seconds(20)));
    ASSERT_TRUE(comm.ok()) << comm.status().to_string();
    auto remote = (*dev)->import_key(test::from_hex(key));
    ASSERT_TRUE(remote.ok()) << remote.status().to_string();
    auto win = Window::open(**comm);
    ASSERT_TRUE(win.ok()) << win.status().to_string();
    std::vector<uint8_t> local(kBig);
    auto reg = (*dev)->register_memory(local.data(), local.size());
    ASSERT_TRUE(reg.ok());
    peer.stop();  // it answers nothing any more: the puts stay in flight
    for (int i = 0; i < 4; ++i) {
      Status s = (*win)->put(*reg, 0, *remote, 0, kBig).status();
      ASSERT_TRUE(s.ok()) << s.to_string();
    }
    Status q = (*win)->quiet(Deadline::after(std::chrono::milliseconds(200)));
    ASSERT_FALSE(q.ok()) << "the puts completed although the peer was stopped";
    // Everything goes, in the order a runtime drops it, with the puts still in flight.
  }
  peer.resume();
  peer.kill_now();
  unsetenv("STRICT_FI_SCRIBBLE");
  unsetenv("STRICT_FI_DELAY_POST_US");
}

}  // namespace
}  // namespace xport

namespace xport {
namespace {

// A window with every operation context in flight refuses the next put at once (Code::again,
// nothing posted) instead of spinning for a free context with the engine lock held.
TEST(StrictWindow, PutsBeyondTheContextsInFlightAreRefusedAtOnce) {
  setenv("XPORT_PROVIDER", "strict", 1);
  auto peer = spawn_target(kSize);
  ASSERT_TRUE(peer.started());
  std::string handle, key;
  ASSERT_TRUE(read_target(peer, &handle, &key));
  // This side's posts leave up to 2 s late, so every context stays in flight. The refusals prove
  // the contract; the bound on the slowest call (1 s: room for a loaded CI machine) catches a
  // put that waits for a delayed post to complete.
  setenv("STRICT_FI_DELAY_POST_US", "2000000", 1);
  {
    ContextOptions o;
    o.peers_on_host = true;
    auto ctx = Context::open(o);
    ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
    auto dev = (*ctx)->open_device();
    ASSERT_TRUE(dev.ok()) << dev.status().to_string();
    auto comm = (*dev)->connect(test::from_hex(handle),
                                Deadline::after(std::chrono::seconds(30)));
    ASSERT_TRUE(comm.ok()) << comm.status().to_string();
    auto remote = (*dev)->import_key(test::from_hex(key));
    ASSERT_TRUE(remote.ok());
    auto win = Window::open(**comm);
    ASSERT_TRUE(win.ok());
    // Puts larger than the inject size (smaller ones are locally complete when issued).
    const size_t len = (*ctx)->provider().caps.inject_size + 64;
    ASSERT_LE(len, kSize);
    std::vector<uint8_t> local(len);
    auto reg = (*dev)->register_memory(local.data(), local.size());
    ASSERT_TRUE(reg.ok());
    int refused = 0;
    std::chrono::nanoseconds slowest{0};
    for (int i = 0; i < 300; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      Status s = (*win)->put(*reg, 0, *remote, 0, len).status();
      slowest = std::max(slowest, std::chrono::steady_clock::now() - t0);
      if (s.code() == Code::again) {
        ++refused;
      } else {
        ASSERT_TRUE(s.ok()) << s.to_string();
      }
    }
    EXPECT_GT(refused, 0) << "every context was to be in flight";
    EXPECT_LT(slowest, std::chrono::milliseconds(1000))
        << "a put call took " << std::chrono::duration_cast<std::chrono::milliseconds>(slowest).count()
        << " ms";
    EXPECT_TRUE((*win)->quiet(Deadline::after(std::chrono::seconds(20))).ok());
  }
  unsetenv("STRICT_FI_DELAY_POST_US");
  peer.kill_now();
}

}  // namespace
}  // namespace xport
