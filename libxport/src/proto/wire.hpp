// Versioned, fixed-size, little-endian wire formats: the connection handle, the control and
// eager messages, and exported remote keys. Every decoder validates lengths and ranges first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "xport/status.hpp"

namespace xport::proto {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "wire formats are little-endian");

inline constexpr uint32_t kHandleMagic = 0x54525058;  // "XPRT"
inline constexpr uint32_t kKeyMagic = 0x59454b58;     // "XKEY"
inline constexpr uint16_t kWireVersion = 2;  // 2: eager credits, RTS
inline constexpr size_t kMaxAddressBytes = 256;
inline constexpr size_t kMaxRails = 32;
// All addresses of a CONN_REQ together (rails x {data, control} x address size) stay below this,
// so a request always fits one bounce buffer.
inline constexpr size_t kMaxConnAddressBytes = 4096;
inline constexpr size_t kProviderNameBytes = 32;

uint32_t crc32(const uint8_t* data, size_t len);

// ---- connection handle: what a listener gives the runtime to ship out of band ----
struct HandleHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t header_bytes;   // sizeof(HandleHeader): lets a reader skip future fields
  uint8_t endpoint_type;   // 0 rdm, 1 msg
  uint8_t rail_count;      // rails described after the header
  uint16_t address_bytes;  // length of each address
  uint8_t per_rail;        // addresses per rail: 2 (data, control) for RDM, 1 for connected
  uint8_t reserved[3];
  uint64_t listener_token; // names the listener inside its process
  char provider[kProviderNameBytes];  // NUL-padded provider name
};
static_assert(sizeof(HandleHeader) == 56);
static_assert(offsetof(HandleHeader, listener_token) == 16);
static_assert(offsetof(HandleHeader, provider) == 24);

struct RailAddresses {
  std::vector<uint8_t> data;
  std::vector<uint8_t> control;  // empty for connected endpoints (one address per rail)
};

struct Handle {
  uint8_t endpoint_type = 0;
  uint64_t listener_token = 0;
  std::string provider;
  std::vector<RailAddresses> rails;
};

std::vector<uint8_t> encode_handle(const Handle& h);
// Layout: HandleHeader, rail_count * per_rail * address_bytes (zero-padded), then the CRC-32
// of everything before it.
Result<Handle> decode_handle(std::span<const uint8_t> bytes);

// ---- messages on the control path and eager payloads ----
enum class MsgType : uint8_t {
  conn_req = 1,    // sender -> listener: open a communicator
  conn_ack = 2,    // listener -> sender: accepted, here is the receiver's comm id
  conn_reject = 3, // listener -> sender: refused (reason in `aux`)
  cts = 4,         // receiver -> sender: clear to send message `seq` into this buffer
                   // (body: the buffer's key on each rail, 8 bytes each)
  eager = 5,       // sender -> receiver: message `seq` inline after the header
  abort = 6,       // either way: message `seq` failed at the peer (reason in `aux`)
  close = 7,       // either way: the communicator is closed
  rts = 8,         // sender -> receiver: message `seq` of `length` bytes goes by rendezvous and
                   // no CTS has come for it yet (the receiver's buffer was eager-sized)
  credit = 9,      // receiver -> sender: every receive up to `seq` is posted (eager credit)
};

struct MsgHeader {
  uint8_t type;        // MsgType
  uint8_t version;     // kWireVersion
  uint16_t dst_comm;   // comm id at the receiver of this message
  uint16_t src_comm;   // comm id at the sender of this message
  uint16_t slot;       // request slot the message refers to
  uint64_t seq;        // message sequence number within the communicator
  uint64_t length;     // payload / buffer length in bytes
  uint64_t aux;        // type-specific: CTS remote address, reject/abort reason
  uint64_t aux2;       // type-specific: CTS key; CONN_* listener token
};
static_assert(sizeof(MsgHeader) == 40);
static_assert(offsetof(MsgHeader, seq) == 8);
static_assert(offsetof(MsgHeader, aux2) == 32);

// CONN_REQ body (after the header), RDM only: who is asking, how to reach each of its rails,
// and the striping parameters both sides must share to count a message's stripes.
// Followed by rail_count x {data, control} addresses of address_bytes each.
struct ConnBody {
  uint16_t max_requests;
  uint16_t address_bytes;
  uint8_t rail_count;
  uint8_t reserved[3];
  uint64_t stripe_threshold;  // messages at least this long are striped
  uint64_t stripe_min;        // bytes per stripe at least
  uint32_t stripe_align;      // stripe boundaries are multiples of this
  uint32_t stripe_rails;      // stripe over at most this many rails (0: all)
};
static_assert(sizeof(ConnBody) == 32);
static_assert(offsetof(ConnBody, stripe_threshold) == 8);

struct ConnRequest {
  ConnBody body;
  std::vector<RailAddresses> rails;
};
std::vector<uint8_t> encode_conn_body(const ConnRequest& r);

// Validates a received message: size, version, type, and type-specific lengths.
Result<MsgHeader> decode_header(const uint8_t* data, size_t len);
Result<ConnRequest> decode_conn_body(const uint8_t* data, size_t len);

// The striping plan both sides compute from a message length and the sender's parameters.
struct StripePlan {
  uint64_t threshold = 256 * 1024;
  uint64_t min = 64 * 1024;
  uint32_t align = 4096;
  uint32_t max_rails = 0;
};
// Number of stripes of a `len`-byte message over `rails` rails (1 when not striped).
uint32_t stripe_count(const StripePlan& p, uint64_t len, uint32_t rails);
// Offset of stripe `i` of `n` (stripe i spans [offset(i), offset(i+1)); offset(n) = len).
uint64_t stripe_offset(const StripePlan& p, uint64_t len, uint32_t n, uint32_t i);

// ---- remote CQ data of a rendezvous write ----
// Low 32 bits: (request_slot << 16) | receiver_comm_id, which routes the completion.
// High 32 bits (providers with 8-byte CQ data): the message length, because several providers
// (tcp, ofi_rxm, sockets) report len = 0 for remote writes; kLengthUnknown when it does not fit,
// and the receiver then uses the completion's len (hardware providers report it).
inline constexpr uint32_t kLengthUnknown = 0xffffffffu;
inline uint64_t encode_cq_data(uint16_t comm, uint16_t slot, uint64_t length, size_t data_bytes) {
  uint64_t d = (static_cast<uint64_t>(slot) << 16) | comm;
  if (data_bytes >= 8) {
    const uint64_t l = length < kLengthUnknown ? length : kLengthUnknown;
    d |= l << 32;
  }
  return d;
}
struct CqData {
  uint16_t comm;
  uint16_t slot;
  uint32_t length;  // kLengthUnknown, or 0 with 4-byte CQ data
};
inline CqData decode_cq_data(uint64_t d) {
  return {static_cast<uint16_t>(d & 0xffff), static_cast<uint16_t>((d >> 16) & 0xffff),
          static_cast<uint32_t>(d >> 32)};
}

// An eager message without a header (providers with 8 bytes of remote CQ data): the CQ data
// routes it like a write's and its high word carries the low 32 bits of the sequence number;
// the payload is the whole message.
inline uint64_t encode_eager_data(uint16_t comm, uint16_t slot, uint64_t seq) {
  return (seq << 32) | (static_cast<uint64_t>(slot) << 16) | comm;
}
// The sequence number with these low 32 bits nearest to `near`: a receiver's window of
// possible messages (2 x depth) is far narrower than 2^31.
inline uint64_t widen_seq(uint32_t low, uint64_t near) {
  const uint64_t span = uint64_t{1} << 32;
  uint64_t s = (near & ~(span - 1)) | low;
  if (s > near && s - near > span / 2 && s >= span) s -= span;
  else if (s < near && near - s > span / 2) s += span;
  return s;
}

// ---- exported remote keys ----
struct KeyHeader {
  uint32_t magic;
  uint16_t version;
  uint8_t rail_count;
  uint8_t flags;        // bit 0: remote addresses are virtual (FI_MR_VIRT_ADDR)
  uint64_t base;        // region address in the owner's process
  uint64_t length;      // region length in bytes
  uint64_t mr_offset;   // offset of `base` in its registration (offset-addressed providers)
  uint64_t device_token; // identifies the device that registered it
};
static_assert(sizeof(KeyHeader) == 40);

struct RemoteKey {
  bool virt_addr = false;
  uint64_t base = 0;
  uint64_t length = 0;
  uint64_t mr_offset = 0;
  uint64_t device_token = 0;
  std::vector<uint64_t> keys;  // one per rail
};

std::vector<uint8_t> encode_key(const RemoteKey& k);
Result<RemoteKey> decode_key(std::span<const uint8_t> bytes);

}  // namespace xport::proto
