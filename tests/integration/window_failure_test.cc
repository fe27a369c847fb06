// A window operation that fails stays failed (docs/semantics.md, "One-sided", "Failed
// operations"): check() and wait_local() of a failed ticket report its error every time they are
// asked, never done, in any order with quiet(), which reports the window's failures since the
// previous quiet once; a thread polling check() while another calls quiet() both hear it; a
// signal the target cannot apply fails its own ticket. And a transfer that needs more provider
// operations than a window has is refused by name, never answered `again` for ever. One
// process: a device's window to itself, operations with a forged key (an MR key nobody issued),
// which providers that validate keys fail with an error completion.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "harness.hpp"
#include "proto/wire.hpp"
#include "provider_fixture.hpp"
#include "xport/xport.hpp"

namespace xport {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr size_t kSize = 65536;

// The operation made to fail: a put (which fails its stream: the window must be reopened, as
// after a queue pair in error) or a get (which fails only its own ticket).
enum class Op { put, get };
const char* name(Op o) { return o == Op::put ? "put" : "get"; }

class WindowFailure : public test::ProviderTest {
 protected:
  void SetUp() override {
    const bool strict = std::string(GetParam().provider) == "strict";
    if (strict != (std::getenv("FI_PROVIDER_PATH") != nullptr)) {
      GTEST_SKIP() << (strict ? "the strict provider runs only in the one-sided-strict test"
                              : "the one-sided-strict test runs only the strict provider");
    }
    test::ProviderTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    pair_ = test::connect_pair(*dev_, *dev_);
    ASSERT_TRUE(pair_.send) << "a connection of the device to itself";
    ASSERT_NO_FATAL_FAILURE(reopen());
    auto s = dev_->register_memory(src_.data(), src_.size());
    auto d = dev_->register_memory(dst_.data(), dst_.size());
    auto g = dev_->register_memory(got_.data(), got_.size());
    ASSERT_TRUE(s.ok() && d.ok() && g.ok());
    src_reg_ = std::make_unique<Region>(std::move(s).value());
    dst_reg_ = std::make_unique<Region>(std::move(d).value());
    got_reg_ = std::make_unique<Region>(std::move(g).value());
    auto good = dev_->import_key(dst_reg_->export_key());
    ASSERT_TRUE(good.ok()) << good.status().to_string();
    good_ = std::move(good).value();
    // The same key with MR keys the provider never issued (ranges and device are right, so
    // libxport's own checks pass and the operation goes out).
    auto k = proto::decode_key(dst_reg_->export_key());
    ASSERT_TRUE(k.ok()) << k.status().to_string();
    for (uint64_t& key : k->keys) key += 0x5a5a;
    auto forged = dev_->import_key(proto::encode_key(*k));
    ASSERT_TRUE(forged.ok()) << forged.status().to_string();
    forged_ = std::move(forged).value();
    // Larger than the provider injects: an injected put's failure comes without its context.
    len_ = std::min(kSize, std::max<size_t>(16384, ctx_->provider().caps.inject_size + 1));
  }

  void TearDown() override {
    win_.reset();
    pair_ = {};
    test::ProviderTest::TearDown();
  }

  // A new window on the device's connection to itself (a new stream once the old one failed).
  void reopen() {
    win_.reset();
    auto w = Window::open(*pair_.send, Deadline::after(20s));
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    win_ = std::move(w).value();
  }

  Result<Ticket> forged(Op op) {
    return op == Op::put ? win_->put(*src_reg_, 0, forged_, 0, len_)
                         : win_->get(*got_reg_, 0, forged_, 0, len_);
  }

  // check() polled until it answers other than pending (or 20 s pass).
  Result<TransferState> check_until_answered(Ticket t) {
    const auto until = Clock::now() + 20s;
    for (;;) {
      Result<TransferState> s = win_->check(t);
      if (!s.ok() || *s == TransferState::done || Clock::now() > until) return s;
    }
  }

  // The operations this provider fails with a forged key, telling the initiator with the key's
  // own error (libfabric 1.17: sockets fails puts and gets, tcp;ofi_rxm and strict gets only,
  // shm neither: it takes a forged get, and a forged put never completes, or fails later with
  // the connection the failure took down). Asked once per provider and process, each on a
  // device of its own: a put that never completes holds its stream's count back for good.
  std::vector<Op> failing_ops() {
    static std::map<std::string, std::vector<Op>> known;
    const std::string provider = GetParam().provider;
    if (known.count(provider) != 0) return known[provider];
    std::vector<Op> ops;
    for (Op op : {Op::get, Op::put}) {
      auto probe_dev = ctx_->open_device();
      EXPECT_TRUE(probe_dev.ok()) << probe_dev.status().to_string();
      if (!probe_dev.ok()) return {};
      Device& d = **probe_dev;
      test::Pair pair = test::connect_pair(d, d);
      auto w = pair.send ? Window::open(*pair.send, Deadline::after(20s))
                         : Result<std::unique_ptr<Window>>(Status(Code::closed, "no connection"));
      auto reg = d.register_memory(got_.data(), got_.size());
      EXPECT_TRUE(w.ok() && reg.ok());
      if (!w.ok() || !reg.ok()) return {};
      auto k = proto::decode_key(reg->export_key());
      for (uint64_t& key : k->keys) key += 0x5a5a;
      auto bad = d.import_key(proto::encode_key(*k));
      EXPECT_TRUE(bad.ok()) << bad.status().to_string();
      auto t = op == Op::put ? (*w)->put(*reg, 0, *bad, 0, len_) : (*w)->get(*reg, 0, *bad, 0, len_);
      Status q = t.ok() ? (*w)->quiet(Deadline::after(3s)) : t.status();
      std::printf("[ forged  ] a %s with a forged key on %s: %s\n", name(op), provider.c_str(),
                  q.to_string().c_str());
      if (t.ok() && !q.ok() && q.code() != Code::timeout && q.code() != Code::peer_lost) {
        ops.push_back(op);
      }
    }
    known[provider] = ops;
    return ops;
  }

  test::Pair pair_;
  std::unique_ptr<Window> win_;
  std::vector<uint8_t> src_ = std::vector<uint8_t>(kSize, 7), dst_ = std::vector<uint8_t>(kSize),
                       got_ = std::vector<uint8_t>(kSize);
  std::unique_ptr<Region> src_reg_, dst_reg_, got_reg_;
  RemoteRegion good_, forged_;
  size_t len_ = 0;
};

enum class Call { check, wait_local, quiet };
const char* name(Call c) {
  return c == Call::check ? "check" : c == Call::wait_local ? "wait_local" : "quiet";
}

// Every order of check, wait_local and quiet on a failed operation, each asked twice: check and
// wait_local report its error every time (wait_local also through its lock-free path, 40 calls
// in a row), quiet reports it once.
TEST_P(WindowFailure, AFailedOperationStaysFailedWhateverTheOrderOfCheckWaitLocalAndQuiet) {
  const std::vector<Op> ops = failing_ops();
  if (ops.empty()) GTEST_SKIP() << GetParam().provider << " reports no forged key's failure";
  for (Op op : ops) {
    std::array<Call, 3> order = {Call::check, Call::wait_local, Call::quiet};
    do {
      std::string seq = std::string(name(op)) + ", then";
      for (Call c : order) seq += std::string(" ") + name(c);
      SCOPED_TRACE(seq);
      ASSERT_NO_FATAL_FAILURE(reopen());
      auto t = forged(op);
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      bool quieted = false;
      for (int round = 0; round < 2; ++round) {
        for (Call c : order) {
          SCOPED_TRACE(std::string(name(c)) + ", round " + std::to_string(round));
          switch (c) {
            case Call::check: {
              auto s = check_until_answered(*t);
              EXPECT_FALSE(s.ok()) << "check() of a failed " << name(op) << " answered "
                                   << (s.ok() && *s == TransferState::done ? "done" : "pending");
              if (!s.ok()) {
                EXPECT_NE(s.status().code(), Code::timeout) << s.status().to_string();
              }
              break;
            }
            case Call::wait_local: {
              Status l = win_->wait_local(*t, Deadline::after(20s));
              EXPECT_FALSE(l.ok()) << "wait_local() of a failed " << name(op) << " succeeded";
              EXPECT_NE(l.code(), Code::timeout) << l.to_string();
              for (int i = 0; i < 40; ++i) {  // (15 in 16 go the lock-free way)
                Status q = win_->wait_local(*t, Deadline::now());
                EXPECT_FALSE(q.ok()) << "call " << i << ": wait_local() of a failed "
                                     << name(op) << " succeeded";
                if (q.ok()) break;
              }
              break;
            }
            case Call::quiet: {
              Status q = win_->quiet(Deadline::after(20s));
              if (!quieted) {
                EXPECT_FALSE(q.ok()) << "the first quiet() after the " << name(op) << " failed";
                EXPECT_NE(q.code(), Code::timeout) << q.to_string();
              } else {
                EXPECT_TRUE(q.ok()) << "a second quiet() reported the failure again: "
                                    << q.to_string();
              }
              quieted = true;
              break;
            }
          }
        }
      }
    } while (std::next_permutation(order.begin(), order.end(),
                                   [](Call a, Call b) { return int(a) < int(b); }));
  }
}

// One thread polls check() on the failed operation while another calls quiet(): both hear the
// error (quiet used to take it from under check, which then answered done), and so does every
// later check() and wait_local().
TEST_P(WindowFailure, CheckPolledWhileAnotherThreadQuietsStillSeesTheFailure) {
  const std::vector<Op> ops = failing_ops();
  if (ops.empty()) GTEST_SKIP() << GetParam().provider << " reports no forged key's failure";
  for (Op op : ops) {
    for (int round = 0; round < 10; ++round) {
      SCOPED_TRACE(std::string(name(op)) + ", round " + std::to_string(round));
      ASSERT_NO_FATAL_FAILURE(reopen());
      auto t = forged(op);
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      Result<TransferState> polled = TransferState::pending;
      std::thread checker([&] { polled = check_until_answered(*t); });
      Status q = win_->quiet(Deadline::after(20s));
      checker.join();
      EXPECT_FALSE(q.ok()) << "quiet() after a failed " << name(op);
      EXPECT_FALSE(polled.ok()) << "check() polled during quiet() answered "
                                << (polled.ok() && *polled == TransferState::done ? "done"
                                                                                  : "pending");
      auto again = win_->check(*t);
      EXPECT_FALSE(again.ok()) << "check() after quiet() answered "
                               << (again.ok() && *again == TransferState::done ? "done"
                                                                               : "pending");
      for (int i = 0; i < 20; ++i) {
        Status l = win_->wait_local(*t, Deadline::now());
        EXPECT_FALSE(l.ok()) << "call " << i << ": wait_local() after quiet() succeeded";
        if (l.ok()) break;
      }
      EXPECT_TRUE(win_->quiet(Deadline::after(20s)).ok()) << "reported once";
    }
  }
}

// A window keeps the errors of its last 16384 failed operations (gets here, which fail only
// their own tickets): older failed tickets, and the tickets between them, are answered "no
// longer known" (invalid_argument), never done; tickets complete before the window's first
// failure are still done. quiet() counts the failures it reports.
TEST_P(WindowFailure, AWindowKeepsTheErrorsOfItsLast16384FailedOperations) {
  const std::vector<Op> ops = failing_ops();
  if (std::find(ops.begin(), ops.end(), Op::get) == ops.end()) {
    GTEST_SKIP() << GetParam().provider << " takes a get with a forged key";
  }
  constexpr size_t kKept = 16384;
  auto ok = win_->get(*got_reg_, 0, good_, 0, 64);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  ASSERT_TRUE(win_->wait_local(*ok, Deadline::after(20s)).ok());
  auto first = win_->get(*got_reg_, 0, forged_, 0, 64);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  ASSERT_FALSE(win_->quiet(Deadline::after(20s)).ok());
  // A good get after the first failure (tcp;ofi_rxm fails it too: the failure closed its
  // connection), then enough failures to push both out of the window's record.
  auto between = win_->get(*got_reg_, 0, good_, 0, 64);
  ASSERT_TRUE(between.ok()) << between.status().to_string();
  (void)win_->quiet(Deadline::after(20s));
  Ticket last = 0;
  for (size_t issued = 0; issued < kKept + 1;) {
    const size_t batch = std::min<size_t>(128, kKept + 1 - issued);
    for (size_t i = 0; i < batch; ++i, ++issued) {
      auto t = win_->get(*got_reg_, 0, forged_, 0, 64);
      ASSERT_TRUE(t.ok()) << "get " << issued << ": " << t.status().to_string();
      last = *t;
    }
    Status q = win_->quiet(Deadline::after(20s));
    ASSERT_FALSE(q.ok()) << "quiet() after " << batch << " failed gets";
    ASSERT_NE(q.code(), Code::timeout) << q.to_string();
    if (batch > 1) {
      EXPECT_NE(q.message().find("(" + std::to_string(batch) + " operations of window"),
                std::string::npos) << q.to_string();
    }
  }
  auto c = win_->check(*ok);
  ASSERT_TRUE(c.ok()) << "a get complete before the first failure: " << c.status().to_string();
  EXPECT_EQ(*c, TransferState::done);
  EXPECT_TRUE(win_->wait_local(*ok, Deadline::after(20s)).ok());
  for (Ticket t : {*first, *between}) {
    auto c = win_->check(t);
    ASSERT_FALSE(c.ok()) << "ticket " << t << ": older than the last " << kKept
                         << " failures, answered " << (*c == TransferState::done ? "done" : "pending");
    EXPECT_EQ(c.status().code(), Code::invalid_argument) << c.status().to_string();
    EXPECT_NE(c.status().message().find("no longer known"), std::string::npos)
        << c.status().to_string();
    EXPECT_EQ(win_->wait_local(t, Deadline::now()).code(), Code::invalid_argument)
        << "ticket " << t;
  }
  for (Ticket t : {last - kKept + 1, last}) {
    auto c = win_->check(t);
    ASSERT_FALSE(c.ok()) << "ticket " << t << ": a kept failure";
    EXPECT_NE(c.status().message().find("get"), std::string::npos) << c.status().to_string();
    EXPECT_EQ(c.status().message().find("no longer known"), std::string::npos)
        << c.status().to_string();
    Status l = win_->wait_local(t, Deadline::now());
    EXPECT_EQ(l.code(), c.status().code()) << l.to_string();
  }
}

// A signal the target cannot apply (its region was deregistered after the key was taken) fails
// its own ticket, on every provider: check() and wait_local() report it, every time, and quiet()
// once; the counter of put_signal_counter is not counted. (It used to reach quiet() only:
// check() answered done.)
TEST_P(WindowFailure, ASignalTheTargetCannotApplyFailsItsTicket) {
  alignas(8) static uint64_t words[4];
  alignas(8) static uint64_t counter[1];
  words[0] = counter[0] = 0;
  auto creg = dev_->register_memory(counter, sizeof(counter));
  ASSERT_TRUE(creg.ok()) << creg.status().to_string();
  RemoteRegion gone;
  {
    auto sreg = dev_->register_memory(words, sizeof(words));
    ASSERT_TRUE(sreg.ok()) << sreg.status().to_string();
    auto k = dev_->import_key(sreg->export_key());
    ASSERT_TRUE(k.ok()) << k.status().to_string();
    gone = std::move(k).value();
  }  // (deregistered: the key's region is no more)
  std::vector<Result<Ticket>> tickets;
  tickets.push_back(win_->signal(gone, 0, 1));
  tickets.push_back(win_->put_signal(*src_reg_, 0, good_, 0, 64, gone, 8, 1, SignalOp::set));
  tickets.push_back(win_->signal_counter(gone, 16, 1, *creg, 0));
  for (size_t i = 0; i < tickets.size(); ++i) {
    SCOPED_TRACE("operation " + std::to_string(i));
    ASSERT_TRUE(tickets[i].ok()) << tickets[i].status().to_string();
    auto c = check_until_answered(*tickets[i]);
    ASSERT_FALSE(c.ok()) << "check() of a signal the target could not apply answered "
                         << (*c == TransferState::done ? "done" : "pending");
    EXPECT_NE(c.status().message().find("failed at the target"), std::string::npos)
        << c.status().to_string();
    EXPECT_FALSE(win_->wait_local(*tickets[i], Deadline::after(20s)).ok());
  }
  Status q = win_->quiet(Deadline::after(20s));
  EXPECT_FALSE(q.ok()) << "quiet() after signals that failed at the target";
  EXPECT_TRUE(win_->quiet(Deadline::after(20s)).ok()) << "reported once";
  for (const auto& t : tickets) EXPECT_FALSE(win_->check(*t).ok()) << "after quiet()";
  EXPECT_EQ(counter[0], 0u) << "the counter counted a signal that was not applied";
  EXPECT_EQ(words[0], 0u);
  // The window goes on: a signal into live memory is applied, and done.
  alignas(8) static uint64_t live[1];
  live[0] = 0;
  auto lreg = dev_->register_memory(live, sizeof(live));
  ASSERT_TRUE(lreg.ok());
  auto lk = dev_->import_key(lreg->export_key());
  ASSERT_TRUE(lk.ok());
  auto t = win_->signal(*lk, 0, 5);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  auto c = check_until_answered(*t);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(*c, TransferState::done);
  EXPECT_TRUE(win_->wait_signal(*lreg, 0, 5, Deadline::after(20s)).ok());
}

// A transfer of more items than the window has operation contexts (256) can never be issued:
// it is refused with invalid_argument naming the limit (it used to answer `again`, and "quiet
// and retry" looped for ever). One within the limit goes.
TEST_P(WindowFailure, ATransferLargerThanTheWindowIsRefusedByName) {
  constexpr size_t kItems = 300;
  std::vector<TransferItem> items(kItems);
  for (size_t i = 0; i < kItems; ++i) {
    items[i] = {TransferItem::Kind::put, src_reg_.get(), i * 8, &good_, i * 8, 8};
  }
  const uint64_t before = win_->issued();
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto t = win_->post(items);
    ASSERT_FALSE(t.ok()) << "a transfer of " << kItems << " operations was taken";
    EXPECT_EQ(t.status().code(), Code::invalid_argument) << t.status().to_string();
    EXPECT_NE(t.status().message().find("256"), std::string::npos) << t.status().to_string();
    ASSERT_TRUE(win_->quiet(Deadline::after(20s)).ok());  // (what `again` asks for)
  }
  EXPECT_EQ(win_->issued(), before) << "nothing of a refused transfer may be issued";
  items.resize(200);
  auto t = win_->post(items);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  auto s = check_until_answered(*t);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(*s, TransferState::done);
  EXPECT_EQ(dst_[199 * 8], 7);
}

INSTANTIATE_TEST_SUITE_P(Providers, WindowFailure,
                         ::testing::Values(test::ProviderParam{"shm", "auto"},
                                           test::ProviderParam{"tcp;ofi_rxm", "auto"},
                                           test::ProviderParam{"sockets", "auto"},
                                           test::ProviderParam{"strict", "auto"}),
                         test::provider_param_name);

}  // namespace
}  // namespace xport
