// Wire formats of one-sided windows: the fields of the win_* messages (MsgType 30..38), their
// bodies, the remote CQ data of window writes, and the sequence numbers both carry.
#pragma once

#include <cstddef>
#include <cstdint>

#include "proto/wire.hpp"

namespace xport::proto {

// ---- sequence numbers ----
// Every operation a window stream counts at its target (a write, a signal, an emulated atomic, a
// notification) takes the stream's next 64-bit sequence number. Writes carry its low bits in
// their remote CQ data; messages carry all of it. The target widens the low bits against its
// `done` mark (every number below it is done): an initiator never has more than `span`
// numbers beyond the mark it was last told (its credits), and span <= 2^bits, so nothing
// aliases.
inline constexpr unsigned kWideSeqBits = 32;    // 8-byte CQ data: the high word
inline constexpr unsigned kNarrowSeqBits = 6;   // 4-byte CQ data: beside a 10-bit stream index
inline constexpr unsigned kNarrowStreamBits = 10;
inline constexpr unsigned kWideStreamBits = 12;  // + a 4-bit generation

inline uint64_t seq_mask(unsigned bits) {
  return bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
}
// The full sequence number with these low bits at or above `done`.
inline uint64_t widen_window_seq(uint64_t low, uint64_t done, unsigned bits) {
  return done + ((low - done) & seq_mask(bits));
}
// Signal values and counters wrap: `value` has reached `target` when it is at most 2^63 past it.
inline bool reached(uint64_t value, uint64_t target) {
  return static_cast<int64_t>(value - target) >= 0;
}

// ---- remote CQ data of a window write ----
// The low 16 bits are 0 (comm id 0 is never issued: a rendezvous write always names one), so a
// target tells window writes from rendezvous writes by them.
//   8-byte: stream index (12) << 16 | generation (4) << 28 | sequence low word << 32
//   4-byte: sequence low 6 bits << 16 | stream index (10) << 22
// (XPORT_TEST_SEQ_BITS narrows the sequence bits of both, for the wrap-around tests.)
struct WindowWrite {
  uint16_t stream = 0;
  uint8_t gen = 0;
  uint64_t seq_low = 0;
};
// (is_window_write(), wire.hpp: the low 16 bits are 0)
inline uint64_t encode_window_write(uint16_t stream, uint8_t gen, uint64_t seq, size_t data_bytes,
                                    unsigned seq_bits) {
  if (data_bytes >= 8) {
    return (uint64_t{stream} & 0xfff) << 16 | (uint64_t{gen} & 0xf) << 28 |
           (seq & seq_mask(seq_bits)) << 32;
  }
  return (seq & seq_mask(seq_bits)) << 16 | (uint64_t{stream} & 0x3ff) << 22;
}
inline WindowWrite decode_window_write(uint64_t data, size_t data_bytes, unsigned seq_bits) {
  WindowWrite w;
  if (data_bytes >= 8) {
    w.stream = static_cast<uint16_t>((data >> 16) & 0xfff);
    w.gen = static_cast<uint8_t>((data >> 28) & 0xf);
    w.seq_low = (data >> 32) & seq_mask(seq_bits);
  } else {
    w.stream = static_cast<uint16_t>((data >> 22) & 0x3ff);
    w.seq_low = (data >> 16) & seq_mask(seq_bits);
  }
  return w;
}
// The sequence bits a stream uses with this CQ data width (test_bits: XPORT_TEST_SEQ_BITS, 0 for
// all there is) and the stream indices it can name.
inline unsigned window_seq_bits(size_t data_bytes, unsigned test_bits) {
  const unsigned full = data_bytes >= 8 ? kWideSeqBits : kNarrowSeqBits;
  return test_bits > 0 && test_bits < full ? test_bits : full;
}
inline uint16_t window_stream_limit(size_t data_bytes) {
  return static_cast<uint16_t>(1u << (data_bytes >= 8 ? kWideStreamBits : kNarrowStreamBits));
}

// ---- messages ----
// win_req   aux: the initiator's device token, aux2: nonce; body: ConnBody (its nonce and token
//           again, limits) + the initiator's rail addresses
// win_ack   seq: 0 refused (slot: WindowRefusal), else accepted: 1 + the first grant (the
//           numbers below it may go; 0: none yet); length: the stream's span; slot: sequence
//           bits; aux: the target's device token, aux2: the nonce; src_comm/src_gen: the
//           target's stream; body: AckBody + the target's rail addresses
// win_signal, win_atomic, win_notify (operations):
//           seq: the operation's sequence number; slot: op (low byte) | WindowFlags << 8;
//           length: first sequence number it waits for (weak ordering; strong waits for all
//           below seq); aux: target address; aux2: the target region's key on rail 0 (signal,
//           atomic); body: WindowOperand (signal, atomic) or the notification's bytes
// win_done  seq: every operation below it is done at the target; length: the initiator may
//           send the numbers below it (0: the grant is unchanged); aux: the grant's epoch
//           (a grant older than the last take-back followed is ignored); slot: kDoneTakeBack
//           (the target takes its unused numbers back: the initiator keeps those below
//           max(length, what it sent) and answers with a win_sync kSyncTakenBack)
// win_result seq: the operation; aux: the value fetched; length: the target's done mark;
//           slot: WindowStatus
// win_sync  seq: send win_done once the done mark reaches it (at once when it has, even if
//           that mark was answered before: a win_sync goes again after a rail loss);
//           slot kSyncWant: the initiator is held at its limit and wants the numbers below
//           `length` (its next operation's), and could use those below `aux` (every operation
//           it holds; 0: no more than length); slot kSyncTakenBack: the answer to a take-back
//           of epoch aux: seq is the limit it keeps
// win_close (nothing else)
// win_gone  (nothing else; target -> initiator)
inline constexpr size_t kMaxNotifyBytes = 256;

enum WindowFlags : uint8_t {
  kWinStrong = 1,  // applied once every operation below it is done
  kWinAckNow = 2,  // the initiator waits on it (a counter): win_done as soon as it is applied
  kWinPastSignals = 4,  // (with kWinStrong) earlier signals below it need only have begun
};

// publish: not a signal but the same message: the target copies [word, +operand) of a staged
// region from its host shadow on to the GPU, and counts it done once the copy has finished.
enum class WindowSignalOp : uint8_t { add = 0, set = 1, publish = 2 };
enum class WindowAtomicOp : uint8_t { add = 0, fetch_add = 1, swap = 2, compare_swap = 3, fetch = 4 };
inline constexpr uint8_t kWindowAtomicOps = 5;

enum class WindowStatus : uint8_t {
  ok = 0,
  no_region = 1,  // no live registration of the target has that key
  outside = 2,    // the word is not inside it
  unaligned = 3,  // the word is not 8-byte aligned
};
const char* window_status_text(uint8_t status);

enum WindowDoneFlags : uint16_t { kDoneTakeBack = 1 };
enum WindowSyncFlags : uint16_t { kSyncWant = 1, kSyncTakenBack = 2 };

// (2 was "no CQ room for another stream" before wire version 5: streams now open without CQ
// room and wait for a grant.)
enum class WindowRefusal : uint8_t {
  streams = 1,  // the target's stream table is full (or its CQ data names no more streams)
  bad = 3,      // the request's addresses are unusable there
  peers = 4,    // the target's device has no room for another peer device (shm address table)
};
const char* window_refusal_text(uint8_t reason);

// Whether a message type is a window's: validated by check_window_message, handled by
// OneSided::on_message (one list for both).
constexpr bool is_window_message(MsgType t) {
  switch (t) {
    case MsgType::win_req:
    case MsgType::win_ack:
    case MsgType::win_signal:
    case MsgType::win_atomic:
    case MsgType::win_done:
    case MsgType::win_result:
    case MsgType::win_sync:
    case MsgType::win_close:
    case MsgType::win_notify:
    case MsgType::win_gone: return true;
    default: return false;
  }
}

// A window message's header with its type and the wire version, the rest zero.
inline MsgHeader window_header(MsgType t) {
  MsgHeader h{};
  h.type = static_cast<uint8_t>(t);
  h.version = kWireVersion;
  return h;
}

struct WindowOperand {
  uint64_t operand;
  uint64_t compare;  // compare-swap (signals send only the operand)
};
static_assert(sizeof(WindowOperand) == 16);

// Validates the body of a win_* message against its header (called by decode_header).
Status check_window_message(const MsgHeader& h, size_t body);

}  // namespace xport::proto
