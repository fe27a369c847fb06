// Signals: 64-bit words in a target's registered memory, added to or set by a window's signal
// (alone, or after a put's data) once its turn comes at the target, and read and waited on by
// the target with wrap-safe comparisons. A counter variant counts, in a local word, the signal's
// remote completion (the target's acknowledgement that it was applied).
#pragma once

#include "proto/device_state.hpp"

namespace xport::proto {

class OneSided;

class Signals {
 public:
  Signals(DeviceState& state, OneSided& os) : state_(state), os_(os) {}

  struct Spec {
    const RemoteKey* key = nullptr;  // the signal word's region (at the window's peer)
    size_t offset = 0;
    uint64_t value = 0;
    WindowSignalOp op = WindowSignalOp::add;
    bool strong = true;              // covers every earlier operation to the peer
    bool past_signals = false;       // (strong) ... but earlier signals only once begun
    memory::RegionRef counter_region;  // counter variants: a local word counting completion
    uint64_t* counter = nullptr;
  };

  // A signal without data.
  Result<Ticket> signal(uint32_t window, const Spec& spec, const char* what);
  // The same, checked already, on ticket t of window w (a put into a peer's staged GPU memory
  // issues its publish and its signal so, in the put's hold of the lock).
  // (`gate`: a put's source gate, which its publishes and signal carry, put_pieces)
  void submit(WindowState& w, OutStream& s, Ticket t, const Spec& spec,
              std::shared_ptr<SourceGate> gate = nullptr, uint64_t gate_need = 0);
  // Checks of the word (inside the key's region, aligned, the peer's).
  Status check(const WindowState& w, const Spec& spec, const char* what) const;
  // The piece fields of a signal; attaches its counter to the ticket.
  void fill(Piece& p, TicketState& t, const Spec& spec) const;
  // The win_signal message of a piece released with number `seq`.
  void send(OutStream& s, const Piece& p, uint64_t seq, uint64_t cover_from);

  // Target: the word a peer names by address and rail-0 key, or nullptr (and why).
  uint64_t* resolve(uint64_t address, uint64_t key, WindowStatus* status) const;
  // Target: applies a signal whose turn came.
  void apply(InStream& in, const MsgHeader& h, uint64_t operand);
  // Target, before apply: a publish, or a signal into a staged GPU region, whose turn came.
  enum class Staging : uint8_t {
    none,     // not into staged memory: apply() it as host memory
    copying,  // applied to the shadow, its copy on to the GPU started: done once that copy has
              // finished (Streams::poll_copies marks it)
    done,     // handled here (nothing to copy, or the copy could not start and the initiator
              // was told): done now, not to be applied again
  };
  // `early`: what prepare() started for it, if anything.
  Staging stage(InStream& in, const MsgHeader& h, uint64_t operand,
                std::unique_ptr<gpu::StagedCopy> early = nullptr);
  // Target, on arrival of a signal into a staged GPU word that must wait for its turn: its word
  // update, started held (it takes the word's turn and reads the GPU word while the signal
  // waits); null where there is nothing to start.
  std::unique_ptr<gpu::StagedCopy> prepare(const MsgHeader& h, uint64_t operand);
  // Target: the staged copy of operation `seq` failed once started: the initiator is told.
  void copy_failed(InStream& in, uint64_t seq);

 private:
  // Target: a win_result telling the initiator why operation h was not applied.
  void answer(InStream& in, const MsgHeader& h, WindowStatus status);
  DeviceState& state_;
  OneSided& os_;
};

}  // namespace xport::proto
