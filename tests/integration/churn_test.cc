// Churn between two processes: thousands of communicators opened and closed under traffic, the
// receiving side sometimes closing early while the sender's later messages are on their way
// (late data on purpose). Every message received is verified against its communicator's
// pattern (misrouted data would fail), every send ends well or, past the receiver's early close,
// as closed; descriptors, registered bytes and memory stay flat on this side, and the peer's
// routing misses are all late arrivals of closed communicators.
// XTEST_CHURN_COMMS sets the count (default 10,000 on shm, 2,000 elsewhere).
#include <gtest/gtest.h>
#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <optional>
#include <sstream>

#if defined(__SANITIZE_ADDRESS__)
#define XTEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define XTEST_ASAN 1
#endif
#endif
#ifndef XTEST_ASAN
#define XTEST_ASAN 0
#endif
#if XTEST_ASAN
// From <sanitizer/allocator_interface.h>, which GCC does not install (its libasan has it).
extern "C" void __sanitizer_purge_allocator(void);
#endif

#include "harness.hpp"
#include "provider_fixture.hpp"
#include "xport/xport.hpp"

namespace xport {
namespace {

using namespace std::chrono_literals;

size_t open_fds() {
  size_t n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d) != nullptr) ++n;
    closedir(d);
  }
  return n;
}

size_t rss_bytes() {
#if XTEST_ASAN
  // ASan keeps freed memory in its quarantine (256 MiB by default) and its own caches: drained
  // first, or the quarantine filling up would read as growth.
  __sanitizer_purge_allocator();
#endif
  std::ifstream in("/proc/self/statm");
  size_t pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

class Churn : public test::ProviderTest {};

TEST_P(Churn, ThousandsOfCommunicatorsComeAndGoUnderTraffic) {
  const std::string provider = GetParam().provider;
  const char* env = std::getenv("XTEST_CHURN_COMMS");
  const int comms = env != nullptr ? std::atoi(env) : (provider == "shm" ? 10000 : 2000);
  const char* bin = std::getenv("XTEST_PEER_BIN");
  auto p = test::ChildProcess::spawn({bin != nullptr ? bin : "xport-test-peer", "churn"}, {});
  ASSERT_TRUE(p.started());
  std::string err;
  std::string line = p.read_line(30000, &err);
  ASSERT_EQ(line.rfind("HANDLE ", 0), 0u) << line << " " << err;
  const auto handle = test::from_hex(line.substr(7));

  constexpr size_t kMax = 300 * 1024;
  std::vector<uint8_t> mem(4 * kMax + 64);
  auto reg = dev_->register_memory(mem.data(), mem.size());
  ASSERT_TRUE(reg.ok());
  std::mt19937 rng(2026);
  size_t fds_mark = 0, rss_mark = 0, reg_mark = 0;
  uint64_t sent = 0, closed_sends = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < comms; ++i) {
    if (i == comms / 10) {  // after a warm-up (pools, caches, the peer's channels) settle
      fds_mark = open_fds();
      rss_mark = rss_bytes();
      reg_mark = dev_->stats().registered_bytes;
    }
    auto comm = dev_->connect(handle, Deadline::after(20s));
    ASSERT_TRUE(comm.ok()) << "communicator " << i << ": " << comm.status().to_string();
    const uint64_t count = 1 + rng() % 4;
    const uint64_t close_at = rng() % 5 == 0 ? rng() % count : count;
    uint64_t head[3] = {static_cast<uint64_t>(i), count, close_at};
    std::memcpy(mem.data() + 4 * kMax, head, sizeof(head));
    auto h = (*comm)->isend(mem.data() + 4 * kMax, sizeof(head), *reg);
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    const auto sizes = test::message_sizes(static_cast<uint32_t>(i), count, kMax);
    std::vector<Request> reqs;
    // Every third communicator sends from a registration of its own, dropped with it.
    std::optional<Region> own;
    if (i % 3 == 0) own = *dev_->register_memory(mem.data(), 4 * kMax);
    for (uint64_t k = 0; k < count; ++k) {
      uint8_t* b = mem.data() + k * kMax;
      test::fill(b, sizes[k], static_cast<uint64_t>(i) * 1000 + k);
      auto s = (*comm)->isend(b, sizes[k], own ? *own : *reg);
      if (!s.ok()) {
        ASSERT_GE(k, close_at) << "communicator " << i << " message " << k << ": "
                               << s.status().to_string();
        break;
      }
      reqs.push_back(*s);
    }
    ASSERT_TRUE((*comm)->wait(*h, Deadline::after(20s)).ok()) << "communicator " << i;
    for (uint64_t k = 0; k < reqs.size(); ++k) {
      auto w = (*comm)->wait(reqs[k], Deadline::after(20s));
      if (w.ok()) {
        ++sent;
        continue;
      }
      ASSERT_GE(k, close_at) << "communicator " << i << " message " << k << ": "
                             << w.status().to_string();
      ASSERT_TRUE(w.status().code() == Code::closed || w.status().code() == Code::peer_lost)
          << w.status().to_string();
      ++closed_sends;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Closing is asynchronous: let the last ones finish before measuring.
  for (auto d = Deadline::after(3s); !d.expired();) (void)dev_->progress();
  const Stats st = dev_->stats();
  std::printf("%d communicators in %.1f s (%.0f/s): %llu messages sent, %llu cut off by an early "
              "close; fds %zu -> %zu, registered %zu -> %llu bytes, RSS %.1f -> %.1f MiB\n",
              comms, secs, comms / secs, static_cast<unsigned long long>(sent),
              static_cast<unsigned long long>(closed_sends), fds_mark, open_fds(), reg_mark,
              static_cast<unsigned long long>(st.registered_bytes), rss_mark / 1048576.0,
              rss_bytes() / 1048576.0);
  EXPECT_EQ(st.comms_open, 0u);
  EXPECT_LE(open_fds(), fds_mark + 2) << "descriptors grow with communicators";
  EXPECT_EQ(st.registered_bytes, reg_mark) << "registrations grow with communicators";
  EXPECT_LT(rss_bytes(), rss_mark + (48u << 20)) << "memory grows with communicators";
  EXPECT_GT(sent, 0u);

  p.write_line("DONE");
  line = p.read_line(60000, &err);
  ASSERT_EQ(line.rfind("STATS ", 0), 0u) << line << " " << err;
  std::printf("peer: %s\n", line.c_str());
  std::istringstream in(line.substr(6));
  std::string k;
  uint64_t v = 0, peer_comms = 0, misses = 0, late = 0, open = 0;
  while (in >> k >> v) {
    if (k == "comms") peer_comms = v;
    if (k == "misses") misses = v;
    if (k == "late") late = v;
    if (k == "comms_open") open = v;
  }
  EXPECT_EQ(peer_comms, static_cast<uint64_t>(comms));
  EXPECT_EQ(misses, late) << "a routing miss at the peer that is not late traffic of a closed "
                             "communicator";
  EXPECT_EQ(open, 0u) << "the peer still holds communicators";
  p.write_line("bye");
  EXPECT_EQ(p.wait_exit(20000), 0);
}

INSTANTIATE_TEST_SUITE_P(Providers, Churn,
                         ::testing::Values(test::ProviderParam{"shm", "auto"},
                                           test::ProviderParam{"tcp;ofi_rxm", "auto"},
                                           test::ProviderParam{"tcp", "auto"}),
                         test::provider_param_name);

}  // namespace
}  // namespace xport
