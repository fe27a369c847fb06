// One-sided windows to a peer device: puts, gets, signals, counters, atomics and transfers with
// the completion levels of docs/semantics.md ("One-sided"):
//   local      the source may be reused, a fetched value is in place    wait_local(ticket)
//   delivered  a put's data is in the target's memory                     quiet(), check()
//   applied    a signal or atomic executed at the target                 quiet(), counters
// Every operation returns a Ticket. Bad input (a key of another device, a range outside its
// region, an unaligned word) is refused before anything is sent.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "xport/comm.hpp"
#include "xport/region.hpp"

namespace xport {

class Device;

// Names one operation of a window (issued in order from 1).
using Ticket = uint64_t;

enum class SignalOp : uint8_t { add, set };
// strong: applied only after every earlier operation of this device to the peer (any window,
// any rail) is delivered or applied. weak: after the data of its own put (put_signal) only.
// after_data: as strong, except that an earlier signal need only have begun to apply, not
// finished: a signal into staged GPU memory takes copies on the target's GPU, and signals to
// other words overlap them (updates of one word still apply in the order issued). Every
// earlier put's data is in place (GPU memory included) before it applies. NCCL's GIN signals
// are these: a signal covers the puts before it, not the signals.
enum class SignalOrder : uint8_t { strong, weak, after_data };
enum class AtomicOp : uint8_t { add, fetch_add, swap, compare_swap, fetch };

// One put or get of a transfer.
struct TransferItem {
  enum class Kind : uint8_t { put, get } kind = Kind::put;
  const Region* local = nullptr;
  size_t local_offset = 0;
  const RemoteRegion* remote = nullptr;
  size_t remote_offset = 0;
  size_t length = 0;
};
enum class TransferState : uint8_t { pending, done };

// When a put from GPU memory that libxport stages through host memory reads its source
// (docs/semantics.md, "GPU memory"): in_call (the default) copies it in the call, so the buffer
// may be rewritten as soon as the call returns; until_local copies it after the call has
// returned, as progress goes, so the call does not wait for the copy, and the buffer must stay
// as it was until the operation is locally complete (wait_local, check): the contract of GPU
// networking (NCCL's GIN, NVSHMEM), where a kernel reuses a source only once told.
enum class SourceRead : uint8_t { in_call, until_local };

class Window {
 public:
  // Over the channels of an open communicator (either side). The first window to a peer asks
  // it for a stream (one round trip, within `deadline`); later ones share it.
  static Result<std::unique_ptr<Window>> open(const SendComm& comm,
                                              Deadline deadline = Deadline::from_knob());
  static Result<std::unique_ptr<Window>> open(const RecvComm& comm,
                                              Deadline deadline = Deadline::from_knob());
  // Without a communicator: from the peer's connection handle (any of its listeners'), or from
  // a key it exported (keys carry their device's address). RDM providers. Code::resource,
  // naming why, when the target refuses: no free window stream, or no room for another peer
  // device (on shm each endpoint shard holds up to 127 peer devices, libfabric's address table,
  // and a device opens up to XPORT_MAX_SHARDS of them; an all-to-all on shm is served to 160
  // devices, not past it yet: docs/pool.md, "Shards").
  static Result<std::unique_ptr<Window>> open(Device& device, const ConnectionHandle& handle,
                                              Deadline deadline);
  static Result<std::unique_ptr<Window>> open(Device& device, const RemoteRegion& key,
                                              Deadline deadline);
  // Many windows at once (a team's windows to all its peers): every request goes before the
  // first answer is awaited, so the round trips overlap and opening N peers costs about one
  // round trip, not N. Over communicators of one device, or to the devices of keys imported on
  // `device`. One result per element, in order; one that fails (a null element, a communicator
  // of another device, a peer that does not answer by the deadline) does not fail the others.
  static std::vector<Result<std::unique_ptr<Window>>> open_all(
      std::span<const SendComm* const> comms, Deadline deadline = Deadline::from_knob());
  static std::vector<Result<std::unique_ptr<Window>>> open_all(
      Device& device, std::span<const RemoteRegion* const> keys, Deadline deadline);
  ~Window();

  // How this window's puts read sources in staged GPU memory (SourceRead; in_call by default).
  // Applies to operations issued after the call.
  void set_source_read(SourceRead read);

  // Writes local[local_offset, +len) to remote[remote_offset, +len) (striped over the rails
  // when large). Local completion: the source may be reused.
  Result<Ticket> put(const Region& local, size_t local_offset, const RemoteRegion& remote,
                     size_t remote_offset, size_t len);
  // Reads remote[remote_offset, +len) into local[local_offset, +len): in place when complete.
  Result<Ticket> get(const Region& local, size_t local_offset, const RemoteRegion& remote,
                     size_t remote_offset, size_t len);

  // Put then signal: the 64-bit signal word at signal[signal_offset] (8-byte aligned, in the
  // target's registered memory) gets `value` added or set once the put's data (strong: and
  // every earlier operation to the peer) is delivered, however it was striped.
  Result<Ticket> put_signal(const Region& local, size_t local_offset, const RemoteRegion& remote,
                            size_t remote_offset, size_t len, const RemoteRegion& signal,
                            size_t signal_offset, uint64_t value, SignalOp op = SignalOp::add,
                            SignalOrder order = SignalOrder::strong);
  // ... and adds 1 to the local 64-bit word counter[counter_offset] once the signal is applied.
  Result<Ticket> put_signal_counter(const Region& local, size_t local_offset,
                                    const RemoteRegion& remote, size_t remote_offset, size_t len,
                                    const RemoteRegion& signal, size_t signal_offset,
                                    uint64_t value, const Region& counter,
                                    size_t counter_offset, SignalOp op = SignalOp::add,
                                    SignalOrder order = SignalOrder::strong);
  // A signal alone (strong by default: it covers every earlier operation to the peer).
  Result<Ticket> signal(const RemoteRegion& signal, size_t signal_offset, uint64_t value,
                        SignalOp op = SignalOp::add, SignalOrder order = SignalOrder::strong);
  Result<Ticket> signal_counter(const RemoteRegion& signal, size_t signal_offset, uint64_t value,
                                const Region& counter, size_t counter_offset,
                                SignalOp op = SignalOp::add,
                                SignalOrder order = SignalOrder::strong);
  // Sets a remote signal to 0 (ordered as a strong signal).
  Result<Ticket> reset_signal(const RemoteRegion& signal, size_t signal_offset);
  // A local signal (or counter) word: read now, or waited for until it is >= value, compared
  // wrap-safe (value reached when it is at most 2^63 past it). The wait drives progress; it
  // ends with Code::timeout at the deadline, or Code::peer_lost when this window's peer is lost.
  Result<uint64_t> read_signal(const Region& signal, size_t signal_offset) const;
  Status wait_signal(const Region& signal, size_t signal_offset, uint64_t value,
                     Deadline deadline);
  Status wait_counter(const Region& counter, size_t counter_offset, uint64_t value,
                      Deadline deadline);

  // Atomics on the peer's 64-bit word at remote[remote_offset] (8-byte aligned): add,
  // fetch_add, swap, compare_swap (operand replaces the word if it equals `compare`), fetch.
  // The old value goes to *result (may be null) by the time the ticket is locally complete;
  // *result must stay valid until then. Native (FI_ATOMIC) or emulated, per device:
  // native_atomics().
  Result<Ticket> atomic(AtomicOp op, const RemoteRegion& remote, size_t remote_offset,
                        uint64_t operand, uint64_t compare = 0, uint64_t* result = nullptr);
  bool native_atomics() const;

  // A batch of puts and gets as one ticket, and an optional notification (at most 256 bytes)
  // delivered to the peer after the transfer's data (take_notifications() there). Code::again
  // while too few of the window's 256 operation contexts are free (quiet and retry); a batch
  // that needs more than 256 (one per item, one per stripe of a striped item) is refused with
  // Code::invalid_argument: split it.
  Result<Ticket> post(const std::vector<TransferItem>& items,
                      const std::vector<uint8_t>& notification = {});
  // Without blocking: done once every part is delivered (gets: in place). A failed ticket's
  // error every time it is asked, before or after quiet() (docs/semantics.md, "Failed
  // operations"; beyond the window's last 16384 failures: invalid_argument, never done).
  Result<TransferState> check(Ticket ticket);
  // Notifications the window's peer sent to this device, oldest first.
  std::vector<std::vector<uint8_t>> take_notifications();

  // Operations issued after a fence to the peer start only once every one issued before it is
  // delivered or applied (across rails and windows). Never blocks.
  Status fence();
  // Drives progress until every operation issued on this window before the call is delivered
  // or applied (acknowledged by the target), or fails. Returns at once when nothing is
  // outstanding; the first error since the last quiet, if any: each failure is reported by one
  // quiet (the tickets keep theirs for check() and wait_local()).
  Status quiet(Deadline deadline);
  // Drives progress until the operation is locally complete, or failed: then its error, every
  // time it is asked (as check()).
  Status wait_local(Ticket ticket, Deadline deadline);

  uint64_t issued() const;     // provider operations posted (stripes, reads, native atomics)
  uint64_t completed() const;  // ... and completed

 private:
  friend struct api::Access;
  std::shared_ptr<proto::Engine> engine_;
  uint32_t id_ = 0;
  std::shared_ptr<gpu::StagedArrivals> staged_;  // gets into staged GPU memory, by ticket
  // The engine's mark under which every ticket is locally complete without error: wait_local
  // answers those without an engine call (but every 16th, which makes a progress pass).
  std::shared_ptr<const std::atomic<uint64_t>> local_clear_;
  std::atomic<uint32_t> quick_{0};
  std::atomic<SourceRead> source_read_{SourceRead::in_call};
};

}  // namespace xport
