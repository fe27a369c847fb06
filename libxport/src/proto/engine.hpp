// The protocol engine of one device: connection set-up, two-sided eager and rendezvous,
// one-sided put/get, and the progress loop that routes every completion by its op context
// and remote CQ data. The public classes (Device, SendComm, ...) are thin handles onto it.
#pragma once

#include <array>
#include <deque>
#include <tuple>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "fabric/objects.hpp"
#include "fabric/op_context.hpp"
#include "memory/mr_cache.hpp"
#include "pool/channel.hpp"
#include "pool/comm_table.hpp"
#include "proto/wire.hpp"
#include "rail/rail.hpp"
#include "xport/comm.hpp"
#include "xport/provider.hpp"
#include "xport/region.hpp"
#include "xport/stats.hpp"
#include "xport/window.hpp"

namespace xport::proto {

// Waits spin on progress passes; only every kSpinsPerYield-th pass reads the clock for the
// deadline and yields the CPU (a yield is a system call: on shm one per pass cost more than the
// message itself). Rail health is likewise checked against the clock every kPassesPerRailCheck.
inline constexpr uint32_t kSpinsPerYield = 64;
inline constexpr uint32_t kPassesPerRailCheck = 16;

struct RegionState {
  std::shared_ptr<Engine> engine;  // keeps the rails open while the registration lives
  uint8_t* base = nullptr;
  size_t length = 0;
  bool virt_addr = false;
  std::vector<std::unique_ptr<fabric::MemoryRegistration>> mrs;  // one per rail
  ~RegionState();
};

struct SendSlot {
  bool active = false;
  uint64_t seq = 0;
  const uint8_t* buf = nullptr;
  size_t len = 0;
  const RegionState* region = nullptr;  // per-rail descriptors for striped writes
  uint32_t first_rail = 0;
  bool eager = false;
  bool local_done = false;  // the source buffer may be reused
  bool cts_done = false;    // rendezvous: the receiver's clear-to-send arrived (eager: unused)
  bool waiting_credit = false;  // eager: queued until the receiver grants credit for it
  bool done = false;
  Status error;
  uint32_t stripes = 0;       // rendezvous: writes this message was cut into
  uint32_t stripes_done = 0;  // ... and how many completed locally
  std::vector<fabric::OpContext> stripe_ctx;  // one per rail of the communicator
};

struct RecvSlot {
  bool active = false;
  uint64_t seq = 0;
  uint8_t* buf = nullptr;
  size_t cap = 0;
  size_t bytes = 0;
  bool done = false;
  Status error;
  uint32_t stripes_seen = 0;  // rendezvous writes that landed (remote CQ data)
  bool cts_sent = false;      // a clear-to-send went out for this receive
  const RegionState* region = nullptr;  // for a clear-to-send sent later (on RTS)
};

// A sender's request-to-send that arrived before the matching receive was posted.
struct EarlyRts {
  bool valid = false;
  uint64_t seq = 0;
};

struct Cts {
  uint64_t seq = 0;
  uint64_t raddr = 0;
  uint64_t length = 0;
  uint32_t rails = 0;                    // keys carried
  std::array<uint64_t, kMaxRails> keys{};  // the receive buffer's key on each rail
};

struct EarlyCts {
  bool valid = false;
  Cts cts;
};

// One rail's way to one peer: the data and control channels (the same channel for connected
// endpoints).
struct Path {
  pool::Channel* data = nullptr;
  pool::Channel* control = nullptr;
};

struct EarlyEager {
  memory::Buffer* buffer = nullptr;  // held receive buffer, reposted once consumed
  pool::Channel* owner = nullptr;
  uint64_t seq = 0;
  size_t len = 0;
  size_t offset = 0;  // payload offset in the buffer (the header's size, or 0 when headerless)
};

enum class CommPhase { connecting, ready, failed };

struct CommState {
  bool is_send = false;
  CommPhase phase = CommPhase::connecting;
  uint16_t id = 0;
  uint16_t peer_id = 0;
  std::vector<Path> paths;    // rails shared with the peer (rail i pairs with the peer's rail i)
  uint32_t next_data = 0;     // round-robin over paths for eager messages
  uint32_t next_control = 0;  // round-robin over paths for control messages
  uint32_t next_stripe = 0;   // rotating first rail of striped writes
  StripePlan plan;            // the sending side's striping parameters
  uint16_t depth = 0;         // outstanding requests agreed with the peer
  size_t eager_max = 0;       // largest eager message (min of both sides)
  uint64_t next_seq = 0;
  std::vector<SendSlot> sends;
  std::vector<RecvSlot> recvs;
  std::vector<EarlyCts> early_cts;
  std::vector<EarlyEager> early_eager;
  std::vector<EarlyRts> early_rts;
  // Eager flow control (docs/semantics.md): the sender may have message `seq` on the wire only
  // while seq < credit_limit = (receives the peer reported posted) + depth, so the receiver
  // never holds more than `depth` unexpected messages of this communicator.
  uint64_t credit_limit = 0;        // sender
  std::deque<uint16_t> credit_wait;  // sender: eager slots queued for credit, in seq order
  uint64_t reported_next = 0;       // receiver: receives reported posted to the peer
  bool peer_closed = false;         // receiver: the sender closed after peer_sent messages
  uint64_t peer_sent = 0;
  Status error;               // why the communicator failed
  uint64_t listener_token = 0;
  bool user_closed = false;
  int inflight = 0;           // posted operations whose contexts name this comm
};

struct ListenerState {
  uint64_t token = 0;
  std::deque<uint16_t> ready;  // accepted recv comms, not yet taken by accept()
  size_t pending = 0;          // connected endpoints: accepted, waiting for FI_CONNECTED
};

struct WindowState {
  uint32_t id = 0;
  uint16_t comm = 0;
  std::vector<Path> paths;
  uint32_t next_stripe = 0;
  uint64_t issued = 0;
  uint64_t completed = 0;
  uint64_t quiet_mark = 0;  // issued count at the last quiet
  Status first_error;
  std::vector<fabric::OpContext> ctxs;
  std::vector<uint32_t> free;
  bool closed = false;
};

// Operations that met -FI_EAGAIN: retried from the progress loop (never by spinning inside a
// non-blocking call) until posted, or failed once XPORT_EAGAIN_TIMEOUT_MS has passed.
struct PendingControl {
  pool::Channel* ch = nullptr;
  MsgHeader hdr{};
  std::vector<uint8_t> body;
  Deadline::Clock::time_point since{};
};

// One eager transmission: headerless from the caller's buffer with CQ data (buffer == nullptr),
// or header + payload in a bounce buffer (buffer, whose context names the request). Queued as is
// while the provider answers -FI_EAGAIN.
struct PendingEager {
  pool::Channel* ch = nullptr;
  memory::Buffer* buffer = nullptr;
  const void* src = nullptr;
  size_t len = 0;
  void* desc = nullptr;
  bool with_data = false;
  uint64_t data = 0;
  fabric::OpContext* ctx = nullptr;
  Deadline::Clock::time_point since{};
};

struct PendingRma {
  pool::Channel* ch = nullptr;
  fabric::OpContext* ctx = nullptr;  // a window context (put or get)
  uint8_t* local = nullptr;
  size_t len = 0;
  void* desc = nullptr;
  uint64_t raddr = 0;
  uint64_t key = 0;
  Deadline::Clock::time_point since{};
};

struct PendingWrite {
  uint16_t comm = 0;
  uint16_t slot = 0;
  uint64_t seq = 0;
  uint32_t stripe = 0;
  uint64_t raddr = 0;
  std::array<uint64_t, kMaxRails> keys{};
  Deadline::Clock::time_point since{};
};

struct EngineConfig {
  size_t eager_max = 8192;
  bool headerless_eager = true;  // where the provider has 8-byte CQ data
  uint16_t max_requests = 64;
  size_t rx_buffers = 256;
  size_t tx_buffers = 256;
  size_t cq_batch = 32;
  size_t max_comms = 4096;
  size_t listen_backlog = 128;
  std::chrono::nanoseconds eagain_timeout{std::chrono::seconds(10)};
  uint64_t first_key = 1;
  bool thread_safe = true;
  StripePlan stripe;
  std::chrono::milliseconds rail_check{100};
  std::chrono::milliseconds rail_retry{1000};
  static EngineConfig from_knobs();
  // The rail layout this config gives every rail (bounce buffers sized for an eager message or
  // the largest control message, behind a header); device_registered_bytes() sizes from it too.
  rail::RailConfig rail_config() const;
};

class Engine : public std::enable_shared_from_this<Engine> {
 public:
  // One rail per fi_info (its domain); connected-endpoint providers take exactly one.
  static Result<std::shared_ptr<Engine>> open(const std::vector<const fi_info*>& rails,
                                              const Capabilities& caps,
                                              const EngineConfig& config);
  ~Engine();

  const Capabilities& caps() const { return caps_; }
  size_t rail_count() const { return rails_.size(); }
  const std::string& rail_name(size_t i) const { return rails_[i]->name(); }

  // memory
  Result<Region> register_memory(void* buf, size_t len);
  Result<RemoteRegion> import_key(std::span<const uint8_t> bytes) const;
  std::vector<uint8_t> export_key(const Region& r) const;
  void deregister(RegionState& r);

  // connections (connection.cc)
  Result<std::unique_ptr<Listener>> listen();
  Result<std::unique_ptr<RecvComm>> accept(uint64_t token, Deadline deadline);
  void close_listener(uint64_t token);
  Result<std::unique_ptr<SendComm>> connect(const ConnectionHandle& handle, Deadline deadline);
  void close_comm(uint16_t id);

  // two-sided (two_sided.cc)
  Result<Request> isend(uint16_t comm, const void* buf, size_t len, const Region& region);
  Result<Request> irecv(uint16_t comm, void* buf, size_t len, const Region& region);
  Result<Completion> test(uint16_t comm, Request request);
  Result<size_t> wait(uint16_t comm, Request request, Deadline deadline);
  Status flush(uint16_t comm, const void* buf, size_t len, const Region& region,
               Deadline deadline);

  // one-sided (one_sided.cc)
  Result<uint32_t> open_window(uint16_t comm);
  void close_window(uint32_t id);
  Status put(uint32_t window, const Region& local, size_t loff, const RemoteRegion& remote,
             size_t roff, size_t len);
  Status get(uint32_t window, const Region& local, size_t loff, const RemoteRegion& remote,
             size_t roff, size_t len);
  Status quiet(uint32_t window, Deadline deadline);
  uint64_t window_issued(uint32_t window) const;
  uint64_t window_completed(uint32_t window) const;

  Status progress();
  Stats stats() const;

 private:
  Engine() = default;
  std::unique_lock<std::mutex> lock() const {
    return config_.thread_safe ? std::unique_lock<std::mutex>(mu_) : std::unique_lock<std::mutex>();
  }

  // progress and dispatch (engine.cc)
  Status progress_locked();
  static void retry_hook(void* self);
  void on_completion(const fi_cq_data_entry& e);
  void on_error(void* context, Status status);
  void on_message(pool::Channel* ch, memory::Buffer* b, size_t len, bool* hold);
  void repost(pool::Channel* ch, memory::Buffer* b);
  Status post_all_rx(pool::Channel* ch);
  // Sends a control message; `retry` drives progress on -FI_EAGAIN (user calls only).
  // Queues it when resources are short and `queue_if_busy` is set.
  Status send_control(pool::Channel* ch, const MsgHeader& hdr, const std::vector<uint8_t>* body,
                      bool retry, bool queue_if_busy);
  // Round-robin over the paths whose rail is in service (any path when none is: the caller
  // has checked usable() first where that matters).
  pool::Channel* control_path(CommState& c) { return pick(c.paths, c.next_control).control; }
  pool::Channel* data_path(CommState& c) { return pick(c.paths, c.next_data).data; }
  const Path& pick(std::vector<Path>& paths, uint32_t& cursor) {
    for (size_t tries = 0; tries < paths.size(); ++tries) {
      const size_t i = cursor++ % paths.size();
      if (rails_[i]->state() == rail::Rail::State::up) return paths[i];
    }
    return paths[cursor++ % paths.size()];
  }
  // The rails (indices) among the first `limit` of `paths` that are in service, written to
  // `out` without allocating (hot path); 0 when none is.
  using RailList = std::array<uint32_t, kMaxRails>;
  uint32_t healthy_rails(size_t limit, RailList& out) const {
    uint32_t n = 0;
    for (uint32_t i = 0; i < limit; ++i) {
      if (rails_[i]->state() == rail::Rail::State::up) out[n++] = i;
    }
    return n;
  }
  // The error when no rail among the first `limit` is in service (cold path).
  Status no_rail_error(size_t limit, const char* what) const;
  Status check_usable(const std::vector<Path>& paths, const char* what) const {
    RailList r;
    return healthy_rails(paths.size(), r) > 0 ? Status() : no_rail_error(paths.size(), what);
  }
  void check_rails();
  // Fatal errors (Code::closed: the domain or NIC failed) quarantine the rail they came from:
  // a post the domain refuses at once, error completions after kFatalInARow in a row (one
  // failed operation is that operation's error, not the rail's).
  static constexpr uint32_t kFatalInARow = 3;
  void note_failure(uint32_t rail, const Status& status, bool from_post = true);
  bool connected_endpoints() const { return rails_[0]->connected_endpoints(); }
  Status send_eager(CommState& c, SendSlot& s, uint16_t slot);
  Status post_eager(const PendingEager& p);
  // A free bounce buffer of ch's tx pool; with `wait`, progress runs until one frees up or
  // XPORT_EAGAIN_TIMEOUT_MS passes. nullptr when none.
  memory::Buffer* take_tx(pool::Channel* ch, bool wait);
  void flush_pending();
  bool expired(Deadline::Clock::time_point since) const {
    return Deadline::Clock::now() - since > config_.eagain_timeout;
  }
  Status post_rma(const PendingRma& op);
  template <typename Pred>
  Status wait_until(Deadline deadline, Pred&& done, const char* what);
  void fail_comm(CommState& c, Status why);
  void fail_channel(pool::Channel* ch, Status why);
  static bool uses(const std::vector<Path>& paths, const pool::Channel* ch) {
    for (const Path& p : paths)
      if (p.data == ch || p.control == ch) return true;
    return false;
  }
  void maybe_erase(CommState& c);
  CommState* comm_for(uint16_t id, bool is_send, const char* op, Status* err);
  Status check_local(const Region& region, const void* buf, size_t len, const char* what);

  // connection messages (connection.cc)
  void on_conn_req(pool::Channel* ch, const MsgHeader& h, const uint8_t* body, size_t len);
  void on_conn_ack(const MsgHeader& h);
  void on_conn_reject(const MsgHeader& h);
  Status progress_events();
  Result<std::unique_ptr<CommState>> make_comm(bool is_send, std::vector<Path> paths,
                                               uint16_t depth);
  Result<pool::Channel*> peer_channel(size_t rail, bool control, const std::vector<uint8_t>& addr);
  Result<std::vector<Path>> peer_paths(const std::vector<RailAddresses>& rails);
  std::vector<RailAddresses> local_addresses();

  // two-sided messages (two_sided.cc)
  void on_cts(const MsgHeader& h, const Cts& cts);
  void on_eager(pool::Channel* owner, memory::Buffer* b, const MsgHeader& h, bool* hold);
  void on_eager_data(pool::Channel* owner, memory::Buffer* b, uint64_t data, size_t len,
                     bool* hold);
  void accept_eager(CommState& c, pool::Channel* owner, memory::Buffer* b, uint16_t slot,
                    uint64_t seq, size_t offset, size_t len, bool* hold);
  void on_abort(const MsgHeader& h);
  void on_rts(const MsgHeader& h);
  void on_credit(const MsgHeader& h);
  void grant_credit(CommState& c, uint64_t posted_through);
  Status send_cts(CommState& c, RecvSlot& r, uint16_t slot);
  void on_close(const MsgHeader& h);
  void on_write_data(uint64_t data, size_t len);
  void on_write_done(fabric::OpContext* ctx, Status status);
  void on_eager_sent(fabric::OpContext* ctx, Status status);
  void consume_cts(CommState& c, SendSlot& s, uint16_t slot, const Cts& cts);
  // Posts stripe `stripe` of message s (queued on -FI_EAGAIN inside a progress pass).
  void post_stripe(CommState& c, SendSlot& s, uint16_t slot, uint32_t stripe, uint64_t raddr,
                   const std::array<uint64_t, kMaxRails>& keys, Deadline::Clock::time_point since);
  void deliver(CommState& c, RecvSlot& r, const uint8_t* data, size_t len);
  void maybe_complete_send(CommState& c, SendSlot& s);

  // one-sided (one_sided.cc)
  void on_window_done(fabric::OpContext* ctx, Status status);
  Status rma(uint32_t window, fabric::OpType op, const Region& local, size_t loff,
             const RemoteRegion& remote, size_t roff, size_t len);
  Result<uint64_t> remote_address(const RemoteRegion& remote, size_t roff, size_t len) const;

  EngineConfig config_;
  Capabilities caps_;
  uint64_t device_token_ = 0;
  size_t cq_data_bytes_ = 0;
  // Eager messages go without a header, routed by 8-byte remote CQ data (wire.hpp), where the
  // provider has it: a 4 KiB message then still fits shm's 4 KiB inject path.
  bool headerless_eager_ = false;
  size_t inject_size_ = 0;
  bool rx_cq_data_mode_ = false;  // writes with data consume a posted receive
  mutable std::mutex mu_;
  bool in_progress_ = false;
  size_t polling_rail_ = 0;  // the rail whose CQ is being read
  Deadline::Clock::time_point next_rail_check_{};
  uint32_t passes_since_rail_check_ = 0;

  // Declaration order is teardown order reversed: comms, then channels, then the rails.
  std::vector<std::unique_ptr<rail::Rail>> rails_;
  std::vector<std::unique_ptr<pool::Channel>> channels_;  // peer channels (RDM) and connections
  // RDM: (rail, control?, peer address) -> channel
  std::map<std::tuple<size_t, bool, std::vector<uint8_t>>, pool::Channel*> peers_;
  std::map<fid_t, pool::Channel*> connecting_;  // connected endpoints by fid
  std::unique_ptr<pool::CommTable<CommState>> comms_;
  std::map<uint64_t, ListenerState> listeners_;
  std::map<uint32_t, std::unique_ptr<WindowState>> windows_;
  uint32_t next_window_ = 1;
  std::deque<PendingControl> pending_control_;
  std::deque<PendingWrite> pending_writes_;
  std::deque<PendingEager> pending_eager_;
  std::deque<PendingRma> pending_rma_;
  std::vector<std::pair<pool::Channel*, memory::Buffer*>> pending_rx_;

  memory::MrCache<RegionState> mr_cache_;

  // process-level counters (read by stats())
  uint64_t registrations_ = 0;
  uint64_t registered_bytes_ = 0;
  uint64_t routing_misses_ = 0;
  uint64_t flushes_done_ = 0;  // flush reads completed (flush() waits for its own)
  bool flush_in_flight_ = false;
  Status flush_error_;
};

template <typename Pred>
Status Engine::wait_until(Deadline deadline, Pred&& done, const char* what) {
  for (uint32_t spin = 0;; ++spin) {
    {
      auto l = lock();
      XPORT_RETURN_IF_ERROR(progress_locked());
      if (done()) return Status::success();
    }
    if (spin % kSpinsPerYield == 0) {
      if (deadline.expired()) return Status(Code::timeout, what);
      std::this_thread::yield();
    }
  }
}

}  // namespace xport::proto
