// Window streams across a rail going down (docs/semantics.md, "Rail health"): the control
// messages of one-sided operations (win_signal, win_atomic, win_notify, win_sync, win_done) that
// went on a rail whose link then went down are sent again on the rail left once it is out of
// service, so quiet, check and wait_local end while the link is still down; once it is back,
// the first copies (which TCP then delivers) are not applied twice. Seen: quiet and check waited
// to their deadline although everything had landed, and a lost strong signal stalled every
// later operation to the peer.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "multirail_fixture.hpp"

namespace xport {
namespace {

using multirail::MultiRail;
using multirail::split;

using Clock = std::chrono::steady_clock;

Deadline in(std::chrono::milliseconds ms) { return Deadline::after(ms); }

// Link states are read every 3 s at both ends, so for a while after the link goes down both
// still send on it, as a NIC whose failure is seen late. Emulated atomics (messages) at this
// end: native ones are writes on one rail, never sent again by design.
TEST_F(MultiRail, WindowControlMessagesSurviveARailGoingDown) {
  setenv("XPORT_RAIL_CHECK_MS", "3000", 1);
  setenv("XPORT_ATOMICS", "emulated", 1);
  core::reload_knobs();
  dev_.reset();
  auto dev = ctx_->open_device();
  unsetenv("XPORT_RAIL_CHECK_MS");
  unsetenv("XPORT_ATOMICS");
  core::reload_knobs();
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  dev_ = std::move(dev).value();
  const std::string victim = rails_[1];
  auto p = peer({"window-target", "65536"}, all_peer_rails(), {"XPORT_RAIL_CHECK_MS=3000"});
  ASSERT_TRUE(p.started());
  auto handle = test::from_hex(expect_line(p, "HANDLE "));
  auto data = dev_->import_key(test::from_hex(expect_line(p, "KEY ")));
  auto sigs = dev_->import_key(test::from_hex(expect_line(p, "SIGKEY ")));
  auto atoms = dev_->import_key(test::from_hex(expect_line(p, "ATOMKEY ")));
  ASSERT_TRUE(data.ok() && sigs.ok() && atoms.ok());
  auto comm = dev_->connect(handle, in(std::chrono::seconds(30)));
  ASSERT_TRUE(comm.ok()) << comm.status().to_string();
  auto made = Window::open(**comm, in(std::chrono::seconds(30)));
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  Window& w = **made;
  expect_line(p, "READY ");
  EXPECT_FALSE(w.native_atomics()) << "XPORT_ATOMICS=emulated: atomics are messages here";
  std::vector<uint8_t> src(4096, 7);
  auto reg = dev_->register_memory(src.data(), src.size());
  ASSERT_TRUE(reg.ok());
  // Both rails carry window traffic before the link goes down.
  uint64_t signals = 0;
  for (int i = 0; i < 8; ++i, ++signals) {
    ASSERT_TRUE(w.put_signal(*reg, 0, *data, 512u * static_cast<size_t>(i), 512, *sigs, 0, 1).ok());
  }
  Status q = w.quiet(in(std::chrono::seconds(20)));
  ASSERT_TRUE(q.ok()) << q.to_string();
  auto sends_on = [&](const std::string& rail) {
    uint64_t n = 0;
    for (const auto& e : dev_->stats().endpoints) {
      if (e.rail == rail) n += e.ops[0];
    }
    return n;
  };
  // The link goes down; until the rail is quarantined, signals, atomics (their answers), a
  // notification and a short quiet (its win_sync) go round-robin over both rails.
  ASSERT_EQ(set_link(victim, false), 0);
  const uint64_t sends_before = sends_on(victim);
  std::vector<uint64_t> olds(64, ~uint64_t{0});
  std::vector<Ticket> atomic_tickets;
  Result<Ticket> transfer = Status(Code::internal, "not posted");
  const auto until = Clock::now() + std::chrono::seconds(15);
  bool quarantined = false;
  Status issue;
  for (int round = 0; round < 48 && issue.ok() && !quarantined && Clock::now() < until; ++round) {
    for (int k = 0; k < 4 && issue.ok(); ++k, ++signals) issue = w.signal(*sigs, 0, 1).status();
    if (issue.ok() && atomic_tickets.size() < olds.size()) {
      auto t = w.atomic(AtomicOp::fetch_add, *atoms, 0, 1, 0, &olds[atomic_tickets.size()]);
      issue = t.status();
      if (t.ok()) atomic_tickets.push_back(*t);
    }
    if (issue.ok() && round == 1) {
      transfer = w.post({}, {0x6e, 0x6f, 0x74, 0x65});
      issue = transfer.status();
    }
    if (round == 2) (void)w.quiet(in(std::chrono::milliseconds(1)));  // (its win_sync goes)
    (void)dev_->progress();
    quarantined = dev_->stats().rails[1].state == "quarantined";
  }
  ASSERT_TRUE(issue.ok()) << issue.to_string();
  ASSERT_GT(sends_on(victim), sends_before) << "nothing went on the rail whose link was down";
  ASSERT_TRUE(eventually([](const Stats& st) { return st.rails[1].state == "quarantined"; }))
      << "the rail whose link went down was never quarantined";
  // Everything is known done with the link still down.
  const auto t0 = Clock::now();
  q = w.quiet(in(std::chrono::seconds(15)));
  EXPECT_TRUE(q.ok()) << q.to_string() << " (the link of " << victim << " is down)";
  for (size_t i = 0; i < atomic_tickets.size(); ++i) {
    Status st = w.wait_local(atomic_tickets[i], in(std::chrono::seconds(5)));
    ASSERT_TRUE(st.ok()) << "atomic " << i << ": " << st.to_string();
  }
  ASSERT_TRUE(transfer.ok());
  auto checked = w.check(*transfer);
  ASSERT_TRUE(checked.ok()) << checked.status().to_string();
  EXPECT_EQ(*checked, TransferState::done);
  std::cout << "[ rails    ] " << signals << " signals, " << atomic_tickets.size()
            << " atomics known done "
            << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count()
            << " ms after the quarantine, " << victim << " still down" << std::endl;
  std::vector<uint64_t> got(olds.begin(), olds.begin() + static_cast<long>(atomic_tickets.size()));
  std::sort(got.begin(), got.end());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i], i) << "the fetch-adds' old values are not 0.." << got.size() - 1;
  }
  auto ask = [&](const std::string& cmd, const std::string& prefix) {
    EXPECT_TRUE(p.write_line(cmd));
    return expect_line(p, prefix);
  };
  EXPECT_EQ(ask("READ 0", "VALUE "), std::to_string(signals));
  EXPECT_EQ(ask("ATOM 0", "VALUE "), std::to_string(atomic_tickets.size()));
  EXPECT_EQ(ask("NOTES", "NOTES "), "1 6e6f7465");
  // The link comes back: what TCP held on it arrives late and must not count twice. Once the
  // rail is in service again, new messages go on it too, behind those on the same connection.
  ASSERT_EQ(set_link(victim, true), 0);
  ASSERT_TRUE(eventually([](const Stats& st) { return st.rails[1].state == "up"; }))
      << "rail " << victim << " did not return to service";
  const uint64_t back = sends_on(victim);
  for (int i = 0; i < 16; ++i, ++signals) ASSERT_TRUE(w.signal(*sigs, 0, 1).ok());
  q = w.quiet(in(std::chrono::seconds(30)));
  EXPECT_TRUE(q.ok()) << q.to_string();
  EXPECT_GT(sends_on(victim), back) << "the restored rail carried none of the last signals";
  EXPECT_EQ(ask("READ 0", "VALUE "), std::to_string(signals)) << "a signal was applied twice";
  EXPECT_EQ(ask("ATOM 0", "VALUE "), std::to_string(atomic_tickets.size()))
      << "an atomic was applied twice";
  EXPECT_EQ(ask("NOTES", "NOTES "), "0") << "a notification was delivered twice";
  // (the first copies the target dropped, if TCP delivered them: counted as late arrivals)
  std::cout << "[ rails    ] target: " << ask("STATS", "STATS ") << std::endl;
  made = Status(Code::closed, "dropped");
  p.write_line("bye");
  EXPECT_EQ(p.wait_exit(30000), 0);
}

}  // namespace
}  // namespace xport
