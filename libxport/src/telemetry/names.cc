// The counter name table: one row per counter id (the exporter serves exactly these names).
#include "telemetry/names.hpp"

namespace xport::telemetry {
namespace {

constexpr LabelKey kNone = LabelKey::count;
using enum MetricType;

constexpr CounterName kNames[] = {
    {CounterId::process_devices, "xport_process_devices", gauge, kNone, "",
     "devices of the process publishing counters"},
    {CounterId::telemetry_snapshots, "xport_telemetry_snapshots_total", counter, kNone, "",
     "snapshots the process wrote into its stats segment"},
    {CounterId::telemetry_blocks_dropped, "xport_telemetry_blocks_dropped_total", counter, kNone,
     "", "counter blocks left out of a snapshot because the segment was full"},

    {CounterId::device_comms_open, "xport_device_comms_open", gauge, kNone, "",
     "communicators in the device's comm table"},
    {CounterId::device_registrations, "xport_device_registrations", gauge, kNone, "",
     "live memory registrations of the device"},
    {CounterId::device_registered_bytes, "xport_device_registered_bytes", gauge, kNone, "",
     "bytes of the live memory registrations of the device"},
    {CounterId::device_routing_misses, "xport_device_routing_misses_total", counter, kNone, "",
     "messages or completions that named no open communicator or outstanding request"},
    {CounterId::device_mr_cache_hits, "xport_device_mr_cache_hits_total", counter, kNone, "",
     "register_memory calls served by a live registration"},
    {CounterId::device_mr_cache_misses, "xport_device_mr_cache_misses_total", counter, kNone, "",
     "register_memory calls that registered anew"},

    {CounterId::endpoint_ops_send, "xport_endpoint_ops_total", counter, LabelKey::op, "send",
     "operations by op (send/write/read: posts; recv: messages arrived)"},
    {CounterId::endpoint_ops_recv, "xport_endpoint_ops_total", counter, LabelKey::op, "recv", ""},
    {CounterId::endpoint_ops_write, "xport_endpoint_ops_total", counter, LabelKey::op, "write", ""},
    {CounterId::endpoint_ops_read, "xport_endpoint_ops_total", counter, LabelKey::op, "read", ""},
    {CounterId::endpoint_ops_atomic, "xport_endpoint_ops_total", counter, LabelKey::op, "atomic",
     ""},
    {CounterId::endpoint_bytes_send, "xport_endpoint_bytes_total", counter, LabelKey::op, "send",
     "payload bytes by op"},
    {CounterId::endpoint_bytes_recv, "xport_endpoint_bytes_total", counter, LabelKey::op, "recv",
     ""},
    {CounterId::endpoint_bytes_write, "xport_endpoint_bytes_total", counter, LabelKey::op, "write",
     ""},
    {CounterId::endpoint_bytes_read, "xport_endpoint_bytes_total", counter, LabelKey::op, "read",
     ""},
    {CounterId::endpoint_bytes_atomic, "xport_endpoint_bytes_total", counter, LabelKey::op,
     "atomic", ""},
    {CounterId::endpoint_posted, "xport_endpoint_posted_total", counter, kNone, "",
     "operations handed to the provider"},
    {CounterId::endpoint_completed, "xport_endpoint_completed_total", counter, kNone, "",
     "completions of posted operations, successful or not"},
    {CounterId::endpoint_error_completions, "xport_endpoint_error_completions_total", counter,
     kNone, "", "completions that carried an error"},
    {CounterId::endpoint_eagain_retries, "xport_endpoint_eagain_retries_total", counter, kNone, "",
     "post attempts the provider refused with -FI_EAGAIN (queued and tried again)"},

    {CounterId::cq_polls, "xport_cq_polls_total", counter, kNone, "", "fi_cq_read calls"},
    {CounterId::cq_empty_polls, "xport_cq_empty_polls_total", counter, kNone, "",
     "progress passes that found the CQ empty"},
    {CounterId::cq_completions, "xport_cq_completions_total", counter, kNone, "",
     "completion entries read successfully"},
    {CounterId::cq_error_completions, "xport_cq_error_completions_total", counter, kNone, "",
     "completion entries read with fi_cq_readerr"},
    {CounterId::cq_max_batch, "xport_cq_max_batch", gauge, kNone, "",
     "most completions handled in one progress pass"},

    {CounterId::rail_up, "xport_rail_up", gauge, kNone, "",
     "1 while the rail is up, 0 while it is quarantined or failed"},
    {CounterId::rail_stripes_out, "xport_rail_stripes_out_total", counter, kNone, "",
     "writes of striped messages and puts sent on this rail"},
    {CounterId::rail_stripes_in, "xport_rail_stripes_in_total", counter, kNone, "",
     "striped rendezvous writes that landed on this rail"},
    {CounterId::rail_low_latency_control, "xport_rail_low_latency_control", gauge, kNone, "",
     "1 when the rail's control endpoint got the low-latency traffic class"},
    {CounterId::rail_quarantine_events, "xport_rail_quarantine_events_total", counter, kNone, "",
     "times the rail was quarantined (link down)"},
    {CounterId::rail_write_bytes_in, "xport_rail_write_bytes_in_total", counter, kNone, "",
     "bytes of peers' rendezvous writes that landed on this rail"},
    {CounterId::rail_errors, "xport_rail_error_completions_total", counter, kNone, "",
     "error completions on the rail's endpoints"},
    {CounterId::rail_shards, "xport_rail_shards", gauge, kNone, "",
     "RDM endpoint shards open on the rail (more as peers outgrow one's address table)"},

    {CounterId::nic_info, "xport_nic_info", gauge, kNone, "",
     "a NIC (rail) a device uses: provider, fabric, PCI address (value 1)"},
    {CounterId::gpu_info, "xport_gpu_info", gauge, kNone, "",
     "a GPU a device serves: PCI address, NUMA node (value 1)"},
    {CounterId::rail_plan_info, "xport_rail_plan_info", gauge, kNone, "",
     "which rail carries which device's (GPU's) traffic (value 1)"},

    {CounterId::device_late_arrivals, "xport_device_late_arrivals_total", counter, kNone, "",
     "routing misses that were traffic of a communicator already closed"},
    {CounterId::device_peers, "xport_device_peers", gauge, kNone, "",
     "remote devices this device has channels to"},
    {CounterId::device_peers_lost, "xport_device_peers_lost_total", counter, kNone, "",
     "peers declared lost (keepalive silence or provider errors)"},
    {CounterId::device_keepalives_sent, "xport_device_keepalives_sent_total", counter, kNone, "",
     "keepalive pings sent to peers that requests waited on"},
    {CounterId::device_deferred_posts, "xport_device_deferred_posts_total", counter, kNone, "",
     "posts queued for progress (provider busy, no bounce buffer or CQ room)"},
    {CounterId::device_overflow_copies, "xport_device_overflow_copies_total", counter, kNone, "",
     "early eager messages copied out of their receive buffer"},

    {CounterId::pool_groups, "xport_pool_groups", gauge, kNone, "",
     "channel groups per peer in effect (XPORT_POOL_GROUPS; 0: no sharing)"},
    {CounterId::pool_channels_per_group, "xport_pool_channels_per_group", gauge, kNone, "",
     "channels per group in effect (XPORT_POOL_CHANNELS)"},
    {CounterId::pool_channels, "xport_pool_channels", gauge, kNone, "",
     "channels open in the device's pool (connections, or RDM endpoint + peer address)"},
    {CounterId::pool_cqs, "xport_pool_cqs", gauge, kNone, "",
     "completion queues the pool's channels post to"},
    {CounterId::pool_comms_attached, "xport_pool_comms_attached", gauge, kNone, "",
     "communicator references held on the pool's channels"},
    {CounterId::pool_primaries, "xport_pool_primaries_total", counter, kNone, "",
     "communicators that opened a channel (primaries of their group)"},
    {CounterId::pool_secondaries, "xport_pool_secondaries_total", counter, kNone, "",
     "communicators that joined a channel already open (secondaries)"},
    {CounterId::pool_routing_misses, "xport_pool_routing_misses_total", counter, kNone, "",
     "completions or messages for no known communicator or request, late arrivals of closed "
     "communicators left out (0 unless something was misrouted or forged)"},
    {CounterId::pool_channel_ops, "xport_pool_channel_ops_total", counter, kNone, "",
     "operations posted on the pool's channels"},
    {CounterId::pool_busiest_channel_ops, "xport_pool_busiest_channel_ops", gauge, kNone, "",
     "operations posted on the open channel that carried the most"},
    {CounterId::pool_registered_bytes, "xport_pool_registered_bytes", gauge, kNone, "",
     "bounce-buffer bytes registered for the pool's connections and own RDM endpoints"},
    {CounterId::device_window_streams, "xport_device_window_streams", gauge, kNone, "",
     "one-sided window streams open (this device's and its peers')"},
    {CounterId::device_window_acks_sent, "xport_device_window_acks_sent_total", counter, kNone, "",
     "window acknowledgements and atomic results sent to initiators"},
    {CounterId::device_window_ops_held, "xport_device_window_ops_held_total", counter, kNone, "",
     "window operations held at the initiator (fence, ordering, credits)"},
    {CounterId::device_signals_applied, "xport_device_signals_applied_total", counter, kNone, "",
     "signals applied here as a window target"},
    {CounterId::device_atomics_native, "xport_device_atomics_native_total", counter, kNone, "",
     "native (FI_ATOMIC) window atomics issued"},
    {CounterId::device_atomics_emulated, "xport_device_atomics_emulated_total", counter, kNone, "",
     "emulated window atomics issued"},
    {CounterId::device_atomics_applied, "xport_device_atomics_applied_total", counter, kNone, "",
     "emulated window atomics applied here"},
    {CounterId::device_notifications, "xport_device_window_notifications_total", counter, kNone, "",
     "transfer notifications delivered here"},
    {CounterId::device_window_cq_room, "xport_device_window_cq_room", gauge, kNone, "",
     "CQ room (entries per rail) held by the window streams of peers writing here"},
    {CounterId::device_window_streams_waiting, "xport_device_window_streams_waiting", gauge,
     kNone, "", "window streams of peers writing here that wait for credits (CQ room)"},
    {CounterId::device_window_take_backs, "xport_device_window_take_backs_total", counter, kNone,
     "", "unused window credits taken back from idle streams for streams that wait"},
    {CounterId::device_window_credit_asks, "xport_device_window_credit_asks_total", counter,
     kNone, "", "times this device's window streams, held at their limit, asked for credits"},

    {CounterId::gpu_staging_to_host_bytes, "xport_gpu_staging_to_host_bytes_total", counter, kNone,
     "", "bytes copied from GPU memory into host shadows (sources of sends and puts)"},
    {CounterId::gpu_staging_to_gpu_bytes, "xport_gpu_staging_to_gpu_bytes_total", counter, kNone,
     "", "bytes copied from host shadows on to GPU memory (arrivals)"},
    {CounterId::gpu_staging_copies_to_host, "xport_gpu_staging_copies_to_host_total", counter,
     kNone, "", "copies from GPU memory into host shadows"},
    {CounterId::gpu_staging_copies_to_gpu, "xport_gpu_staging_copies_to_gpu_total", counter, kNone,
     "", "copies from host shadows on to GPU memory"},
    {CounterId::gpu_staging_copy_errors, "xport_gpu_staging_copy_errors_total", counter, kNone, "",
     "staging copies the CUDA driver failed"},
    {CounterId::gpu_staging_shadows, "xport_gpu_staging_shadows", gauge, kNone, "",
     "host shadows of GPU memory alive"},
    {CounterId::gpu_staging_shadow_bytes, "xport_gpu_staging_shadow_bytes", gauge, kNone, "",
     "page-locked bytes of the live host shadows"},
    {CounterId::gpu_staging_pool_bytes, "xport_gpu_staging_pool_bytes", gauge, kNone, "",
     "host memory of the staging pools of GPU sources"},
    {CounterId::gpu_staging_pool_pinned_bytes, "xport_gpu_staging_pool_pinned_bytes", gauge,
     kNone, "", "page-locked bytes of the staging pools of GPU sources"},
    {CounterId::gpu_staging_pool_in_use_bytes, "xport_gpu_staging_pool_in_use_bytes", gauge,
     kNone, "", "staging pool bytes held by operations from GPU memory in flight"},
    {CounterId::gpu_staging_pool_refusals, "xport_gpu_staging_pool_refusals_total", counter,
     kNone, "", "calls answered again: the staging pool of GPU sources at its bound"},

    {CounterId::gpu_proxy_descriptors, "xport_gpu_proxy_descriptors_total", counter, kNone, "",
     "descriptors the proxy took off its ring"},
    {CounterId::gpu_proxy_batches, "xport_gpu_proxy_batches_total", counter, kNone, "",
     "proxy passes that took at least one descriptor"},
    {CounterId::gpu_proxy_completed, "xport_gpu_proxy_completed_total", counter, kNone, "",
     "descriptors reported complete to kernels"},
    {CounterId::gpu_proxy_in_flight, "xport_gpu_proxy_in_flight", gauge, kNone, "",
     "descriptors taken off the ring and not yet complete"},
    {CounterId::gpu_proxy_queued, "xport_gpu_proxy_ring_queued", gauge, kNone, "",
     "descriptors filled on the ring and not yet taken"},
    {CounterId::gpu_proxy_batch_max, "xport_gpu_proxy_batch_max", gauge, kNone, "",
     "most descriptors taken in one pass"},
    {CounterId::gpu_proxy_capacity, "xport_gpu_proxy_ring_capacity", gauge, kNone, "",
     "slots of the proxy's ring"},
    {CounterId::gpu_proxy_again, "xport_gpu_proxy_again_total", counter, kNone, "",
     "descriptor executions refused for now (window credits) and retried"},
    {CounterId::gpu_proxy_timeouts, "xport_gpu_proxy_timeouts_total", counter, kNone, "",
     "kernel waits that passed their deadline and aborted the ring"},
    {CounterId::gpu_proxy_failures, "xport_gpu_proxy_failures_total", counter, kNone, "",
     "operations or descriptors that failed and aborted the ring"},
};

// The process's job is `xport_job`, never `job`: Prometheus gives every target a `job` (and an
// `instance`) of its own, and a series label of the same name would need honor_labels to keep.
constexpr const char* kLabelNames[] = {
    nullptr, "xport_job", "rank",     "program", "device", "rail",      "nic",        "gpu", "pool",
    "cq",    "endpoint", "provider", "fabric",  "pci",    "numa_node", "link_speed", "op",  "role",
    "cuda_device", "proxy",
};
static_assert(sizeof(kLabelNames) / sizeof(kLabelNames[0]) == static_cast<size_t>(LabelKey::count));

}  // namespace

const char* block_kind_name(uint16_t kind) {
  switch (static_cast<BlockKind>(kind)) {
    case BlockKind::process:
      return "process";
    case BlockKind::device:
      return "device";
    case BlockKind::endpoint:
      return "endpoint";
    case BlockKind::cq:
      return "cq";
    case BlockKind::info:
      return "info";
    case BlockKind::rail:
      return "rail";
    case BlockKind::pool:
      return "pool";
    case BlockKind::gpu_staging:
      return "gpu_staging";
    case BlockKind::gpu_proxy:
      return "gpu_proxy";
  }
  return "unknown";
}

bool label_key_valid(uint8_t key) { return key > 0 && key < static_cast<uint8_t>(LabelKey::count); }

const char* label_key_name(LabelKey key) {
  auto k = static_cast<uint8_t>(key);
  return label_key_valid(k) ? kLabelNames[k] : nullptr;
}

std::span<const CounterName> counter_names() { return kNames; }

const CounterName* find_counter(uint16_t id) {
  for (const auto& n : kNames) {
    if (static_cast<uint16_t>(n.id) == id) return &n;
  }
  return nullptr;
}

}  // namespace xport::telemetry
