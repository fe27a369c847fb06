// One xport-scale measurement (one N) and how it is printed: a JSON Lines object or a table row,
// each written and flushed as soon as it is measured. Fields: docs/tools.md, "xport-scale".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "options.hpp"

namespace scale {

// Durations of the target's Device::progress() calls in one state (µs; -1: not measured).
struct PassFigures {
  uint64_t passes = 0;
  double mean_us = -1, p50_us = -1, p99_us = -1, max_us = -1;
};

// Two-sided: the messages of one size.
struct SendFigures {
  size_t size = 0;
  int rounds = 0;         // rounds done: a message from every connected initiator each
  double seconds = -1;    // their time, from the first command to the last verified message
  uint64_t messages = 0;  // messages verified
};

// Initiators that failed the same way in one step: "device" (opening), "open", "connect",
// "round", "send".
struct ErrorKind {
  std::string step, code, text;
  uint64_t count = 0;
  size_t first_peer = 0;
};

struct Record {
  Mode mode = Mode::one_sided;
  size_t peers = 0;
  std::string provider, rails;
  int procs = 0, threads = 1;
  size_t size = 0;  // one-sided
  int rounds = 0;   // asked for

  // Opening: windows (one-sided) or communicators (two-sided).
  size_t devices = 0;  // initiator devices that opened
  size_t opened = 0;
  double open_s = -1;             // from the command to the last window (comm) opened or refused
  double open_ms_max = -1;        // the slowest single open
  std::string error;              // the first error, as the library worded it ("" when none)
  std::string error_code;         // its code ("resource", "timeout", ...)
  std::vector<ErrorKind> errors;  // every distinct failure of the initiators, counted
  size_t open_slowest_peer = 0;   // which initiator's open was the slowest

  // One-sided traffic.
  int rounds_done = 0;
  double rounds_s = -1, round_ms_max = -1;
  std::vector<double> latencies_us;  // put_signal issued -> the target sees its signal word
  size_t latency_peers = 0;
  // Two-sided traffic.
  std::vector<SendFigures> sends;
  // What was checked at the target: bytes compared, signal words seen at their exact value
  // (messages for two-sided), and what was wrong or missing.
  uint64_t bytes_verified = 0, signals_verified = 0, bad = 0;

  PassFigures progress_alone;    // the target device before any peer
  PassFigures progress_idle;     // with every peer open, no traffic
  PassFigures progress_serving;  // during the rounds

  // Cost at the target (its process alone with --procs): before the peers and after.
  uint64_t target_rss_before = 0, target_rss_after = 0;
  uint64_t target_reg_before = 0, target_reg_after = 0;  // Regions + channel pool buffers
  bool costs_measured = false;                           // the "after" figures were taken
  uint64_t model_registered = 0;  // xport::device_registered_bytes(rails, provider)
  uint64_t window_streams = 0, peer_count = 0, pool_channels = 0, cqs = 0, endpoints = 0;
  uint64_t shards = 0;  // the target's endpoint shards on its first rail
  uint64_t deferred_posts = 0, signals_applied = 0;
  // Window credits after the traffic: the CQ room the initiators' streams hold at the target
  // (Stats::window_cq_room), those waiting for room, and the unused credits taken back.
  uint64_t window_cq_room = 0, streams_waiting = 0, take_backs = 0;
  std::string cq_entries, window_credits;  // the knobs in effect
  // Cost per initiator device (its process's VmRSS growth while its devices opened, and the
  // registered bytes of a device as opened), and initiators' counters after the traffic.
  double initiator_rss_per_device = -1, initiator_reg_per_device = -1;
  double initiator_rss_per_peer_open = -1;  // ... growth of its process as its windows opened
  double initiator_reg_per_peer_open = -1;  // ... and of its devices' registered bytes
  uint64_t initiator_ops_held = 0, initiator_deferred_posts = 0;
  std::vector<std::pair<std::string, std::string>> knobs;  // differing from their defaults

  bool verified() const;  // everything that was sent arrived, every check passed
  bool ok() const;        // every window (comm) opened, every round done, verified()
};

// The knobs in effect that differ from their defaults: name, "value (default d)".
std::vector<std::pair<std::string, std::string>> changed_knobs();
std::string knob_value(const std::string& name);

// Table header (version, settings, knobs, column names): printed once, before the rows.
void print_header(const Options& opt, const std::string& provider, uint64_t device_registered);
void print_record(const Record& r, bool json);

}  // namespace scale
