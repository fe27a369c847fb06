// Receives and their tags: a receive request posts a group of buffers at consecutive sequence
// numbers, and each of the sender's messages of the group is placed in a buffer by its tag
// (the k-th message with tag t in the k-th buffer with tag t); the group's outcome for test().
// A group whose buffers all carry one tag places message i in buffer i when posted; others
// place each message once its tag and those of the messages before it have arrived.
#pragma once

#include <span>

#include "proto/device_state.hpp"

namespace xport::proto {

struct GroupOutcome {
  bool done = false;
  size_t bytes = 0;
  uint32_t count = 0;
  std::array<size_t, kMaxGroup> sizes{};
};

class Matching {
 public:
  explicit Matching(DeviceState& state) : state_(state) {}
  // The parts it hands arrivals and clear-to-sends to (the Engine wires them).
  void wire(Eager& eager, Rendezvous& rendezvous) {
    eager_ = &eager;
    rendezvous_ = &rendezvous;
  }

  struct Buffer {
    uint8_t* buf = nullptr;
    size_t cap = 0;
    const RegionRef* region = nullptr;  // the caller's, copied once into the slot
    uint32_t tag = 0;
  };
  // Posts a group at c.next_seq (the caller checked the communicator and the buffers): places
  // what it can, sends the clear-to-sends its placed buffers need, takes early arrivals, reports
  // the receives for eager credit. Code::again, with nothing posted, when its slots are busy or
  // the CQ has no room for the writes its clear-to-sends would allow.
  Status post(CommState& c, std::span<const Buffer> buffers);

  // The tag of message r.seq arrived with its request-to-send (rts) or its eager data (held in
  // c.unexpected): checked against the buffer it was placed in, or used to place it.
  // false when the message was refused (r failed, and a rendezvous sender told).
  bool on_tag(CommState& c, RecvSlot& r, uint32_t tag, bool rts);

  // The group named by its first sequence number: done once every message is; then its sizes
  // per buffer (or its first error) are taken and its slots freed.
  Result<GroupOutcome> take(CommState& c, uint64_t base);
  // Whether take() would answer "not done yet" (the group is outstanding and a message of it
  // has not finished), without building its answer: a wait's pass asks this first.
  bool pending(CommState& c, uint64_t base) const {
    const RecvSlot& head = slot(c, base);
    if (!head.active || head.seq != base || head.group_base != base) return false;
    for (uint32_t i = 0; i < head.group_n; ++i) {
      if (!slot(c, base + i).finished) return true;
    }
    return false;
  }

  RecvSlot& slot(CommState& c, uint64_t seq) const { return c.recvs[c.slot_of(seq)]; }

 private:
  void assign(CommState& c, RecvSlot& r, uint8_t sub);
  // Places the group's messages whose tags (and those of the messages before them) are known.
  void resolve(CommState& c, uint64_t base);
  // A placed message's next step: its early eager data delivered, or the clear-to-send its
  // sender asked for.
  void start(CommState& c, RecvSlot& r);
  // Fails message r, and tells a rendezvous sender (REFUSE) so it does not wait for a CTS.
  void refuse(CommState& c, RecvSlot& r, uint32_t tag, uint64_t reason, Status why);
  DeviceState& state_;
  Eager* eager_ = nullptr;
  Rendezvous* rendezvous_ = nullptr;
};

}  // namespace xport::proto
