// Transfers (NIXL's post and check): a batch of puts and gets issued as one ticket whose state is
// checked without blocking, with an optional notification (at most kMaxNotifyBytes) delivered to
// the target after the transfer's data (a win_notify applied once every earlier operation of the
// stream is done); the target takes notifications from its window to the initiator.
#pragma once

#include "proto/device_state.hpp"

namespace xport::proto {

class OneSided;

class Transfers {
 public:
  Transfers(DeviceState& state, OneSided& os) : state_(state), os_(os) {}

  struct Item {
    fabric::OpType op = fabric::OpType::put;
    memory::RegionRef region;
    uint8_t* local = nullptr;
    size_t len = 0;
    const RemoteKey* key = nullptr;
    size_t remote_offset = 0;
    bool publish = false;  // a put into a peer's staged GPU memory: its publish follows
  };
  // The transfer and the publishes of its items into a peer's staged GPU memory (their
  // tickets appended to *published, in item order), issued whole or not at all.
  Result<Ticket> post(uint32_t window, const std::vector<Item>& items,
                      const std::vector<uint8_t>& notification,
                      std::vector<Ticket>* published = nullptr);
  void send_notify(OutStream& s, const Piece& p, uint64_t seq);

  // Target: a notification whose turn came.
  void apply(InStream& in, const MsgHeader& h, std::vector<uint8_t> payload);
  // Notifications from the window's peer, oldest first.
  std::vector<std::vector<uint8_t>> take(uint32_t window);

 private:
  DeviceState& state_;
  OneSided& os_;
};

}  // namespace xport::proto
