// Starting, driving and stopping xport-scale's initiator hosts (hosts.hpp).
#include "hosts.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "common.hpp"
#include "initiators.hpp"

namespace scale {

using xport::Code;
using xport::Deadline;
using xport::Result;
using xport::Status;

Result<std::unique_ptr<Hosts>> Hosts::start(const Options& opt, size_t peers) {
  auto h = std::unique_ptr<Hosts>(new Hosts());
  h->opt_ = opt;
  const size_t n = opt.procs == 0 ? 1 : std::min(static_cast<size_t>(opt.procs), peers);
  for (size_t k = 0; k < n; ++k) {
    const size_t first = k * peers / n, end = (k + 1) * peers / n;
    h->shares_.push_back({first, end - first});
  }
  if (opt.procs > 0) {
    for (size_t k = 0; k < n; ++k) {
      bench::LineChannel ch;
      XPORT_ASSIGN_OR_RETURN(pid_t pid,
                             bench::spawn_peer(child_args(opt, "initiators", peers), &ch));
      h->pids_.push_back(pid);
      h->channels_.push_back(std::move(ch));
    }
    return h;
  }
  // In this process: the same host code on a thread, over a pair of pipes.
  int to_host[2], from_host[2];
  if (::pipe2(to_host, O_CLOEXEC) != 0) return Status(Code::resource, "pipe");
  if (::pipe2(from_host, O_CLOEXEC) != 0) {
    ::close(to_host[0]);
    ::close(to_host[1]);
    return Status(Code::resource, "pipe");
  }
  h->channels_.emplace_back(from_host[0], to_host[1]);
  const int in = to_host[0], out = from_host[1];
  h->thread_done_ = std::make_shared<std::atomic<bool>>(false);
  h->thread_ = std::thread([done = h->thread_done_, in, out, opt] {
    {
      bench::LineChannel ch(in, out);
      (void)run_initiators(ch, opt);
    }                                              // the pipes close here: the target reads the end
    done->store(true, std::memory_order_release);  // last: stop() joins only after this
  });
  return h;
}

Hosts::~Hosts() {
  channels_.clear();  // a host still reading sees the end and leaves
  for (pid_t p : pids_) {
    if (p > 0) (void)bench::reap_peer(p, 5);
  }
  if (thread_.joinable()) thread_.detach();  // only after stop() said it could not end
}

size_t Hosts::owner(size_t peer) const {
  for (size_t h = 0; h < shares_.size(); ++h) {
    if (peer < shares_[h].first + shares_[h].count) return h;
  }
  return shares_.size() - 1;
}

std::string Hosts::name(size_t h) const {
  const std::string range = "initiators " + std::to_string(shares_[h].first) + ".." +
                            std::to_string(shares_[h].first + shares_[h].count - 1);
  return pids_.empty() ? range + " (thread)"
                       : range + " (process " + std::to_string(pids_[h]) + ")";
}

std::vector<std::string> Hosts::take_notes() {
  std::vector<std::string> out;
  out.swap(notes_);
  return out;
}

Status Hosts::send(size_t h, const std::string& line) {
  Status s = channels_[h].send(line);
  return s.ok() ? s : s.with_context(name(h));
}

Status Hosts::send_all(const std::string& line) {
  for (size_t h = 0; h < channels_.size(); ++h) XPORT_RETURN_IF_ERROR(send(h, line));
  return Status();
}

Result<std::string> Hosts::poll_line(size_t h) {
  auto r = channels_[h].recv(Deadline::now());
  if (r.ok()) return r;
  if (r.status().code() == Code::timeout) return std::string();
  return Status(r.status().code(),
                name(h) + ": " + r.status().message() + " (its error is above, if any)");
}

Result<std::string> Hosts::expect(size_t h, const std::string& prefix, Deadline deadline,
                                  const std::function<void()>& tick) {
  for (;;) {
    XPORT_ASSIGN_OR_RETURN(std::string line, next_line(h, prefix, deadline, tick));
    if (line.rfind("NOTE ", 0) == 0) {  // the distinct errors of the step, before its answer
      notes_.push_back(line);
      continue;
    }
    // The answer to a step the target gave up on (its deadline passed first) comes late: skip.
    bool stale = false;
    for (const char* a : {"OPENED", "DONE", "PONG", "SENT", "STATS"}) {
      stale = stale || (line.rfind(a, 0) == 0 && prefix.rfind(a, 0) != 0);
    }
    if (!stale) return line;
  }
}

Result<std::string> Hosts::next_line(size_t h, const std::string& prefix, Deadline deadline,
                                     const std::function<void()>& tick) {
  std::string line;
  if (tick) {
    // The pipe is looked at every 20 µs; the device is driven in between.
    uint64_t next = 0;
    while (line.empty()) {
      if (now_ns() >= next) {
        XPORT_ASSIGN_OR_RETURN(line, poll_line(h));
        if (!line.empty()) break;
        next = now_ns() + 20000;
        if (deadline.expired()) {
          return Status(Code::timeout, name(h) + ": no '" + prefix + "' answer in time");
        }
      }
      tick();
    }
  } else {
    auto r = channels_[h].recv(deadline);
    if (!r.ok() && r.status().code() == Code::timeout) {
      return Status(Code::timeout, name(h) + ": no '" + prefix + "' answer in time");
    }
    if (!r.ok()) return Status(r.status().code(), name(h) + ": " + r.status().message());
    line = *r;
  }
  if (line.rfind("NOTE ", 0) == 0) return line;  // expect() keeps it
  if (line.rfind("FAIL", 0) == 0) {
    return Status(Code::internal, name(h) + ": " + error_of(line));
  }
  if (line.rfind(prefix, 0) != 0) {
    return Status(Code::protocol,
                  name(h) + ": expected '" + prefix + "', got '" + line.substr(0, 60) + "'");
  }
  return line;
}

Result<std::vector<std::string>> Hosts::expect_all(const std::string& prefix, Deadline deadline,
                                                   const std::function<void()>& tick) {
  std::vector<std::string> out;
  for (size_t h = 0; h < channels_.size(); ++h) {
    XPORT_ASSIGN_OR_RETURN(std::string line, expect(h, prefix, deadline, tick));
    out.push_back(std::move(line));
  }
  return out;
}

bool Hosts::stop(Deadline deadline, Status* error, const std::function<void()>& tick) {
  for (size_t h = 0; h < channels_.size(); ++h) {
    Status s = send(h, "BYE");
    if (s.ok()) s = expect(h, "BYE", deadline, tick).status();
    if (!s.ok() && error->ok()) *error = s;
  }
  channels_.clear();
  const int left_s = static_cast<int>(
      std::chrono::duration_cast<std::chrono::seconds>(deadline.remaining()).count());
  for (pid_t& p : pids_) {
    Status s = bench::reap_peer(p, std::max(1, left_s));
    if (!s.ok() && error->ok()) *error = s.with_context("initiator process");
    p = -1;
  }
  if (!thread_.joinable()) return true;
  // The thread ends once its pipes are closed: wait for that, within the deadline.
  while (!thread_done_->load(std::memory_order_acquire) && !deadline.expired()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // bounded by the deadline
  }
  if (!thread_done_->load(std::memory_order_acquire)) {
    if (error->ok()) *error = Status(Code::timeout, "the initiators' thread did not end in time");
    return false;
  }
  thread_.join();
  return true;
}

}  // namespace scale
