// Stats -> blocks: device, pool, rail, endpoint, cq and info blocks of one Device.
#include "telemetry/stats_blocks.hpp"

#include <map>
#include <string>
#include <utility>

#include "telemetry/block.hpp"
#include "telemetry/names.hpp"

namespace xport::telemetry {
namespace {

static_assert(kStatOps == 5,
              "endpoint counter ids follow fabric::OpKind: send recv write read atomic");

CounterId op_counter(CounterId first, int op) {
  return static_cast<CounterId>(static_cast<uint16_t>(first) + op);
}

void add_endpoint_totals(EndpointStats& sum, const EndpointStats& e) {
  for (int op = 0; op < kStatOps; ++op) {
    sum.ops[op] += e.ops[op];
    sum.bytes[op] += e.bytes[op];
  }
  sum.posted += e.posted;
  sum.completed += e.completed;
  sum.error_completions += e.error_completions;
  sum.eagain_retries += e.eagain_retries;
}

// A label value without what other labels already say: endpoint "rail lo own data" of rail
// "lo" is "own_data", CQ "cq lo" is "lo" (labels that repeat themselves, with spaces, make
// long legends and awkward selectors). What does not start with `prefix` is kept as it is.
std::string short_value(std::string name, const std::string& prefix) {
  if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0) {
    name.erase(0, prefix.size());
  }
  for (char& c : name) {
    if (c == ' ') c = '_';
  }
  return name;
}

}  // namespace

void append_stats_blocks(const Stats& stats, const DeviceLabels& labels,
                         std::vector<BlockRecord>& out) {
  auto device_labels = [&](BlockBuilder& b) {
    b.label(LabelKey::device, labels.device);
    b.label(LabelKey::provider, labels.provider);
    b.label(LabelKey::gpu, labels.gpu);
  };

  BlockBuilder dev(BlockKind::device);
  device_labels(dev);
  dev.counter(CounterId::device_comms_open, stats.comms_open);
  dev.counter(CounterId::device_registrations, stats.registrations);
  dev.counter(CounterId::device_registered_bytes, stats.registered_bytes);
  dev.counter(CounterId::device_routing_misses, stats.routing_misses);
  dev.counter(CounterId::device_mr_cache_hits, stats.mr_cache_hits);
  dev.counter(CounterId::device_mr_cache_misses, stats.mr_cache_misses);
  dev.counter(CounterId::device_late_arrivals, stats.late_arrivals);
  dev.counter(CounterId::device_peers, stats.peers);
  dev.counter(CounterId::device_peers_lost, stats.peers_lost);
  dev.counter(CounterId::device_keepalives_sent, stats.keepalives_sent);
  dev.counter(CounterId::device_deferred_posts, stats.deferred_posts);
  dev.counter(CounterId::device_overflow_copies, stats.overflow_copies);
  dev.counter(CounterId::device_window_streams, stats.window_streams);
  dev.counter(CounterId::device_window_acks_sent, stats.window_acks_sent);
  dev.counter(CounterId::device_window_ops_held, stats.window_ops_held);
  dev.counter(CounterId::device_signals_applied, stats.signals_applied);
  dev.counter(CounterId::device_atomics_native, stats.atomics_native);
  dev.counter(CounterId::device_atomics_emulated, stats.atomics_emulated);
  dev.counter(CounterId::device_atomics_applied, stats.atomics_applied);
  dev.counter(CounterId::device_notifications, stats.notifications);
  dev.counter(CounterId::device_window_cq_room, stats.window_cq_room);
  dev.counter(CounterId::device_window_streams_waiting, stats.window_streams_waiting);
  dev.counter(CounterId::device_window_take_backs, stats.window_take_backs);
  dev.counter(CounterId::device_window_credit_asks, stats.window_credit_asks);
  out.push_back(dev.record());

  // Published whatever the sharing knobs say: groups 0 reads as "no sharing", not as no data.
  const PoolStats& pool = stats.pool;
  BlockBuilder pb(BlockKind::pool);
  device_labels(pb);
  pb.counter(CounterId::pool_groups, pool.groups);
  pb.counter(CounterId::pool_channels_per_group, pool.channels_per_group);
  pb.counter(CounterId::pool_channels, pool.channels);
  pb.counter(CounterId::pool_cqs, pool.cqs);
  pb.counter(CounterId::pool_comms_attached, pool.comms_attached);
  pb.counter(CounterId::pool_primaries, pool.primaries);
  pb.counter(CounterId::pool_secondaries, pool.secondaries);
  pb.counter(CounterId::pool_routing_misses, pool.routing_misses);
  pb.counter(CounterId::pool_channel_ops, pool.channel_ops);
  pb.counter(CounterId::pool_busiest_channel_ops, pool.busiest_channel_ops);
  pb.counter(CounterId::pool_registered_bytes, pool.registered_bytes);
  out.push_back(pb.record());

  std::map<std::pair<std::string, std::string>, EndpointStats> endpoints;
  for (const auto& e : stats.endpoints) add_endpoint_totals(endpoints[{e.rail, e.name}], e);
  for (const auto& [key, e] : endpoints) {
    BlockBuilder b(BlockKind::endpoint);
    device_labels(b);
    b.label(LabelKey::rail, key.first);
    b.label(LabelKey::endpoint, short_value(key.second, "rail " + key.first + " "));
    for (int op = 0; op < kStatOps; ++op) {
      b.counter(op_counter(CounterId::endpoint_ops_send, op), e.ops[op]);
      b.counter(op_counter(CounterId::endpoint_bytes_send, op), e.bytes[op]);
    }
    b.counter(CounterId::endpoint_posted, e.posted);
    b.counter(CounterId::endpoint_completed, e.completed);
    b.counter(CounterId::endpoint_error_completions, e.error_completions);
    b.counter(CounterId::endpoint_eagain_retries, e.eagain_retries);
    out.push_back(b.record());
  }

  for (const auto& r : stats.rails) {
    BlockBuilder b(BlockKind::rail);
    device_labels(b);
    b.label(LabelKey::rail, r.name);
    b.counter(CounterId::rail_up, r.state == "up" ? 1 : 0);
    b.counter(CounterId::rail_stripes_out, r.stripes_out);
    b.counter(CounterId::rail_stripes_in, r.stripes_in);
    b.counter(CounterId::rail_low_latency_control, r.low_latency_control ? 1 : 0);
    b.counter(CounterId::rail_quarantine_events, r.quarantine_events);
    b.counter(CounterId::rail_write_bytes_in, r.write_bytes_in);
    b.counter(CounterId::rail_errors, r.errors);
    b.counter(CounterId::rail_shards, r.shards);
    out.push_back(b.record());
  }

  for (const auto& c : stats.cqs) {
    BlockBuilder b(BlockKind::cq);
    device_labels(b);
    b.label(LabelKey::cq, short_value(c.name, "cq "));
    b.counter(CounterId::cq_polls, c.polls);
    b.counter(CounterId::cq_empty_polls, c.empty_polls);
    b.counter(CounterId::cq_completions, c.completions);
    b.counter(CounterId::cq_error_completions, c.error_completions);
    b.counter(CounterId::cq_max_batch, c.max_batch);
    out.push_back(b.record());
  }

  // Info: labels only, value 1.
  std::vector<std::string> rails;
  for (const auto& r : stats.rails) rails.push_back(r.name);
  for (const auto& e : stats.endpoints) {
    bool seen = false;
    for (const auto& r : rails) seen = seen || r == e.rail;
    if (!seen && !e.rail.empty()) rails.push_back(e.rail);
  }
  if (rails.empty()) rails.push_back(labels.domain);
  for (const auto& rail : rails) {
    auto pci = labels.nic_pci.find(rail);
    const std::string nic_pci = pci != labels.nic_pci.end() ? pci->second : std::string();
    BlockBuilder nic(BlockKind::info);
    nic.label(LabelKey::device, labels.device);
    nic.label(LabelKey::rail, rail);
    nic.label(LabelKey::nic, rail);
    nic.label(LabelKey::provider, labels.provider);
    nic.label(LabelKey::fabric, labels.fabric);
    nic.label(LabelKey::pci, nic_pci);
    nic.counter(CounterId::nic_info, 1);
    out.push_back(nic.record());

    BlockBuilder plan(BlockKind::info);
    plan.label(LabelKey::device, labels.device);
    plan.label(LabelKey::gpu, labels.gpu);
    plan.label(LabelKey::rail, rail);
    plan.label(LabelKey::nic, nic_pci.empty() ? rail : nic_pci);
    plan.label(LabelKey::role, "data");
    plan.counter(CounterId::rail_plan_info, 1);
    out.push_back(plan.record());
  }

  if (!labels.gpu.empty()) {
    BlockBuilder gpu(BlockKind::info);
    gpu.label(LabelKey::device, labels.device);
    gpu.label(LabelKey::gpu, labels.gpu);
    gpu.label(LabelKey::pci, labels.gpu);
    gpu.counter(CounterId::gpu_info, 1);
    out.push_back(gpu.record());
  }
}

}  // namespace xport::telemetry
