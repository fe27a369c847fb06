// Blocking waits (XPORT_WAIT=block, Deadline::blocking()): a thread that waits for a message
// sleeps on the CQs' wait objects instead of spinning, and wakes when the message comes; several
// threads asleep on one device all wake. One process, two devices: the sender is a thread of its
// own on the other device. The CPU bounds are loose (a spinning wait uses a whole core; these
// waits measure a few percent); wake-up latency is measured in docs/benchmarks.md, not here.
// A counted progress pass (Device::progress_counted) says when it read completions.
#include <gtest/gtest.h>
#include <time.h>

#include <chrono>
#include <iostream>
#include <thread>

#include "harness.hpp"
#include "provider_fixture.hpp"
#include "xport/xport.hpp"

namespace xport {
namespace {

using namespace std::chrono_literals;

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

using test::connect_pair;
using test::Pair;

struct Outcome {
  Result<size_t> got = Status(Code::internal, "not run");
  double cpu = 0, wall = 0;
};

// Waits for `req` on `comm` with `d`, measuring this thread's CPU time and the wall time.
Outcome timed_wait(RecvComm& comm, Request req, Deadline d) {
  Outcome o;
  const double c0 = thread_cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  o.got = comm.wait(req, d);
  o.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  o.cpu = thread_cpu_seconds() - c0;
  return o;
}

class Waiting : public test::ProviderTest {
 protected:
  std::vector<std::pair<std::string, std::string>> extra_knobs() const override {
    return {{"XPORT_WAIT", "block"}};
  }

  // Sends `n` bytes on `comm` after `idle` (the time the receiver is to spend waiting: what is
  // measured, not a synchronisation), driving the sending device by its own wait.
  static std::thread send_later(SendComm& comm, Device& dev, std::chrono::milliseconds idle,
                                size_t n, Status* out) {
    return std::thread([&comm, &dev, idle, n, out] {
      std::vector<uint8_t> buf(n, 0x5a);
      auto reg = dev.register_memory(buf.data(), buf.size());
      if (!reg.ok()) {
        *out = reg.status();
        return;
      }
      std::this_thread::sleep_for(idle);
      auto r = comm.isend(buf.data(), n, *reg);
      if (!r.ok()) {
        *out = r.status();
        return;
      }
      auto w = comm.wait(*r, Deadline::after(20s).spinning());
      *out = w.ok() ? Status() : w.status();
    });
  }

  void expect_idle(const Outcome& o, const char* who) {
    ASSERT_TRUE(o.got.ok()) << who << ": " << o.got.status().to_string();
    std::cout << "[ waiting  ] " << who << " " << GetParam().provider << ": " << o.cpu * 1e3
              << " ms of CPU in " << o.wall * 1e3 << " ms asleep\n";
    EXPECT_GE(o.wall, 0.5) << who << ": the wait ended before the message was sent";
    EXPECT_LT(o.cpu, 0.25 * o.wall)
        << who << ": a blocking wait spent " << o.cpu * 1e3 << " ms of CPU in " << o.wall * 1e3
        << " ms (a spinning wait spends all of it)";
  }
};

TEST_P(Waiting, AnIdleReceiveSleepsAndWakesForItsMessage) {
  auto sender = ctx_->open_device();
  ASSERT_TRUE(sender.ok()) << sender.status().to_string();
  Pair l = connect_pair(**sender, *dev_);
  ASSERT_TRUE(l.send && l.recv);
  std::vector<uint8_t> buf(4096);
  auto reg = dev_->register_memory(buf.data(), buf.size());
  ASSERT_TRUE(reg.ok());
  auto r = l.recv->irecv(buf.data(), buf.size(), *reg);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  Status sent;
  std::thread t = send_later(*l.send, **sender, 1000ms, 4096, &sent);
  Outcome o = timed_wait(*l.recv, *r, Deadline::after(20s));
  t.join();
  ASSERT_TRUE(sent.ok()) << sent.to_string();
  expect_idle(o, "receive");
  if (o.got.ok()) {
    EXPECT_EQ(*o.got, 4096u);
  }
  EXPECT_EQ(buf[4095], 0x5a);
}

TEST_P(Waiting, ThreadsAsleepOnOneDeviceAllWake) {
  // Two receivers on one device, on two communicators; whichever thread's pass reads both
  // completions rings for the other.
  auto sender = ctx_->open_device();
  ASSERT_TRUE(sender.ok()) << sender.status().to_string();
  Pair a = connect_pair(**sender, *dev_), b = connect_pair(**sender, *dev_);
  ASSERT_TRUE(a.send && a.recv && b.send && b.recv);
  std::vector<uint8_t> ba(64), bb(64);
  auto ra = dev_->register_memory(ba.data(), ba.size());
  auto rb = dev_->register_memory(bb.data(), bb.size());
  ASSERT_TRUE(ra.ok() && rb.ok());
  auto qa = a.recv->irecv(ba.data(), ba.size(), *ra);
  auto qb = b.recv->irecv(bb.data(), bb.size(), *rb);
  ASSERT_TRUE(qa.ok() && qb.ok());
  Outcome oa, ob;
  std::thread wa([&] { oa = timed_wait(*a.recv, *qa, Deadline::after(20s)); });
  std::thread wb([&] { ob = timed_wait(*b.recv, *qb, Deadline::after(20s)); });
  Status sa, sb;
  std::thread t = send_later(*b.send, **sender, 800ms, 64, &sb);
  t.join();
  t = send_later(*a.send, **sender, 0ms, 64, &sa);
  t.join();
  wa.join();
  wb.join();
  ASSERT_TRUE(sa.ok() && sb.ok()) << sa.to_string() << " / " << sb.to_string();
  expect_idle(oa, "receive a");
  expect_idle(ob, "receive b");
}

INSTANTIATE_TEST_SUITE_P(Providers, Waiting, test::all_providers(), test::provider_param_name);

// Device::progress_counted: a pass says how many completions it read. With nothing in flight a
// pass reads none; a message's arrival is read by a counted pass, and test() (observing only,
// no pass of its own) then finds the receive done.
class Progressing : public test::ProviderTest {};

TEST_P(Progressing, ACountedPassSaysWhenItReadCompletions) {
  auto sender = ctx_->open_device();
  ASSERT_TRUE(sender.ok()) << sender.status().to_string();
  Pair l = connect_pair(**sender, *dev_);
  ASSERT_TRUE(l.send && l.recv);
  std::vector<uint8_t> in(64, 0), out(64, 0x77);
  auto rin = dev_->register_memory(in.data(), in.size());
  auto rout = (*sender)->register_memory(out.data(), out.size());
  ASSERT_TRUE(rin.ok() && rout.ok());
  auto r = l.recv->irecv(in.data(), in.size(), *rin);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  // Whatever the connection left (its acknowledgements) is read first: then passes read nothing.
  int quiet = 0;
  for (auto until = std::chrono::steady_clock::now() + 20s;
       quiet < 16 && std::chrono::steady_clock::now() < until;) {
    auto n = dev_->progress_counted();
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    quiet = *n == 0 ? quiet + 1 : 0;
    ASSERT_TRUE((*sender)->progress().ok());
  }
  ASSERT_EQ(quiet, 16) << "passes kept reading completions with nothing in flight";
  auto c = l.recv->test(*r, TestMode::observe);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->done);
  auto s = l.send->isend(out.data(), out.size(), *rout);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  size_t read = 0;
  for (auto until = std::chrono::steady_clock::now() + 20s;
       read == 0 && std::chrono::steady_clock::now() < until;) {
    ASSERT_TRUE((*sender)->progress().ok());
    auto n = dev_->progress_counted();
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    read = *n;
  }
  EXPECT_GT(read, 0u) << "no counted pass read the message within 20 s";
  c = l.recv->test(*r, TestMode::observe);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->done) << "a pass read completions, yet the receive is not done";
  EXPECT_EQ(in[63], 0x77);
  ASSERT_TRUE(l.send->wait(*s, Deadline::after(20s)).ok());
}

INSTANTIATE_TEST_SUITE_P(Providers, Progressing, test::all_providers(), test::provider_param_name);

// With XPORT_WAIT at its default (spin), a call that asks to block does.
class WaitingPerCall : public Waiting {
 protected:
  std::vector<std::pair<std::string, std::string>> extra_knobs() const override { return {}; }
};

TEST_P(WaitingPerCall, ADeadlineThatBlocksSleepsWhateverTheKnob) {
  auto sender = ctx_->open_device();
  ASSERT_TRUE(sender.ok()) << sender.status().to_string();
  Pair l = connect_pair(**sender, *dev_);
  ASSERT_TRUE(l.send && l.recv);
  std::vector<uint8_t> buf(64);
  auto reg = dev_->register_memory(buf.data(), buf.size());
  ASSERT_TRUE(reg.ok());
  auto r = l.recv->irecv(buf.data(), buf.size(), *reg);
  ASSERT_TRUE(r.ok());
  Status sent;
  std::thread t = send_later(*l.send, **sender, 1000ms, 64, &sent);
  Outcome o = timed_wait(*l.recv, *r, Deadline::after(20s).blocking());
  t.join();
  ASSERT_TRUE(sent.ok()) << sent.to_string();
  expect_idle(o, "receive");
}

INSTANTIATE_TEST_SUITE_P(Providers, WaitingPerCall,
                         ::testing::Values(test::ProviderParam{"shm", "auto"},
                                           test::ProviderParam{"tcp;ofi_rxm", "manual"}),
                         test::provider_param_name);

// Knob values other than spin and block are refused by name.
TEST(WaitKnob, AnUnknownWaitModeIsRefusedByName) {
  setenv("XPORT_WAIT", "doze", 1);
  core::reload_knobs();
  auto c = Context::open();
  unsetenv("XPORT_WAIT");
  core::reload_knobs();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::invalid_argument);
  EXPECT_NE(c.status().message().find("XPORT_WAIT='doze'"), std::string::npos)
      << c.status().to_string();
}

// The other knobs that take one of a few words: a value outside them is refused by name, with
// what would be taken.
TEST(ModeKnobs, UnknownValuesAreRefusedByName) {
  for (auto [knob, expected] : {std::pair{"XPORT_CONTROL_ENDPOINT", "auto, shared or separate"},
                                std::pair{"XPORT_PROGRESS", "native, auto or manual"}}) {
    setenv(knob, "sideways", 1);
    core::reload_knobs();
    auto c = Context::open();
    unsetenv(knob);
    core::reload_knobs();
    ASSERT_FALSE(c.ok()) << knob;
    EXPECT_EQ(c.status().code(), Code::invalid_argument) << knob;
    EXPECT_NE(c.status().message().find(std::string(knob) + "='sideways'"), std::string::npos)
        << c.status().to_string();
    EXPECT_NE(c.status().message().find(expected), std::string::npos) << c.status().to_string();
  }
}

}  // namespace
}  // namespace xport
