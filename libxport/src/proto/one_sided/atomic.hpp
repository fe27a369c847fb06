// Atomics on 64-bit words of a peer's registered memory: add, fetch-add, swap, compare-swap,
// fetch. Native (FI_ATOMIC, one rail: the first in service, so that every initiator's atomics on
// a word meet in one NIC) where the provider performs them and XPORT_ATOMICS allows; emulated
// otherwise: a win_atomic message the target's progress applies in its turn (after every earlier
// operation of the stream), answered by a win_result that the initiator handles inline. The mode
// is the device's: native and emulated atomics never mix on its windows.
#pragma once

#include "proto/dispatch.hpp"
#include "proto/device_state.hpp"

namespace xport::proto {

class OneSided;

class Atomics {
 public:
  Atomics(DeviceState& state, OneSided& os) : state_(state), os_(os) {}
  // win_result messages.
  void register_handlers(Dispatch& d);

  // Decided once the rails are open: FI_ATOMIC granted, the 64-bit operations valid, and the
  // knob not saying emulated.
  void negotiate();

  Result<Ticket> issue(uint32_t window, WindowAtomicOp op, const RemoteKey& key, size_t offset,
                       uint64_t operand, uint64_t compare, uint64_t* result);
  // Posts a native atomic the stream released.
  Status post_native(WindowState& w, Piece& p);
  // A native atomic completed: its value goes to the caller.
  void on_native_done(WindowOp& o, const Status& st);
  // Sends an emulated atomic released with number `seq`, and waits for its answer.
  void send_emulated(OutStream& s, Piece& p, uint64_t seq);

  // Target: applies an emulated atomic whose turn came, and answers.
  void apply(InStream& in, const MsgHeader& h, const WindowOperand& v);
  // Initiator: an answer (a fetched value, or a failure) came.
  void on_result(const Message& m);

 private:
  DeviceState& state_;
  OneSided& os_;
};

}  // namespace xport::proto
