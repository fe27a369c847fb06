// The put_signal stream both ends of the one-sided tests run (one_sided_test.cc, the multi-rail
// signal test and their peer): message i (message_sizes(seed) bytes, pattern i) goes into slot
// i % slots of the target's buffer, and word i % slots of its signal region is set to i + 1 —
// by a strong put_signal, a weak put_signal, or a put, a fence and a weak signal, in turn. The
// target waits on the word, checks the whole slot at once (the signal promises the data is
// there), and acknowledges by adding 1 to the initiator's ack word: the initiator reuses a slot
// only once the message before it there was checked.
#pragma once

#include <string>
#include <vector>

#include "harness.hpp"
#include "xport/xport.hpp"

namespace xport::test {

struct SignalStream {
  uint32_t seed = 1;
  size_t count = 100;
  size_t max = 65536;
  size_t slots = 8;
  size_t slot_bytes() const { return (max + 63) / 64 * 64; }
  size_t buffer_bytes() const { return slot_bytes() * slots; }
};

inline Status timed_out(const std::string& what) { return Status(Code::timeout, what); }

// Initiator: `local` (at least buffer_bytes) stages each message in its slot; `ack` is a local
// registered word the target sets.
inline Status send_signal_stream(Window& w, const SignalStream& s, const Region& local,
                                 uint8_t* local_buf, const RemoteRegion& data,
                                 const RemoteRegion& signals, const Region& ack,
                                 std::chrono::seconds per_message) {
  const auto sizes = message_sizes(s.seed, s.count, s.max);
  for (size_t i = 0; i < s.count; ++i) {
    const size_t slot = i % s.slots;
    const size_t off = slot * s.slot_bytes();
    if (i >= s.slots) {
      Status st = w.wait_signal(ack, 0, i - s.slots + 1, Deadline::after(per_message));
      if (!st.ok()) return st.with_context("waiting for the target to check message " +
                                           std::to_string(i - s.slots));
    }
    fill(local_buf + off, sizes[i], i);
    for (int attempt = 0;; ++attempt) {
      Result<Ticket> t = Status();
      switch (i % 3) {
        case 0:
          t = w.put_signal(local, off, data, off, sizes[i], signals, slot * 8, i + 1, SignalOp::set);
          break;
        case 1:
          t = w.put_signal(local, off, data, off, sizes[i], signals, slot * 8, i + 1, SignalOp::set,
                           SignalOrder::weak);
          break;
        default: {
          t = w.put(local, off, data, off, sizes[i]);
          if (!t.ok()) break;
          Status f = w.fence();
          if (!f.ok()) return f;
          // A weak signal covers nothing of its own: the fence keeps it behind the put.
          t = w.signal(signals, slot * 8, i + 1, SignalOp::set, SignalOrder::weak);
          break;
        }
      }
      if (t.ok()) break;
      if (t.status().code() != Code::again || attempt > 100) {
        return t.status().with_context("message " + std::to_string(i));
      }
      Status q = w.quiet(Deadline::after(per_message));
      if (!q.ok()) return q.with_context("quiet after message " + std::to_string(i));
    }
  }
  return w.quiet(Deadline::after(per_message));
}

// Target: waits for each message's signal and checks its slot at once. On a mismatch the
// message and byte are named.
inline Status receive_signal_stream(Window& w, const SignalStream& s, const uint8_t* data_buf,
                                    const Region& signals, const RemoteRegion& ack,
                                    std::chrono::seconds per_message) {
  const auto sizes = message_sizes(s.seed, s.count, s.max);
  for (size_t i = 0; i < s.count; ++i) {
    const size_t slot = i % s.slots;
    Status st = w.wait_signal(signals, slot * 8, i + 1, Deadline::after(per_message));
    if (!st.ok()) return st.with_context("signal of message " + std::to_string(i));
    const long long bad = first_mismatch(data_buf + slot * s.slot_bytes(), sizes[i], i);
    if (bad >= 0) {
      return Status(Code::protocol, "message " + std::to_string(i) + " (" +
                                        std::to_string(sizes[i]) + " bytes, mode " +
                                        std::to_string(i % 3) + ") differs at byte " +
                                        std::to_string(bad) + " when its signal arrived");
    }
    for (int attempt = 0;; ++attempt) {
      auto t = w.signal(ack, 0, 1, SignalOp::add, SignalOrder::weak);  // counts, in any order
      if (t.ok()) break;
      if (t.status().code() != Code::again || attempt > 100) return t.status();
      Status q = w.quiet(Deadline::after(per_message));
      if (!q.ok()) return q;
    }
  }
  return w.quiet(Deadline::after(per_message));
}

}  // namespace xport::test
