// The process's telemetry publisher: sources (one per Device) append counter blocks, and a
// background thread copies them into the stats segment every XPORT_TELEMETRY_INTERVAL_MS.
// The hot path never touches the segment; sources read the hot-path atomics at snapshot time.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "telemetry/segment_format.hpp"
#include "telemetry/segment_writer.hpp"

namespace xport::telemetry {

// Appends this source's blocks. Runs on the publisher thread, never concurrently with itself.
using Source = std::function<void(std::vector<BlockRecord>& out)>;

class Publisher {
 public:
  struct Options {
    std::string dir = "/dev/shm";
    uint32_t interval_ms = 200;
    ProcessLabels labels;
  };
  explicit Publisher(Options options);
  ~Publisher();  // shutdown()
  Publisher(const Publisher&) = delete;
  Publisher& operator=(const Publisher&) = delete;

  // Registers a source; the first one creates the segment and starts the thread. Returns 0 when
  // the segment cannot be created (logged once) or after shutdown.
  uint64_t add(Source source);
  // Unregisters; waits for a snapshot in progress, so the source's captures may die after.
  void remove(uint64_t id);
  // Writes one snapshot now (tests; the thread does this every interval).
  void publish_now();
  // Stops the thread and removes the segment. Later add() calls return 0.
  void shutdown();

  std::string segment_path() const;

 private:
  void run();
  void publish_locked();

  const Options options_;
  const int owner_pid_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Source> sources_;
  uint64_t next_id_ = 1;
  std::unique_ptr<SegmentWriter> writer_;
  std::thread thread_;
  bool stop_ = false;
  bool wake_ = false;
  bool failed_ = false;  // segment creation failed: publication is off for the process
  uint64_t blocks_dropped_ = 0;
  uint64_t snapshots_ = 0;
  std::vector<BlockRecord> scratch_;
};

// The process-wide publisher, configured from the knobs (XPORT_TELEMETRY, _INTERVAL_MS, _DIR,
// XPORT_JOB, XPORT_RANK); nullptr when XPORT_TELEMETRY=0. It lives for the process; an atexit
// handler stops it and removes the segment on normal exit.
Publisher* process_publisher();

// Keeps a source registered with the process publisher while it lives.
class Registration {
 public:
  Registration(Publisher* publisher, uint64_t id) : publisher_(publisher), id_(id) {}
  ~Registration() {
    if (publisher_ != nullptr && id_ != 0) publisher_->remove(id_);
  }
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;

 private:
  Publisher* publisher_;
  uint64_t id_;
};

}  // namespace xport::telemetry
