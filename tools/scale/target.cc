// One run of xport-scale (target.hpp): opens the target device, lets the mode measure, and
// prints the record, whatever failed on the way.
#include "target.hpp"

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace scale {

using namespace xport;

void Target::progress(PassTimes* times) {
  const uint64_t t0 = times ? now_ns() : 0;
  Status s = dev->progress();
  if (times) times->add(now_ns() - t0);
  if (!s.ok() && progress_error.ok()) progress_error = s.with_context("target progress");
}

PassFigures Target::idle(int passes) {
  PassTimes times;
  for (int i = 0; i < passes; ++i) progress(&times);
  return {times.count(), times.mean_us(), times.percentile_us(0.5), times.percentile_us(0.99),
          times.max_us()};
}

namespace {

// A figure's growth between two fields of an answer.
int64_t grown(const std::vector<std::string>& w, const char* before, const char* after) {
  return static_cast<int64_t>(field_u64(w, after)) - static_cast<int64_t>(field_u64(w, before));
}

}  // namespace

void Target::note(const Status& s) {
  if (!s.ok()) note(one_line(s.to_string()), code_name(s.code()));
}

void Target::note(const std::string& error, const std::string& code) {
  if (rec.error.empty() && !error.empty()) {
    rec.error = error;
    rec.error_code = code;
  }
}

Status Target::start_hosts(const std::string& hello) {
  XPORT_ASSIGN_OR_RETURN(hosts, Hosts::start(opt, n));
  for (size_t h = 0; h < hosts->size(); ++h) {
    XPORT_RETURN_IF_ERROR(hosts->send(h, hello + " first=" + std::to_string(hosts->share(h).first) +
                                             " count=" + std::to_string(hosts->share(h).count)));
  }
  // Opening N devices is one phase.
  XPORT_ASSIGN_OR_RETURN(auto lines, hosts->expect_all("READY", phase_with_grace()));
  uint64_t devices = 0, reg = 0;
  int64_t rss = 0;  // (memory can shrink while devices open: signed)
  for (const auto& line : lines) {
    const auto w = words(line);
    devices += field_u64(w, "devices");
    rss += grown(w, "rss0", "rss1");
    reg += field_u64(w, "reg");
    note(error_of(line), field(w, "code"));
  }
  rec.devices = devices;
  if (devices > 0) {
    rec.initiator_rss_per_device = static_cast<double>(rss) / static_cast<double>(devices);
    rec.initiator_reg_per_device = static_cast<double>(reg) / static_cast<double>(devices);
  }
  return Status();
}

uint64_t library_registered(const Stats& s) { return s.registered_bytes + s.pool.registered_bytes; }

void Target::costs_before() {
  rec.target_rss_before = resident_bytes();
  rec.target_reg_before = library_registered(dev->stats());
}

void Target::costs_after() {
  rec.target_rss_after = resident_bytes();
  const Stats s = dev->stats();
  rec.target_reg_after = library_registered(s);
  rec.costs_measured = true;
  rec.window_streams = s.window_streams;
  rec.peer_count = s.peers;
  rec.pool_channels = s.pool.channels;
  rec.cqs = s.cqs.size();
  rec.endpoints = s.endpoints.size();
  rec.shards = s.rails.empty() ? 0 : s.rails[0].shards;
}

std::vector<bool> Target::opened(const std::vector<std::string>& lines) {
  std::vector<bool> live(n, true);
  int64_t grew = 0, reg = 0;
  for (const auto& line : lines) {
    const auto w = words(line);
    rec.opened += field_u64(w, "ok");
    reg += grown(w, "reg0", "reg");
    const double ms = static_cast<double>(field_u64(w, "max_us")) / 1e3;
    if (ms >= rec.open_ms_max) {
      rec.open_ms_max = ms;
      rec.open_slowest_peer = field_u64(w, "slowest");
    }
    grew += grown(w, "rss0", "rss");
    for (size_t i : parse_index_list(field(w, "bad"))) {
      if (i < n) live[i] = false;
    }
    note(error_of(line), field(w, "code"));
  }
  if (rec.opened > 0) {
    rec.initiator_rss_per_peer_open = static_cast<double>(grew) / static_cast<double>(rec.opened);
    rec.initiator_reg_per_peer_open = static_cast<double>(reg) / static_cast<double>(rec.opened);
  }
  return live;
}

void Target::finish() {
  auto tick = [this] { progress(); };
  Status sent = hosts->send_all("STATS");
  auto lines = sent.ok() ? hosts->expect_all("STATS", phase_with_grace(), tick)
                         : Result<std::vector<std::string>>(sent);
  if (lines.ok()) {
    for (const auto& line : *lines) {
      const auto w = words(line);
      rec.initiator_ops_held += field_u64(w, "held");
      rec.initiator_deferred_posts += field_u64(w, "deferred");
    }
  } else {
    note(lines.status());
  }
  Status err;
  ended = hosts->stop(phase_with_grace(), &err, tick);
  note(err.with_context("closing"));
  // Each step's distinct errors, summed over the hosts (errors that differ only in their
  // numbers are one kind, named by the words of its first initiator).
  for (const auto& line : hosts->take_notes()) {
    const auto w = words(line);
    const std::string step = field(w, "step"), text = error_of(line);
    auto it = std::find_if(rec.errors.begin(), rec.errors.end(), [&](const ErrorKind& e) {
      return e.step == step && error_shape(e.text) == error_shape(text);
    });
    if (it == rec.errors.end()) {
      rec.errors.push_back({step, field(w, "code"), text, 0, field_u64(w, "first")});
      it = rec.errors.end() - 1;
    }
    it->count += field_u64(w, "count");
    if (field_u64(w, "first") < it->first_peer) {
      it->first_peer = field_u64(w, "first");
      it->text = text;
    }
  }
  if (ended) hosts.reset();
}

namespace {

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

}  // namespace

int run_target(const Options& opt) {
  // A host that died must not take the run with it when we write to its pipe.
  ::signal(SIGPIPE, SIG_IGN);
  Target t;
  t.opt = opt;
  t.n = opt.peers[0];
  Record& r = t.rec;
  r.mode = opt.mode;
  r.peers = t.n;
  r.procs = opt.procs;
  r.threads = opt.threads;
  r.size = opt.size;
  r.rounds = rounds_of(opt);
  r.knobs = changed_knobs();
  r.cq_entries = knob_value("XPORT_CQ_ENTRIES");
  r.window_credits = knob_value("XPORT_WINDOW_CREDITS");
  Status s = [&]() -> Status {
    ContextOptions co;
    co.provider = opt.provider;
    co.peers_on_host = true;
    XPORT_ASSIGN_OR_RETURN(t.ctx, Context::open(co));
    r.provider = t.ctx->provider().caps.provider;
    DeviceOptions d;
    d.rails = opt.nics;
    XPORT_ASSIGN_OR_RETURN(t.dev, t.ctx->open_device(d));
    return Status();
  }();
  if (s.ok()) {
    r.rails = join(t.dev->rails(), "+");
    r.model_registered = device_registered_bytes(t.dev->rails().size(), r.provider);
    r.progress_alone = t.idle(opt.idle_passes);
    s = opt.mode == Mode::one_sided ? run_one_sided(t) : run_two_sided(t);
  }
  t.note(s);
  t.note(t.progress_error);
  if (t.hosts && t.ended) t.finish();
  print_record(r, opt.json);
  const int rc = r.ok() ? kExitOk : kExitFailed;
  if (!t.ended) std::_Exit(rc);  // a thread still inside the library: no destructors
  return rc;
}

}  // namespace scale
