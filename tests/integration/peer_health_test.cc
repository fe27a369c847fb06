// Peer loss judged on evidence (docs/semantics.md, "Peer failure"), two devices of one process
// on every provider: an idle spell of both devices (no libxport call for several timeouts) is no
// loss, and a peer that stays silent once this device resumes is lost about a timeout later.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "provider_fixture.hpp"
#include "xport/xport.hpp"

namespace xport {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kTimeout = 600ms;    // XPORT_PEER_TIMEOUT_MS
constexpr auto kKeepalive = 100ms;  // XPORT_KEEPALIVE_MS
constexpr auto kIdle = 3 * kTimeout;  // the spell under test: no call into libxport at all

Deadline in(std::chrono::milliseconds ms) { return Deadline::after(ms); }

class PeerHealth : public test::ProviderTest {
 protected:
  std::vector<std::pair<std::string, std::string>> extra_knobs() const override {
    return {{"XPORT_PEER_TIMEOUT_MS", std::to_string(kTimeout.count())},
            {"XPORT_KEEPALIVE_MS", std::to_string(kKeepalive.count())}};
  }

  std::unique_ptr<Device> second_device() {
    auto b = ctx_->open_device();
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    return b.ok() ? std::move(b).value() : nullptr;
  }
};

// Both devices wait on each other (b's receive, a's put not yet counted by b), then neither
// calls libxport for three timeouts (a GPU kernel, an application computing). a resumes alone
// for a moment (b still away: a's keepalives go unanswered meanwhile), then b
// resumes. Neither is lost: the put lands, a rendezvous send and the receive complete. Before,
// each side's first health sweep counted the idle spell as the peer's silence and failed
// everything with Code::peer_lost.
TEST_P(PeerHealth, AnIdleSpellOfBothDevicesIsNoPeerLoss) {
  std::unique_ptr<Device> b = second_device();
  ASSERT_TRUE(b);
  Device& a = *dev_;
  std::atomic<bool> stop{false};
  std::thread b_progress([&] {
    while (!stop) (void)b->progress();
  });
  test::Pair p = test::connect_pair(a, *b);
  Result<std::unique_ptr<Window>> w = Status(Code::internal, "not opened");
  if (p.send) w = Window::open(*p.send, in(20s));
  stop = true;
  b_progress.join();
  ASSERT_TRUE(p.send && p.recv);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  constexpr size_t kLen = 64 * 1024;  // rendezvous (past XPORT_EAGER_MAX): b must answer
  std::vector<uint8_t> src(kLen), dst(kLen, 0), rbuf(kLen, 0);
  for (size_t i = 0; i < kLen; ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  auto sreg = a.register_memory(src.data(), src.size());
  auto dreg = b->register_memory(dst.data(), dst.size());
  auto rreg = b->register_memory(rbuf.data(), rbuf.size());
  ASSERT_TRUE(sreg.ok() && dreg.ok() && rreg.ok());
  auto remote = a.import_key(dreg->export_key());
  ASSERT_TRUE(remote.ok()) << remote.status().to_string();
  auto recv = p.recv->irecv(rbuf.data(), rbuf.size(), *rreg);
  ASSERT_TRUE(recv.ok()) << recv.status().to_string();
  auto put = (*w)->put(*sreg, 0, *remote, 0, 4096);
  ASSERT_TRUE(put.ok()) << put.status().to_string();
  // a listens until it sends b a keepalive (b makes no pass: the put is not counted, nothing
  // answers): a's health sweeps have seen b waited on and silent, as before a kernel launch.
  // (Connected endpoints send none: the connection reports a peer's loss.)
  if (std::string(GetParam().provider) != "tcp") {
    const uint64_t pings = a.stats().keepalives_sent;
    const auto ping_deadline = Clock::now() + 10s;
    while (a.stats().keepalives_sent == pings && Clock::now() < ping_deadline) {
      ASSERT_TRUE(a.progress().ok());
    }
    ASSERT_GT(a.stats().keepalives_sent, pings) << "a never sent b a keepalive";
  }

  std::this_thread::sleep_for(kIdle);  // the idle spell itself (what is under test)

  // a resumes alone for a while: its keepalives to b go unanswered meanwhile.
  const auto alone_until = Clock::now() + kKeepalive / 2;
  while (Clock::now() < alone_until) ASSERT_TRUE(a.progress().ok());
  // b resumes (its own thread), and a sends and waits.
  stop = false;
  std::thread b_again([&] {
    const auto until = Clock::now() + 20s;  // bounded whatever the main thread does
    while (!stop && Clock::now() < until) (void)b->progress();
  });
  auto send = p.send->isend(src.data(), kLen, *sreg);
  Status sent = send.ok() ? p.send->wait(*send, in(10s)).status() : send.status();
  Status quiet = (*w)->quiet(in(10s));
  stop = true;
  b_again.join();
  EXPECT_TRUE(sent.ok()) << "a's send after the idle spell: " << sent.to_string();
  EXPECT_TRUE(quiet.ok()) << "a's put issued before the idle spell: " << quiet.to_string();
  auto got = p.recv->wait(*recv, in(10s));
  ASSERT_TRUE(got.ok()) << "b's receive posted before the idle spell: " << got.status().to_string();
  EXPECT_EQ(*got, kLen);
  EXPECT_EQ(rbuf, src);
  EXPECT_TRUE(std::equal(dst.begin(), dst.begin() + 4096, src.begin()));
  w = Status(Code::closed, "dropped");
}

// A peer that never answers once this device resumes (b stays away for good: as a process that
// died without its provider saying so) is still declared lost, about XPORT_PEER_TIMEOUT_MS after
// this device resumed: not at once (the idle spell is not its silence), and not never.
TEST_P(PeerHealth, APeerSilentAfterThisDeviceResumesIsLostAboutATimeoutLater) {
  if (std::string(GetParam().provider) == "tcp") {
    GTEST_SKIP() << "connected endpoints: the connection reports a peer's loss, no keepalives";
  }
  std::unique_ptr<Device> b = second_device();
  ASSERT_TRUE(b);
  Device& a = *dev_;
  test::Pair p = test::connect_pair(a, *b);
  ASSERT_TRUE(p.send && p.recv);
  constexpr size_t kLen = 64 * 1024;  // rendezvous: the send waits for b's clear-to-send
  std::vector<uint8_t> src(kLen, 3);
  auto sreg = a.register_memory(src.data(), src.size());
  ASSERT_TRUE(sreg.ok());
  auto send = p.send->isend(src.data(), kLen, *sreg);
  ASSERT_TRUE(send.ok()) << send.status().to_string();
  (void)a.progress();

  std::this_thread::sleep_for(kIdle);  // the idle spell (b never progresses again)

  const auto t0 = Clock::now();
  auto w = p.send->wait(*send, in(10s));
  const auto waited = Clock::now() - t0;
  ASSERT_FALSE(w.ok()) << "a send completed without its receiver";
  EXPECT_EQ(w.status().code(), Code::peer_lost) << w.status().to_string();
  // (a sweep may count up to 100 ms of the spell, half the timeout at most: docs/knobs.md)
  EXPECT_GE(waited, kTimeout - 150ms)
      << "declared lost " << std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()
      << " ms after resuming: the idle spell was counted as the peer's silence";
}

INSTANTIATE_TEST_SUITE_P(Providers, PeerHealth, test::all_providers(),
                         test::provider_param_name);

}  // namespace
}  // namespace xport
