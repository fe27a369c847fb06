// Validation of the one-sided window messages (lengths and ranges before any use).
#include "proto/one_sided/wire.hpp"

#include "core/format.hpp"

namespace xport::proto {

const char* window_status_text(uint8_t status) {
  switch (static_cast<WindowStatus>(status)) {
    case WindowStatus::ok: return "applied";
    case WindowStatus::no_region: return "no live registration at the target has that key";
    case WindowStatus::outside: return "the word is outside the target's registered region";
    case WindowStatus::unaligned: return "the word is not 8-byte aligned";
  }
  return "unknown status";
}

const char* window_refusal_text(uint8_t reason) {
  switch (static_cast<WindowRefusal>(reason)) {
    case WindowRefusal::streams: return "the target has no free window stream";
    case WindowRefusal::bad: return "the request's addresses are unusable at the target";
    case WindowRefusal::peers:
      return "the target's device has no room for another peer device (its shm address table "
             "holds 256 addresses, 2 per peer device)";
  }
  return "unknown reason";
}

Status check_window_message(const MsgHeader& h, size_t body) {
  const auto type = static_cast<MsgType>(h.type);
  const uint8_t op = static_cast<uint8_t>(h.slot & 0xff);
  const uint8_t flags = static_cast<uint8_t>(h.slot >> 8);
  auto bad = [&](auto&&... why) {
    return core::error(Code::protocol, "window message type ", int(h.type), ": ", why...);
  };
  switch (type) {
    case MsgType::win_req:
      if (body < sizeof(ConnBody) || body > sizeof(ConnBody) + kMaxConnAddressBytes) {
        return bad("body of ", body, " bytes, expected ", sizeof(ConnBody), "..",
                   sizeof(ConnBody) + kMaxConnAddressBytes);
      }
      return Status::success();
    case MsgType::win_ack:
      if (body < sizeof(AckBody) || body > sizeof(AckBody) + kMaxConnAddressBytes) {
        return bad("body of ", body, " bytes, expected ", sizeof(AckBody), "..",
                   sizeof(AckBody) + kMaxConnAddressBytes);
      }
      if (h.seq != 0 && h.seq - 1 > h.length) {
        return bad("seq ", h.seq, " (0 refused, else 1 + a first grant of at most the span, ",
                   h.length, ")");
      }
      return Status::success();
    case MsgType::win_signal:
      if (body != sizeof(uint64_t)) return bad("body of ", body, " bytes, expected 8");
      if (op > static_cast<uint8_t>(WindowSignalOp::publish)) return bad("signal op ", int(op));
      break;
    case MsgType::win_atomic:
      if (body != sizeof(WindowOperand)) {
        return bad("body of ", body, " bytes, expected ", sizeof(WindowOperand));
      }
      if (op >= kWindowAtomicOps) return bad("atomic op ", int(op));
      break;
    case MsgType::win_notify:
      if (body > kMaxNotifyBytes) return bad("notification of ", body, " bytes (at most ",
                                             kMaxNotifyBytes, ")");
      if (op != 0) return bad("notification op ", int(op));
      break;
    case MsgType::win_result:
      if (h.slot > static_cast<uint16_t>(WindowStatus::unaligned)) {
        return bad("status ", h.slot);
      }
      [[fallthrough]];
    case MsgType::win_done:
      if (h.slot > kDoneTakeBack) return bad("flags 0x", std::hex, h.slot);
      if (body != 0) return bad(body, " unexpected bytes");
      return Status::success();
    case MsgType::win_sync:
      if (h.slot != 0 && h.slot != kSyncWant && h.slot != kSyncTakenBack) {
        return bad("flags 0x", std::hex, h.slot);
      }
      if (body != 0) return bad(body, " unexpected bytes");
      return Status::success();
    case MsgType::win_close:
    case MsgType::win_gone:
      if (body != 0) return bad(body, " unexpected bytes");
      return Status::success();
    default: return bad("not a window message");
  }
  if (flags > (kWinStrong | kWinAckNow | kWinPastSignals) ||
      ((flags & kWinPastSignals) && !(flags & kWinStrong))) {
    return bad("flags 0x", std::hex, int(flags));
  }
  return Status::success();
}

}  // namespace xport::proto
