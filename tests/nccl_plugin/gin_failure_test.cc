// A failed GIN operation, driven as NCCL 2.28.9's GIN proxy drives the table
// (src/gin/gin_host_proxy.cc): it calls test() on each request until *done and ignores what
// test() returns; its only error channel is iput / iputSignal's return code (which sets the
// context's error flag and ends its progress thread). So a request that failed must be reported
// done, the log must say so once, and the next iput / iputSignal of the comm must fail. Two
// processes (this one rank 0, a copy of it started with --gin-failing-peer rank 1): rank 1
// deregisters its signal region after the keys were exchanged, so rank 0's signal into it fails
// at the target; or (--gin-failing-peer closed) it closes its comm, so rank 0's put to it fails,
// a put split over the GIN lanes where meson's nccl-gin-lanes-* run this.
#include <gtest/gtest.h>

#include <poll.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "../integration/harness.hpp"
#include "driver.hpp"
#include "gin_fixture.hpp"

namespace xport::nccl_test {

namespace {

using namespace std::chrono_literals;

// Rank `rank`'s side up to its registrations: listen, exchange handles (`exchange` sends this
// rank's and returns the other's), connect as a collective, register 4 KiB of data and two
// signal words. "" or what failed.
template <typename Exchange>
std::string join(Plugin& p, int rank, Exchange exchange, void** coll, std::vector<uint8_t>& data,
                 std::vector<uint64_t>& sig, void** data_mh, void** sig_mh) {
  ncclGin_v11_t* g = p.gin;
  char mine[NCCL_NET_HANDLE_MAXSIZE];
  void* listen = nullptr;
  if (g->listen(p.gin_ctx, 0, mine, &listen) != ncclSuccess) return "listen: " + warned_since(0);
  std::vector<uint8_t> other = exchange(std::vector<uint8_t>(mine, mine + sizeof(mine)));
  if (other.size() != NCCL_NET_HANDLE_MAXSIZE) return "the peer's handle did not come";
  void* handles[2];
  handles[rank] = mine;
  handles[1 - rank] = other.data();
  if (g->connect(p.gin_ctx, handles, 2, rank, listen, coll) != ncclSuccess || *coll == nullptr) {
    return "connect: " + warned_since(0);
  }
  if (g->closeListen(listen) != ncclSuccess) return "closeListen: " + warned_since(0);
  data.assign(4096, 0);
  sig.assign(2, 0);
  void* gh = nullptr;
  if (g->regMrSym(*coll, data.data(), data.size(), NCCL_PTR_HOST, 0, data_mh, &gh) != ncclSuccess ||
      g->regMrSym(*coll, sig.data(), 16, NCCL_PTR_HOST, 0, sig_mh, &gh) != ncclSuccess) {
    return "regMrSym: " + warned_since(0);
  }
  return "";
}

}  // namespace

// Rank 1: joins, deregisters its signal words (its data stays registered) and says so, or, with
// `close_comm`, closes its comm and says so; then drives progress until rank 0 says "bye".
int gin_failing_peer_main(bool close_comm) {
  Plugin p;
  if (!p.load_gin()) {
    std::cout << "FAILED " << p.error << std::endl;
    return 1;
  }
  auto exchange = [](const std::vector<uint8_t>& mine) {
    std::cout << "HANDLE " << xport::test::to_hex(mine) << std::endl;
    std::string line;
    if (!std::getline(std::cin, line) || line.rfind("HANDLE ", 0) != 0) return std::vector<uint8_t>();
    return xport::test::from_hex(line.substr(7));
  };
  void *coll = nullptr, *data_mh = nullptr, *sig_mh = nullptr;
  std::vector<uint8_t> data;
  std::vector<uint64_t> sig;
  std::string e = join(p, 1, exchange, &coll, data, sig, &data_mh, &sig_mh);
  if (e.empty() && close_comm) {
    (void)p.gin->deregMrSym(coll, data_mh);
    (void)p.gin->deregMrSym(coll, sig_mh);
    if (p.gin->closeColl(coll) != ncclSuccess) e = "closeColl: " + warned_since(0);
    coll = nullptr;
  } else if (e.empty() && p.gin->deregMrSym(coll, sig_mh) != ncclSuccess) {
    e = "deregMrSym: " + warned_since(0);
  }
  std::cout << (!e.empty() ? "FAILED " + e : close_comm ? "CLOSED" : "DEREGISTERED") << std::endl;
  if (!e.empty()) return 1;
  // Progress (rank 0's signal is answered from here) until "bye", or 120 s.
  const auto until = std::chrono::steady_clock::now() + 120s;
  while (std::chrono::steady_clock::now() < until) {
    pollfd in{0, POLLIN, 0};
    if (poll(&in, 1, close_comm ? 1 : 0) > 0) break;
    if (coll != nullptr) (void)p.gin->ginProgress(coll);
  }
  std::string line;
  std::getline(std::cin, line);
  if (coll != nullptr) {
    (void)p.gin->deregMrSym(coll, data_mh);
    (void)p.gin->closeColl(coll);
  }
  p.unload();
  std::cout << "PASSED" << std::endl;
  return 0;
}

namespace {

// Number of WARN lines logged since `mark` that contain `what`.
size_t warned_count(size_t mark, const std::string& what) {
  std::lock_guard<std::mutex> l(g_log_mu);
  size_t n = 0;
  for (size_t i = mark; i < g_log.size(); ++i) {
    if (g_log[i].rfind("WARN ", 0) == 0 && g_log[i].find(what) != std::string::npos) ++n;
  }
  return n;
}

class GinFailure : public GinFixture {
 protected:
  // Starts rank 1 (--gin-failing-peer [mode]), joins it as rank 0 and waits until it says
  // `said` (what it did to fail rank 0's next operation).
  void start_pair(const std::string& mode, const std::string& said) {
    const char* self = std::getenv("XTEST_SELF");
    ASSERT_NE(self, nullptr) << "XTEST_SELF (this test binary's path) is not set";
    std::vector<std::string> argv = {self, "--gin-failing-peer"};
    if (!mode.empty()) argv.push_back(mode);
    child_.emplace(xport::test::ChildProcess::spawn(argv, peer_env()));
    ASSERT_TRUE(child_->started());
    auto exchange = [&](const std::vector<uint8_t>& mine) {
      return exchange_handle(*child_, mine, &err_);
    };
    ASSERT_EQ(join(p_, 0, exchange, &coll_, data_, sig_, &data_mh_, &sig_mh_), "") << err_;
    ASSERT_EQ(child_->read_line(30000, &err_, [&] { (void)p_.gin->ginProgress(coll_); }), said)
        << err_;
  }
  // The comm's next iputSignal (`signal`) or iput fails, naming `what` when it is not empty.
  void expect_next_fails(bool signal, const std::string& what) {
    const size_t before = log_mark();
    void* next = nullptr;
    const ncclResult_t r =
        signal ? p_.gin->iputSignal(coll_, 0, data_mh_, 8, 0, data_mh_, 1, 0, sig_mh_, 1,
                                    NCCL_NET_SIGNAL_OP_INC, &next)
               : p_.gin->iput(coll_, 0, data_mh_, 8, 0, data_mh_, 1, &next);
    EXPECT_NE(r, ncclSuccess) << (signal ? "iputSignal" : "iput") << " after a failed request";
    EXPECT_EQ(next, nullptr);
    if (!what.empty()) {
      EXPECT_NE(warned_since(before).find(what), std::string::npos) << warned_since(before);
    }
  }
  // Says bye to rank 1, which closes; then this rank closes.
  void finish() {
    bool has_error = false;
    EXPECT_EQ(p_.gin->queryLastError(coll_, &has_error), ncclSuccess);
    EXPECT_TRUE(has_error);
    unsetenv("XTEST_QUIET_WARN");
    child_->write_line("bye");
    EXPECT_EQ(child_->read_line(30000, &err_, [&] { (void)p_.gin->ginProgress(coll_); }),
              "PASSED") << err_;
    EXPECT_EQ(child_->wait_exit(30000), 0);
    EXPECT_EQ(p_.gin->deregMrSym(coll_, data_mh_), ncclSuccess);
    EXPECT_EQ(p_.gin->deregMrSym(coll_, sig_mh_), ncclSuccess);
    EXPECT_EQ(p_.gin->closeColl(coll_), ncclSuccess);
  }

  std::optional<xport::test::ChildProcess> child_;
  std::string err_;
  void *coll_ = nullptr, *data_mh_ = nullptr, *sig_mh_ = nullptr;
  std::vector<uint8_t> data_;
  std::vector<uint64_t> sig_;
};

TEST_P(GinFailure, AFailedRequestIsDoneLoggedOnceAndTheNextIputFails) {
  start_pair("", "DEREGISTERED");
  if (HasFatalFailure()) return;
  ncclGin_v11_t* g = p_.gin;
  setenv("XTEST_QUIET_WARN", "1", 1);
  const size_t mark = log_mark();
  // An empty put (nothing to move) before the failure, tested only after it: its own outcome.
  void* empty = nullptr;
  ASSERT_EQ(g->iput(coll_, 0, data_mh_, 0, 0, data_mh_, 1, &empty), ncclSuccess) << warned_since(0);
  // A signal into rank 1's deregistered words: it fails at the target.
  void* req = nullptr;
  ASSERT_EQ(g->iputSignal(coll_, 0, nullptr, 0, 0, nullptr, 1, 8, sig_mh_, 5,
                          NCCL_NET_SIGNAL_OP_ADD, &req), ncclSuccess) << warned_since(0);
  ASSERT_NE(req, nullptr);
  // NCCL's proxy: test() until done, its return code ignored, ginProgress between (here also
  // until 1000 lines were logged: a request that never ends logs at every test).
  int done = 0, tests = 0;
  const auto until = Clock::now() + 30s;
  while (!done && Clock::now() < until && log_mark() - mark < 1000) {
    (void)g->test(coll_, req, &done);
    ++tests;
    (void)g->ginProgress(coll_);
  }
  EXPECT_EQ(done, 1) << "a failed request must be reported done (NCCL tests it until then), "
                     << tests << " tests so far; " << warned_count(mark, "GIN")
                     << " WARN lines, the last: " << warned_since(mark);
  EXPECT_EQ(warned_count(mark, "failed at the target"), 1u)
      << "the failure is logged once, over " << tests << " tests: " << warned_since(mark);
  int empty_done = 0;
  EXPECT_EQ(g->test(coll_, empty, &empty_done), ncclSuccess)
      << "the empty put's own outcome, not the comm's failure: " << warned_since(mark);
  EXPECT_EQ(empty_done, 1);
  // NCCL's channel: the next iputSignal (and iput) of the comm fails, naming the failure.
  expect_next_fails(true, "failed at the target");
  expect_next_fails(false, "failed at the target");
  finish();
}

// A put to a rank that closed its comm and makes no progress any more fails once the rank is
// declared lost (meson's nccl-gin-lanes-peer-gone-*: XPORT_PEER_TIMEOUT_MS=5000): done, its error
// returned, and the comm's next iput fails. 4 KiB with 3 lanes and puts from 4 KiB split: the
// parts on lanes 1 and 2 fail on their lanes' threads.
TEST_P(GinFailure, APutToARankThatClosedItsCommIsDoneWithItsErrorAndTheNextIputFails) {
  ASSERT_STREQ(std::getenv("XPORT_PEER_TIMEOUT_MS"), "5000") << "meson's nccl-gin-lanes-peer-gone-*";
  start_pair("closed", "CLOSED");
  if (HasFatalFailure()) return;
  ncclGin_v11_t* g = p_.gin;
  setenv("XTEST_QUIET_WARN", "1", 1);
  const size_t mark = log_mark();
  void* req = nullptr;
  ASSERT_EQ(g->iput(coll_, 0, data_mh_, data_.size(), 0, data_mh_, 1, &req), ncclSuccess)
      << warned_since(0);
  ASSERT_NE(req, nullptr);
  int done = 0;
  ncclResult_t last = ncclSuccess;
  const auto until = Clock::now() + 60s;
  while (!done && Clock::now() < until) {
    last = g->test(coll_, req, &done);
    (void)g->ginProgress(coll_);
  }
  EXPECT_EQ(done, 1) << "the failed put must be reported done: " << warned_since(mark);
  EXPECT_NE(last, ncclSuccess) << "test() returns the put's error";
  EXPECT_GE(warned_count(mark, "GIN"), 1u);
  expect_next_fails(false, "");
  finish();
}

INSTANTIATE_TEST_SUITE_P(Providers, GinFailure, gin_cases(), gin_case_name);

}  // namespace
}  // namespace xport::nccl_test
