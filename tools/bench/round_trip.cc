// Host-initiated put_signal round trips (--op put-signal --round-trip): the initiator puts
// `size` bytes with a signal into the peer's word, the peer waits for it and puts the bytes back
// with a signal into the initiator's word, which waits for it. The shape the device round trips
// of device_ops.cc have, so the two compare like with like; with --memory cuda the data and the
// words are GPU memory (staged: the host's waits read the words' shadows, docs/semantics.md).
#include <algorithm>

#include "ops.hpp"
#include "pattern.hpp"

namespace bench {

using namespace xport;
using Clock = std::chrono::steady_clock;

namespace {

// Layout on both sides: the ping's bytes at 0, the echo's at pong_offset, the word at the
// session's word_offset.
Status put_signal_to(Session& s, size_t to, const Plan& p) {
  Window& w = *s.win[0];
  auto issue = [&] {
    return w.put_signal(s.data, 0, s.remote, to, p.size, s.remote, s.word_offset(), 1).status();
  };
  Status st = issue();
  if (st.code() == Code::again) {  // every context in flight: finish them, then once more
    XPORT_RETURN_IF_ERROR(w.quiet(s.deadline()));
    st = issue();
  }
  return st;
}

Status wait_next_signal(Session& s, Deadline dl) {
  XPORT_RETURN_IF_ERROR(s.win[0]->wait_signal(s.data, s.word_offset(), s.signals_seen + 1, dl));
  ++s.signals_seen;
  return Status();
}

}  // namespace

Result<Measured> round_trip_initiate(Session& s, const Plan& p) {
  Measured m;
  const int n = p.warmup + p.iterations;
  m.lat_us.reserve(static_cast<size_t>(p.iterations));
  const size_t pong = pong_offset(p);
  // One clock read per round trip, a deadline refreshed every 1024 (as the send ping-pong).
  Clock::time_point start = Clock::now();
  Clock::time_point t0 = start;
  Deadline dl = s.deadline();
  // A bad echo is named once the peer has had every round: it waits for each of them.
  Mismatch bad;
  for (int i = 0; i < n; ++i) {
    if (i % 1024 == 0) dl = s.deadline();
    if (p.check) {  // not measured
      XPORT_RETURN_IF_ERROR(fill_at(s, p, 0, seed_of(p.size, i, kPing), i));
      t0 = Clock::now();
    }
    XPORT_RETURN_IF_ERROR(put_signal_to(s, 0, p));
    XPORT_RETURN_IF_ERROR(wait_next_signal(s, dl));
    const auto t1 = Clock::now();
    if (i == p.warmup) start = t0;
    if (i >= p.warmup) {
      m.lat_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    t0 = t1;
    if (p.check) {  // the peer echoed our ping
      XPORT_ASSIGN_OR_RETURN(size_t off, verify_at(s, pong, p.size, seed_of(p.size, i, kPing)));
      if (off < p.size) bad.note(static_cast<uint64_t>(i), off);
    }
  }
  m.phase_start = start;
  m.phase_end = Clock::now();
  m.seconds = m.wall_seconds = std::chrono::duration<double>(m.phase_end - start).count();
  XPORT_RETURN_IF_ERROR(s.win[0]->quiet(s.deadline()));
  if (bad.bad) return check_failed(p, bad.iteration, bad.offset, "initiator");
  m.messages = 2.0 * p.iterations;  // both directions, as the send ping-pong
  m.bytes = m.messages * static_cast<double>(p.size);
  return m;
}

Status round_trip_serve(Session& s, const Plan& p, Mismatch* bad) {
  const int n = p.warmup + p.iterations;
  const size_t pong = pong_offset(p);
  Deadline dl = s.deadline();
  for (int i = 0; i < n; ++i) {
    if (i % 1024 == 0) dl = s.deadline();
    XPORT_RETURN_IF_ERROR(wait_next_signal(s, dl));
    if (p.check) {
      XPORT_ASSIGN_OR_RETURN(size_t off, verify_at(s, 0, p.size, seed_of(p.size, i, kPing)));
      if (off < p.size) bad->note(static_cast<uint64_t>(i), off);
    }
    XPORT_RETURN_IF_ERROR(put_signal_to(s, pong, p));  // the bytes that arrived, back
  }
  return s.win[0]->quiet(s.deadline());
}

}  // namespace bench
