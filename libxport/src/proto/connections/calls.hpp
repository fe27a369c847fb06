// ConnectionCalls: the connection calls of the public API (listen, accept, connect in one call
// or in steps, close), carried out by the connections part, waiting through the engine's Driver.
#pragma once

#include <span>

#include "proto/connections/connections.hpp"
#include "proto/driver.hpp"
#include "proto/flush.hpp"
#include "proto/device_state.hpp"

namespace xport::proto {

class ConnectionCalls : Calls {
 public:
  ConnectionCalls(DeviceState& state, Driver& driver, Connections& connections, Flusher& flusher)
      : Calls(state, driver), connections_(connections), flusher_(flusher) {}

  Result<Connections::Listening> listen();
  Result<CommId> accept(uint64_t token, Deadline deadline);
  // One progress pass, then the next accepted communicator, or {} when none is ready.
  Result<CommId> try_accept(uint64_t token);
  void close_listener(uint64_t token);
  Result<CommId> connect(std::span<const uint8_t> handle, Deadline deadline);
  // Non-blocking connect: start, then poll (one progress pass each): true once connected, false
  // while the listener has not answered, an error (the attempt is given up) when it failed or
  // the deadline passed. A connection nobody polls to the end is given up with abandon.
  Result<CommId> connect_start(std::span<const uint8_t> handle);
  Result<bool> connect_poll(CommId id, Deadline deadline);
  void connect_abandon(CommId id);
  void close_comm(CommId id);

 private:
  // Under the lock: the connection's id, or the error that ended it (then it is given up).
  Result<CommId> connect_outcome(CommId id, Status s);

  Connections& connections_;
  Flusher& flusher_;  // (a closed communicator's flushes are abandoned)
};

}  // namespace xport::proto
