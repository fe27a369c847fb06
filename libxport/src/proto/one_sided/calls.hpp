// OneSidedCalls: the one-sided calls of the public API (the public Window's; docs/semantics.md
// "One-sided"): opening windows, issuing operations with the caller's local ranges checked, and
// the waits, each with its deadline; carried out by the one-sided part, waiting through the
// engine's Driver.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "proto/driver.hpp"
#include "proto/one_sided/one_sided.hpp"
#include "proto/regions.hpp"
#include "proto/device_state.hpp"

namespace xport::proto {

// The refusal of a signal or atomic on a peer's word in GPU memory it registered with the
// provider (RemoteKey::device): its CPU, which applies them, cannot write there.
Status device_word(const char* what);

class OneSidedCalls : Calls {
 public:
  OneSidedCalls(DeviceState& state, Driver& driver, const MemoryCalls& memory, OneSided& one_sided)
      : Calls(state, driver), memory_(memory), one_sided_(one_sided) {}

  struct SignalRequest {
    const RemoteKey* key = nullptr;  // the signal word's region at the peer
    size_t offset = 0;
    uint64_t value = 0;
    WindowSignalOp op = WindowSignalOp::add;
    bool strong = true;
    bool past_signals = false;  // strong, but earlier signals need only have begun to apply
    const LocalBuffer* counter = nullptr;  // counter variants: a local word
    size_t counter_offset = 0;
  };
  struct TransferItem {
    bool put = true;
    const LocalBuffer* local = nullptr;
    size_t local_offset = 0;
    const RemoteKey* remote = nullptr;
    size_t remote_offset = 0;
    size_t length = 0;
    bool publish = false;  // a put into a peer's staged GPU memory: its publish follows
  };
  Result<uint32_t> open_window(CommId comm, Deadline deadline);
  Result<uint32_t> open_window_to(const std::vector<uint8_t>& handle, Deadline deadline);
  Result<uint32_t> open_window_to(const RemoteKey& key, Deadline deadline);
  // Several windows at once: every stream request goes before the first answer is awaited, so
  // the round trips overlap (a team's windows to all its peers: one round trip, not N). A target
  // is a communicator (`comm`) or, without one, a key's device. One result per target, in order;
  // a target that fails does not fail the others.
  struct OpenTarget {
    CommId comm;
    const RemoteKey* key = nullptr;
  };
  std::vector<Result<uint32_t>> open_windows(std::span<const OpenTarget> targets,
                                             Deadline deadline);
  void close_window(uint32_t id);
  Result<uint64_t> put(uint32_t window, const LocalBuffer& local, size_t loff,
                       const RemoteKey& remote, size_t roff, size_t len,
                       const SignalRequest* signal = nullptr);
  Result<uint64_t> get(uint32_t window, const LocalBuffer& local, size_t loff,
                       const RemoteKey& remote, size_t roff, size_t len);
  Result<uint64_t> signal(uint32_t window, const SignalRequest& signal);
  Result<uint64_t> atomic(uint32_t window, WindowAtomicOp op, const RemoteKey& remote, size_t roff,
                          uint64_t operand, uint64_t compare, uint64_t* result);
  // The publishes of items into a peer's staged GPU memory are issued with the transfer, in the
  // same hold of the lock (their tickets appended to *published).
  Result<uint64_t> transfer(uint32_t window, const std::vector<TransferItem>& items,
                            const std::vector<uint8_t>& notification,
                            std::vector<uint64_t>* published = nullptr);
  // A put in pieces (OneSided::put_pieces): into a peer's staged GPU memory (`publish`: each
  // piece followed by its publish, the target copying its range on to its GPU), from a source
  // copied in while the pieces wait (`gate`), and, with `signal`, the signal made strong behind
  // them: issued whole under one hold of the lock, or nothing (every check, and room for every
  // ticket and operation context, first). Tickets: the put's (the caller's), the publishes' and
  // the signal's (0: none).
  struct Published {
    uint64_t put = 0, publish = 0, signal = 0;
  };
  struct PutPieces {
    bool publish = false;
    const SignalRequest* signal = nullptr;
    size_t piece = 0;  // 0: one piece
    std::shared_ptr<SourceGate> gate;
    bool in_place = false;  // the gate's copy fills the target's shadow itself (own_shadow)
  };
  Result<Published> put_pieces(uint32_t window, const LocalBuffer& local, size_t loff,
                               const RemoteKey& remote, size_t roff, size_t len,
                               const PutPieces& how);
  // OneSided::own_shadow, under the lock.
  std::optional<OwnShadow> own_shadow(uint32_t window, const RemoteKey& remote, size_t roff,
                                      size_t len);
  // Gives `gate` (of a put in pieces issued with none yet) the copy that progress polls for it
  // (SourceRead::until_local), under the lock: what waits on it goes as it lands; or, where the
  // copy could not start, fails it (what waits on it is dropped, its tickets failed).
  void attach_copy(uint32_t window, SourceGate& gate,
                   Result<std::unique_ptr<gpu::StagedCopyIn>> copy);
  // A gate of a put in pieces opened further (or failed): what may go now goes.
  void post_ready(uint32_t window);
  Status fence(uint32_t window);
  Status quiet(uint32_t window, Deadline deadline);
  // (pass: make a progress pass first, whatever the quick check would answer: Window::wait_local
  // answers most calls itself and sends every 16th here for its pass)
  Status wait_local(uint32_t window, uint64_t ticket, Deadline deadline, bool pass = false);
  // 1 once the ticket is complete (delivered, applied), 0 while not, or its error.
  Result<int> check(uint32_t window, uint64_t ticket);
  // Waits until the local word at `offset` of `region` reaches `value` (wrap-safe), driving
  // progress; the window's peer lost fails the wait.
  Status wait_word(uint32_t window, const LocalBuffer& region, size_t offset, uint64_t value,
                   Deadline deadline, const char* what);
  Result<uint64_t> read_word(const LocalBuffer& region, size_t offset, const char* what);
  std::vector<std::vector<uint8_t>> take_notifications(uint32_t window);
  bool native_atomics() const { return state_.native_atomics; }
  uint64_t window_issued(uint32_t window) const;
  // The window's local-completion mark (WindowState::local_clear), for Window::wait_local to
  // read without the engine lock; nullptr for a window not open.
  std::shared_ptr<const std::atomic<uint64_t>> local_clear(uint32_t window);
  uint64_t window_completed(uint32_t window) const;

 private:
  // Under the lock: the stream a window over `comm` (or to `key`'s device) uses, made and
  // requested when there is none, with an opener reference taken (settle_open drops it).
  Result<OutStream*> stream_for(CommId comm);
  Result<OutStream*> stream_for(const RemoteKey& key);
  // ... to the device at `address` (a key's or a connection handle's).
  Result<OutStream*> stream_to(uint64_t token, uint32_t provider_hash,
                               const std::vector<uint8_t>& address);
  // Waits until none of `streams` (0: none) is still waiting for its target's answer.
  Status wait_answers(std::span<const uint32_t> streams, Deadline deadline);
  // A window's open call waits for its stream's answer.
  Result<uint32_t> finish_open(uint32_t stream, CommId comm, Deadline deadline);
  // After the wait (`waited`: its outcome): the window on a stream that answered; a stream still
  // unanswered is given up with `waited`'s error.
  Result<uint32_t> settle_open(uint32_t stream, CommId comm, const Status& waited);
  Result<uint64_t> rma(uint32_t window, fabric::OpType op, const LocalBuffer& local, size_t loff,
                       const RemoteKey& remote, size_t roff, size_t len,
                       const SignalRequest* signal);
  Result<Signals::Spec> signal_spec(const SignalRequest& r, const char* what);
  Result<uint64_t*> local_word(const LocalBuffer& region, size_t offset, const char* what);

  const MemoryCalls& memory_;  // (checks the caller's buffers)
  OneSided& one_sided_;
  uint32_t quick_local_ = 0;  // wait_local calls answered without a pass (one in 16 makes one)
};

}  // namespace xport::proto
