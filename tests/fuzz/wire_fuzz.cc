// Fuzzes the message decoders (header, connection request and acknowledgement bodies, one-sided
// window messages) and the CQ-data decoders (two-sided and window writes).
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "proto/wire.hpp"
#include "proto/one_sided/wire.hpp"
#include "rail/stripes.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace xport::proto;
  auto h = decode_header(data, size);
  if (h.ok()) {
    const size_t body = size - sizeof(MsgHeader);
    if (h->reserved0 != 0 || h->reserved1 != 0) __builtin_trap();
    if (h->type == static_cast<uint8_t>(MsgType::eager) && h->length != body) __builtin_trap();
    if (h->type == static_cast<uint8_t>(MsgType::conn_req)) {
      auto b = decode_conn_request(data + sizeof(MsgHeader), body);
      if (b.ok() && b->rails.size() > kMaxRails) __builtin_trap();
      if (b.ok()) {
        // What decodes re-encodes to the same bytes.
        auto again = encode_conn_request(*b);
        if (!b->rails.empty() &&
            (again.size() != body || std::memcmp(again.data(), data + sizeof(MsgHeader), body) != 0))
          __builtin_trap();
        const uint32_t rails = static_cast<uint32_t>(b->rails.size());
        const uint32_t n =
            xport::rail::stripe_count(xport::rail::StripePlan{b->body.stripe_threshold,
                                                              b->body.stripe_min,
                                                              b->body.stripe_align,
                                                              b->body.stripe_rails},
                                      h->length, rails == 0 ? 1 : rails);
        if (n == 0 || n > (rails == 0 ? 1 : rails)) __builtin_trap();
      }
    }
    // Window operations that decode have the body their type needs (check_window_message).
    if (h->type == static_cast<uint8_t>(MsgType::win_signal) && body != sizeof(uint64_t))
      __builtin_trap();
    if (h->type == static_cast<uint8_t>(MsgType::win_atomic) &&
        (body != sizeof(WindowOperand) || (h->slot & 0xff) >= kWindowAtomicOps))
      __builtin_trap();
    if (h->type == static_cast<uint8_t>(MsgType::win_notify) && body > kMaxNotifyBytes)
      __builtin_trap();
    if (h->type == static_cast<uint8_t>(MsgType::conn_ack)) {
      auto a = decode_conn_ack(data + sizeof(MsgHeader), body);
      if (a.ok() && (a->body.depth == 0 || a->body.depth > kMaxSlots)) __builtin_trap();
    }
  }
  if (size >= 8) {
    uint64_t d;
    std::memcpy(&d, data, 8);
    for (size_t width : {size_t{4}, size_t{8}}) {
      const CqData c = decode_cq_data(d, width);
      if (c.slot >= kMaxSlots || c.field > 0xf) __builtin_trap();
      const uint64_t mask = width >= 8 ? ~uint64_t{0} : 0xffffffffull;
      if (encode_cq_data(c, width) != (d & mask)) __builtin_trap();
      // A window write's fields re-encode to its CQ data, and any low bits widen to a sequence
      // number at or above the done mark, less than 2^bits past it.
      if (is_window_write(d & mask)) {
        for (unsigned bits : {3u, window_seq_bits(width, 0)}) {
          const WindowWrite w = decode_window_write(d & mask, width, bits);
          const uint64_t again = encode_window_write(w.stream, w.gen, w.seq_low, width, bits);
          if (decode_window_write(again, width, bits).seq_low != w.seq_low) __builtin_trap();
          if (w.stream >= window_stream_limit(width)) __builtin_trap();
          uint64_t done = 0;
          if (size >= 16) std::memcpy(&done, data + 8, 8);
          const uint64_t seq = widen_window_seq(w.seq_low, done, bits);
          if (seq - done > seq_mask(bits) || (seq & seq_mask(bits)) != w.seq_low) __builtin_trap();
        }
      }
    }
  }
  return 0;
}
