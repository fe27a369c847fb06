// The generation protocol under load: a writer thread publishes as fast as it can while a
// reader reads the file the way the exporter does and checks every snapshot is one whole write.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "telemetry/block.hpp"
#include "telemetry/segment_reader.hpp"
#include "telemetry/segment_writer.hpp"
#include "temp_dir.hpp"

namespace xport::telemetry {
namespace {

// Snapshot k has (k % 40) + 1 blocks whose every counter holds k: any mix of two writes shows.
std::vector<BlockRecord> snapshot_of(uint64_t k) {
  std::vector<BlockRecord> out;
  for (uint64_t b = 0; b <= k % 40; ++b) {
    BlockBuilder bb(BlockKind::endpoint);
    bb.label(LabelKey::device, std::to_string(b));
    for (int c = 0; c < kBlockCounters; ++c) bb.counter(CounterId::endpoint_posted, k);
    out.push_back(bb.record());
  }
  return out;
}

TEST(Seqlock, ReaderNeverSeesATornSnapshot) {
  test::TempDir dir;
  auto w = SegmentWriter::create(dir.path(), {"j", "", "p"}, 100);
  ASSERT_TRUE(w.ok());
  SegmentWriter& writer = **w;
  std::vector<std::vector<BlockRecord>> snaps;
  for (uint64_t k = 1; k <= 80; ++k) snaps.push_back(snapshot_of(k));
  writer.publish(snaps[0]);

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> written{0};
  std::atomic<uint64_t> attempts{0};  // read attempts finished by the reader
  std::thread hammer([&] {
    for (uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
      writer.publish(snaps[i % snaps.size()]);
      written.fetch_add(1, std::memory_order_relaxed);
      if (i % 256 == 255) {
        // Between bursts, hold still until the reader has finished two attempts, so one whole
        // read ran without a concurrent write: a seqlock must let it through. (Without pauses a
        // slow reader, under ASan say, may never get a clean window, which proves nothing.)
        const uint64_t a = attempts.load();
        while (attempts.load() < a + 2 && !stop.load()) std::this_thread::yield();
      }
    }
  });

  const FileIdentity id{static_cast<uint64_t>(::geteuid()), static_cast<uint64_t>(::getpid())};
  uint64_t good = 0, torn = 0, last_generation = 0;
  // Reads go on until the writer has published its share as well (within the deadline): on a
  // loaded machine the writer thread may not run at all while the reader finishes 2,000 reads
  // (a full-suite run saw 0 writes), which would test nothing concurrent.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  while (std::chrono::steady_clock::now() < until &&
         (good < 2000 || written.load(std::memory_order_relaxed) <= 1000)) {
    DecodeResult r = read_segment_file(dir.path() + "/" + segment_file_name(id.uid, id.pid), id);
    attempts.fetch_add(1);
    if (r.reason == Reject::torn) {
      ++torn;
      continue;
    }
    ASSERT_TRUE(r.ok()) << reject_name(r.reason) << ": " << r.detail;
    const auto& s = r.snapshot;
    ASSERT_GE(s.generation, last_generation);
    last_generation = s.generation;
    ASSERT_FALSE(s.blocks.empty());
    const uint64_t k = s.blocks[0].counters[0].second;
    ASSERT_EQ(s.blocks.size(), k % 40 + 1) << "block count of another snapshot";
    for (size_t b = 0; b < s.blocks.size(); ++b) {
      ASSERT_EQ(s.blocks[b].labels[0].value, std::to_string(b));
      for (const auto& [cid, v] : s.blocks[b].counters) ASSERT_EQ(v, k) << "torn block " << b;
    }
    ++good;
  }
  stop = true;
  hammer.join();
  // Reads during bursts mostly retry out (the exporter just skips those); what matters is that
  // none of them mixes two writes, and that reads between bursts succeed.
  EXPECT_GE(good, 20u) << "reads hardly ever succeeded under load (" << torn << " torn)";
  EXPECT_GT(written.load(), 1000u);
  std::printf("seqlock: %llu consistent reads, %llu retried out, %llu writes\n",
              static_cast<unsigned long long>(good), static_cast<unsigned long long>(torn),
              static_cast<unsigned long long>(written.load()));
}

}  // namespace
}  // namespace xport::telemetry
