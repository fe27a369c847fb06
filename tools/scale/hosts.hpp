// The target's view of its initiators: P child processes of this binary (--procs P) or one
// thread of the target's own process (--procs 0), each holding a contiguous share of the N
// initiator devices and driven by lines over pipes (the protocol is in initiators.hpp).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/bootstrap.hpp"
#include "options.hpp"
#include "xport/deadline.hpp"
#include "xport/status.hpp"

namespace scale {

class Hosts {
 public:
  struct Share {
    size_t first = 0, count = 0;
  };
  // Starts min(P, N) processes (or the thread) and splits the N devices among them.
  static xport::Result<std::unique_ptr<Hosts>> start(const Options& opt, size_t peers);
  ~Hosts();

  size_t size() const { return shares_.size(); }
  const Share& share(size_t h) const { return shares_[h]; }
  size_t owner(size_t peer) const;

  xport::Status send(size_t h, const std::string& line);
  xport::Status send_all(const std::string& line);
  // The next line of host `h`, which must start with `prefix`; `tick` (when given) runs between
  // looks at the pipe: the target drives its device meanwhile. A host's "FAIL error=..." line,
  // its end, or the deadline is an error naming the host.
  xport::Result<std::string> expect(size_t h, const std::string& prefix, xport::Deadline deadline,
                                    const std::function<void()>& tick = {});
  // One such line from every host, in host order.
  xport::Result<std::vector<std::string>> expect_all(const std::string& prefix,
                                                     xport::Deadline deadline,
                                                     const std::function<void()>& tick = {});
  // The NOTE lines read so far (each distinct error of a step, with how many had it).
  std::vector<std::string> take_notes();
  // Says goodbye, waits for each host's answer (closing its windows and comms: `tick` drives the
  // target meanwhile) and its end (processes are killed past the deadline). False when the
  // in-process thread did not end: the caller must not return into destructors that would wait for
  // it (it leaves with _Exit).
  bool stop(xport::Deadline deadline, xport::Status* error, const std::function<void()>& tick = {});

 private:
  Hosts() = default;
  std::string name(size_t h) const;
  xport::Result<std::string> poll_line(size_t h);  // a line, "" when none yet
  xport::Result<std::string> next_line(size_t h, const std::string& prefix,
                                       xport::Deadline deadline, const std::function<void()>& tick);

  Options opt_;
  std::vector<Share> shares_;
  std::vector<bench::LineChannel> channels_;
  std::vector<std::string> notes_;
  std::vector<pid_t> pids_;  // empty with the in-process thread
  std::thread thread_;
  std::shared_ptr<std::atomic<bool>> thread_done_;  // the thread's last act
};

}  // namespace scale
