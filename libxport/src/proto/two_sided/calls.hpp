// TwoSidedCalls: the two-sided calls of the public API (isend, grouped irecv, test and wait,
// flush and iflush), checked here and carried out by the eager, rendezvous, matching and flush
// parts, waiting through the engine's Driver.
#pragma once

#include <array>
#include <optional>
#include <span>

#include "proto/driver.hpp"
#include "proto/flush.hpp"
#include "proto/regions.hpp"
#include "proto/device_state.hpp"
#include "proto/two_sided/eager.hpp"
#include "proto/two_sided/matching.hpp"
#include "proto/two_sided/rendezvous.hpp"

namespace xport::proto {

struct Completion {
  bool done = false;
  size_t bytes = 0;
  uint32_t count = 0;
  std::array<size_t, kMaxGroup> sizes{};
};

// One buffer of a (grouped) receive.
struct RecvBufferRef {
  void* buf = nullptr;
  size_t len = 0;
  LocalBuffer region;
  uint32_t tag = 0;
};

class TwoSidedCalls : Calls {
 public:
  TwoSidedCalls(DeviceState& state, Driver& driver, const MemoryCalls& memory, Eager& eager,
                Rendezvous& rendezvous, Matching& matching, Flusher& flusher)
      : Calls(state, driver),
        memory_(memory),
        eager_(eager),
        rendezvous_(rendezvous),
        matching_(matching),
        flusher_(flusher) {}

  // `handoff` (PostMode::handoff): the call takes the engine only if it is free (else
  // Code::again, nothing started) and leaves a rendezvous message's writes to the next progress
  // pass.
  Result<uint64_t> isend(CommId comm, const void* buf, size_t len, const LocalBuffer& region,
                         uint32_t tag = 0, bool handoff = false);
  // A receive of 1..kMaxGroup buffers; named by its first sequence number.
  Result<uint64_t> irecv(CommId comm, std::span<const RecvBufferRef> buffers, bool handoff = false);
  Result<uint64_t> irecv(CommId comm, void* buf, size_t len, const LocalBuffer& region,
                         uint32_t tag = 0, bool handoff = false) {
    const RecvBufferRef one{buf, len, region, tag};
    return irecv(comm, std::span(&one, 1), handoff);
  }
  // progress false: no progress pass, and not done while another thread holds the engine.
  Result<Completion> test(CommId comm, uint64_t seq, bool progress = true);
  // test() without its progress pass, under the lock.
  Result<Completion> test_locked(CommId comm, uint64_t seq);
  // An injected send of `comm` not reported yet: reported now, without the engine lock (its
  // length); nullopt for anything else, which the caller takes the locked way.
  std::optional<size_t> take_injected(CommId comm, uint64_t seq, bool progress);
  // test() and wait() of a send communicator: an injected send is reported without the lock.
  Result<Completion> test_send(CommId comm, uint64_t seq, bool progress = true);
  Result<size_t> wait_send(CommId comm, uint64_t seq, Deadline deadline);
  // Under the lock, a wait's look at its request: nothing while it is outstanding (nothing
  // failed), else what wait() returns for it (its bytes, or its error), the request retired.
  // One lookup, and no Completion built for a send or a one-buffer receive.
  std::optional<Result<size_t>> finish_locked(CommId comm, uint64_t seq);
  Result<size_t> wait(CommId comm, uint64_t seq, Deadline deadline);
  Status flush(CommId comm, const void* buf, size_t len, const LocalBuffer& region,
               Deadline deadline);
  // A flush that does not wait: its id (0: nothing to read, done), tested with test_flush.
  Result<uint64_t> iflush(CommId comm, const void* buf, size_t len, const LocalBuffer& region);
  Result<bool> test_flush(CommId comm, uint64_t id, bool progress = true);

 private:
  CommState* comm_for(CommId id, bool is_send, const char* op, Status* err);

  const MemoryCalls& memory_;  // (checks the caller's buffers)
  Eager& eager_;
  Rendezvous& rendezvous_;
  Matching& matching_;
  Flusher& flusher_;
};

}  // namespace xport::proto
