// The publisher: sources in and out of the segment, the periodic thread, removal at shutdown;
// process liveness (dead, zombie, reused pid).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "telemetry/block.hpp"
#include "telemetry/process.hpp"
#include "telemetry/publisher.hpp"
#include "telemetry/segment_reader.hpp"
#include "temp_dir.hpp"

namespace xport::telemetry {
namespace {

const FileIdentity kSelf{static_cast<uint64_t>(::geteuid()), static_cast<uint64_t>(::getpid())};

Publisher::Options options(const std::string& dir, uint32_t interval_ms) {
  Publisher::Options o;
  o.dir = dir;
  o.interval_ms = interval_ms;
  o.labels = {"job", "0", "prog"};
  return o;
}

uint64_t counter_of(const SegmentSnapshot& s, uint16_t kind, CounterId id) {
  for (const auto& b : s.blocks) {
    if (b.kind != kind) continue;
    for (const auto& [i, v] : b.counters) {
      if (i == static_cast<uint16_t>(id)) return v;
    }
  }
  return UINT64_MAX;
}

TEST(Publisher, SourcesComeAndGo) {
  test::TempDir dir;
  Publisher p(options(dir.path(), 60000));  // the thread waits; publish_now drives it
  std::atomic<uint64_t> value{41};
  uint64_t id = p.add([&](std::vector<BlockRecord>& out) {
    BlockBuilder b(BlockKind::device);
    b.label(LabelKey::device, "0");
    b.counter(CounterId::device_comms_open, value.load());
    out.push_back(b.record());
  });
  ASSERT_NE(id, 0u);
  const std::string path = p.segment_path();
  ASSERT_FALSE(path.empty());
  value = 42;
  p.publish_now();
  DecodeResult r = read_segment_file(path, kSelf);
  ASSERT_TRUE(r.ok()) << r.detail;
  EXPECT_EQ(r.snapshot.blocks.size(), 2u);
  EXPECT_EQ(counter_of(r.snapshot, 2, CounterId::device_comms_open), 42u);
  EXPECT_EQ(counter_of(r.snapshot, 1, CounterId::process_devices), 1u);

  p.remove(id);
  p.publish_now();
  r = read_segment_file(path, kSelf);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.snapshot.blocks.size(), 1u);  // the process block only
  EXPECT_EQ(counter_of(r.snapshot, 1, CounterId::process_devices), 0u);

  p.shutdown();
  EXPECT_NE(::access(path.c_str(), F_OK), 0) << "segment left after shutdown";
  EXPECT_EQ(p.add([](std::vector<BlockRecord>&) {}), 0u);
}

TEST(Publisher, ThreadPublishesEveryInterval) {
  test::TempDir dir;
  Publisher p(options(dir.path(), 10));
  std::atomic<uint64_t> value{0};
  uint64_t id = p.add([&](std::vector<BlockRecord>& out) {
    BlockBuilder b(BlockKind::device);
    b.counter(CounterId::device_routing_misses, value.load());
    out.push_back(b.record());
  });
  ASSERT_NE(id, 0u);
  value = 7;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  uint64_t seen = 0;
  while (seen != 7 && std::chrono::steady_clock::now() < deadline) {
    DecodeResult r = read_segment_file(p.segment_path(), kSelf);
    if (r.ok()) seen = counter_of(r.snapshot, 2, CounterId::device_routing_misses);
    std::this_thread::yield();
  }
  EXPECT_EQ(seen, 7u) << "the publisher thread did not publish the new value within 10 s";
  p.remove(id);
}

TEST(Publisher, UnwritableDirectoryTurnsPublicationOff) {
  Publisher p(options("/nonexistent/xport-telemetry", 100));
  EXPECT_EQ(p.add([](std::vector<BlockRecord>&) {}), 0u);
  EXPECT_EQ(p.segment_path(), "");
}

TEST(Liveness, SelfAliveExitedChildDead) {
  EXPECT_EQ(process_liveness(::getpid(), process_start_ticks(::getpid())), Liveness::alive);
  EXPECT_EQ(process_liveness(::getpid(), process_start_ticks(::getpid()) + 1), Liveness::dead)
      << "a pid reused by another process must count as dead";
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  uint64_t ticks = process_start_ticks(child);
  // Not reaped yet: a zombie, whose segment can never change again.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (process_liveness(child, ticks) != Liveness::dead &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_EQ(process_liveness(child, ticks), Liveness::dead) << "zombie seen as alive";
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_EQ(process_liveness(child, ticks), Liveness::dead);
}

}  // namespace
}  // namespace xport::telemetry

namespace xport::telemetry {
namespace {

// The program label (and the job label's default) is the executable's name, in full: it was
// /proc/self/comm, cut at 15 characters ("xport-unit-test") and "exe" for a process started
// from /proc/self/exe (xport-bench's local peer: tests/tools/xport_bench_stream_test.py).
TEST(ProcessIdentity, ProgramNameIsTheExecutablesFullName) {
  char path[4096];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  ASSERT_GT(n, 0);
  std::string exe(path, static_cast<size_t>(n));
  exe = exe.substr(exe.rfind('/') + 1);
  EXPECT_EQ(program_name(), exe);
  EXPECT_EQ(program_name(), "xport-unit-tests") << "this binary's name, all 16 characters";
}

}  // namespace
}  // namespace xport::telemetry
