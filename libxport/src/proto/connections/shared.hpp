// What the connection files share: a header with only its type set, and the reasons a request
// is refused (their numbers travel in CONN_REJECT's aux).
#pragma once

#include <cstdint>

#include "proto/wire.hpp"

namespace xport::proto::conn {

enum RejectReason : uint64_t {
  kUnknownListener = 1,
  kBacklogFull = 2,
  kTableFull = 3,
  kBadRequest = 4,
  kNoRoom = 5,
  kNoCqRoom = 6,
};

inline const char* reject_text(uint64_t r) {
  switch (r) {
    case kUnknownListener: return "the listener is closed or unknown";
    case kBacklogFull: return "the listener's backlog is full (XPORT_LISTEN_BACKLOG)";
    case kTableFull: return "the peer's communicator table is full (XPORT_MAX_COMMS)";
    case kBadRequest: return "the request's addresses are unusable there";
    case kNoRoom:
      return "the listener's device has no room for another peer device (its endpoint shards' "
             "address tables are full: XPORT_MAX_SHARDS, docs/pool.md)";
    case kNoCqRoom:
      return "the listener's CQ has no room for another connection's receive buffers "
             "(XPORT_CQ_ENTRIES)";
  }
  return "unknown reason";
}

inline MsgHeader bare(MsgType t) {
  MsgHeader h{};
  h.type = static_cast<uint8_t>(t);
  h.version = kWireVersion;
  return h;
}

}  // namespace xport::proto::conn
