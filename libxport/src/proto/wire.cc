// Encoders and validating decoders of the wire formats.
#include "proto/wire.hpp"

#include <algorithm>
#include <array>

#include "core/format.hpp"
#include "proto/one_sided/wire.hpp"

namespace xport::proto {

uint32_t crc32(const uint8_t* data, size_t len) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < len; ++i) c = table[(c ^ data[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

namespace {
void put_crc(std::vector<uint8_t>& out) {
  uint32_t c = crc32(out.data(), out.size());
  const auto* p = reinterpret_cast<const uint8_t*>(&c);
  out.insert(out.end(), p, p + sizeof(c));
}

Status check_crc(std::span<const uint8_t> bytes, const char* what) {
  uint32_t stored;
  std::memcpy(&stored, bytes.data() + bytes.size() - 4, 4);
  if (crc32(bytes.data(), bytes.size() - 4) != stored) {
    return core::error(Code::protocol, what, " is corrupted (checksum mismatch)");
  }
  return Status::success();
}
}  // namespace

uint32_t provider_hash(const std::string& provider) {
  return crc32(reinterpret_cast<const uint8_t*>(provider.data()), provider.size());
}

Result<std::vector<uint8_t>> encode_handle(const Handle& h) {
  if (h.address.empty() || h.address.size() > kMaxHandleAddressBytes) {
    return core::error(Code::unsupported, "a listener address of ", h.address.size(),
                       " bytes does not fit a ", kMaxHandleBytes, "-byte connection handle (at most ",
                       kMaxHandleAddressBytes, ")");
  }
  HandleHeader hdr{};
  hdr.magic = kHandleMagic;
  hdr.version = kWireVersion;
  hdr.endpoint_type = h.endpoint_type;
  hdr.address_bytes = static_cast<uint8_t>(h.address.size());
  hdr.provider_hash = h.provider_hash;
  hdr.listener_token = h.listener_token;
  hdr.device_token = h.device_token;
  std::vector<uint8_t> out(sizeof(hdr) + h.address.size());
  std::memcpy(out.data(), &hdr, sizeof(hdr));
  std::memcpy(out.data() + sizeof(hdr), h.address.data(), h.address.size());
  put_crc(out);
  return out;
}

Result<Handle> decode_handle(std::span<const uint8_t> bytes) {
  if (bytes.size() < 8) {
    return core::error(Code::protocol, "connection handle is truncated: ", bytes.size(),
                       " bytes, a handle has at least ", sizeof(HandleHeader) + 5);
  }
  uint32_t magic;
  uint16_t version;
  std::memcpy(&magic, bytes.data(), 4);
  std::memcpy(&version, bytes.data() + 4, 2);
  if (magic != kHandleMagic) {
    return core::error(Code::protocol, "not a libxport connection handle (bad magic 0x",
                       std::hex, magic, ")");
  }
  if (version != kWireVersion) {
    return core::error(Code::protocol, "connection handle version ", version,
                       " is not supported (this libxport speaks version ", kWireVersion, ")");
  }
  if (bytes.size() < sizeof(HandleHeader) + 1 + 4) {
    return core::error(Code::protocol, "connection handle is truncated: ", bytes.size(),
                       " bytes, the header alone needs ", sizeof(HandleHeader) + 4);
  }
  HandleHeader hdr;
  std::memcpy(&hdr, bytes.data(), sizeof(hdr));
  if (hdr.endpoint_type > 1 || hdr.reserved != 0) {
    return core::error(Code::protocol, "connection handle has endpoint type ",
                       int(hdr.endpoint_type), " and reserved word ", hdr.reserved,
                       " (type 0 or 1, reserved 0 expected)");
  }
  if (hdr.address_bytes == 0 || hdr.address_bytes > kMaxHandleAddressBytes) {
    return core::error(Code::protocol, "connection handle carries a ", int(hdr.address_bytes),
                       "-byte address (1..", kMaxHandleAddressBytes, " allowed)");
  }
  const size_t need = sizeof(HandleHeader) + hdr.address_bytes + 4;
  // A runtime may pass its whole fixed-size handle buffer (NCCL's 128 bytes): zeros after the
  // handle are padding, anything else is not a handle of ours.
  bool padding = bytes.size() > need && bytes.size() <= kMaxHandleBytes;
  for (size_t i = need; padding && i < bytes.size(); ++i) padding = bytes[i] == 0;
  if (bytes.size() != need && !padding) {
    return core::error(Code::protocol, "connection handle is ", bytes.size(),
                       " bytes but its header describes ", need,
                       bytes.size() < need ? " (truncated)"
                                           : " (trailing bytes that are not zero padding within "
                                             "128 bytes)");
  }
  bytes = bytes.first(need);
  XPORT_RETURN_IF_ERROR(check_crc(bytes, "connection handle"));
  Handle h;
  h.endpoint_type = hdr.endpoint_type;
  h.provider_hash = hdr.provider_hash;
  h.listener_token = hdr.listener_token;
  h.device_token = hdr.device_token;
  const uint8_t* p = bytes.data() + sizeof(HandleHeader);
  h.address.assign(p, p + hdr.address_bytes);
  return h;
}

Result<MsgHeader> decode_header(const uint8_t* data, size_t len) {
  if (len < sizeof(MsgHeader)) {
    return core::error(Code::protocol, "message of ", len, " bytes is shorter than its ",
                       sizeof(MsgHeader), "-byte header");
  }
  MsgHeader h;
  std::memcpy(&h, data, sizeof(h));
  if (h.version != kWireVersion) {
    return core::error(Code::protocol, "message version ", int(h.version), " (expected ",
                       kWireVersion, ")");
  }
  if (h.reserved0 != 0 || h.reserved1 != 0) {
    return core::error(Code::protocol, "message has non-zero reserved fields (version ",
                       kWireVersion, " requires zeros)");
  }
  const size_t body = len - sizeof(MsgHeader);
  switch (static_cast<MsgType>(h.type)) {
    case MsgType::conn_req:
      if (body < sizeof(ConnBody) || body > sizeof(ConnBody) + kMaxConnAddressBytes) {
        return core::error(Code::protocol, "CONN_REQ body is ", body, " bytes, expected ",
                           sizeof(ConnBody), "..", sizeof(ConnBody) + kMaxConnAddressBytes);
      }
      break;
    case MsgType::conn_ack:
      if (body < sizeof(AckBody) || body > sizeof(AckBody) + kMaxConnAddressBytes) {
        return core::error(Code::protocol, "CONN_ACK body is ", body, " bytes, expected ",
                           sizeof(AckBody), "..", sizeof(AckBody) + kMaxConnAddressBytes);
      }
      break;
    case MsgType::cts:
      if (body == 0 || body % 8 != 0 || body / 8 > kMaxRails) {
        return core::error(Code::protocol, "CTS carries ", body, " bytes of keys, expected 8 per "
                           "rail for 1..", kMaxRails, " rails");
      }
      break;
    case MsgType::eager:
      if (h.length != body) {
        return core::error(Code::protocol, "eager message announces ", h.length,
                           " bytes but carries ", body);
      }
      break;
    case MsgType::conn_reject:
    case MsgType::abort:
    case MsgType::close:
    case MsgType::rts:
    case MsgType::credit:
    case MsgType::conn_cancel:
    case MsgType::ping:
    case MsgType::pong:
    case MsgType::rail_state:
    case MsgType::refuse:
      if (body != 0) {
        return core::error(Code::protocol, "control message type ", int(h.type), " carries ",
                           body, " unexpected bytes");
      }
      break;
    default:
      if (!is_window_message(static_cast<MsgType>(h.type))) {
        return core::error(Code::protocol, "unknown message type ", int(h.type));
      }
      XPORT_RETURN_IF_ERROR(check_window_message(h, body));
      break;
  }
  return h;
}

namespace {

template <typename Body>
std::vector<uint8_t> encode_with_addresses(Body b, const std::vector<RailAddresses>& rails) {
  std::memset(b.reserved, 0, sizeof(b.reserved));  // never send uninitialised bytes
  size_t longest = 0;
  bool own = !rails.empty();
  for (const auto& a : rails) {
    longest = std::max({longest, a.data.size(), a.control.size(), a.own.size()});
    own = own && !a.own.empty();
  }
  b.address_bytes = static_cast<uint16_t>(longest);
  b.rail_count = static_cast<uint8_t>(rails.size());
  b.flags = own ? kOwnDataEndpoints : 0;
  std::vector<uint8_t> out(reinterpret_cast<uint8_t*>(&b),
                           reinterpret_cast<uint8_t*>(&b) + sizeof(b));
  auto append = [&](const std::vector<uint8_t>& v) {
    std::vector<uint8_t> padded(v);
    padded.resize(longest, 0);
    out.insert(out.end(), padded.begin(), padded.end());
  };
  for (const auto& a : rails) {
    append(a.data);
    append(a.control);
  }
  if (own) {
    for (const auto& a : rails) append(a.own);
  }
  return out;
}

// The addresses after a body: rail_count (0 allowed: connected endpoints) x {data, control},
// then with kOwnDataEndpoints rail_count own data endpoints.
template <typename Body>
Status decode_addresses(const Body& b, const uint8_t* data, size_t len, const char* what,
                        std::vector<RailAddresses>& out) {
  for (uint8_t r : b.reserved) {
    if (r != 0) {
      return core::error(Code::protocol, what, " has non-zero reserved bytes (version ",
                         kWireVersion, " requires zeros)");
    }
  }
  if (b.rail_count > kMaxRails) {
    return core::error(Code::protocol, what, " describes ", int(b.rail_count), " rails (at most ",
                       kMaxRails, ")");
  }
  if (b.rail_count > 0 && (b.address_bytes == 0 || b.address_bytes > kMaxAddressBytes)) {
    return core::error(Code::protocol, what, " carries ", b.address_bytes,
                       "-byte addresses (1..", kMaxAddressBytes, " allowed)");
  }
  if ((b.flags & ~kOwnDataEndpoints) != 0 ||
      ((b.flags & kOwnDataEndpoints) != 0 && b.rail_count == 0)) {
    return core::error(Code::protocol, what, " has flags ", int(b.flags),
                       " (known: ", int(kOwnDataEndpoints), " with at least one rail)");
  }
  const size_t per_rail = (b.flags & kOwnDataEndpoints) != 0 ? 3 : 2;
  const size_t addresses =
      size_t{b.rail_count} * per_rail * (b.rail_count > 0 ? b.address_bytes : 0);
  if (addresses > kMaxConnAddressBytes || len != sizeof(Body) + addresses) {
    return core::error(Code::protocol, what, " body is ", len, " bytes, its header describes ",
                       sizeof(Body) + addresses);
  }
  const uint8_t* p = data + sizeof(Body);
  for (int i = 0; i < b.rail_count; ++i) {
    RailAddresses a;
    a.data.assign(p, p + b.address_bytes);
    p += b.address_bytes;
    a.control.assign(p, p + b.address_bytes);
    p += b.address_bytes;
    out.push_back(std::move(a));
  }
  if (per_rail == 3) {
    for (int i = 0; i < b.rail_count; ++i) {
      out[i].own.assign(p, p + b.address_bytes);
      p += b.address_bytes;
    }
  }
  return Status::success();
}

}  // namespace

std::vector<uint8_t> encode_conn_request(const ConnRequest& r) {
  return encode_with_addresses(r.body, r.rails);
}

std::vector<uint8_t> encode_conn_ack(const ConnAck& a) {
  return encode_with_addresses(a.body, a.rails);
}

Result<ConnRequest> decode_conn_request(const uint8_t* data, size_t len) {
  if (len < sizeof(ConnBody)) {
    return core::error(Code::protocol, "connection request body is ", len, " bytes, at least ",
                       sizeof(ConnBody), " expected");
  }
  ConnRequest r;
  std::memcpy(&r.body, data, sizeof(ConnBody));
  const ConnBody& b = r.body;
  if (b.max_requests == 0) {
    return core::error(Code::protocol, "connection request allows 0 outstanding requests");
  }
  if (b.stripe_align == 0 || (b.stripe_align & (b.stripe_align - 1)) != 0 || b.stripe_min == 0) {
    return core::error(Code::protocol, "connection request has stripe alignment ", b.stripe_align,
                       " and minimum ", b.stripe_min, " (need a power of two and a minimum > 0)");
  }
  XPORT_RETURN_IF_ERROR(decode_addresses(b, data, len, "connection request", r.rails));
  return r;
}

Result<ConnAck> decode_conn_ack(const uint8_t* data, size_t len) {
  if (len < sizeof(AckBody)) {
    return core::error(Code::protocol, "connection acknowledgement body is ", len,
                       " bytes, at least ", sizeof(AckBody), " expected");
  }
  ConnAck a;
  std::memcpy(&a.body, data, sizeof(AckBody));
  if (a.body.depth == 0 || a.body.depth > kMaxSlots) {
    return core::error(Code::protocol, "connection acknowledgement agrees to ", a.body.depth,
                       " outstanding requests (1..", kMaxSlots, ")");
  }
  XPORT_RETURN_IF_ERROR(decode_addresses(a.body, data, len, "connection acknowledgement", a.rails));
  return a;
}

std::vector<uint8_t> encode_key(const RemoteKey& k) {
  KeyHeader hdr{};
  hdr.magic = kKeyMagic;
  hdr.version = kWireVersion;
  hdr.rail_count = static_cast<uint8_t>(k.keys.size());
  hdr.flags = static_cast<uint8_t>((k.virt_addr ? 1 : 0) | (!k.reach.empty() ? 2 : 0) |
                                   (k.staged ? 4 : 0) | (k.device ? 8 : 0));
  hdr.base = k.base;
  hdr.length = k.length;
  hdr.mr_offset = k.mr_offset;
  hdr.device_token = k.device_token;
  std::vector<uint8_t> out(reinterpret_cast<uint8_t*>(&hdr),
                           reinterpret_cast<uint8_t*>(&hdr) + sizeof(hdr));
  for (uint64_t key : k.keys) {
    const auto* p = reinterpret_cast<const uint8_t*>(&key);
    out.insert(out.end(), p, p + 8);
  }
  if (!k.reach.empty()) {
    KeyReach r{};
    r.address_bytes = static_cast<uint8_t>(k.reach.size());
    r.provider_hash = k.provider_hash;
    const auto* p = reinterpret_cast<const uint8_t*>(&r);
    out.insert(out.end(), p, p + sizeof(r));
    out.insert(out.end(), k.reach.begin(), k.reach.end());
  }
  put_crc(out);
  return out;
}

Result<RemoteKey> decode_key(std::span<const uint8_t> bytes) {
  if (bytes.size() < sizeof(KeyHeader) + 4) {
    return core::error(Code::protocol, "remote key is truncated: ", bytes.size(), " bytes");
  }
  KeyHeader hdr;
  std::memcpy(&hdr, bytes.data(), sizeof(hdr));
  if (hdr.magic != kKeyMagic) return core::error(Code::protocol, "not a libxport remote key");
  if (hdr.version != kWireVersion) {
    return core::error(Code::protocol, "remote key version ", hdr.version, " is not supported");
  }
  if (hdr.rail_count == 0 || hdr.flags > 15 || (hdr.flags & 12) == 12) {
    return core::error(Code::protocol, "remote key has ", int(hdr.rail_count), " rails and flags ",
                       int(hdr.flags));
  }
  const size_t keys_end = sizeof(KeyHeader) + size_t{hdr.rail_count} * 8;
  KeyReach reach{};
  size_t need = keys_end + 4;
  if (hdr.flags & 2) {
    if (bytes.size() < keys_end + sizeof(KeyReach) + 4) {
      return core::error(Code::protocol, "remote key is truncated: ", bytes.size(),
                         " bytes, its reach needs ", keys_end + sizeof(KeyReach) + 4);
    }
    std::memcpy(&reach, bytes.data() + keys_end, sizeof(reach));
    if (reach.address_bytes == 0 || reach.address_bytes > kMaxHandleAddressBytes ||
        reach.endpoint_type != 0 || reach.reserved != 0) {
      return core::error(Code::protocol, "remote key's reach has a ", int(reach.address_bytes),
                         "-byte address, endpoint type ", int(reach.endpoint_type),
                         " and reserved ", reach.reserved, " (1..", kMaxHandleAddressBytes,
                         ", 0, 0 expected)");
    }
    need = keys_end + sizeof(KeyReach) + reach.address_bytes + 4;
  }
  if (bytes.size() != need) {
    return core::error(Code::protocol, "remote key is ", bytes.size(), " bytes, expected ", need);
  }
  XPORT_RETURN_IF_ERROR(check_crc(bytes, "remote key"));
  if (hdr.length == 0 || hdr.base + hdr.length < hdr.base ||
      hdr.mr_offset + hdr.length < hdr.mr_offset) {
    return core::error(Code::protocol, "remote key describes an invalid range: base 0x", std::hex,
                       hdr.base, " length ", std::dec, hdr.length);
  }
  RemoteKey k;
  k.virt_addr = (hdr.flags & 1) != 0;
  k.staged = (hdr.flags & 4) != 0;
  k.device = (hdr.flags & 8) != 0;
  k.base = hdr.base;
  k.length = hdr.length;
  k.mr_offset = hdr.mr_offset;
  k.device_token = hdr.device_token;
  for (int i = 0; i < hdr.rail_count; ++i) {
    uint64_t key;
    std::memcpy(&key, bytes.data() + sizeof(KeyHeader) + 8 * i, 8);
    k.keys.push_back(key);
  }
  if (hdr.flags & 2) {
    const uint8_t* a = bytes.data() + keys_end + sizeof(KeyReach);
    k.reach.assign(a, a + reach.address_bytes);
    k.provider_hash = reach.provider_hash;
  }
  return k;
}

}  // namespace xport::proto
