// Rail::registered_bytes() against the bounce buffers a real rail opens (shm, else the first RDM
// provider), so the locked-memory estimate xport-probe prints follows the buffer layout.
#include <gtest/gtest.h>

#include "fabric/provider.hpp"
#include "memory/bounce_buffers.hpp"
#include "rail/rail.hpp"

namespace xport::rail {
namespace {

size_t bounce_bytes(const memory::BounceBuffers* p) {
  return p == nullptr ? 0 : memory::BounceBuffers::footprint(p->count(), p->size());
}

// What an open rail's endpoints (one, or two with a separate control endpoint) hold registered.
size_t opened_bytes(Rail& rail) {
  size_t opened = 0;
  EXPECT_NE(rail.data(), nullptr);
  EXPECT_EQ(rail.control() != rail.data(), rail.separate_control());
  for (RailEndpoint* ep : rail.endpoints()) {
    if (ep == nullptr) continue;
    opened += bounce_bytes(&ep->rx()) + bounce_bytes(&ep->tx()) + bounce_bytes(ep->flush_target()) +
              bounce_bytes(ep->atomic_slots());
  }
  return opened;
}

TEST(RailRegisteredBytes, MatchesTheBuffersAnOpenRailRegisters) {
  fabric::ProviderRequest req;
  req.peers_on_host = true;
  auto sel = fabric::select_provider(req);
  ASSERT_TRUE(sel.ok()) << sel.status().to_string();
  if (sel->report.caps.endpoint_type != "rdm") GTEST_SKIP() << "no RDM provider here";
  RailConfig rc;
  rc.rx_buffers = 20;
  rc.tx_buffers = 17;
  rc.buffer_bytes = 5000;  // not a multiple of 64: BounceBuffers rounds each slot up
  auto rail = Rail::open(sel->info.get(), rc, 0);
  ASSERT_TRUE(rail.ok()) << rail.status().to_string();
  const size_t opened = opened_bytes(**rail);
  EXPECT_EQ(Rail::registered_bytes(rc), opened);
  EXPECT_EQ(opened % 4096, 0u);
  // The control endpoint with buffers of its own size (control messages only).
  EXPECT_EQ((*rail)->control()->tx().size(), 5056u);  // slots round up to 64 bytes
  rc.control_buffer_bytes = 1000;
  rail = Rail::open(sel->info.get(), rc, 0);
  ASSERT_TRUE(rail.ok()) << rail.status().to_string();
  EXPECT_EQ((*rail)->data()->rx().size(), 5056u);
  EXPECT_EQ((*rail)->control()->rx().size(), 1024u);
  EXPECT_EQ((*rail)->control()->tx().size(), 1024u);
  EXPECT_EQ(Rail::registered_bytes(rc), opened_bytes(**rail));
  // A door with a shallow provider queue posts no more receive buffers than it holds; a shard
  // opened later registers shard_registered_bytes.
  rc.door_queue = 8;
  rc.shard_rx_buffers = 5;
  rc.shard_tx_buffers = 3;
  rail = Rail::open(sel->info.get(), rc, 0);
  ASSERT_TRUE(rail.ok()) << rail.status().to_string();
  EXPECT_LE((*rail)->control()->rx().count(), 8u);
  EXPECT_EQ(Rail::registered_bytes(rc), opened_bytes(**rail));
  const size_t before = opened_bytes(**rail);
  auto shard = (*rail)->open_shard();
  ASSERT_TRUE(shard.ok()) << shard.status().to_string();
  EXPECT_EQ((*shard)->index, 1u);
  EXPECT_EQ((*rail)->shard_count(), 2u);
  EXPECT_EQ((*shard)->data->rx().count(), 5u);
  EXPECT_EQ((*shard)->control_ep()->tx().count(), 3u);
  EXPECT_EQ(Rail::shard_registered_bytes(rc), opened_bytes(**rail) - before);
  rc.door_queue = 0;
  // One endpoint for data and control (XPORT_CONTROL_ENDPOINT=shared): control() is the data
  // endpoint, with the data endpoint's buffers, and nothing else is registered.
  rc.separate_control = false;
  rail = Rail::open(sel->info.get(), rc, 0);
  ASSERT_TRUE(rail.ok()) << rail.status().to_string();
  EXPECT_FALSE((*rail)->separate_control());
  EXPECT_EQ((*rail)->control(), (*rail)->data());
  EXPECT_EQ((*rail)->endpoints().size(), 1u);
  EXPECT_EQ(Rail::registered_bytes(rc), opened_bytes(**rail));
  EXPECT_EQ(Rail::registered_bytes(rc),
            memory::BounceBuffers::footprint(20, 5000) +
                memory::BounceBuffers::footprint(17, 5000) + 4096 +
                memory::BounceBuffers::footprint(kAtomicSlots, kAtomicSlotBytes));
}

TEST(RailRegisteredBytes, BounceBuffersFootprintIsWholePages) {
  EXPECT_EQ(memory::BounceBuffers::footprint(1, 64), 4096u);
  EXPECT_EQ(memory::BounceBuffers::footprint(256, 8232), 256u * 8256);  // 8232 -> 8256 per slot
  EXPECT_EQ(memory::BounceBuffers::footprint(3, 4096), 3u * 4096);
  EXPECT_EQ(memory::BounceBuffers::footprint(0, 4096), 0u);
}

}  // namespace
}  // namespace xport::rail
