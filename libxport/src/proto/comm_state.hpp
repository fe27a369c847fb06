// A communicator's state (its send and receive slots, early arrivals, messages stashed before
// its CONN_ACK), a listener's and a flush's, and the records of posts queued for the provider.
// Read and written under the engine lock, like everything in state.hpp.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/word_mutex.hpp"
#include "fabric/op_context.hpp"
#include "memory/registry.hpp"
#include "pool/channel.hpp"
#include "pool/comm_table.hpp"
#include "pool/peer.hpp"
#include "pool/pool.hpp"
#include "proto/one_sided/state.hpp"
#include "proto/wire.hpp"
#include "rail/rail.hpp"
#include "rail/stripes.hpp"
#include "xport/deadline.hpp"
#include "xport/provider.hpp"

namespace xport::proto {

using Clock = std::chrono::steady_clock;
using memory::RegionRef;
using pool::CommId;

enum class Phase : uint8_t { connecting, ready, failed };

// A send request. done() once nothing of it is posted or queued any more and it will start
// nothing new: only then may its slot (and its op contexts) be reused.
struct SendSlot {
  bool active = false;  // issued, and test() has not reported it done yet
  uint64_t seq = 0;
  const uint8_t* buf = nullptr;
  size_t len = 0;
  uint32_t tag = 0;
  RegionRef region;  // the registration stays while any operation may use it
  bool eager = false;
  bool waiting_credit = false;  // eager: queued until the receiver grants credit for it
  bool queued = false;          // eager: queued for a later post (provider busy, no room)
  bool rts_sent = false;        // rendezvous: the receiver was told of it
  bool cts_consumed = false;    // rendezvous: its clear-to-send arrived and was used
  bool finished = false;        // nothing more will be started for it
  bool abort_owed = false;      // the receiver must hear of its failure (once done)
  uint32_t outstanding = 0;     // its operations posted to the provider or queued
  uint32_t stripes = 0;         // rendezvous: writes this message was cut into
  uint32_t stripes_done = 0;    // ... and how many completed (successfully or not)
  uint32_t stripes_posted = 0;  // bit i: stripe i is with the provider (its completion due)
  Status error;
  std::vector<fabric::OpContext> ctx;  // one per stripe; eager messages use ctx[0]
  bool done() const { return finished && outstanding == 0; }
  // test() or wait() reported it: the slot is free again, the Region let go; its error, if any.
  Status retire() {
    active = false;
    region.reset();
    return std::exchange(error, Status());
  }
  // Back to a fresh slot, keeping ctx's storage (sized per rail once); a no-op error is not
  // reassigned (this runs on every isend).
  void reset() {
    active = false;
    seq = 0;
    buf = nullptr;
    len = 0;
    tag = 0;
    region.reset();
    eager = waiting_credit = queued = rts_sent = cts_consumed = finished = abort_owed = false;
    outstanding = stripes = stripes_done = stripes_posted = 0;
    if (!error.ok()) error = Status();
  }
};

// An injected send: done before isend returned, so its SendSlot is free at once and what is left
// is to report it, once, to test() or wait(), which do so without the engine lock
// (CommState::take_injected). `seq1` is its sequence number + 1 while it waits to be reported,
// 0 once it was (or while nothing was injected here); `len` its length. isend, under the lock,
// fills a ticket only when it is 0 and counts a filled one as an outstanding send.
struct InjectedTicket {
  std::atomic<uint64_t> seq1{0};
  std::atomic<uint64_t> len{0};
};

// The most buffers of one grouped receive (xport::kMaxGroupedRecvs).
inline constexpr uint32_t kMaxGroup = 8;

// One sequence number of the receiving side. A receive request posts a group of n buffers at
// n consecutive sequence numbers (n = 1 for a plain receive). The slot of sequence s holds two
// things: the buffer posted as the group's (s - group_base)-th (`posted_*`), and the state of
// the sender's message s, which lands in the group's buffer `sub` once it is assigned
// (buf/cap/region are then that buffer's). Groups whose buffers all carry one tag assign
// message i to buffer i when posted; other groups as the messages' tags become known
// (proto/two_sided/matching.hpp).
struct RecvSlot {
  bool active = false;
  uint64_t seq = 0;
  uint64_t group_base = 0;   // sequence number of the group's first buffer (names the request)
  uint8_t group_n = 1;       // buffers in the group
  // The buffer posted at this sequence number.
  uint8_t* posted_buf = nullptr;
  size_t posted_cap = 0;
  RegionRef posted_region;
  uint32_t posted_tag = 0;
  // Message `seq`.
  bool assigned = false;       // its buffer is known (buf, cap, region, want_tag below)
  uint8_t sub = 0;             // ... the group's buffer it lands in
  uint32_t want_tag = 0;       // ... whose tag it must carry
  bool tag_known = false;      // the message's tag arrived (eager data, RTS)
  uint32_t tag = 0;
  bool rts_pending = false;    // not yet assigned: its sender asked (RTS) for a clear-to-send
  uint8_t* buf = nullptr;
  size_t cap = 0;
  RegionRef region;
  bool cts_sent = false;       // a clear-to-send went out: the sender may write into buf
  uint32_t cq_reserved = 0;    // CQ room held on each rail for the writes the CTS allows
  size_t bytes = 0;            // received so far (4-byte CQ data: the sum of the stripes)
  uint32_t stripes_seen = 0;   // rendezvous writes that landed
  bool finished = false;
  Status error;
  bool done() const { return finished; }
  // Its group was reported: the slot is free again, both Regions let go (the error is taken
  // by whoever reports it).
  void retire() {
    active = false;
    region.reset();
    posted_region.reset();
  }
  // Back to a fresh slot (this runs on every irecv: a no-op error is not reassigned).
  void reset() {
    active = false;
    seq = 0;
    group_base = 0;
    group_n = 1;
    posted_buf = nullptr;
    posted_cap = 0;
    posted_region.reset();
    posted_tag = 0;
    assigned = false;
    sub = 0;
    want_tag = 0;
    tag_known = false;
    tag = 0;
    rts_pending = false;
    buf = nullptr;
    cap = 0;
    region.reset();
    cts_sent = false;
    cq_reserved = 0;
    bytes = 0;
    stripes_seen = 0;
    finished = false;
    if (!error.ok()) error = Status();
  }
};

struct Cts {
  uint64_t seq = 0;
  uint64_t raddr = 0;
  uint64_t length = 0;
  uint32_t tag = 0;                          // the tag the receive buffer takes
  uint32_t rails = 0;                        // keys carried
  std::array<uint64_t, kMaxRails> keys{};    // the receive buffer's key on each rail
};

struct EarlyCts {
  bool valid = false;
  Cts cts;
};

// A sender's request-to-send that arrived before the matching receive was posted.
struct EarlyRts {
  bool valid = false;
  uint64_t seq = 0;
  uint32_t tag = 0;
};

// An eager message that arrived before its receive: in the receive buffer it came in (held, and
// reposted once consumed), or copied out when its endpoint's holding budget was spent.
struct Unexpected {
  bool valid = false;
  uint64_t seq = 0;
  memory::Buffer* buffer = nullptr;
  rail::RailEndpoint* owner = nullptr;
  size_t offset = 0;  // payload offset in the buffer (the header's size, or 0 when headerless)
  size_t len = 0;
  uint32_t tag = 0;
  std::vector<uint8_t> copy;
  const uint8_t* data() const { return buffer != nullptr ? buffer->data + offset : copy.data(); }
};

// A control message that reached a communicator still waiting for its CONN_ACK (it may take
// another rail and overtake the ACK): replayed once the ACK is in.
struct Stashed {
  MsgHeader header;
  std::vector<uint8_t> body;
};

struct CommState {
  CommId id;
  CommId peer_comm;  // the communicator at the other end
  bool is_send = false;
  Phase phase = Phase::connecting;
  Status error;  // why the communicator failed
  pool::Peer* peer = nullptr;        // the remote device (a reference is held)
  std::vector<pool::Path> paths;     // rails shared with the peer (rail i pairs with its rail i)
  pool::Channel* connection = nullptr;  // connected endpoints: its pooled connection (shared)
  uint32_t next_data = 0;     // round-robin over paths for eager messages
  uint32_t next_control = 0;  // round-robin over paths for control messages
  uint32_t next_stripe = 0;   // rotating first rail of striped writes
  rail::StripePlan plan;      // the sending side's striping parameters
  uint16_t depth = 0;         // outstanding requests agreed with the peer (set_depth)
  uint16_t depth_mask = 0;    // depth - 1 where depth is a power of two, else 0
  bool depth_pow2 = false;
  void set_depth(uint16_t d) {
    depth = d;
    depth_pow2 = d != 0 && (d & (d - 1)) == 0;
    depth_mask = depth_pow2 ? static_cast<uint16_t>(d - 1) : 0;
  }
  // The slot of sequence number `seq` (seq % depth): a mask where depth is a power of two (the
  // default 64), a division otherwise; several run per message, on its critical path.
  uint16_t slot_of(uint64_t seq) const {
    return static_cast<uint16_t>(depth_pow2 ? (seq & depth_mask) : seq % depth);
  }
  size_t eager_max = 0;       // largest eager message (min of both sides)
  uint64_t next_seq = 0;
  std::vector<SendSlot> sends;
  // Sender: one ticket per send slot, by slot_of(seq), made with the communicator and never
  // moved, so test() and wait() may read them without the lock. (They are made at the depth the
  // connector asks for; the peer's answer may lower it, before the SendComm is handed out, so
  // slot_of() never changes while a ticket can be read.)
  std::unique_ptr<InjectedTicket[]> injected;
  std::atomic<uint32_t> quick_answers{0};  // lock-free reports: every 16th makes a pass all the same
  void make_tickets(uint16_t n) { injected = std::make_unique<InjectedTicket[]>(n); }
  InjectedTicket* ticket_of(uint64_t seq) const {
    return injected ? &injected[slot_of(seq)] : nullptr;
  }
  // Injected send `seq`, not reported yet: reported now (true, and its length), to one caller
  // only however many threads ask. Safe without the engine lock.
  bool take_injected(uint64_t seq, size_t* len) {
    InjectedTicket* t = ticket_of(seq);
    uint64_t want = seq + 1;
    if (t == nullptr || t->seq1.load(std::memory_order_acquire) != want) return false;
    // Read before the ticket is let go: once it is 0, isend may fill it again.
    const uint64_t n = t->len.load(std::memory_order_relaxed);
    if (!t->seq1.compare_exchange_strong(want, 0, std::memory_order_acq_rel)) return false;
    *len = static_cast<size_t>(n);
    return true;
  }
  std::vector<RecvSlot> recvs;
  std::vector<EarlyCts> early_cts;
  std::vector<EarlyRts> early_rts;
  std::vector<Unexpected> unexpected;
  // Eager flow control (docs/semantics.md): the sender may have message `seq` on the wire only
  // while seq < credit_limit = (receives the peer reported posted) + depth, so the receiver
  // never holds more than `depth` unexpected messages of this communicator.
  uint64_t credit_limit = 0;          // sender
  std::deque<uint16_t> credit_wait;   // sender: eager slots queued for credit, in seq order
  uint64_t reported_next = 0;         // receiver: receives reported posted to the peer
  // Connection set-up.
  uint64_t nonce = 0;           // of the CONN_REQ (connector) or the one it answered (listener)
  uint64_t listener_token = 0;
  std::deque<Stashed> stash;    // connector: control messages that overtook the CONN_ACK
  Clock::time_point connect_started{};
  bool made_channels = false;   // RDM connector: it made the peer's first channel (a primary)
  // RDM with XPORT_POOL_GROUPS=0 (docs/pool.md): this communicator's own data channels, by
  // rail (its own endpoint, or the rail's towards the peer's own one); in the pool, released
  // when it is erased. Its paths' data channels are these.
  std::vector<pool::Channel*> own;
  bool owns(const pool::Channel* ch) const {
    return std::find(own.begin(), own.end(), ch) != own.end();
  }
  // Closing.
  bool user_closed = false;
  bool peer_closed = false;     // receiver: the sender closed after peer_sent messages
  uint64_t peer_sent = 0;
  Clock::time_point linger_until{};  // receiver: how long late writes are waited for
  uint32_t outstanding = 0;     // operations posted or queued that name this communicator
};

// A message to the peer's end of communicator `c` (its index and generation) from this end: the
// header every two-sided and connection message starts from.
inline MsgHeader comm_header(MsgType t, const CommState& c, uint16_t slot = 0, uint64_t seq = 0) {
  MsgHeader h{};
  h.type = static_cast<uint8_t>(t);
  h.version = kWireVersion;
  h.dst_comm = c.peer_comm.index;
  h.dst_gen = c.peer_comm.gen;
  h.src_comm = c.id.index;
  h.src_gen = c.id.gen;
  h.slot = slot;
  h.seq = seq;
  return h;
}

struct ListenerState {
  uint64_t token = 0;
  std::deque<CommId> ready;  // accepted recv comms, not yet taken by accept()
  size_t pending = 0;        // connected endpoints: accepted, waiting for FI_CONNECTED
};

// A flush: one read per rail of its communicator into that rail's flush target.
struct FlushState {
  uint64_t id = 0;
  CommId comm;
  RegionRef region;
  uint32_t remaining = 0;
  Status error;
  std::vector<fabric::OpContext> ctx;
  std::vector<rail::RailEndpoint*> eps;  // the data endpoint of each read
  std::vector<uint8_t> pending;          // each read: still with the provider
  bool abandoned = false;  // its waiter gave up: erase once its reads complete
};

// Who waits on a queued control message: its failure fails them.
struct Dependent {
  enum class Kind : uint8_t { none, send, recv, comm } kind = Kind::none;
  CommId comm;
  uint16_t slot = 0;
  uint64_t seq = 0;
};

// Posts that met -FI_EAGAIN, found no bounce buffer or no CQ room, each in its part's
// PendingQueue (pending_queue.hpp): retried by progress (never by spinning inside a call) until
// posted, dropped when their owner is gone, failed (with their owner) after
// XPORT_EAGAIN_TIMEOUT_MS.
struct PendingControl {
  pool::Channel* ch = nullptr;
  pool::Peer* peer = nullptr;  // a reference is held (RDM channels belong to their peer)
  CommId owner;                // counted in its `outstanding` (connected channels are its own)
  MsgHeader hdr{};
  std::vector<uint8_t> body;
  Dependent dep;
};

struct PendingEager {
  CommId comm;
  uint16_t slot = 0;
  uint64_t seq = 0;
  pool::Channel* ch = nullptr;
  memory::Buffer* buffer = nullptr;  // headered: the bounce buffer it is in (else nullptr)
};

struct PendingStripe {
  CommId comm;
  uint16_t slot = 0;
  uint64_t seq = 0;
  uint32_t stripe = 0;
  uint64_t raddr = 0;
  std::array<uint64_t, kMaxRails> keys{};
};

struct PendingRx {
  rail::RailEndpoint* ep = nullptr;
  memory::Buffer* buffer = nullptr;
};

}  // namespace xport::proto
