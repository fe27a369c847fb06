// Stats -> blocks: connection endpoints summed per rail, one block per CQ, the pool block, info
// blocks.
#include <gtest/gtest.h>

#include "telemetry/names.hpp"
#include "telemetry/stats_blocks.hpp"

namespace xport::telemetry {
namespace {

std::string label(const BlockRecord& b, LabelKey k) {
  for (int i = 0; i < b.label_count; ++i) {
    if (b.labels[i].key == static_cast<uint8_t>(k)) {
      return std::string(b.labels[i].value, b.labels[i].length);
    }
  }
  return "<none>";
}

uint64_t counter(const BlockRecord& b, CounterId id) {
  for (int i = 0; i < b.counter_count; ++i) {
    if (b.counters[i].id == static_cast<uint16_t>(id)) return b.counters[i].value;
  }
  return UINT64_MAX;
}

std::vector<const BlockRecord*> of_kind(const std::vector<BlockRecord>& v, BlockKind k) {
  std::vector<const BlockRecord*> out;
  for (const auto& b : v) {
    if (b.kind == static_cast<uint16_t>(k)) out.push_back(&b);
  }
  return out;
}

TEST(StatsBlocks, SumsConnectionEndpointsAndLabelsEverything) {
  Stats s;
  EndpointStats shared;
  shared.name = "rail lo data";
  shared.rail = "lo";
  shared.bytes[0] = 100;
  shared.ops[2] = 3;
  s.endpoints.push_back(shared);
  for (int i = 0; i < 50; ++i) {  // 50 peers' connections: still one block
    EndpointStats c;
    c.name = "rail lo connection";
    c.rail = "lo";
    c.bytes[1] = 10;
    c.eagain_retries = 1;
    s.endpoints.push_back(c);
  }
  CqStats cq;
  cq.name = "cq lo";
  cq.polls = 9;
  cq.max_batch = 4;
  s.cqs.push_back(cq);
  s.comms_open = 2;
  s.registered_bytes = 4096;
  s.mr_cache_hits = 5;
  RailStats rs;
  rs.name = "lo";
  rs.state = "up";
  rs.stripes_out = 8;
  s.rails.push_back(rs);
  DeviceLabels l;
  l.device = "1";
  l.provider = "tcp;ofi_rxm";
  l.fabric = "127.0.0.1/32";
  l.domain = "lo";
  l.nic_pci = {{"lo", "0000:01:00.0"}};
  std::vector<BlockRecord> out;
  append_stats_blocks(s, l, out);

  auto dev = of_kind(out, BlockKind::device);
  ASSERT_EQ(dev.size(), 1u);
  EXPECT_EQ(counter(*dev[0], CounterId::device_comms_open), 2u);
  EXPECT_EQ(counter(*dev[0], CounterId::device_registered_bytes), 4096u);
  EXPECT_EQ(label(*dev[0], LabelKey::device), "1");
  EXPECT_EQ(counter(*dev[0], CounterId::device_mr_cache_hits), 5u);

  auto rails = of_kind(out, BlockKind::rail);
  ASSERT_EQ(rails.size(), 1u);
  EXPECT_EQ(counter(*rails[0], CounterId::rail_up), 1u);
  EXPECT_EQ(counter(*rails[0], CounterId::rail_stripes_out), 8u);
  EXPECT_EQ(label(*rails[0], LabelKey::rail), "lo");

  auto eps = of_kind(out, BlockKind::endpoint);
  ASSERT_EQ(eps.size(), 2u);
  // Label values say what the other labels do not: the endpoint's role on its rail, the CQ's
  // rail (they were "rail lo connection" and "cq lo": the rail twice, with spaces).
  const BlockRecord* conn = label(*eps[0], LabelKey::endpoint) == "connection" ? eps[0] : eps[1];
  const BlockRecord* rail = conn == eps[0] ? eps[1] : eps[0];
  EXPECT_EQ(label(*conn, LabelKey::endpoint), "connection");
  EXPECT_EQ(label(*rail, LabelKey::endpoint), "data");
  EXPECT_EQ(counter(*conn, CounterId::endpoint_bytes_recv), 500u);
  EXPECT_EQ(counter(*conn, CounterId::endpoint_eagain_retries), 50u);
  EXPECT_EQ(counter(*rail, CounterId::endpoint_bytes_send), 100u);
  EXPECT_EQ(counter(*rail, CounterId::endpoint_ops_write), 3u);
  EXPECT_EQ(label(*rail, LabelKey::rail), "lo");
  EXPECT_EQ(label(*rail, LabelKey::provider), "tcp;ofi_rxm");

  auto cqs = of_kind(out, BlockKind::cq);
  ASSERT_EQ(cqs.size(), 1u);
  EXPECT_EQ(counter(*cqs[0], CounterId::cq_polls), 9u);
  EXPECT_EQ(counter(*cqs[0], CounterId::cq_max_batch), 4u);
  EXPECT_EQ(label(*cqs[0], LabelKey::cq), "lo");

  auto info = of_kind(out, BlockKind::info);
  ASSERT_EQ(info.size(), 2u);  // nic + rail plan; no GPU
  EXPECT_EQ(counter(*info[0], CounterId::nic_info), 1u);
  EXPECT_EQ(label(*info[0], LabelKey::pci), "0000:01:00.0");
  EXPECT_EQ(counter(*info[1], CounterId::rail_plan_info), 1u);
  EXPECT_EQ(label(*info[1], LabelKey::nic), "0000:01:00.0");

  l.gpu = "0000:53:00.0";
  out.clear();
  append_stats_blocks(s, l, out);
  EXPECT_EQ(of_kind(out, BlockKind::info).size(), 3u);
}

TEST(StatsBlocks, OnePoolBlockPerDeviceWithEveryPoolStatsField) {
  Stats s;
  s.pool.groups = 2;
  s.pool.channels_per_group = 4;
  s.pool.channels = 3;
  s.pool.cqs = 1;
  s.pool.comms_attached = 5;
  s.pool.primaries = 6;
  s.pool.secondaries = 7;
  s.pool.routing_misses = 8;
  s.pool.channel_ops = 1234;
  s.pool.busiest_channel_ops = 800;
  s.pool.registered_bytes = 4096;
  DeviceLabels l;
  l.device = "2";
  l.provider = "shm";
  l.gpu = "0000:53:00.0";
  std::vector<BlockRecord> out;
  append_stats_blocks(s, l, out);
  auto pools = of_kind(out, BlockKind::pool);
  ASSERT_EQ(pools.size(), 1u);
  const BlockRecord& p = *pools[0];
  EXPECT_EQ(label(p, LabelKey::device), "2");
  EXPECT_EQ(label(p, LabelKey::provider), "shm");
  EXPECT_EQ(label(p, LabelKey::gpu), "0000:53:00.0");
  EXPECT_EQ(p.label_count, 3);
  EXPECT_EQ(p.counter_count, 11);
  EXPECT_EQ(counter(p, CounterId::pool_groups), 2u);
  EXPECT_EQ(counter(p, CounterId::pool_channels_per_group), 4u);
  EXPECT_EQ(counter(p, CounterId::pool_channels), 3u);
  EXPECT_EQ(counter(p, CounterId::pool_cqs), 1u);
  EXPECT_EQ(counter(p, CounterId::pool_comms_attached), 5u);
  EXPECT_EQ(counter(p, CounterId::pool_primaries), 6u);
  EXPECT_EQ(counter(p, CounterId::pool_secondaries), 7u);
  EXPECT_EQ(counter(p, CounterId::pool_routing_misses), 8u);
  EXPECT_EQ(counter(p, CounterId::pool_channel_ops), 1234u);
  EXPECT_EQ(counter(p, CounterId::pool_busiest_channel_ops), 800u);
  EXPECT_EQ(counter(p, CounterId::pool_registered_bytes), 4096u);
  for (int i = 0; i < p.counter_count; ++i) {
    EXPECT_NE(find_counter(p.counters[i].id), nullptr) << p.counters[i].id;
  }

  // No sharing configured, no GPU: the block is still there, zeros and all, without a gpu label.
  l.gpu.clear();
  out.clear();
  append_stats_blocks(Stats{}, l, out);
  pools = of_kind(out, BlockKind::pool);
  ASSERT_EQ(pools.size(), 1u);
  EXPECT_EQ(label(*pools[0], LabelKey::gpu), "<none>");
  EXPECT_EQ(pools[0]->label_count, 2);
  EXPECT_EQ(counter(*pools[0], CounterId::pool_groups), 0u);
  EXPECT_EQ(counter(*pools[0], CounterId::pool_busiest_channel_ops), 0u);
}

TEST(StatsBlocks, OneInfoPairPerRail) {
  Stats s;
  RailStats down;
  down.name = "eth2";  // a rail no endpoint names yet still gets its info blocks
  down.state = "quarantined";
  s.rails.push_back(down);
  for (const char* r : {"eth0", "eth1", "eth0"}) {
    EndpointStats e;
    e.name = std::string("rail ") + r;
    e.rail = r;
    s.endpoints.push_back(e);
  }
  DeviceLabels l;
  l.device = "0";
  l.domain = "eth0";
  std::vector<BlockRecord> out;
  append_stats_blocks(s, l, out);
  EXPECT_EQ(of_kind(out, BlockKind::info).size(), 6u);
  EXPECT_EQ(of_kind(out, BlockKind::endpoint).size(), 2u);
  auto rails = of_kind(out, BlockKind::rail);
  ASSERT_EQ(rails.size(), 1u);
  EXPECT_EQ(counter(*rails[0], CounterId::rail_up), 0u);
}

}  // namespace
}  // namespace xport::telemetry
