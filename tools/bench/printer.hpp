// xport-bench's output, streamed: the header (table lines, the CSV header, a JSON header
// record) before the first point, each point's row printed and flushed as it is measured, and
// one end that says what ended the run (the table's pool and progress lines, a JSON end record;
// a line on stderr when it did not complete). A one-line status on a terminal's stderr names a
// point that takes long. Thread-safe: the thread that watches signals and the peer ends a run
// the main thread is still measuring (watch.hpp).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ops.hpp"
#include "report.hpp"

namespace bench {

// What ended a run (the JSON end record's "status").
enum class EndStatus { complete, failed, peer_died, interrupted };
const char* to_string(EndStatus s);

class Printer {
 public:
  // `status_line`: stderr is a terminal, where long points get a status line.
  Printer(Format format, bool status_line);
  ~Printer();
  Printer(const Printer&) = delete;
  Printer& operator=(const Printer&) = delete;

  // Before the first point: `argv` (the command line) and `planned` (points to measure) go into
  // the JSON header record with the version, host, time and the knobs in effect.
  void begin(const RunInfo& run, const std::vector<std::string>& argv, size_t planned);
  bool begun() const;
  // The point now being measured (the status line names it while it lasts).
  void measuring(const Plan& p);
  // One measured point; `run` carries the pool and progress counters as of this point.
  void point(const RunInfo& run, const Point& p);
  // Ends the run, once: later calls print nothing and return false. Complete: the table's
  // pool and progress lines (of the last point's RunInfo). Otherwise `reason` goes on one
  // stderr line ("xport-bench: <reason>, while measuring size N (K of M points measured)").
  // JSON: an end record with status, reason, points and exit_status.
  bool end(EndStatus status, const std::string& reason, int exit_status);

 private:
  void clear_status_locked();
  void status_loop();

  const Format format_;
  const bool status_line_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool begun_ = false, ended_ = false, stop_ = false, shown_ = false;
  RunInfo run_;
  size_t planned_ = 0, printed_ = 0;
  bool measuring_ = false;
  long shown_s_ = -1;  // the seconds the status line shows
  Plan current_;
  std::chrono::steady_clock::time_point start_, point_start_;
  std::thread status_;
};

}  // namespace bench
