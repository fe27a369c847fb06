// Eight threads on one device at once, each doing everything a runtime does (connect, isend,
// irecv, register and deregister per message, put, get, quiet, close), every byte verified.
// Run under ThreadSanitizer in CI (scripts/dev.sh), and in the plain and ASan builds.
// XTEST_STRESS_SECONDS bounds each provider's run (default 4).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "../integration/harness.hpp"
#include "../integration/provider_fixture.hpp"
#include "xport/xport.hpp"

namespace xport {
namespace {

using namespace std::chrono_literals;

Deadline soon() { return Deadline::after(30s); }

int stress_seconds() {
  const char* s = std::getenv("XTEST_STRESS_SECONDS");
  return s != nullptr ? std::max(1, std::atoi(s)) : 4;
}

class Stress : public test::ProviderTest {};

struct Worker {
  Device* dev = nullptr;
  int id = 0;
  uint64_t messages = 0, puts = 0, reconnects = 0;
  std::string error;

  bool fail(const std::string& what) {
    if (error.empty()) error = "thread " + std::to_string(id) + ": " + what;
    return false;
  }

  bool run(std::chrono::steady_clock::time_point until, std::atomic<bool>& stop) {
    std::mt19937_64 rng(1234 + id);
    constexpr size_t kMax = 300 * 1024;  // eager, rendezvous and (over several rails) striped
    std::vector<uint8_t> sbuf(kMax), rbuf(kMax), window(kMax), local(kMax);
    auto wreg = dev->register_memory(window.data(), window.size());
    auto lreg = dev->register_memory(local.data(), local.size());
    if (!wreg.ok() || !lreg.ok()) return fail("register window memory");
    std::unique_ptr<Listener> listener;
    std::unique_ptr<SendComm> send;
    std::unique_ptr<RecvComm> recv;
    std::unique_ptr<Window> win;
    std::optional<RemoteRegion> remote;
    uint64_t msg = 0;
    while (std::chrono::steady_clock::now() < until && !stop) {
      if (!send || rng() % 40 == 0) {  // connect (again): the old pair closes under traffic
        win.reset();
        send.reset();
        recv.reset();
        auto l = dev->listen();
        if (!l.ok()) return fail("listen: " + l.status().to_string());
        listener = std::move(l).value();
        auto s = dev->connect(listener->handle(), soon());
        if (!s.ok()) return fail("connect: " + s.status().to_string());
        send = std::move(s).value();
        auto r = listener->accept(soon());
        if (!r.ok()) return fail("accept: " + r.status().to_string());
        recv = std::move(r).value();
        auto w = Window::open(*send);
        if (!w.ok()) return fail("window: " + w.status().to_string());
        win = std::move(w).value();
        auto k = dev->import_key(wreg->export_key());
        if (!k.ok()) return fail("import_key: " + k.status().to_string());
        remote = std::move(k).value();
        ++reconnects;
      }
      // A message with registrations made for it and dropped after it.
      const size_t len = (rng() % 4 == 0) ? rng() % kMax : rng() % 9000;
      test::fill(sbuf.data(), len, msg);
      {
        auto rr = dev->register_memory(rbuf.data(), kMax);
        if (!rr.ok()) return fail("register: " + rr.status().to_string());
        auto r = recv->irecv(rbuf.data(), kMax, *rr);
        if (!r.ok()) return fail("irecv: " + r.status().to_string());
        Result<Request> s = Status(Code::internal, "");
        {
          auto sr = dev->register_memory(sbuf.data(), len == 0 ? 1 : len);
          if (!sr.ok()) return fail("register: " + sr.status().to_string());
          s = send->isend(sbuf.data(), len, *sr);
        }
        if (!s.ok()) return fail("isend: " + s.status().to_string());
        auto got = recv->wait(*r, soon());
        if (!got.ok()) return fail("recv " + std::to_string(msg) + ": " + got.status().to_string());
        if (*got != len) return fail("recv " + std::to_string(msg) + ": wrong length");
        auto sent = send->wait(*s, soon());
        if (!sent.ok()) return fail("send " + std::to_string(msg) + ": " + sent.status().to_string());
        if (test::first_mismatch(rbuf.data(), len, msg) != -1) {
          return fail("message " + std::to_string(msg) + " corrupted");
        }
        ++messages;
        ++msg;
      }
      // One-sided: put a pattern, quiet, then get it back into another buffer until it is
      // there (quiet() is local completion: on tcp the put lands when the target's progress
      // places it, a moment later; reading the target memory directly would race with that).
      const size_t plen = 1 + rng() % (kMax - 1);
      test::fill(local.data(), plen, msg + 1000000);
      Status st = win->put(*lreg, 0, *remote, 0, plen).status();
      if (st.ok()) st = win->quiet(soon());
      if (!st.ok()) return fail("put: " + st.to_string());
      for (auto d = Deadline::after(10s);;) {
        std::fill(local.begin(), local.begin() + static_cast<long>(plen), 0);
        st = win->get(*lreg, 0, *remote, 0, plen).status();
        if (st.ok()) st = win->quiet(soon());
        if (!st.ok()) return fail("get: " + st.to_string());
        if (test::first_mismatch(local.data(), plen, msg + 1000000) == -1) break;
        if (d.expired()) return fail("put " + std::to_string(msg) + " never landed intact");
      }
      ++puts;
    }
    return true;
  }
};

TEST_P(Stress, EightThreadsDoEverythingAtOnce) {
  constexpr int kThreads = 8;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(stress_seconds());
  std::vector<Worker> workers(kThreads);
  std::vector<std::thread> threads;
  std::atomic<bool> stop{false};
  std::atomic<int> done{0};
  for (int t = 0; t < kThreads; ++t) {
    workers[t].dev = dev_.get();
    workers[t].id = t;
    threads.emplace_back([&, t] {
      if (!workers[t].run(until, stop)) stop = true;
      ++done;
    });
  }
  const auto limit = until + 120s;
  while (done.load() < kThreads && std::chrono::steady_clock::now() < limit) {
    std::this_thread::sleep_for(20ms);  // polling the workers under a deadline
  }
  if (done.load() < kThreads) {
    std::fprintf(stderr, "FAIL: %d of %d threads still running 120 s after the end: deadlock\n",
                 kThreads - done.load(), kThreads);
    std::_Exit(1);
  }
  uint64_t messages = 0, puts = 0, reconnects = 0;
  for (auto& t : threads) t.join();
  for (const Worker& w : workers) {
    EXPECT_TRUE(w.error.empty()) << w.error;
    messages += w.messages;
    puts += w.puts;
    reconnects += w.reconnects;
  }
  EXPECT_GT(messages, 0u);
  std::printf("%d threads: %llu messages, %llu put+get pairs, %llu connections, all verified\n",
              kThreads, static_cast<unsigned long long>(messages),
              static_cast<unsigned long long>(puts), static_cast<unsigned long long>(reconnects));
  const Stats st = dev_->stats();
  EXPECT_EQ(st.routing_misses, st.late_arrivals)
      << "a routing miss that is not late traffic of a closed communicator";
}

INSTANTIATE_TEST_SUITE_P(Providers, Stress,
                         ::testing::Values(test::ProviderParam{"shm", "auto"},
                                           test::ProviderParam{"tcp;ofi_rxm", "auto"},
                                           test::ProviderParam{"tcp;ofi_rxm", "manual"},
                                           test::ProviderParam{"tcp", "auto"}),
                         test::provider_param_name);

}  // namespace
}  // namespace xport
