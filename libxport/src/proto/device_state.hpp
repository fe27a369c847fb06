// DeviceState: the state of one device's protocol engine, shared by its parts (engine.hpp lists
// them): configuration, rails, peers, the comm table (a communicator's requests: comm_state.hpp),
// windows, flushes, and the engine lock (posts waiting for the provider are in their parts'
// queues). Everything here is read and written under DeviceState::mu (or by the only thread of
// a thread_safe = false device).
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
#include "proto/comm_state.hpp"
#include "proto/hook.hpp"
#include "proto/one_sided/state.hpp"
#include "proto/wire.hpp"
#include "rail/rail.hpp"
#include "rail/scheduler.hpp"
#include "rail/stripes.hpp"
#include "xport/deadline.hpp"
#include "xport/provider.hpp"

namespace xport::proto {

using Clock = std::chrono::steady_clock;
using memory::RegionRef;
using pool::CommId;

// shm: the provider queue of a rail's door (RailConfig::door_queue): a pass maps at most this
// many commands' senders there, half of them first requests (kDoorRoom is kept for them).
inline constexpr size_t kShmDoorQueue = 64;

struct EngineConfig {
  size_t eager_max = 8192;
  bool headerless_eager = true;  // where the provider has 8-byte CQ data
  uint16_t max_requests = 64;
  size_t rx_buffers = 256;
  size_t tx_buffers = 256;
  size_t cq_batch = 32;
  size_t cq_entries = 8192;  // CQ room beyond the bounce buffers (XPORT_CQ_ENTRIES)
  size_t max_comms = 4096;
  // Channel pool (docs/pool.md).
  uint32_t pool_groups = 1;        // 0: no sharing
  uint32_t pool_channels = 4;      // per group and rail
  uint32_t pool_depth_multiplier = 2;
  uint32_t shard_peers = 0;  // peer devices per endpoint shard (0: as the AV holds)
  uint32_t max_shards = 128;  // endpoint shards per rail
  size_t listen_backlog = 128;
  std::chrono::nanoseconds eagain_timeout{std::chrono::seconds(10)};
  std::chrono::milliseconds keepalive{1000};
  std::chrono::milliseconds peer_timeout{30000};
  std::chrono::milliseconds close_linger{1000};
  bool thread_safe = true;
  rail::StripePlan stripe;
  std::chrono::milliseconds rail_check{100};
  std::chrono::milliseconds rail_retry{1000};
  // One-sided windows (docs/knobs.md): atomics mode, credits of a stream, work per progress pass
  // on their queues, and the test knob narrowing sequence numbers.
  enum class Atomics : uint8_t { automatic, native, emulated } atomics = Atomics::automatic;
  uint32_t window_credits = 128;
  size_t progress_batch = 64;
  unsigned test_seq_bits = 0;
  // Waits (XPORT_WAIT, XPORT_WAIT_SPIN_US): sleep on the CQs' wait objects after the spin,
  // or spin; rails' CQs get a wait object (FI_WAIT_FD) only where waits block by default.
  bool block_waits = false;
  std::chrono::microseconds wait_spin{50};
  // XPORT_SPIN_GATHER_NS (between_passes): the knob (-1: auto), and what the engine's
  // provider gets from it (spin_gather_for).
  int64_t spin_gather_knob = -1;
  std::chrono::nanoseconds spin_gather{0};
  std::chrono::nanoseconds spin_gather_for(std::string_view provider) const;
  // XPORT_CONTROL_ENDPOINT: RDM rails' control messages on an endpoint of their own or on the
  // data endpoint (separate_control() decides auto for a provider).
  enum class ControlEndpoint : uint8_t { automatic, shared, separate };
  ControlEndpoint control_endpoint = ControlEndpoint::automatic;
  bool separate_control(std::string_view provider) const;
  static EngineConfig from_knobs();
  // The rail layout this config gives every rail (bounce buffers sized for an eager message or
  // the largest control message, behind a header; the CQ sized for the buffers and
  // cq_entries operations); device_registered_bytes() sizes from it too.
  // `provider` decides an automatic control endpoint (empty: as one with traffic classes).
  rail::RailConfig rail_config(std::string_view provider = {}) const;
};

class DeviceState;

// The engine lock: DeviceState::mu, with the holding thread recorded so that a registration
// released by the engine's own operation (already under the lock) does not take it twice.
class Lock {
 public:
  explicit Lock(DeviceState& c);
  // Takes the lock only if it is free at once (owns() says whether it did).
  Lock(DeviceState& c, std::try_to_lock_t);
  ~Lock();
  bool owns() const;
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;
  void unlock();

 private:
  DeviceState* state_;
  bool held_ = false;
};

// Counters that live under the engine lock.
struct EngineCounters {
  uint64_t routing_misses = 0;   // messages or completions for no known communicator/request
  uint64_t late_arrivals = 0;    // of them: traffic for a communicator already closed
  uint64_t peers_lost = 0;       // peers declared dead (keepalive or provider errors)
  uint64_t keepalives_sent = 0;
  uint64_t deferred_posts = 0;   // posts queued for lack of provider room, buffers or CQ room
  uint64_t overflow_copies = 0;  // unexpected messages copied out of their receive buffer
  // One-sided windows.
  uint64_t window_acks_sent = 0;     // win_done / win_result messages sent (target)
  uint64_t window_ops_held = 0;      // operations held at the initiator (fence, order, credits)
  uint64_t window_take_backs = 0;    // unused window credits taken back from idle streams
  uint64_t window_credit_asks = 0;   // credits asked for by this device's streams (initiator)
  uint64_t signals_applied = 0;      // signals applied here (target)
  uint64_t atomics_native = 0;       // native atomics issued
  uint64_t atomics_emulated = 0;     // emulated atomics issued
  uint64_t atomics_applied = 0;      // emulated atomics applied here (target)
  uint64_t notifications = 0;        // notifications delivered here (target)
};

class Control;
class Connections;
class Eager;
class Rendezvous;
class Matching;
class OneSided;
class Flusher;
class PeerHealth;
class Engine;

class DeviceState {
 public:
  EngineConfig config;
  Capabilities caps;
  uint64_t device_token = 0;
  size_t cq_data_bytes = 0;
  bool headerless_eager = false;  // eager messages carry no header (8-byte CQ data)
  size_t inject_size = 0;
  size_t iov_limit = 1;           // buffers one send may gather (tx_attr->iov_limit)
  bool rx_cq_data_mode = false;   // writes with data consume a posted receive

  core::WordMutex mu;
  // The thread holding mu (none by default). Atomic: any thread asks whether it is the holder
  // (only the holder itself can find its own id there, so relaxed order is enough).
  std::atomic<std::thread::id> holder{};
  bool in_progress = false;
  // The device closed (Engine::shutdown): no pass, injected input or exported key after it.
  bool shut_down = false;

  // Declaration order is teardown order reversed: everything that names channels and endpoints
  // goes before the peers, the peers before the rails.
  std::vector<std::unique_ptr<rail::Rail>> rails;
  rail::Scheduler scheduler{rails};  // (holds a reference to rails only)
  std::unique_ptr<memory::Registry> registry;
  std::map<uint64_t, std::unique_ptr<pool::Peer>> peers;  // by device token
  std::unique_ptr<pool::Pool> pool;  // connected endpoints' connections (pool/pool.hpp)
  // Connections no communicator uses any more, shut down but not yet closed: their buffers'
  // completions and their FI_SHUTDOWN event may still come (an endpoint freed earlier could
  // have its address reused by a new connection while an event naming the old one is queued).
  std::vector<std::unique_ptr<pool::Channel>> retiring;
  // Endpoints closed before their last completions came: their buffers' memory stays.
  std::vector<std::unique_ptr<rail::RailEndpoint>> stale_endpoints;
  std::unique_ptr<pool::CommTable<CommState>> comms;
  std::map<uint64_t, ListenerState> listeners;
  std::map<uint32_t, std::unique_ptr<WindowState>> windows;
  uint32_t next_window = 1;
  // One-entry caches of Windows::find and Streams::find (an operation looks its window and
  // stream up several times from post to completion); cleared where their entry is erased.
  mutable uint32_t last_window_id = 0;
  mutable WindowState* last_window = nullptr;
  mutable uint32_t last_stream_id = 0;
  mutable OutStream* last_stream = nullptr;
  // One-sided streams (one_sided/state.hpp): this device's, by id, and its peers', by index.
  std::map<uint32_t, std::unique_ptr<OutStream>> out_streams;
  uint32_t next_out_stream = 1;
  std::vector<std::unique_ptr<InStream>> in_streams;  // index 0 unused
  // The indexes of the live entries of in_streams, in no order: progress walks these, not the
  // table (4096 entries with 8-byte CQ data, most of them empty).
  std::vector<uint16_t> in_stream_live;
  std::vector<uint8_t> in_stream_gen;
  std::deque<uint16_t> in_stream_free;
  bool native_atomics = false;  // FI_ATOMIC negotiated and usable, and XPORT_ATOMICS allows it
  // RDM, XPORT_POOL_GROUPS=0, no FI_MR_ENDPOINT: every communicator opens data endpoints of its
  // own (docs/pool.md).
  bool own_data_endpoints = false;
  // RDM, no FI_MR_ENDPOINT: peers past a shard's room get another shard (rail/rail.hpp).
  bool shards = false;
  std::map<uint64_t, std::unique_ptr<FlushState>> flushes;
  uint64_t next_flush = 1;
  EngineCounters counters;

  // The control-message sender every part uses (set by the Engine). The parts call each other
  // through the references the Engine wires into them (Eager::wire, ...), not through here.
  Control* control = nullptr;
  // What the one-sided wing does when a communicator or a peer fails here, or rails were lost
  // (window streams over it, to it, and their messages sent again): bound by the Engine.
  Hook<void(CommId, const Status&)> windows_comm_failed;
  Hook<void(pool::Peer&, const Status&)> windows_peer_failed;
  Hook<void(const pool::Peer*)> windows_rails_lost;

  bool held_by_me() const {
    return holder.load(std::memory_order_relaxed) == std::this_thread::get_id();
  }
  bool connected_endpoints() const { return rails[0]->connected_endpoints(); }
  bool expired(Clock::time_point since) const {
    return Clock::now() - since > config.eagain_timeout;
  }

  // Which rails carry traffic towards a peer, and round-robin over them: the rail scheduler
  // (rail/scheduler.hpp), given the rails the peer reported down at its end.
  static uint32_t down_at(const pool::Peer* peer) { return peer != nullptr ? peer->rails_down : 0; }
  bool usable(size_t rail, const pool::Peer* peer) const {
    return scheduler.usable(rail, down_at(peer));
  }
  const pool::Path& pick(std::vector<pool::Path>& paths, uint32_t& cursor,
                         const pool::Peer* peer) const {
    return paths[scheduler.pick(paths.size(), cursor, down_at(peer))];
  }
  pool::Channel* control_path(CommState& c) const {
    return pick(c.paths, c.next_control, c.peer).control;
  }
  pool::Channel* data_path(CommState& c) const { return pick(c.paths, c.next_data, c.peer).data; }
  using RailList = std::array<uint32_t, kMaxRails>;
  uint32_t healthy_rails(size_t limit, RailList& out, const pool::Peer* peer) const {
    return scheduler.healthy(limit, out.data(), down_at(peer));
  }
  Status no_rail_error(size_t limit, const pool::Peer*, const char* what) const {
    return scheduler.none_usable(limit, what);
  }
  Status check_usable(const std::vector<pool::Path>& paths, const pool::Peer* peer,
                      const char* what) const {
    RailList r;
    return healthy_rails(paths.size(), r, peer) > 0 ? Status()
                                                    : no_rail_error(paths.size(), peer, what);
  }
  // A rail went out of (or back into) service here: every peer is told, so it stops (or
  // resumes) using its end of it towards this device.
  void announce_rail_state(uint32_t rail, bool in_service);
  // A rail of `peer` (or, with peer == nullptr, of this device) went out of service: messages
  // the other side may never have seen on it — clear-to-sends, requests-to-send, credits, and
  // window streams' requests, operations, acknowledgements and closes — go again on the rails
  // left (each is idempotent at its receiver).
  void resend_after_rail_loss(const pool::Peer* peer);
  // Fatal errors (Code::closed: the domain or NIC failed) quarantine the rail they came from: a
  // post the domain refuses at once, error completions after kFatalInARow in a row (one failed
  // operation is that operation's error, not the rail's).
  static constexpr uint32_t kFatalInARow = 3;
  void note_failure(uint32_t rail, const Status& status, bool from_post = true);

  // The communicator a message names: exact id and generation, the expected side and peer
  // comm, connected; nullptr (a routing miss, counted) otherwise.
  enum class Side : uint8_t { send, recv, either };
  CommState* route(const MsgHeader& h, Side side);
  // Connected endpoints: an accepted communicator becomes ready, for its listener's accept(), at
  // its connection's FI_CONNECTED event, or at the first message on it where that comes first (a
  // pass reads the CQs before the event queue, and the connector sends as soon as its own event
  // is in; the message proves the connection). Code::closed where the listener is gone. Returns
  // the communicator, nullptr where that failure freed it.
  CommState* ready_accepted(CommState& c);
  // An operation's owner by id and generation (nullptr once it is gone).
  CommState* comm(CommId id) const { return comms->find(id); }
  // Counted where the traffic was dropped; the debug log names the place.
  // (__builtin_FILE/LINE: clang 14 with libstdc++ 12 has no std::source_location.)
  void miss(bool late = false, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    ++counters.routing_misses;
    if (late) ++counters.late_arrivals;
    log_miss(late, file, line);
  }
  static void log_miss(bool late, const char* file, int line);

  // Request and communicator outcomes.
  // A send fails; a receiver that knows of it (RTS, or its CTS used) hears of it by ABORT once
  // nothing of it is in flight, unless it refused the message itself (tell_receiver = false).
  void fail_send(CommState& c, SendSlot& s, Status why, bool tell_receiver = true);
  void fail_recv(CommState& c, RecvSlot& r, Status why);
  void fail_comm(CommState& c, Status why);
  // Every communicator and window of a peer fails (it died, or cannot be reached).
  void fail_peer(pool::Peer& p, Status why);
  // Accounting of operations that name a request: taken when posted or queued, given back when
  // completed or dropped; a request (and a closed communicator) moves on when the last goes.
  void hold(CommState& c, SendSlot& s) {
    ++s.outstanding;
    ++c.outstanding;
  }
  void release(CommState& c, SendSlot& s);
  void hold(CommState& c) { ++c.outstanding; }
  void release(CommState& c);
  // Once a send is done: the ABORT it owes the receiver goes out.
  void settle(CommState& c, SendSlot& s);
  // What a connection or window request says of this device: its token, stripe and eager
  // settings, request limit; `nonce` names the request.
  ConnBody conn_body(uint64_t nonce) const;
  // Gives back the CQ room a receive's clear-to-send reserved.
  void release_cts_room(CommState& c, RecvSlot& r);
  // Erases a closed communicator once nothing of it can still be in flight.
  void maybe_erase(CommState& c);
  void erase_comm(CommState& c);
  // Lets go of a communicator's own data channel: out of the pool; an endpoint of its own is
  // retired (closed once drained), the peer's address leaves the AV.
  void drop_own(pool::Channel* ch);
  // Removes a channel's peer address from its rail's AV (RDM; none for connections).
  void forget_address(const pool::Channel& ch);

  // Peers: found by token or made; a reference per user; retired (AV entries removed, channels
  // freed) with the last one. A peer made for a device of this process that has closed is
  // made closed (device_closed_in_process).
  pool::Peer* peer_for(uint64_t token);
  // A device of this process closed (its engine told the others, Engine::peer_closed): the
  // peer is marked closed, its channels gone, and everything of it fails with Code::closed.
  void close_peer(pool::Peer& p, const Status& why);
  // Code::closed naming the peer when it is a device of this process that closed (nothing may
  // be sent to it: callers about to post to it ask first), else ok.
  static Status check_open(const pool::Peer& p, const char* what);
  void ref(pool::Peer* p) {
    if (p != nullptr) ++p->refs;
  }
  void unref(pool::Peer* p);
  void retire_peer(pool::Peer& p);
  // Rail i of `p` pairs with the remote rail i over the rails both have, from the shard `p`
  // lives on there (place); channels are made for rails not yet known, and again where the
  // peer's address changed (a target answers from the shard it chose for this device, not the
  // door the request went to). `addresses` come from a CONN_REQ or CONN_ACK. Code::resource,
  // making nothing, when no shard has room for `p` and none can be opened.
  Status set_paths(pool::Peer& p, const std::vector<RailAddresses>& addresses);
  // Room kept free in shard 0's address table of a bounded provider (shm): for answering the
  // peers refused (refusal_channel), and for the endpoints whose first request the provider maps
  // there before libxport reads it (each a peer living on another shard; release_knock).
  static constexpr size_t kRefusalRoom = 8;
  static constexpr size_t kDoorRoom = 64;
  // CQ entries a new shard leaves free beyond its receive buffers (for the operations of peers).
  static constexpr size_t kShardCqSlack = 64;
  // Address-table entries promised to a peer placed on a shard: its data and control endpoints'
  // (kPeerAddresses); one placed by a first request to its door (connect, window) keeps the
  // door's entry besides, where the peer answers from a shard of its own (kDoorPeerAddresses).
  // A shard's room is counted by these promises, not by what its peers hold so far: a device
  // asking many peers at once places them all before any answer brings their addresses.
  static constexpr uint8_t kPeerAddresses = 2;
  static constexpr uint8_t kDoorPeerAddresses = 3;
  // The shard `p` lives on at `rail`: its own, else the first with room for `entries` address
  // entries more (opening one where shards may be: Code::resource naming the limit when none
  // can be had). A peer placed already keeps its shard; its promise grows to `entries`.
  Result<rail::Shard*> place(pool::Peer& p, size_t rail, uint8_t entries = kPeerAddresses);
  // This device's addresses towards `p`: the endpoints of the shard it lives on at each rail
  // (placed there now if it was not).
  Result<std::vector<RailAddresses>> local_addresses(pool::Peer& p);
  // A request from `p` came through `ep` (a door: shard 0's control endpoint) though `p` lives
  // on another shard: the provider mapped its sending endpoint into ep's address table (shm),
  // which nothing would free; inserting and removing that address frees it.
  void release_knock(pool::Peer& p, const rail::RailEndpoint* ep,
                     const std::vector<RailAddresses>& addresses);
  // The channel a refusal to `p` goes on: its rail-0 control path, made from `addresses` (the
  // request's) in the room kept for refusals when set_paths could not make it; nullptr when
  // even that is full. Marks `p` refused: its address goes as soon as nothing names it (the
  // next PeerHealth sweep, no linger; at once when a later refusal finds that room used up).
  pool::Channel* refusal_channel(pool::Peer& p, const std::vector<RailAddresses>& addresses);
  // A channel to the door (control) address of `p`'s handle on rail 0, from the shard `p`
  // lives on (placed there now, kDoorPeerAddresses promised), owned by `p`: the first request's.
  Result<pool::Channel*> door_channel(pool::Peer& p, const std::vector<uint8_t>& address);

 private:
  bool shard_has_room(const rail::Shard& s, size_t entries) const;
  // After `p`'s paths are set, its promise on each rail's shard becomes the entries it holds
  // there (a door entry the answer made stale stays until the peer retires).
  void settle_promises(pool::Peer& p);
  Result<pool::Channel*> channel_on(pool::Peer& p, rail::Shard& shard, size_t rail, bool control,
                                    const std::vector<uint8_t>& address);
};

// Whether a device of this process with this token has closed (engine.cc keeps the list of
// this process's engines, and the tokens of those that closed).
bool device_closed_in_process(uint64_t token);

// Inline: taken on every call of the public API.
inline Lock::Lock(DeviceState& c) : state_(&c) {
  if (!c.config.thread_safe) return;
  c.mu.lock();
  c.holder.store(std::this_thread::get_id(), std::memory_order_relaxed);
  held_ = true;
}

inline Lock::Lock(DeviceState& c, std::try_to_lock_t) : state_(&c) {
  if (!c.config.thread_safe || !c.mu.try_lock()) return;
  c.holder.store(std::this_thread::get_id(), std::memory_order_relaxed);
  held_ = true;
}

inline bool Lock::owns() const { return held_ || !state_->config.thread_safe; }

inline void Lock::unlock() {
  if (!held_) return;
  state_->holder.store(std::thread::id(), std::memory_order_relaxed);
  held_ = false;
  state_->mu.unlock();
}

inline Lock::~Lock() { unlock(); }

}  // namespace xport::proto
