// The operations xport-bench measures (ops.hpp): send ping-pong and streaming, put, get; the
// control messages that frame a point.
#include "ops.hpp"

#include "pattern.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <deque>

namespace bench {

using namespace xport;
using Clock = std::chrono::steady_clock;

namespace {

// ---- control messages: fixed size, both sides of one build ----

enum class CtlType : uint32_t { point = 1, sync, verify, fill, end, bye, reply };
constexpr uint32_t kMagic = 0x58424e31;  // "XBN1"
struct Ctl {
  uint32_t magic = kMagic;
  CtlType type = CtlType::reply;
  uint32_t op = 0, check = 0;
  uint32_t shape = 0;  // point: kRoundTrip | kDevice | scope << 8
  uint32_t reserved = 0;
  uint64_t size = 0, warmup = 0, iterations = 0, depth = 0, slots = 0;
  uint64_t first = 0, count = 0;  // verify / fill: iterations [first, first+count) in slots 0..
  uint64_t bad = 0, bad_iteration = 0, bad_offset = 0;  // reply
  int64_t corrupt = -1;                                 // point: Plan::corrupt
};
static_assert(sizeof(Ctl) <= 128);
constexpr uint32_t kRoundTrip = 1, kDevice = 2;

Status send_ctl(Session& s, const Ctl& c) {
  std::memcpy(s.ctl + 128, &c, sizeof(c));
  XPORT_ASSIGN_OR_RETURN(Request r, s.tx[0]->isend(s.ctl + 128, sizeof(c), s.ctl_region));
  return s.tx[0]->wait(r, s.deadline()).status();
}
Result<Ctl> recv_ctl(Session& s) {
  XPORT_ASSIGN_OR_RETURN(Request r, s.rx[0]->irecv(s.ctl, 128, s.ctl_region));
  XPORT_ASSIGN_OR_RETURN(size_t n, s.rx[0]->wait(r, s.deadline()));
  Ctl c;
  std::memcpy(&c, s.ctl, sizeof(c));
  if (n != sizeof(Ctl) || c.magic != kMagic) {
    return Status(Code::protocol,
                  "control message of " + std::to_string(n) +
                      " bytes is not xport-bench's (the peer runs another version?)");
  }
  return c;
}
Result<Ctl> ask(Session& s, const Ctl& c) {
  XPORT_RETURN_IF_ERROR(send_ctl(s, c));
  XPORT_ASSIGN_OR_RETURN(Ctl r, recv_ctl(s));
  if (r.type != CtlType::reply) return Status(Code::protocol, "expected a reply from the peer");
  return r;
}

}  // namespace

size_t pong_offset(const Plan& p) {
  const size_t slots = p.size * static_cast<size_t>(p.slots);
  return (slots + 4095) / 4096 * 4096;
}

namespace {

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}
double secs_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ---- send: ping-pong for latency (and, at depth 1, bandwidth); streaming at depth > 1 ----

Result<Measured> send_initiate(Session& s, const Plan& p) {
  Measured m;
  const int n = p.warmup + p.iterations;
  m.lat_us.reserve(static_cast<size_t>(p.iterations));
  // One clock read per round trip (each iteration's end is the next one's start) and a deadline
  // refreshed every 1024 iterations: per-iteration clock reads would add a few percent to an
  // 8-byte round trip that the bare loop, which we are compared with, does not pay.
  // Pings go from the first slot, pongs land past pong_offset, as the bare loop keeps separate
  // send and receive buffers: sending from the buffer the peer just wrote would first pull
  // every line back from the other core's cache (1 MiB on shm: ~120 us a write instead of
  // ~50). The receive of round trip i + 1 is posted once ping i is out, while its pong travels
  // (the bare loop keeps its receives posted likewise): no receive is posted between a pong's
  // arrival and the next ping. Both receives name the same buffer, as the bare loop's do: pong
  // i + 1 cannot come before ping i + 1, which goes out once pong i was read.
  uint8_t* const ping = s.buf;
  uint8_t* const pong = s.buf + pong_offset(p);
  Clock::time_point start = Clock::now();
  Clock::time_point t0 = start;
  Deadline dl = s.deadline();
  XPORT_ASSIGN_OR_RETURN(Request rx, s.rx[s.comm_of(0)]->irecv(pong, p.size, s.data));
  for (int i = 0; i < n; ++i) {
    if (i % 1024 == 0) dl = s.deadline();
    if (p.gap_us > 0) {  // idle, not measured: the round trip starts after the gap
      const auto until = Clock::now() + std::chrono::microseconds(p.gap_us);
      while (Clock::now() < until) {
      }
      t0 = Clock::now();
    }
    if (p.check) XPORT_RETURN_IF_ERROR(fill_at(s, p, 0, seed_of(p.size, i, kPing), i));
    SendComm& tx_comm = *s.tx[s.comm_of(i)];  // round trip i: comm i % comms, both ways
    RecvComm& rx_comm = *s.rx[s.comm_of(i)];
    XPORT_ASSIGN_OR_RETURN(Request tx, tx_comm.isend(ping, p.size, s.data));
    Request next{};
    if (i + 1 < n) {
      XPORT_ASSIGN_OR_RETURN(next, s.rx[s.comm_of(i + 1)]->irecv(pong, p.size, s.data));
    }
    XPORT_RETURN_IF_ERROR(tx_comm.wait(tx, dl).status());
    XPORT_ASSIGN_OR_RETURN(size_t got, rx_comm.wait(rx, dl));
    rx = next;
    const auto t1 = Clock::now();
    if (i == p.warmup) start = t0;
    if (i >= p.warmup) {  // one way, as the bare loop
      m.lat_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 2);
    }
    t0 = t1;
    if (got != p.size) return Status(Code::protocol, "pong of " + std::to_string(got) + " bytes");
    if (p.check) {
      XPORT_ASSIGN_OR_RETURN(size_t off,
                             verify_at(s, pong_offset(p), p.size, seed_of(p.size, i, kPong)));
      if (off < p.size) return check_failed(p, i, off, "initiator");
    }
  }
  if (p.depth == 1) {  // both directions of the ping-pong count
    m.phase_start = start;
    m.phase_end = Clock::now();
    m.seconds = m.wall_seconds = std::chrono::duration<double>(m.phase_end - start).count();
    m.messages = 2.0 * p.iterations;
    m.bytes = m.messages * static_cast<double>(p.size);
    return m;
  }
  std::deque<std::pair<Request, size_t>> inflight;  // and its comm
  const size_t window = static_cast<size_t>(std::min(p.depth, p.slots));
  auto finish_oldest = [&]() -> Status {
    auto [r, c] = inflight.front();
    inflight.pop_front();
    return s.tx[c]->wait(r, s.deadline()).status();
  };
  for (int i = 0; i < n; ++i) {
    if (i == p.warmup) start = Clock::now();
    while (inflight.size() >= window) XPORT_RETURN_IF_ERROR(finish_oldest());
    uint8_t* b = s.buf + static_cast<size_t>(i % p.slots) * p.size;
    if (p.check) {
      XPORT_RETURN_IF_ERROR(fill_at(s, p, static_cast<size_t>(b - s.buf),
                                    seed_of(p.size, i, kStream), UINT64_MAX));
    }
    const size_t c = s.comm_of(i);
    for (;;) {
      auto r = s.tx[c]->isend(b, p.size, s.data);
      if (r.ok()) {
        inflight.emplace_back(*r, c);
        break;
      }
      // XPORT_MAX_REQUESTS sends outstanding: finish the oldest, then retry.
      if (r.status().code() != Code::again || inflight.empty()) return r.status();
      XPORT_RETURN_IF_ERROR(finish_oldest());
    }
  }
  while (!inflight.empty()) XPORT_RETURN_IF_ERROR(finish_oldest());
  Ctl sync;
  sync.type = CtlType::sync;  // the target has received everything when it answers
  XPORT_RETURN_IF_ERROR(ask(s, sync).status());
  m.phase_start = start;
  m.phase_end = Clock::now();
  m.seconds = m.wall_seconds = std::chrono::duration<double>(m.phase_end - start).count();
  m.messages = p.iterations;
  m.bytes = m.messages * static_cast<double>(p.size);
  return m;
}

Status send_serve(Session& s, const Plan& p, Mismatch* bad) {
  const int n = p.warmup + p.iterations;
  Deadline dl = s.deadline();
  // Pings land in the first slot, pongs go from pong_offset (as in send_initiate: separate
  // receive and send buffers). Two receives are posted ahead, as the bare loop keeps its
  // receives posted: ping i + 1's was posted a round trip before it comes (a large one finds
  // its clear-to-send instead of asking for it first), and pong i goes out before ping i + 2's
  // receive is posted. Both name the same buffer, as the bare loop's do: ping i + 1 cannot
  // come before pong i, which goes out once ping i was read. Round trip i on comm i % comms,
  // as the initiator sends it.
  uint8_t* const ping = s.buf;
  uint8_t* const pong = s.buf + pong_offset(p);
  std::array<Request, 2> rx{};
  for (int i = 0; i < std::min(n, 2); ++i) {
    XPORT_ASSIGN_OR_RETURN(rx[i % 2], s.rx[s.comm_of(i)]->irecv(ping, p.size, s.data));
  }
  for (int i = 0; i < n; ++i) {
    if (i % 1024 == 0) dl = s.deadline();  // as in send_initiate: no clock read per message
    const size_t c = s.comm_of(i);
    XPORT_ASSIGN_OR_RETURN(size_t got, s.rx[c]->wait(rx[i % 2], dl));
    if (p.check) {
      XPORT_ASSIGN_OR_RETURN(size_t off, verify_at(s, 0, p.size, seed_of(p.size, i, kPing)));
      if (got != p.size || off < p.size) bad->note(i, std::min(off, got));
      XPORT_RETURN_IF_ERROR(
          fill_at(s, p, pong_offset(p), seed_of(p.size, i, kPong), UINT64_MAX));
    }
    XPORT_ASSIGN_OR_RETURN(Request tx, s.tx[c]->isend(pong, p.size, s.data));
    if (i + 2 < n) {
      XPORT_ASSIGN_OR_RETURN(rx[i % 2],
                             s.rx[s.comm_of(i + 2)]->irecv(ping, p.size, s.data));
    }
    XPORT_RETURN_IF_ERROR(s.tx[c]->wait(tx, dl).status());
  }
  if (p.depth == 1) return Status();
  std::deque<std::pair<Request, int>> posted;
  const size_t window = static_cast<size_t>(std::min(p.depth, p.slots));
  int next = 0;
  for (int done = 0; done < n; ++done) {
    while (next < n && posted.size() < window) {
      uint8_t* b = s.buf + static_cast<size_t>(next % p.slots) * p.size;
      auto r = s.rx[s.comm_of(next)]->irecv(b, p.size, s.data);
      if (!r.ok() && r.status().code() == Code::again && !posted.empty()) break;
      if (!r.ok()) return r.status();
      posted.emplace_back(*r, next++);
    }
    auto [req, i] = posted.front();
    posted.pop_front();
    XPORT_ASSIGN_OR_RETURN(size_t got, s.rx[s.comm_of(i)]->wait(req, s.deadline()));
    if (p.check) {
      XPORT_ASSIGN_OR_RETURN(size_t off, verify_at(s, static_cast<size_t>(i % p.slots) * p.size,
                                                   p.size, seed_of(p.size, i, kStream)));
      if (got != p.size || off < p.size) bad->note(i, std::min(off, got));
    }
  }
  return Status();
}

// ---- put and get: latency = one op + quiet; bandwidth = `depth` ops per quiet ----

}  // namespace

Status stage_pings(Session& s, const Plan& p, uint64_t first, int count) {
  if (!p.check) return Status();
  for (int k = 0; k < count; ++k) {
    XPORT_RETURN_IF_ERROR(fill_at(s, p, static_cast<size_t>(k) * p.size,
                                  seed_of(p.size, first + k, kPing), first + k));
  }
  return Status();
}

Status verify_at_target(Session& s, const Plan& p, uint64_t first, int count) {
  if (!p.check) return Status();
  Ctl c;
  c.type = CtlType::verify;
  c.first = first;
  c.count = static_cast<uint64_t>(count);
  XPORT_ASSIGN_OR_RETURN(Ctl r, ask(s, c));
  if (r.bad) return check_failed(p, r.bad_iteration, r.bad_offset, "target");
  return Status();
}

namespace {

// Issues one operation on window `w`; with every context of the window in flight, or the
// staging pool of GPU sources full (Code::again), it finishes them with a quiet and issues once
// more.
template <typename F>
Status issue_draining(Session& s, Window& w, F&& issue) {
  Status st = issue();
  if (st.code() == Code::again) {
    XPORT_RETURN_IF_ERROR(w.quiet(s.deadline()));
    st = issue();
  }
  return st;
}

// Operation `it` of a point goes on the window of comm it % comms; a batch ends with a quiet of
// every window (a window with nothing issued returns at once).
Window& window_of(Session& s, uint64_t it) { return *s.win[s.comm_of(it)]; }
Status quiet_all(Session& s) {
  for (auto& w : s.win) XPORT_RETURN_IF_ERROR(w->quiet(s.deadline()));
  return Status();
}

// The rate phase's figures: `secs` spent issuing and waiting, the wall clock since `phase`.
void finish_rate(Measured& m, const Plan& p, Clock::time_point phase, double secs,
                 double bytes_each) {
  m.seconds = secs;
  m.phase_start = phase;
  m.phase_end = Clock::now();
  m.wall_seconds = std::chrono::duration<double>(m.phase_end - phase).count();
  m.messages = p.iterations;
  m.bytes = m.messages * bytes_each;
}

template <bool kPut>
Result<Measured> one_sided_initiate(Session& s, const Plan& p) {
  Measured m;
  const int lat_n = std::min(p.iterations, kOneSidedLatencyIterations);
  uint64_t it = 0;  // transfers of this point so far: the pattern's iteration
  auto prepare = [&](uint64_t first, int count) -> Status {
    if (!p.check) return Status();
    if (kPut) {
      return stage_pings(s, p, first, count);
    }
    Ctl c;  // get: the target writes a fresh pattern into the slots we will read
    c.type = CtlType::fill;
    c.first = first;
    c.count = static_cast<uint64_t>(count);
    return ask(s, c).status();
  };
  auto confirm = [&](uint64_t first, int count) -> Status {
    if (!p.check) return Status();
    if (!kPut) {
      for (int k = 0; k < count; ++k) {
        XPORT_ASSIGN_OR_RETURN(size_t off, verify_at(s, static_cast<size_t>(k) * p.size, p.size,
                                                     seed_of(p.size, first + k, kGet)));
        if (off < p.size) return check_failed(p, first + k, off, "initiator");
      }
      return Status();
    }
    return verify_at_target(s, p, first, count);  // put: the target verifies its slots
  };
  auto issue = [&](Window& w, size_t slot) {
    const size_t off = slot * p.size;
    return (kPut ? w.put(s.data, off, s.remote, off, p.size)
                 : w.get(s.data, off, s.remote, off, p.size))
        .status();
  };
  for (int i = 0; i < p.warmup + lat_n; ++i, ++it) {
    XPORT_RETURN_IF_ERROR(prepare(it, 1));
    Window& w = window_of(s, it);
    const auto t0 = Clock::now();
    XPORT_RETURN_IF_ERROR(issue(w, 0));
    XPORT_RETURN_IF_ERROR(w.quiet(s.deadline()));
    if (i >= p.warmup) m.lat_us.push_back(us_since(t0));
    XPORT_RETURN_IF_ERROR(confirm(it, 1));
  }
  // Checked batches write distinct slots (their bytes must not overlap); unchecked ones may
  // reuse slots, so depth stays what was asked for.
  const int batch_max = p.check ? std::min(p.depth, p.slots) : p.depth;
  double secs = 0;
  const auto phase = Clock::now();
  if (p.sliding) {
    // --sliding (never with --check): `depth` operations in flight; each new one waits for the
    // oldest to be locally complete (fi-bare-loop's window); one quiet ends the phase. The
    // first --warmup operations are not timed: issued the same way, then quieted before the
    // clock starts, as fi-bare-loop's warm-up writes end with an acknowledgement. The deadline
    // is refreshed every 1024 operations (as in send_initiate): the bare loop reads no clock
    // per write.
    std::vector<std::pair<Window*, Ticket>> ring(static_cast<size_t>(p.depth));
    auto t0 = Clock::now();
    Deadline dl = s.deadline();
    Clock::duration in_calls{}, in_waits{};  // --time-calls, timed operations only
    for (int i = 0; i < p.warmup + p.iterations; ++i, ++it) {
      if (i == p.warmup && p.warmup > 0) {
        XPORT_RETURN_IF_ERROR(quiet_all(s));
        t0 = Clock::now();
      }
      if (i % 1024 == 0) dl = s.deadline();
      const bool timed = p.time_calls && i >= p.warmup;
      auto& [ow, ot] = ring[static_cast<size_t>(i) % ring.size()];
      const auto w0 = timed ? Clock::now() : Clock::time_point{};
      if (ow != nullptr) XPORT_RETURN_IF_ERROR(ow->wait_local(ot, dl));
      Window& w = window_of(s, it);
      const size_t off = static_cast<size_t>(i % p.slots) * p.size;
      const auto c0 = timed ? Clock::now() : Clock::time_point{};
      Result<Ticket> t = kPut ? w.put(s.data, off, s.remote, off, p.size)
                              : w.get(s.data, off, s.remote, off, p.size);
      if (!t.ok() && t.status().code() == Code::again) {
        // (more in flight than the window or the staging pool holds: finish them, once more)
        XPORT_RETURN_IF_ERROR(w.quiet(dl));
        t = kPut ? w.put(s.data, off, s.remote, off, p.size)
                 : w.get(s.data, off, s.remote, off, p.size);
      }
      if (timed) {
        const auto c1 = Clock::now();
        in_waits += c0 - w0;
        in_calls += c1 - c0;
      }
      if (!t.ok()) return t.status();
      ow = &w;
      ot = *t;
    }
    XPORT_RETURN_IF_ERROR(quiet_all(s));
    finish_rate(m, p, phase, secs_since(t0), static_cast<double>(p.size));
    if (p.time_calls && p.iterations > 0) {
      const double n = static_cast<double>(p.iterations);
      m.call_ns = static_cast<double>(std::chrono::nanoseconds(in_calls).count()) / n;
      m.wait_ns = static_cast<double>(std::chrono::nanoseconds(in_waits).count()) / n;
    }
    return m;
  }
  for (int left = p.iterations; left > 0;) {
    const int batch = std::min(batch_max, left);
    XPORT_RETURN_IF_ERROR(prepare(it, batch));
    const auto t0 = Clock::now();
    for (int k = 0; k < batch; ++k) {
      Window& w = window_of(s, it + k);
      const auto slot = static_cast<size_t>(k % p.slots);
      XPORT_RETURN_IF_ERROR(issue_draining(s, w, [&] { return issue(w, slot); }));
    }
    XPORT_RETURN_IF_ERROR(quiet_all(s));
    secs += secs_since(t0);
    XPORT_RETURN_IF_ERROR(confirm(it, batch));
    it += static_cast<uint64_t>(batch);
    left -= batch;
  }
  finish_rate(m, p, phase, secs, static_cast<double>(p.size));
  return m;
}

// ---- put-signal: latency = one put_signal + quiet (data delivered, signal applied at the
// target); rate = `depth` put_signals per quiet. The signal word follows the slots. ----

Result<Measured> put_signal_initiate(Session& s, const Plan& p) {
  Measured m;
  const int lat_n = std::min(p.iterations, kOneSidedLatencyIterations);
  const size_t sig = pong_offset(p);  // page aligned, past every slot (buffer_bytes)
  uint64_t it = 0;
  // (with --check the target verifies its slots after each batch: the signal promised the data
  // was there)
  auto issue = [&](Window& w, size_t slot) {
    const size_t off = slot * p.size;
    return w.put_signal(s.data, off, s.remote, off, p.size, s.remote, sig, 1).status();
  };
  for (int i = 0; i < p.warmup + lat_n; ++i, ++it) {
    XPORT_RETURN_IF_ERROR(stage_pings(s, p, it, 1));
    Window& w = window_of(s, it);
    const auto t0 = Clock::now();
    XPORT_RETURN_IF_ERROR(issue(w, 0));
    XPORT_RETURN_IF_ERROR(w.quiet(s.deadline()));
    if (i >= p.warmup) m.lat_us.push_back(us_since(t0));
    XPORT_RETURN_IF_ERROR(verify_at_target(s, p, it, 1));
  }
  const int batch_max = p.check ? std::min(p.depth, p.slots) : p.depth;
  double secs = 0;
  const auto phase = Clock::now();
  for (int left = p.iterations; left > 0;) {
    const int batch = std::min(batch_max, left);
    XPORT_RETURN_IF_ERROR(stage_pings(s, p, it, batch));
    const auto t0 = Clock::now();
    for (int k = 0; k < batch; ++k) {
      const auto slot = static_cast<size_t>(k % p.slots);
      Window& w = window_of(s, it + k);
      XPORT_RETURN_IF_ERROR(issue_draining(s, w, [&] { return issue(w, slot); }));
    }
    XPORT_RETURN_IF_ERROR(quiet_all(s));
    secs += secs_since(t0);
    XPORT_RETURN_IF_ERROR(verify_at_target(s, p, it, batch));
    it += static_cast<uint64_t>(batch);
    left -= batch;
  }
  finish_rate(m, p, phase, secs, static_cast<double>(p.size));
  return m;
}

// ---- atomic: latency = one fetch_add round trip (wait_local: the old value is here); rate =
// `depth` fetch_adds per quiet. On the target's word after the slots, whatever the size; with
// --check every latency iteration's old value must be the previous one plus 1. ----

Result<Measured> atomic_initiate(Session& s, const Plan& p) {
  Measured m;
  const int lat_n = std::min(p.iterations, kOneSidedLatencyIterations);
  const size_t word = pong_offset(p);
  std::fprintf(stderr, "xport-bench: atomics %s\n",
               s.win[0]->native_atomics() ? "native (FI_ATOMIC)" : "emulated (target progress)");
  uint64_t last = 0;
  for (int i = 0; i < p.warmup + lat_n; ++i) {
    uint64_t old = 0;
    Window& w = window_of(s, static_cast<uint64_t>(i));
    const auto t0 = Clock::now();
    XPORT_ASSIGN_OR_RETURN(Ticket t, w.atomic(AtomicOp::fetch_add, s.remote, word, 1, 0, &old));
    XPORT_RETURN_IF_ERROR(w.wait_local(t, s.deadline()));
    if (i >= p.warmup) m.lat_us.push_back(us_since(t0));
    if (p.check && i > 0 && old != last + 1) {
      return Status(Code::protocol, "--check: fetch_add " + std::to_string(i) + " fetched " +
                                        std::to_string(old) + ", expected " +
                                        std::to_string(last + 1));
    }
    last = old;
  }
  std::vector<uint64_t> olds(static_cast<size_t>(std::max(p.depth, 1)));
  double secs = 0;
  const auto phase = Clock::now();
  uint64_t it = 0;
  for (int left = p.iterations; left > 0;) {
    const int batch = std::min(p.depth, left);
    const auto t0 = Clock::now();
    for (int k = 0; k < batch; ++k) {
      Window& w = window_of(s, it + static_cast<uint64_t>(k));
      XPORT_RETURN_IF_ERROR(issue_draining(s, w, [&] {
        return w.atomic(AtomicOp::fetch_add, s.remote, word, 1, 0, &olds[k]).status();
      }));
    }
    XPORT_RETURN_IF_ERROR(quiet_all(s));
    secs += secs_since(t0);
    it += static_cast<uint64_t>(batch);
    left -= batch;
  }
  finish_rate(m, p, phase, secs, 8.0);
  return m;
}

// ---- the table of operations: adding one is an initiator function and, if the target takes
// part in the data phase, a target function ----

struct OpImpl {
  Op op;
  Result<Measured> (*initiate)(Session&, const Plan&);
  Status (*serve)(Session&, const Plan&, Mismatch*);  // nullptr: control requests only
  const char* missing;                                // why it is unavailable, when it is
};
constexpr OpImpl kOps[] = {
    {Op::send, send_initiate, send_serve, nullptr},
    {Op::put, one_sided_initiate<true>, nullptr, nullptr},
    {Op::get, one_sided_initiate<false>, nullptr, nullptr},
    {Op::put_signal, put_signal_initiate, nullptr, nullptr},
    {Op::atomic, atomic_initiate, nullptr, nullptr},
};
const OpImpl& impl(Op op) {
  for (const auto& o : kOps) {
    if (o.op == op) return o;
  }
  return kOps[0];
}
// Round trips and --initiator device (put, put-signal) replace the op's functions.
auto initiator_of(const Plan& p) {
  if (p.device) return p.op == Op::put ? device_put_initiate : device_round_trip_initiate;
  return p.round_trip ? round_trip_initiate : impl(p.op).initiate;
}
auto server_of(const Plan& p) {
  if (p.round_trip) return p.device ? device_round_trip_serve : round_trip_serve;
  return impl(p.op).serve;
}

}  // namespace

Plan make_plan(const Options& opt, size_t size) {
  Plan p;
  p.op = opt.op;
  p.size = size;
  p.iterations = iterations_for(opt, size);
  p.warmup = warmup_for(opt, size);
  p.depth = depth_of(opt);
  // Checked batches need a slot per operation (their bytes must not overlap); unchecked puts and
  // gets cycle through --slots or kRateSlots whatever the depth; at most 64 MiB of them.
  const bool rate_slots = !opt.check && (opt.op == Op::put || opt.op == Op::get);
  const size_t want = opt.slots > 0 ? static_cast<size_t>(opt.slots)
                      : rate_slots  ? kRateSlots
                                    : static_cast<size_t>(p.depth);
  p.slots = static_cast<int>(std::clamp<size_t>(kSlotBytes / size, 1, want));
  p.check = opt.check;
  p.sliding = opt.sliding;
  p.time_calls = opt.time_calls;
  p.corrupt = opt.corrupt;
  p.gap_us = opt.gap_us;
  p.device = opt.device_initiator;
  p.round_trip = opt.op == Op::put_signal && (opt.round_trip || opt.device_initiator);
  p.scope = opt.device_scope;
  return p;
}

size_t buffer_bytes(const std::vector<Plan>& plans) {
  size_t b = 8;
  // (put-signal and atomic use the word at pong_offset: at least 8 bytes there; round trips
  // the `size` bytes there)
  for (const auto& p : plans) b = std::max(b, pong_offset(p) + std::max<size_t>(p.size, 8));
  return b;
}

bool op_available(Op op, std::string* why) {
  const OpImpl& o = impl(op);
  if (o.initiate != nullptr) return true;
  if (why != nullptr) *why = o.missing;
  return false;
}

Result<Measured> run_point(Session& s, const Plan& p) {
  const OpImpl& o = impl(p.op);
  if (o.initiate == nullptr) return Status(Code::unsupported, o.missing);
  const auto initiate = initiator_of(p);
  const bool word = p.op == Op::put_signal || p.op == Op::atomic;
  if (p.size * static_cast<size_t>(p.slots) > s.len || p.size > s.remote.length() ||
      (word && pong_offset(p) + std::max<size_t>(p.round_trip ? p.size : 0, 8) >
                   std::min<size_t>(s.len, s.remote.length()))) {
    return Status(Code::internal, "size " + std::to_string(p.size) + " does not fit the buffers");
  }
  Ctl c;
  c.type = CtlType::point;
  c.op = static_cast<uint32_t>(p.op);
  c.check = p.check;
  c.size = p.size;
  c.warmup = static_cast<uint64_t>(p.warmup);
  c.iterations = static_cast<uint64_t>(p.iterations);
  c.depth = static_cast<uint64_t>(p.depth);
  c.slots = static_cast<uint64_t>(p.slots);
  c.corrupt = p.corrupt;
  c.shape = (p.round_trip ? kRoundTrip : 0) | (p.device ? kDevice : 0) |
            (static_cast<uint32_t>(p.scope) << 8);
  XPORT_RETURN_IF_ERROR(send_ctl(s, c));
  if (p.round_trip) {
    // Round trips count signals from each side's word as the point starts: the target reads
    // its baseline, then says so; only then may the first signal go (it read 1 and waited for
    // 2 when the first ping came while it was still joining).
    XPORT_ASSIGN_OR_RETURN(Ctl ready, recv_ctl(s));
    if (ready.type != CtlType::reply) return Status(Code::protocol, "expected the target's ready");
    XPORT_ASSIGN_OR_RETURN(s.signals_seen, s.win[0]->read_signal(s.data, s.word_offset()));
  }
  auto m = initiate(s, p);
  if (!m.ok()) return m.status();
  Ctl end;
  end.type = CtlType::end;
  XPORT_ASSIGN_OR_RETURN(Ctl r, ask(s, end));
  if (r.bad) return check_failed(p, r.bad_iteration, r.bad_offset, "target");
  return m;
}

Status say_bye(Session& s) {
  Ctl c;
  c.type = CtlType::bye;
  return send_ctl(s, c);
}

Status serve_point(Session& s, bool* bye) {
  XPORT_ASSIGN_OR_RETURN(Ctl c, recv_ctl(s));
  *bye = c.type == CtlType::bye;
  if (*bye) return Status();
  if (c.type != CtlType::point) return Status(Code::protocol, "expected the start of a point");
  Plan p;
  p.op = static_cast<Op>(c.op);
  p.size = c.size;
  p.warmup = static_cast<int>(c.warmup);
  p.iterations = static_cast<int>(c.iterations);
  p.depth = static_cast<int>(c.depth);
  p.slots = static_cast<int>(c.slots);
  p.check = c.check != 0;
  p.corrupt = c.corrupt;
  p.round_trip = (c.shape & kRoundTrip) != 0;
  p.device = (c.shape & kDevice) != 0;
  p.scope = static_cast<int>(c.shape >> 8);
  if (p.size == 0 || p.slots < 1 || p.size * static_cast<size_t>(p.slots) > s.len ||
      (p.round_trip && pong_offset(p) + p.size > s.len)) {
    return Status(Code::protocol, "point of size " + std::to_string(p.size) + " x " +
                                      std::to_string(p.slots) + " does not fit the buffer");
  }
  if (p.round_trip) {
    XPORT_ASSIGN_OR_RETURN(s.signals_seen, s.win[0]->read_signal(s.data, s.word_offset()));
    XPORT_RETURN_IF_ERROR(send_ctl(s, Ctl{}));  // ready (a reply)
  }
  Mismatch bad;
  const auto serve = server_of(p);
  if (serve != nullptr) XPORT_RETURN_IF_ERROR(serve(s, p, &bad));
  for (;;) {
    XPORT_ASSIGN_OR_RETURN(Ctl r, recv_ctl(s));
    Ctl reply;
    if (r.type == CtlType::verify || r.type == CtlType::fill) {
      if (r.count > static_cast<uint64_t>(p.slots)) return Status(Code::protocol, "too many slots");
      for (uint64_t k = 0; k < r.count; ++k) {
        const size_t at = k * p.size;
        if (r.type == CtlType::fill) {
          XPORT_RETURN_IF_ERROR(fill_at(s, p, at, seed_of(p.size, r.first + k, kGet), r.first + k));
          continue;
        }
        // quiet() promises delivery; the bounded wait for late data stays as a safety margin
        // (driving progress) before calling it a mismatch.
        const Deadline late = Deadline::after(std::chrono::seconds(2));
        const uint64_t seed = seed_of(p.size, r.first + k, kPing);
        XPORT_ASSIGN_OR_RETURN(size_t off, verify_at(s, at, p.size, seed));
        while (off < p.size && !late.expired()) {
          XPORT_RETURN_IF_ERROR(s.dev.progress());
          XPORT_ASSIGN_OR_RETURN(off, verify_at(s, at, p.size, seed));
        }
        if (off < p.size) bad.note(r.first + k, off);
      }
      reply.bad = bad.bad;
      reply.bad_iteration = bad.iteration;
      reply.bad_offset = bad.offset;
    } else if (r.type == CtlType::end) {
      reply.bad = bad.bad;
      reply.bad_iteration = bad.iteration;
      reply.bad_offset = bad.offset;
    } else if (r.type != CtlType::sync) {
      return Status(Code::protocol, "unexpected control message in a point");
    }
    XPORT_RETURN_IF_ERROR(send_ctl(s, reply));
    if (r.type == CtlType::end) return Status();
  }
}

}  // namespace bench
