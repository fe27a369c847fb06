// Ids of block kinds, label keys and counters in the stats segment, and the table that maps
// each counter id to its Prometheus name, type and help (docs/metrics.md lists the same names;
// tests/exporter/metrics_doc_test.py keeps the two in sync).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace xport::telemetry {

// To add a block kind: a value here, its counters below (ids in a fresh range), a function
// that fills BlockRecords (see stats_blocks.cc), and rows in docs/metrics.md.
enum class BlockKind : uint16_t {
  process = 1,   // the publisher itself
  device = 2,    // one Device: comms, registrations, routing misses
  endpoint = 3,  // one endpoint (or all connection endpoints of a rail) of a device
  cq = 4,        // one completion queue
  info = 5,      // labels only: a NIC, a GPU, the rail plan (value 1)
  rail = 6,      // one rail of a device: state, stripes
  pool = 7,      // the channel pool of one device: channels, CQs, comms sharing them
  gpu_staging = 8,  // the process's host staging of one GPU's memory
  gpu_proxy = 9,    // one GpuProxy: its ring and thread
};
const char* block_kind_name(uint16_t kind);  // "endpoint"; "unknown" for other values

// Label keys a block may carry; the value text is the Prometheus label name.
enum class LabelKey : uint8_t {
  job = 1,
  rank,
  program,
  device,
  rail,
  nic,
  gpu,
  pool,
  cq,
  endpoint,
  provider,
  fabric,
  pci,
  numa_node,
  link_speed,
  op,
  role,
  cuda_device,  // a CUDA device ordinal
  proxy,        // a GpuProxy's ordinal in the process
  count  // not a key
};
const char* label_key_name(LabelKey key);  // nullptr for values outside the enum
bool label_key_valid(uint8_t key);

enum class MetricType : uint8_t { counter, gauge };

enum class CounterId : uint16_t {
  // process (publisher)
  process_devices = 1,
  telemetry_snapshots = 2,
  telemetry_blocks_dropped = 3,
  // device
  device_comms_open = 10,
  device_registrations = 11,
  device_registered_bytes = 12,
  device_routing_misses = 13,
  device_mr_cache_hits = 14,
  device_mr_cache_misses = 15,
  // endpoint: ops and bytes by op (the order of fabric::OpKind), then totals
  endpoint_ops_send = 20,
  endpoint_ops_recv,
  endpoint_ops_write,
  endpoint_ops_read,
  endpoint_ops_atomic,
  endpoint_bytes_send = 25,
  endpoint_bytes_recv,
  endpoint_bytes_write,
  endpoint_bytes_read,
  endpoint_bytes_atomic,
  endpoint_posted = 30,
  endpoint_completed = 31,
  endpoint_error_completions = 32,
  endpoint_eagain_retries = 33,
  // cq
  cq_polls = 40,
  cq_empty_polls = 41,
  cq_completions = 42,
  cq_error_completions = 43,
  cq_max_batch = 44,
  // rail
  rail_up = 50,
  rail_stripes_out = 51,
  rail_stripes_in = 52,
  rail_low_latency_control = 53,
  rail_quarantine_events = 54,
  rail_write_bytes_in = 55,
  rail_errors = 56,
  rail_shards = 57,
  // info metrics (value 1, the labels are the information)
  nic_info = 60,
  gpu_info = 61,
  rail_plan_info = 62,
  // device: peers and the engine's queues
  device_late_arrivals = 70,
  device_peers = 71,
  device_peers_lost = 72,
  device_keepalives_sent = 73,
  device_deferred_posts = 74,
  device_overflow_copies = 75,
  // pool: the channel pool of a device (xport::PoolStats; 80-99)
  pool_groups = 80,
  pool_channels_per_group = 81,
  pool_channels = 82,
  pool_cqs = 83,
  pool_comms_attached = 84,
  pool_primaries = 85,
  pool_secondaries = 86,
  pool_routing_misses = 87,
  pool_channel_ops = 88,
  pool_busiest_channel_ops = 89,
  pool_registered_bytes = 90,
  // device: one-sided windows (issue 12: 120-159)
  device_window_streams = 120,
  device_window_acks_sent = 121,
  device_window_ops_held = 122,
  device_signals_applied = 123,
  device_atomics_native = 124,
  device_atomics_emulated = 125,
  device_atomics_applied = 126,
  device_notifications = 127,
  device_window_cq_room = 128,
  device_window_streams_waiting = 129,
  device_window_take_backs = 130,
  device_window_credit_asks = 131,
  // GPU staging, per CUDA device of the process (issue 15: 160-169)
  gpu_staging_to_host_bytes = 160,
  gpu_staging_to_gpu_bytes = 161,
  gpu_staging_copies_to_host = 162,
  gpu_staging_copies_to_gpu = 163,
  gpu_staging_copy_errors = 164,
  gpu_staging_shadows = 165,
  gpu_staging_shadow_bytes = 166,
  gpu_staging_pool_bytes = 167,         // (issue 39: the staging pools of GPU sources)
  gpu_staging_pool_pinned_bytes = 168,
  gpu_staging_pool_in_use_bytes = 169,
  gpu_staging_pool_refusals = 190,      // (160-169 full: from 190)
  // GPU proxy (170-189)
  gpu_proxy_descriptors = 170,
  gpu_proxy_batches = 171,
  gpu_proxy_completed = 172,
  gpu_proxy_in_flight = 173,
  gpu_proxy_queued = 174,
  gpu_proxy_batch_max = 175,
  gpu_proxy_capacity = 176,
  gpu_proxy_again = 177,
  gpu_proxy_timeouts = 178,
  gpu_proxy_failures = 179,
};

struct CounterName {
  CounterId id;
  const char* metric;  // Prometheus name: xport_..., base units, _total for counters
  MetricType type;
  LabelKey extra_key;       // a label the id implies (op="send"), or LabelKey::count for none
  const char* extra_value;  // its value
  const char* help;
};

// Every counter the segment may carry, in id order.
std::span<const CounterName> counter_names();
const CounterName* find_counter(uint16_t id);  // nullptr when the id is unknown

}  // namespace xport::telemetry
