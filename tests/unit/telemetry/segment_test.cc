// The stats segment: writer/reader round trip, and every rejection the reader must make.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "telemetry/block.hpp"
#include "telemetry/segment_reader.hpp"
#include "telemetry/segment_writer.hpp"
#include "telemetry/stats_blocks.hpp"
#include "temp_dir.hpp"

namespace xport::telemetry {
namespace {

using test::TempDir;

FileIdentity self() {
  return {static_cast<uint64_t>(::geteuid()), static_cast<uint64_t>(::getpid())};
}

std::vector<BlockRecord> sample_blocks() {
  std::vector<BlockRecord> out;
  BlockBuilder ep(BlockKind::endpoint);
  ep.label(LabelKey::device, "0");
  ep.label(LabelKey::rail, "lo");
  ep.label(LabelKey::provider, "tcp;ofi_rxm");
  ep.counter(CounterId::endpoint_bytes_send, 12345);
  ep.counter(CounterId::endpoint_ops_send, 7);
  out.push_back(ep.record());
  BlockBuilder cq(BlockKind::cq);
  cq.label(LabelKey::cq, "cq lo");
  cq.counter(CounterId::cq_polls, 99);
  out.push_back(cq.record());
  return out;
}

struct SegmentFile : ::testing::Test {
  TempDir dir;
  std::unique_ptr<SegmentWriter> writer;
  void SetUp() override {
    auto w = SegmentWriter::create(dir.path(), {"myjob", "3", "prog"}, 100);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    writer = std::move(w).value();
  }
  std::string path() const { return writer->path(); }
  void poke(size_t offset, const void* bytes, size_t n) {
    int fd = ::open(path().c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, bytes, n, static_cast<off_t>(offset)), static_cast<ssize_t>(n));
    ::close(fd);
  }
  template <typename T>
  void poke_value(size_t offset, T v) {
    poke(offset, &v, sizeof(v));
  }
};

TEST_F(SegmentFile, RoundTrip) {
  EXPECT_EQ(path(), dir.path() + "/" + segment_file_name(::geteuid(), ::getpid()));
  struct stat st {};
  ASSERT_EQ(::stat(path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(static_cast<size_t>(st.st_size), kSegmentSize);

  auto blocks = sample_blocks();
  EXPECT_EQ(writer->publish(blocks), 0u);
  DecodeResult r = read_segment_file(path(), self());
  ASSERT_TRUE(r.ok()) << reject_name(r.reason) << ": " << r.detail;
  const auto& s = r.snapshot;
  EXPECT_EQ(s.pid, static_cast<uint64_t>(::getpid()));
  EXPECT_EQ(s.generation % 2, 0u);
  EXPECT_EQ(s.snapshots, 2u);  // the empty one at creation, then ours
  EXPECT_EQ(s.interval_ms, 100u);
  EXPECT_NE(s.start_ticks, 0u);
  ASSERT_NE(s.process_label(LabelKey::job), nullptr);
  EXPECT_EQ(*s.process_label(LabelKey::job), "myjob");
  EXPECT_EQ(*s.process_label(LabelKey::rank), "3");
  EXPECT_EQ(*s.process_label(LabelKey::program), "prog");
  ASSERT_EQ(s.blocks.size(), 2u);
  EXPECT_EQ(s.blocks[0].kind, static_cast<uint16_t>(BlockKind::endpoint));
  ASSERT_EQ(s.blocks[0].labels.size(), 3u);
  EXPECT_EQ(s.blocks[0].labels[2].value, "tcp;ofi_rxm");
  ASSERT_EQ(s.blocks[0].counters.size(), 2u);
  EXPECT_EQ(s.blocks[0].counters[0].second, 12345u);
  EXPECT_EQ(s.blocks[1].counters[0].first, static_cast<uint16_t>(CounterId::cq_polls));
}

TEST_F(SegmentFile, TooManyBlocksAreDroppedAndCounted) {
  std::vector<BlockRecord> many(kMaxBlocks + 5, sample_blocks()[0]);
  EXPECT_EQ(writer->publish(many), 5u);
  DecodeResult r = read_segment_file(path(), self());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.snapshot.blocks.size(), static_cast<size_t>(kMaxBlocks));
}

TEST_F(SegmentFile, UnlinkRemovesTheFile) {
  writer->unlink_file();
  EXPECT_NE(::access(path().c_str(), F_OK), 0);
}

TEST_F(SegmentFile, RejectsWrongSize) {
  ASSERT_EQ(::truncate(path().c_str(), kSegmentSize - 1), 0);
  EXPECT_EQ(read_segment_file(path(), self()).reason, Reject::size);
  ASSERT_EQ(::truncate(path().c_str(), kSegmentSize * 2), 0);
  EXPECT_EQ(read_segment_file(path(), self()).reason, Reject::size);
  ASSERT_EQ(::truncate(path().c_str(), 0), 0);
  EXPECT_EQ(read_segment_file(path(), self()).reason, Reject::size);
}

TEST_F(SegmentFile, RejectsUnknownVersion) {
  poke_value<uint32_t>(offsetof(SegmentHeader, version), kSegmentVersion + 1);
  EXPECT_EQ(read_segment_file(path(), self()).reason, Reject::version);
}

TEST_F(SegmentFile, RejectsCorruptHeaderAndTable) {
  writer->publish(sample_blocks());
  poke(0, "BADMAGIC", 8);
  EXPECT_EQ(read_segment_file(path(), self()).reason, Reject::corrupt);
}

TEST_F(SegmentFile, RejectsBlockCountBeyondTheTable) {
  writer->publish(sample_blocks());
  poke_value<uint32_t>(offsetof(SegmentHeader, block_count), kMaxBlocks + 1);
  EXPECT_EQ(read_segment_file(path(), self()).reason, Reject::corrupt);
}

TEST_F(SegmentFile, RejectsBadLabels) {
  writer->publish(sample_blocks());
  const size_t block0 = sizeof(SegmentHeader);
  const size_t label0 = block0 + offsetof(BlockRecord, labels);
  poke_value<char>(label0 + offsetof(LabelSlot, value), '"');
  EXPECT_EQ(read_segment_file(path(), self()).reason, Reject::corrupt);
  writer->publish(sample_blocks());
  poke_value<uint8_t>(label0 + offsetof(LabelSlot, key), 200);  // unknown key
  EXPECT_EQ(read_segment_file(path(), self()).reason, Reject::corrupt);
  writer->publish(sample_blocks());
  poke_value<uint8_t>(label0 + offsetof(LabelSlot, length), kLabelValueMax + 1);
  EXPECT_EQ(read_segment_file(path(), self()).reason, Reject::corrupt);
  writer->publish(sample_blocks());
  // Second label slot given the first one's key: one value per key.
  poke_value<uint8_t>(label0 + sizeof(LabelSlot), static_cast<uint8_t>(LabelKey::device));
  EXPECT_EQ(read_segment_file(path(), self()).reason, Reject::corrupt);
  writer->publish(sample_blocks());
  poke_value<uint8_t>(block0 + offsetof(BlockRecord, label_count), kBlockLabels + 1);
  EXPECT_EQ(read_segment_file(path(), self()).reason, Reject::corrupt);
  writer->publish(sample_blocks());
  poke_value<uint8_t>(block0 + offsetof(BlockRecord, counter_count), kBlockCounters + 1);
  EXPECT_EQ(read_segment_file(path(), self()).reason, Reject::corrupt);
  writer->publish(sample_blocks());
  poke_value<uint16_t>(block0 + offsetof(BlockRecord, counters), 0);  // counter id 0
  EXPECT_EQ(read_segment_file(path(), self()).reason, Reject::corrupt);
  writer->publish(sample_blocks());
  EXPECT_TRUE(read_segment_file(path(), self()).ok());
}

TEST_F(SegmentFile, KeepsUnknownCounterIds) {
  BlockBuilder b(BlockKind::rail);
  b.counter(static_cast<CounterId>(4000), 5);  // a newer library's counter
  std::vector<BlockRecord> blocks{b.record()};
  writer->publish(blocks);
  DecodeResult r = read_segment_file(path(), self());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.snapshot.blocks[0].counters[0].first, 4000);
}

TEST_F(SegmentFile, PoolBlockRoundTrip) {
  Stats st;
  st.pool.groups = 1;
  st.pool.channels_per_group = 4;
  st.pool.channels = 2;
  st.pool.cqs = 1;
  st.pool.comms_attached = 2;
  st.pool.primaries = 1;
  st.pool.secondaries = 1;
  st.pool.routing_misses = 0;
  st.pool.channel_ops = 1234;
  st.pool.busiest_channel_ops = 800;
  st.pool.registered_bytes = 4096;
  DeviceLabels l;
  l.device = "0";
  l.provider = "tcp;ofi_rxm";
  l.domain = "lo";
  std::vector<BlockRecord> blocks;
  append_stats_blocks(st, l, blocks);
  EXPECT_EQ(writer->publish(blocks), 0u);
  DecodeResult r = read_segment_file(path(), self());
  ASSERT_TRUE(r.ok()) << reject_name(r.reason) << ": " << r.detail;
  const BlockSnapshot* pool = nullptr;
  for (const auto& b : r.snapshot.blocks) {
    if (b.kind == static_cast<uint16_t>(BlockKind::pool)) {
      EXPECT_EQ(pool, nullptr) << "one pool block per device";
      pool = &b;
    }
  }
  ASSERT_NE(pool, nullptr);
  EXPECT_STREQ(block_kind_name(pool->kind), "pool");
  std::map<LabelKey, std::string> labels;
  for (const auto& x : pool->labels) labels[x.key] = x.value;
  EXPECT_EQ(labels, (std::map<LabelKey, std::string>{{LabelKey::device, "0"},
                                                     {LabelKey::provider, "tcp;ofi_rxm"}}));
  std::map<uint16_t, uint64_t> got(pool->counters.begin(), pool->counters.end());
  auto id = [](CounterId c) { return static_cast<uint16_t>(c); };
  EXPECT_EQ(got, (std::map<uint16_t, uint64_t>{{id(CounterId::pool_groups), 1},
                                               {id(CounterId::pool_channels_per_group), 4},
                                               {id(CounterId::pool_channels), 2},
                                               {id(CounterId::pool_cqs), 1},
                                               {id(CounterId::pool_comms_attached), 2},
                                               {id(CounterId::pool_primaries), 1},
                                               {id(CounterId::pool_secondaries), 1},
                                               {id(CounterId::pool_routing_misses), 0},
                                               {id(CounterId::pool_channel_ops), 1234},
                                               {id(CounterId::pool_busiest_channel_ops), 800},
                                               {id(CounterId::pool_registered_bytes), 4096}}));
  for (const auto& [c, v] : pool->counters) {
    const CounterName* n = find_counter(c);
    ASSERT_NE(n, nullptr) << c;
    EXPECT_EQ(std::string(n->metric).rfind("xport_pool_", 0), 0u) << n->metric;
  }
}

TEST_F(SegmentFile, KeepsUnknownBlockKinds) {
  BlockBuilder b(static_cast<BlockKind>(900));  // a newer library's block kind
  b.label(LabelKey::device, "0");
  b.counter(CounterId::pool_channels, 3);
  std::vector<BlockRecord> blocks{b.record()};
  writer->publish(blocks);
  DecodeResult r = read_segment_file(path(), self());
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.snapshot.blocks.size(), 1u);
  EXPECT_EQ(r.snapshot.blocks[0].kind, 900);
  EXPECT_STREQ(block_kind_name(900), "unknown");
  EXPECT_EQ(r.snapshot.blocks[0].counters[0].second, 3u);
}

TEST_F(SegmentFile, OddGenerationIsTorn) {
  poke_value<uint64_t>(offsetof(SegmentHeader, generation), 7);  // a writer that died mid-update
  DecodeResult r = read_segment_file(path(), self());
  EXPECT_EQ(r.reason, Reject::torn);
  EXPECT_NE(r.snapshot.start_ticks, 0u);  // still there for the liveness check
}

TEST_F(SegmentFile, RejectsForeignOwnerModeAndLinks) {
  FileIdentity other = self();
  other.uid += 1;
  EXPECT_EQ(read_segment_file(path(), other).reason, Reject::owner);
  ASSERT_EQ(::chmod(path().c_str(), 0644), 0);
  EXPECT_EQ(read_segment_file(path(), self()).reason, Reject::owner);
  ASSERT_EQ(::chmod(path().c_str(), 0600), 0);
  const std::string link = dir.path() + "/link";
  ASSERT_EQ(::symlink(path().c_str(), link.c_str()), 0);
  EXPECT_EQ(read_segment_file(link, self()).reason, Reject::owner);
}

TEST_F(SegmentFile, RejectsAHeaderNamingAnotherProcess) {
  FileIdentity other = self();
  other.pid += 1;
  EXPECT_EQ(read_segment_file(path(), other).reason, Reject::corrupt);
}

TEST(SegmentDecode, EveryTruncationIsRejected) {
  TempDir dir;
  auto w = SegmentWriter::create(dir.path(), {"j", "", "p"}, 100);
  ASSERT_TRUE(w.ok());
  auto blocks = sample_blocks();
  (*w)->publish(blocks);
  std::vector<uint8_t> bytes(kSegmentSize);
  int fd = ::open((*w)->path().c_str(), O_RDONLY);
  ASSERT_EQ(::pread(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  ::close(fd);
  EXPECT_TRUE(decode_segment(bytes).ok());
  for (size_t n : {size_t{0}, size_t{1}, size_t{8}, sizeof(SegmentHeader) - 1,
                   sizeof(SegmentHeader), sizeof(SegmentHeader) + 100, kSegmentSize - 1}) {
    EXPECT_FALSE(decode_segment(std::span<const uint8_t>(bytes.data(), n)).ok()) << n;
  }
}

TEST(SegmentName, ParsesOnlyOurNames) {
  FileIdentity id;
  EXPECT_TRUE(parse_segment_name("xport-1000-4242", &id));
  EXPECT_EQ(id.uid, 1000u);
  EXPECT_EQ(id.pid, 4242u);
  for (const char* bad :
       {"xport-", "xport-1000", "xport-1000-", "xport--1", "xport-a-1", "xport-1-2x", "xport-1-0",
        ".xport-1-2.init", "xport-1-2.init", "xport-99999999999-1", "other-1-2"}) {
    EXPECT_FALSE(parse_segment_name(bad, &id)) << bad;
  }
}

}  // namespace
}  // namespace xport::telemetry
