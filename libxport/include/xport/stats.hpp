// Counter snapshots, read through the public API (relaxed reads of hot-path atomics).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace xport {

// Operations libfabric carries for us: send, recv, write, read, atomic.
inline constexpr int kStatOps = 5;
const char* stat_op_name(int op);

struct EndpointStats {
  std::string name;     // "rail lo", "rail lo connection"
  std::string rail;     // domain name
  uint64_t ops[kStatOps] = {};
  uint64_t bytes[kStatOps] = {};
  uint64_t posted = 0;             // operations handed to the provider
  uint64_t completed = 0;          // their completions (successful or not)
  uint64_t error_completions = 0;
  uint64_t eagain_retries = 0;    // post attempts refused with -FI_EAGAIN (queued, tried again)
};

struct CqStats {
  std::string name;  // "cq lo"
  uint64_t polls = 0;
  uint64_t empty_polls = 0;
  uint64_t completions = 0;
  uint64_t error_completions = 0;
  uint64_t max_batch = 0;
};

struct RailStats {
  std::string name;        // domain (NIC) name
  std::string state;       // "up" or "quarantined" (link down: new traffic avoids the rail)
  uint64_t quarantine_events = 0;
  bool low_latency_control = false;  // the control endpoint got FI_TC_LOW_LATENCY
  uint64_t stripes_out = 0;  // writes of striped messages and puts sent on this rail
  uint64_t stripes_in = 0;   // striped rendezvous writes that landed here
  uint64_t write_bytes_in = 0;  // bytes of peers' rendezvous writes landing on this rail (where
                                // the provider reports no len: each stripe's even share)
  uint64_t errors = 0;       // error completions on the rail's endpoints
  // RDM endpoint shards open (docs/pool.md, "Shards"): 1 until peers outgrow the first; 0 for
  // connected endpoints.
  uint32_t shards = 0;
};

// The channel pool of a device (docs/pool.md): the channels its communicators share.
struct PoolStats {
  uint32_t groups = 0;              // XPORT_POOL_GROUPS in effect (0: no sharing)
  uint32_t channels_per_group = 0;  // XPORT_POOL_CHANNELS in effect
  uint64_t channels = 0;        // channels open (connections, or RDM endpoint + peer address)
  uint64_t cqs = 0;             // completion queues the channels post to
  uint64_t comms_attached = 0;  // communicator references held on channels now
  uint64_t primaries = 0;       // communicators that opened a channel (since the device opened)
  uint64_t secondaries = 0;     // communicators that joined an open channel (same)
  // Completions or messages for no known communicator or request, but for late arrivals of
  // communicators closed meanwhile (Stats::late_arrivals): 0 unless something was misrouted
  // or forged.
  uint64_t routing_misses = 0;
  uint64_t channel_ops = 0;     // operations posted on channels (since the device opened)
  uint64_t busiest_channel_ops = 0;  // of them, on the open channel that carried most
  // Bounce-buffer bytes registered for connections and RDM communicators' own endpoints
  // (XPORT_POOL_GROUPS=0); shared RDM channels add none: they post on the rail's endpoints,
  // whose buffers the device has whatever its communicators.
  uint64_t registered_bytes = 0;
};

struct Stats {
  std::vector<RailStats> rails;
  std::vector<EndpointStats> endpoints;
  std::vector<CqStats> cqs;
  uint64_t comms_open = 0;
  uint64_t registrations = 0;
  uint64_t registered_bytes = 0;
  uint64_t routing_misses = 0;  // messages or completions for no known communicator/request
  uint64_t late_arrivals = 0;   // ... of them: traffic for a communicator already closed
  uint64_t peers = 0;           // remote devices this device has channels to
  uint64_t peers_lost = 0;      // peers declared lost (keepalive silence or provider errors)
  uint64_t keepalives_sent = 0; // keepalive pings to peers that requests waited on
  uint64_t deferred_posts = 0;  // posts queued for lack of provider room, buffers or CQ room
  uint64_t overflow_copies = 0; // early eager messages copied out of their receive buffer
  uint64_t mr_cache_hits = 0;   // register_memory calls served by a live registration
  uint64_t mr_cache_misses = 0; // ... that registered anew
  // One-sided windows.
  uint64_t window_streams = 0;    // window streams open (this device's and its peers')
  uint64_t window_acks_sent = 0;  // acknowledgements and results sent to initiators
  uint64_t window_ops_held = 0;   // operations held at the initiator (fence, order, credits)
  uint64_t signals_applied = 0;   // signals applied here
  uint64_t atomics_native = 0;    // native (FI_ATOMIC) atomics issued
  uint64_t atomics_emulated = 0;  // emulated atomics issued
  uint64_t atomics_applied = 0;   // emulated atomics applied here
  uint64_t notifications = 0;     // transfer notifications delivered here
  // Credits as a window target: the CQ room (entries per rail) the streams of peers writing here
  // hold now, the streams that asked for numbers and wait for room, and the unused numbers taken
  // back from idle streams for them (docs/semantics.md, "Credits").
  uint64_t window_cq_room = 0;
  uint64_t window_streams_waiting = 0;
  uint64_t window_take_backs = 0;
  // Credits as a window initiator: the times a stream of this device, held at its limit, asked
  // its target for more numbers (win_sync kSyncWant).
  uint64_t window_credit_asks = 0;
  PoolStats pool;
};

}  // namespace xport
