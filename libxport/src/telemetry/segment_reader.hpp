// Reading a stats segment without trusting it: every field is validated before use, and a
// rejected segment comes back with the reason the exporter counts
// (xport_exporter_segments_rejected_total{reason}).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "telemetry/names.hpp"

namespace xport::telemetry {

enum class Reject { none, owner, size, version, corrupt, torn, dead, io };
inline constexpr Reject kRejectReasons[] = {Reject::owner,   Reject::size, Reject::version,
                                            Reject::corrupt, Reject::torn, Reject::dead,
                                            Reject::io};
const char* reject_name(Reject r);  // "owner", "size", ...

struct Label {
  LabelKey key;
  std::string value;
};

struct BlockSnapshot {
  uint16_t kind = 0;
  std::vector<Label> labels;
  std::vector<std::pair<uint16_t, uint64_t>> counters;  // id (maybe unknown to us), value
};

struct SegmentSnapshot {
  uint64_t generation = 0;
  uint64_t pid = 0;
  uint64_t uid = 0;
  uint64_t start_ticks = 0;
  uint64_t publish_time_ns = 0;
  uint64_t snapshots = 0;
  uint32_t interval_ms = 0;
  std::vector<Label> process_labels;
  std::vector<BlockSnapshot> blocks;

  const std::string* process_label(LabelKey key) const;
};

struct DecodeResult {
  Reject reason = Reject::none;
  std::string detail;  // what was wrong, for logs
  SegmentSnapshot snapshot;
  bool ok() const { return reason == Reject::none; }
};

// Validates and decodes the bytes of one segment (a private copy: they cannot change under us).
DecodeResult decode_segment(std::span<const uint8_t> bytes);

struct FileIdentity {
  uint64_t uid = 0;  // from the name xport-<uid>-<pid>
  uint64_t pid = 0;
};
// Parses "xport-<uid>-<pid>"; false for any other name.
bool parse_segment_name(const std::string& name, FileIdentity* out);

// Reads and decodes one segment file: opened without following links, it must be a regular
// file of the uid in its name, owner-only, of exactly kSegmentSize bytes; a snapshot changing
// under the read is retried a few times, then rejected as torn (snapshot.start_ticks is still
// filled when it could be read). Says nothing about liveness.
DecodeResult read_segment_file(const std::string& path, const FileIdentity& id);

}  // namespace xport::telemetry
