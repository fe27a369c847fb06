// One run of xport-scale (one N): the target device, its initiator hosts, and the measurements
// both modes share (progress passes, costs before and after the peers, the first error).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common.hpp"
#include "hosts.hpp"
#include "options.hpp"
#include "record.hpp"
#include "xport/xport.hpp"

namespace scale {

// Runs one N (opt.peers[0]) in this process and prints its record. Returns the exit code.
int run_target(const Options& opt);

struct Target {
  Options opt;
  size_t n = 0;
  std::unique_ptr<xport::Context> ctx;
  std::unique_ptr<xport::Device> dev;
  std::unique_ptr<Hosts> hosts;
  Record rec;
  PassTimes serving;  // progress passes during the traffic
  xport::Status progress_error;

  xport::Deadline phase() const {
    return xport::Deadline::after(std::chrono::seconds(opt.timeout_s));
  }
  // The hosts' own deadlines end first, so their named errors reach us before ours.
  xport::Deadline phase_with_grace() const {
    return xport::Deadline::after(std::chrono::seconds(opt.timeout_s + 5));
  }

  // A progress pass, timed into `times` when given.
  void progress(PassTimes* times = nullptr);
  // `passes` progress passes with nothing to do.
  PassFigures idle(int passes);
  // Keeps the first error of the run.
  void note(const xport::Status& s);
  void note(const std::string& error, const std::string& code);

  // Starts the hosts and sends each its HELLO (`hello` plus its share); collects READY.
  xport::Status start_hosts(const std::string& hello);
  // Before the peers open (after start_hosts), and after.
  void costs_before();
  void costs_after();
  // Parses the OPENED answers: opened count, the failed initiators, the slowest open.
  std::vector<bool> opened(const std::vector<std::string>& lines);
  // The initiators' counters, then goodbye; `ended` false when the in-process thread did not
  // end (the run then leaves with _Exit).
  void finish();
  bool ended = true;
};

// Bytes registered with the provider that Stats shows: the caller's Regions and the channel
// pool's bounce buffers (the device's own endpoints' are xport::device_registered_bytes()).
uint64_t library_registered(const xport::Stats& s);

xport::Status run_one_sided(Target& t);
xport::Status run_two_sided(Target& t);

}  // namespace scale
