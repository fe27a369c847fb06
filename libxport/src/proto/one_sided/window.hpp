// Windows: opened on a stream to a peer (over a communicator's channels, or from the peer's
// connection handle or an exported key alone), the checks of local and remote ranges and words
// before anything is issued, the window's provider operations (contexts), and its tickets: each
// issued operation is a ticket, complete locally (source reusable, value fetched) and remotely
// (delivered, applied) once every part of it is.
#pragma once

#include "proto/device_state.hpp"

namespace xport::proto {

class OneSided;

class Windows {
 public:
  Windows(DeviceState& state, OneSided& os) : state_(state), os_(os) {}
  static constexpr uint32_t kOps = 256;          // provider operations in flight per window
  static constexpr size_t kMaxTickets = 16384;   // operations not yet complete per window
  static constexpr size_t kMaxFailed = 16384;    // failed tickets whose error a window keeps

  // A window on a stream that is ready (holding the stream, its peer, and the communicator).
  Result<uint32_t> make(OutStream& s, CommState* comm);
  void close(uint32_t id);
  void maybe_erase(WindowState& w);
  // An open window, or nullptr with *err naming what is wrong (closed, its stream failed).
  WindowState* usable(uint32_t id, const char* what, Status* err);
  // What usable() accepts, without saying why not: the window, open, its peer alive, and its
  // stream, ready (*stream); nullptr otherwise. The injected put's fast path asks this.
  WindowState* ready(uint32_t id, OutStream** stream) const;
  WindowState* find(uint32_t id) const;

  // Checks of a remote range, or of an 8-byte word (signal, atomic), against the key and the
  // window's peer: nothing is issued when they fail.
  Status check_remote(const WindowState& w, const RemoteKey& k, size_t off, size_t len,
                      const char* what) const;
  // What check_remote() accepts, without saying why not: the key is the window's peer's, not
  // empty, and [off, off + len) is inside it.
  static bool remote_fits(const WindowState& w, const RemoteKey& k, size_t off, size_t len) {
    return (w.peer == nullptr || k.device_token == w.peer->token) && !k.keys.empty() &&
           off <= k.length && len <= k.length - off;
  }
  Status check_remote_word(const WindowState& w, const RemoteKey& k, size_t off,
                           const char* what) const;
  static uint64_t remote_address(const RemoteKey& k, size_t off) {
    return (k.virt_addr ? k.base : k.mr_offset) + off;
  }

  // Tickets and provider operations.
  Result<Ticket> begin(WindowState& w, const char* what);
  TicketState* ticket(WindowState& w, Ticket t);
  // Reserves `n` provider operations (contexts) for ticket `t`; Code::again when too few are free.
  Status reserve(WindowState& w, uint32_t n, Ticket t, fabric::OpType type, Piece& p,
                 const char* what);
  // A provider operation ended (its completion, or its post failed, or it was dropped).
  void finish_op(WindowState& w, uint32_t index, const Status& st);
  // One piece of ticket `t` is locally done (a message handed to the control path).
  void piece_sent(WindowState& w, Ticket t);
  // Ticket `t` failed (all its other parts still settle).
  void fail(WindowState& w, Ticket t, const Status& why);
  // ... also once it settled (a failure the target reports after its done mark covered it: the
  // ticket's record turns failed, and the next quiet() reports it).
  void fail_late(WindowState& w, Ticket t, const Status& why);
  // WindowState::local_clear, the mark under which wait_local answers without the engine:
  // lowered to `t` (a ticket that failed), or moved up over the tickets now locally complete
  // without error (the lowest one not stops it, and so does every ticket that failed: the mark
  // never passes a failure while the window lives).
  static void lower_clear(WindowState& w, Ticket t) {
    if (t < w.local_clear->load(std::memory_order_relaxed)) {
      w.local_clear->store(t, std::memory_order_release);
    }
  }
  void advance_clear(WindowState& w);
  // A settled ticket's error, kept (WindowState::failed).
  static void record_failure(WindowState& w, Ticket t, const Status& why);
  // Completes `t` if every part of it is done at every level (counting its counter).
  void settle(WindowState& w, Ticket t);
  // The stream's done mark moved (or it failed): settle what waited on it.
  void on_stream(OutStream& s);

  // quiet(): the tickets below `target` are complete; then the first error since the last quiet
  // (taken: the next quiet does not report it again; the tickets' own errors stay).
  bool quiet_done(const WindowState& w, Ticket target) const;
  Status take_error(WindowState& w, Ticket target);
  // wait_local() and check(): 1 when done, 0 while not, an error when the ticket failed (every
  // time it is asked).
  Result<int> local_state(WindowState& w, Ticket t, bool remote);
  // A ticket no longer outstanding completed without error: under the mark (which never passes
  // a failure), or neither failed nor forgotten.
  static bool settled_clean(const WindowState& w, Ticket t) {
    if (t < w.local_clear->load(std::memory_order_relaxed)) return true;
    return t > w.forgotten && (w.failed.empty() || w.failed.count(t) == 0);
  }

 private:
  DeviceState& state_;
  OneSided& os_;
};

}  // namespace xport::proto
