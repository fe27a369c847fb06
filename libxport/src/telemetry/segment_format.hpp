// The shared-memory stats segment: a fixed-size, versioned, little-endian layout that one process
// writes (segment_writer) and xport-exporter reads without trusting it (segment_reader).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace xport::telemetry {

static_assert(std::endian::native == std::endian::little,
              "the segment layout is little-endian; a big-endian port needs byte swaps");

inline constexpr char kSegmentMagic[8] = {'X', 'P', 'O', 'R', 'T', 'S', 'E', 'G'};
// Bumped when the layout or the meaning of a field changes. A new block kind or counter id is not
// such a change: readers keep ids they do not know, and the exporter counts them as unknown.
inline constexpr uint32_t kSegmentVersion = 1;

inline constexpr size_t kLabelValueMax = 62;  // bytes of one label value (no terminator)
inline constexpr int kBlockLabels = 8;        // label slots per block
inline constexpr int kBlockCounters = 31;     // counter slots per block
inline constexpr int kProcessLabels = 4;      // job, rank, program (+1 spare)
inline constexpr int kMaxBlocks = 255;        // blocks per segment (per process)

// One label: a key from LabelKey (names.hpp) and a sanitised value. Keys are ids, not text,
// so a segment can only carry label names the exporter knows.
struct LabelSlot {
  uint8_t key;     // LabelKey; 0 = unused
  uint8_t length;  // bytes of value used, <= kLabelValueMax
  char value[kLabelValueMax];
};
static_assert(sizeof(LabelSlot) == 64);

struct CounterSlot {
  uint16_t id;  // CounterId; 0 = unused
  uint16_t reserved0;
  uint32_t reserved1;
  uint64_t value;
};
static_assert(sizeof(CounterSlot) == 16);
static_assert(offsetof(CounterSlot, value) == 8);

// A counter block: one endpoint, CQ, device, rail, pool... with its labels.
struct BlockRecord {
  uint16_t kind;  // BlockKind
  uint8_t label_count;
  uint8_t counter_count;
  uint32_t reserved0;
  uint64_t reserved1;
  LabelSlot labels[kBlockLabels];
  CounterSlot counters[kBlockCounters];
};
static_assert(sizeof(BlockRecord) == 1024);
static_assert(offsetof(BlockRecord, labels) == 16);
static_assert(offsetof(BlockRecord, counters) == 16 + 64 * kBlockLabels);

struct SegmentHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_size;  // sizeof(SegmentHeader)
  uint64_t total_size;   // header + kMaxBlocks blocks
  uint32_t block_size;   // sizeof(BlockRecord)
  uint32_t max_blocks;
  uint64_t generation;  // seqlock: odd while the writer updates; even and unchanged = consistent
  uint64_t pid;
  uint64_t uid;
  uint64_t start_ticks;      // field 22 of /proc/<pid>/stat: tells a reused pid from its owner
  uint64_t publish_time_ns;  // CLOCK_REALTIME of the last snapshot
  uint32_t interval_ms;      // the publisher's interval
  uint32_t block_count;      // valid blocks after the header
  uint64_t snapshots;        // snapshots written so far
  uint64_t reserved0[5];
  LabelSlot process_labels[kProcessLabels];
  uint8_t reserved1[1024 - 128 - 64 * kProcessLabels];
};
static_assert(sizeof(SegmentHeader) == 1024);
static_assert(offsetof(SegmentHeader, generation) == 32);
static_assert(offsetof(SegmentHeader, pid) == 40);
static_assert(offsetof(SegmentHeader, start_ticks) == 56);
static_assert(offsetof(SegmentHeader, interval_ms) == 72);
static_assert(offsetof(SegmentHeader, block_count) == 76);
static_assert(offsetof(SegmentHeader, process_labels) == 128);

inline constexpr size_t kSegmentSize = sizeof(SegmentHeader) + kMaxBlocks * sizeof(BlockRecord);
static_assert(kSegmentSize == 256 * 1024);

// "xport-<uid>-<pid>" in the segment directory (/dev/shm unless XPORT_TELEMETRY_DIR says else).
inline constexpr const char* kSegmentPrefix = "xport-";

}  // namespace xport::telemetry
