// Versioned, fixed-size, little-endian wire formats: the connection handle, the control and
// eager messages with their bodies, the remote CQ data of writes and headerless eager messages,
// and exported remote keys. Every decoder validates lengths and ranges before use (and is fuzzed).
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
// 3: comm-id generations, connection nonces, device tokens, compact handles (the listener's
// rail addresses travel in CONN_ACK), keepalive, one meaning per header field.
// 4: message tags (EAGER, RTS and CTS carry one in aux2; headerless eager CQ data carries tag
// and sequence number in 16 bits each), REFUSE.
// 5: window credits granted and taken back by the target (win_done length/aux/slot, win_sync
// kSyncWant/kSyncTakenBack), 4-byte CQ data's window writes: 6 sequence bits, 10 stream bits.
inline constexpr uint16_t kWireVersion = 5;
inline constexpr size_t kMaxAddressBytes = 256;
inline constexpr size_t kMaxRails = 32;
// All addresses of a CONN_REQ or CONN_ACK together (rails x {data, control} x address size)
// stay below this, so a connection message always fits one bounce buffer.
inline constexpr size_t kMaxConnAddressBytes = 4096;
// A connection handle fits NCCL's 128-byte handle: the header, one address, the checksum.
inline constexpr size_t kMaxHandleBytes = 128;

uint32_t crc32(const uint8_t* data, size_t len);

// ---- connection handle: what a listener gives the runtime to ship out of band ----
// Only what reaches the listener travels: its rail-0 control endpoint (RDM) or its passive
// endpoint (connected); every other address goes in the connection exchange.
struct HandleHeader {
  uint32_t magic;
  uint16_t version;
  uint8_t endpoint_type;   // 0 rdm, 1 msg
  uint8_t address_bytes;   // length of the address that follows
  uint32_t provider_hash;  // CRC-32 of the provider name
  uint32_t reserved;       // zero
  uint64_t listener_token; // names the listener inside its process
  uint64_t device_token;   // names the listening device (exported keys carry the same)
};
static_assert(sizeof(HandleHeader) == 32);
static_assert(offsetof(HandleHeader, listener_token) == 16);
inline constexpr size_t kMaxHandleAddressBytes = kMaxHandleBytes - sizeof(HandleHeader) - 4;

struct Handle {
  uint8_t endpoint_type = 0;
  uint32_t provider_hash = 0;
  uint64_t listener_token = 0;
  uint64_t device_token = 0;
  std::vector<uint8_t> address;
};

uint32_t provider_hash(const std::string& provider);
// Fails when the address does not fit a 128-byte handle.
Result<std::vector<uint8_t>> encode_handle(const Handle& h);
// Layout: HandleHeader, address_bytes of address, then the CRC-32 of everything before it; zero
// padding may follow up to kMaxHandleBytes in all (a runtime's fixed-size handle buffer).
Result<Handle> decode_handle(std::span<const uint8_t> bytes);

// ---- messages on the control path and eager payloads ----
enum class MsgType : uint8_t {
  conn_req = 1,     // connector -> listener: open a communicator (body: ConnBody + addresses)
  conn_ack = 2,     // listener -> connector: accepted (body: AckBody + the listener's addresses)
  conn_reject = 3,  // listener -> connector: refused (aux: reason, aux2: the request's nonce)
  cts = 4,          // receiver -> sender: clear to send message `seq` into this buffer
                    // (aux: its remote address, length: its capacity, aux2: the tag it takes;
                    // body: its key per rail)
  eager = 5,        // sender -> receiver: message `seq` inline after the header (aux2: its tag)
  abort = 6,        // sender -> receiver: message `seq` failed at the sender (aux: reason)
  close = 7,        // either way: the communicator is closed (from a sender: seq = messages sent)
  rts = 8,          // sender -> receiver: message `seq` of `length` bytes goes by rendezvous and
                    // no CTS has come for it yet (the receiver's buffer was eager-sized, or its
                    // group still places messages by tag; aux2: the message's tag)
  credit = 9,       // receiver -> sender: every receive up to `seq` is posted (eager credit)
  conn_cancel = 10, // connector -> listener: the connection with nonce aux2 was given up
  ping = 11,        // keepalive (dst_comm 0; aux: the sender's device token, aux2: nonce)
  pong = 12,        // keepalive answer (aux: the answering device's token, aux2: the nonce)
  rail_state = 13,  // a rail of the sender went out of or back into service (dst_comm 0;
                    // seq: the rail's index, aux: the sender's device token, aux2: 1 in
                    // service, 0 out): the peer stops (or resumes) using it towards the sender
  // 20-29: two-sided matching (issue 13).
  refuse = 20,      // receiver -> sender: message `seq` will not be received (aux: reason, 1: its
                    // tag matches no buffer left in its group, 2: its tag differs from the
                    // receive's; aux2: the tag the message carried)
  // One-sided windows (30..49; one_sided/wire.hpp has their fields and the CQ data of their
  // writes). dst_comm/dst_gen name the receiver's window stream, src_comm/src_gen the sender's.
  win_req = 30,     // initiator -> target: open a stream (body: ConnBody + addresses)
  win_ack = 31,     // target -> initiator: the stream (or a refusal) (body: AckBody + addresses)
  win_signal = 32,  // initiator -> target: add to / set a signal word (body: WindowOperand)
  win_atomic = 33,  // initiator -> target: an emulated atomic (body: WindowOperand)
  win_done = 34,    // target -> initiator: every operation below seq is delivered or applied
  win_result = 35,  // target -> initiator: operation seq's fetched value, or its failure
  win_sync = 36,    // initiator -> target: send win_done once everything below seq is done
  win_close = 37,   // initiator -> target: the stream is closed
  win_notify = 38,  // initiator -> target: a notification (body: its bytes)
  win_gone = 39,    // target -> initiator: the target's device closed; the stream is gone
};

struct MsgHeader {
  uint8_t type;        // MsgType
  uint8_t version;     // kWireVersion
  uint8_t dst_gen;     // generation of dst_comm the sender knows (checked by the receiver)
  uint8_t src_gen;     // generation of src_comm
  uint16_t dst_comm;   // comm id at the receiver of this message (0: none, for ping/pong/conn)
  uint16_t src_comm;   // comm id at the sender of this message
  uint16_t slot;       // request slot the message refers to
  uint16_t reserved0;  // zero
  uint32_t reserved1;  // zero
  uint64_t seq;        // message sequence number within the communicator
  uint64_t length;     // payload / buffer length in bytes
  uint64_t aux;        // type-specific (see MsgType)
  uint64_t aux2;       // type-specific (see MsgType)
};
static_assert(sizeof(MsgHeader) == 48);
static_assert(offsetof(MsgHeader, seq) == 16);
static_assert(offsetof(MsgHeader, aux2) == 40);

// CONN_REQ body: who is asking (device token, nonce), what it allows, the striping parameters
// both sides must share to count a message's stripes, and how to reach each of its rails.
// Followed by rail_count x {data, control} addresses of address_bytes each (RDM; connected
// endpoints send none: the connection is the path), and with kOwnDataEndpoints in `flags` by
// rail_count more: the data endpoint of each rail that is this communicator's own
// (XPORT_POOL_GROUPS=0 on RDM providers, docs/pool.md), where the peer sends its data.
struct ConnBody {
  uint64_t nonce;             // echoed by CONN_ACK, CONN_REJECT and CONN_CANCEL
  uint64_t device_token;      // the connecting device
  uint64_t listener_token;    // the listener asked for (from its handle)
  uint64_t stripe_threshold;  // messages at least this long are striped
  uint64_t stripe_min;        // bytes per stripe at least
  uint32_t stripe_align;      // stripe boundaries are multiples of this
  uint32_t stripe_rails;      // stripe over at most this many rails (0: all)
  uint32_t eager_max;         // largest eager message the connector sends
  uint16_t max_requests;
  uint16_t address_bytes;
  uint8_t rail_count;
  uint8_t flags;              // kOwnDataEndpoints
  uint8_t reserved[6];
};
static_assert(sizeof(ConnBody) == 64);

// ConnBody/AckBody flags: each rail's address list ends with the communicator's own data
// endpoint.
inline constexpr uint8_t kOwnDataEndpoints = 1;

// CONN_ACK body: the request's nonce, the listening device, what it agreed to, and its rails.
struct AckBody {
  uint64_t nonce;
  uint64_t device_token;
  uint32_t eager_max;
  uint16_t depth;         // outstanding requests agreed (min of both sides)
  uint16_t address_bytes;
  uint8_t rail_count;
  uint8_t flags;          // kOwnDataEndpoints
  uint8_t reserved[6];
};
static_assert(sizeof(AckBody) == 32);

struct RailAddresses {
  std::vector<uint8_t> data;
  std::vector<uint8_t> control;
  // The communicator's own data endpoint on this rail (empty: it uses the shared one). Either
  // every rail of a request or answer has one or none does.
  std::vector<uint8_t> own;
};

struct ConnRequest {
  ConnBody body{};
  std::vector<RailAddresses> rails;
};
struct ConnAck {
  AckBody body{};
  std::vector<RailAddresses> rails;
};
std::vector<uint8_t> encode_conn_request(const ConnRequest& r);
std::vector<uint8_t> encode_conn_ack(const ConnAck& a);

// Validates a received message: size, version, type, reserved fields, type-specific lengths.
Result<MsgHeader> decode_header(const uint8_t* data, size_t len);
Result<ConnRequest> decode_conn_request(const uint8_t* data, size_t len);
Result<ConnAck> decode_conn_ack(const uint8_t* data, size_t len);

// ---- remote CQ data ----
// Low 32 bits, both widths: comm id (16) | request slot (12) | a 4-bit field:
//   8-byte CQ data: the receiver comm's generation; the high 32 bits carry the message length
//     (writes: tcp, ofi_rxm and sockets report len = 0 for remote writes; kLengthUnknown when it
//     does not fit, then the completion's len is used) or the message's tag (16 bits) and the
//     low 16 bits of its sequence number (headerless eager messages, eager_high());
//   4-byte CQ data (efa, verbs): the message's stripe count - 1 (writes; eager messages carry a
//     header there), so at most kMaxNarrowStripes stripes; the receiver adds up the completions'
//     lengths.
inline constexpr uint32_t kLengthUnknown = 0xffffffffu;
inline constexpr uint32_t kMaxNarrowStripes = 16;
inline constexpr uint16_t kMaxSlots = 4096;  // request slots fit 12 bits

struct CqData {
  uint16_t comm = 0;
  uint16_t slot = 0;
  uint8_t field = 0;   // generation (8-byte data) or stripe count - 1 (4-byte data)
  uint32_t high = 0;   // 8-byte data: length (writes) or sequence low word (eager)
};
inline uint64_t encode_cq_data(const CqData& d, size_t data_bytes) {
  uint64_t v = static_cast<uint64_t>(d.comm) | (static_cast<uint64_t>(d.slot & 0xfff) << 16) |
               (static_cast<uint64_t>(d.field & 0xf) << 28);
  if (data_bytes >= 8) v |= static_cast<uint64_t>(d.high) << 32;
  return v;
}
// Comm id 0 is never issued (a rendezvous write always names one): remote CQ data whose low 16
// bits are 0 is a window's write (one_sided/wire.hpp has its layout).
inline bool is_window_write(uint64_t data) { return (data & 0xffff) == 0; }
inline CqData decode_cq_data(uint64_t v, size_t data_bytes) {
  CqData d;
  d.comm = static_cast<uint16_t>(v & 0xffff);
  d.slot = static_cast<uint16_t>((v >> 16) & 0xfff);
  d.field = static_cast<uint8_t>((v >> 28) & 0xf);
  d.high = data_bytes >= 8 ? static_cast<uint32_t>(v >> 32) : 0;
  return d;
}
// The sequence number with these low `bits` bits nearest to `near`: a receiver's window of
// possible messages (2 x depth <= 8192) is far narrower than 2^15.
inline uint64_t widen_seq(uint32_t low, uint64_t near, unsigned bits = 32) {
  const uint64_t span = uint64_t{1} << bits;
  uint64_t s = (near & ~(span - 1)) | (low & (span - 1));
  if (s > near && s - near > span / 2 && s >= span) s -= span;
  else if (s < near && near - s > span / 2) s += span;
  return s;
}
// The high word of a headerless eager message's 8-byte CQ data: its tag and the low 16 bits of
// its sequence number. Messages with tags above kMaxCqDataTag carry a header instead.
inline constexpr uint32_t kMaxCqDataTag = 0xffff;
inline constexpr unsigned kEagerSeqBits = 16;
inline uint32_t eager_high(uint64_t seq, uint32_t tag) {
  return (tag << 16) | static_cast<uint32_t>(seq & 0xffff);
}
inline uint32_t eager_seq_low(uint32_t high) { return high & 0xffff; }
inline uint32_t eager_tag(uint32_t high) { return high >> 16; }

// ---- exported remote keys ----
struct KeyHeader {
  uint32_t magic;
  uint16_t version;
  uint8_t rail_count;
  uint8_t flags;        // bit 0: remote addresses are virtual (FI_MR_VIRT_ADDR); bit 1: a
                        // KeyReach follows the keys (a window can be opened from the key)
  uint64_t base;        // region address in the owner's process
  uint64_t length;      // region length in bytes
  uint64_t mr_offset;   // offset of `base` in its registration (offset-addressed providers)
  uint64_t device_token; // the device that registered it: usable only towards that device
};
static_assert(sizeof(KeyHeader) == 40);

// How to reach the device that exported a key (its rail-0 control endpoint), so that a window
// can be opened from the key alone: after the keys, before the checksum.
struct KeyReach {
  uint8_t address_bytes;   // 1..kMaxHandleAddressBytes
  uint8_t endpoint_type;   // 0 rdm (connected endpoints export no reach)
  uint16_t reserved;       // zero
  uint32_t provider_hash;  // CRC-32 of the provider name
};
static_assert(sizeof(KeyReach) == 8);

struct RemoteKey {
  bool virt_addr = false;
  uint64_t base = 0;
  uint64_t length = 0;
  uint64_t mr_offset = 0;
  uint64_t device_token = 0;
  std::vector<uint64_t> keys;  // one per rail
  // The owner's rail-0 control address and provider (empty: the key carries no reach).
  std::vector<uint8_t> reach;
  uint32_t provider_hash = 0;
  // GPU memory behind a host shadow: puts into it are followed by a publish (the target copies
  // the range on to the GPU before they count as delivered); gets and atomics are refused.
  bool staged = false;
  // GPU memory its owner registered with the provider (FI_HMEM): the NIC reaches it, the
  // owner's CPU cannot (signals and emulated atomics are applied by that CPU): puts and gets
  // only; signals and atomics on it are refused before anything is sent.
  bool device = false;
};

std::vector<uint8_t> encode_key(const RemoteKey& k);
Result<RemoteKey> decode_key(std::span<const uint8_t> bytes);

}  // namespace xport::proto
