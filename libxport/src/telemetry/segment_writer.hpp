// Writes the stats segment of this process: creates /dev/shm/xport-<uid>-<pid> (0600), keeps it
// mapped, and publishes snapshots under a seqlock generation so readers never see torn data.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "telemetry/segment_format.hpp"
#include "xport/status.hpp"

namespace xport::telemetry {

struct ProcessLabels {
  std::string job;
  std::string rank;
  std::string program;
};

// "xport-<uid>-<pid>".
std::string segment_file_name(uint64_t uid, uint64_t pid);

class SegmentWriter {
 public:
  // Creates the segment in `dir` under a temporary name, writes its header and an empty
  // snapshot, then renames it into place, so a reader never finds a half-initialised file.
  // A file of the same name is a dead process's (the pid is ours now) and is replaced.
  static Result<std::unique_ptr<SegmentWriter>> create(const std::string& dir,
                                                       const ProcessLabels& labels,
                                                       uint32_t interval_ms);
  ~SegmentWriter();  // unmaps; unlinks the file when this process created it
  SegmentWriter(const SegmentWriter&) = delete;
  SegmentWriter& operator=(const SegmentWriter&) = delete;

  // Writes one snapshot. Blocks beyond kMaxBlocks are left out; returns how many were.
  size_t publish(std::span<const BlockRecord> blocks);

  const std::string& path() const { return path_; }
  // Removes the file now (normal exit); the mapping stays valid until destruction.
  void unlink_file();

 private:
  SegmentWriter() = default;
  SegmentHeader* header() const { return static_cast<SegmentHeader*>(map_); }

  std::string path_;
  void* map_ = nullptr;
  int owner_pid_ = 0;
  bool linked_ = false;
};

}  // namespace xport::telemetry
