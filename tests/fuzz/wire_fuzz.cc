// Fuzzes the message decoders (header, connection body) and the CQ-data decoder.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "proto/wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace xport::proto;
  auto h = decode_header(data, size);
  if (h.ok()) {
    const size_t body = size - sizeof(MsgHeader);
    if (h->type == static_cast<uint8_t>(MsgType::eager) && h->length != body) __builtin_trap();
    if (h->type == static_cast<uint8_t>(MsgType::conn_req) && body != 0) {
      auto b = decode_conn_body(data + sizeof(MsgHeader), body);
      if (b.ok() && (b->rails.empty() || b->rails.size() > kMaxRails)) __builtin_trap();
      if (b.ok()) {
        // What decodes re-encodes to the same bytes.
        auto again = encode_conn_body(*b);
        if (again.size() != body || std::memcmp(again.data(), data + sizeof(MsgHeader), body) != 0)
          __builtin_trap();
        const uint32_t n = stripe_count(StripePlan{b->body.stripe_threshold, b->body.stripe_min,
                                                   b->body.stripe_align, b->body.stripe_rails},
                                        h->length, static_cast<uint32_t>(b->rails.size()));
        if (n == 0 || n > b->rails.size()) __builtin_trap();
      }
    }
  }
  if (size >= 8) {
    uint64_t d;
    std::memcpy(&d, data, 8);
    CqData c = decode_cq_data(d);
    if (encode_cq_data(c.comm, c.slot, c.length, 8) != d && c.length != kLengthUnknown)
      __builtin_trap();
  }
  return 0;
}
