// Engine: the stats snapshot, summed over rails, endpoints, peers and parts.
#include "proto/engine.hpp"

#include <algorithm>
#include <mutex>
#include <thread>

#include "core/knob.hpp"
#include "core/log.hpp"

namespace xport::proto {

Stats Engine::stats() const {
  Lock l(state_);
  Stats s;
  auto add_ep = [&](const fabric::Endpoint& ep, const std::string& rail) {
    EndpointStats es;
    es.name = ep.name();
    es.rail = rail;
    const auto& c = ep.counters();
    for (int i = 0; i < kStatOps; ++i) {
      es.ops[i] = c.ops[i].get();
      es.bytes[i] = c.bytes[i].get();
    }
    es.posted = c.posted.get();
    es.completed = c.completed.get();
    es.error_completions = c.error_completions.get();
    es.eagain_retries = c.eagain.get();
    s.endpoints.push_back(es);
  };
  for (const auto& r : state_.rails) {
    RailStats rs;
    rs.name = r->name();
    rs.state = r->health().state_name();
    rs.quarantine_events = r->health().quarantines().get();
    rs.low_latency_control = r->low_latency_control();
    rs.stripes_out = r->stripes_out().get();
    rs.stripes_in = r->stripes_in().get();
    rs.write_bytes_in = r->bytes_in().get();
    for (rail::RailEndpoint* ep : r->endpoints()) {
      if (ep != nullptr) rs.errors += ep->endpoint().counters().error_completions.get();
    }
    for (rail::RailEndpoint* ep : r->endpoints()) add_ep(ep->endpoint(), r->name());
    rs.shards = static_cast<uint32_t>(r->shard_count());
    s.rails.push_back(rs);
    CqStats cs;
    cs.name = "cq " + r->name();
    const auto& cc = r->cq().counters();
    cs.polls = cc.polls.get();
    cs.empty_polls = cc.empty_polls.get();
    cs.completions = cc.completions.get();
    cs.error_completions = cc.error_completions.get();
    cs.max_batch = cc.max_batch.get();
    s.cqs.push_back(cs);
  }
  // The pool: connections (each its own endpoint) and the RDM channels of every peer.
  PoolStats& ps = s.pool;
  ps.groups = state_.config.pool_groups;
  ps.channels_per_group = state_.config.pool_channels;
  uint64_t live_ops = 0;
  auto count_channel = [&](const pool::Channel& ch) {
    ++ps.channels;
    live_ops += ch.ops;
    ps.busiest_channel_ops = std::max(ps.busiest_channel_ops, ch.ops);
  };
  state_.pool->for_each([&](const pool::Channel& ch) {
    count_channel(ch);
    if (!ch.owned) return;
    if (ch.owned->has_endpoint()) add_ep(ch.owned->endpoint(), state_.rails[ch.rail]->name());
    for (const memory::BounceBuffers* b : {&ch.owned->rx(), &ch.owned->tx()}) {
      ps.registered_bytes += b->count() * b->size();
    }
  });
  for (const auto& [token, p] : state_.peers) {
    for (const auto& ch : p->channels) count_channel(*ch);
  }
  ps.cqs = state_.rails.size();  // one per rail, shared by its endpoints and connections
  state_.comms->for_each([&](uint16_t, CommState& c) {
    if (!c.paths.empty()) ++ps.comms_attached;
  });
  ps.primaries = state_.pool->primaries();
  ps.secondaries = state_.pool->secondaries();
  // Late arrivals (traffic for a communicator closed meanwhile) are expected: counted apart.
  ps.routing_misses = state_.counters.routing_misses - state_.counters.late_arrivals;
  ps.channel_ops = live_ops + state_.pool->ops_gone();
  s.comms_open = state_.comms->size();
  s.registrations = state_.registry->registrations();
  s.registered_bytes = state_.registry->registered_bytes();
  s.routing_misses = state_.counters.routing_misses;
  s.late_arrivals = state_.counters.late_arrivals;
  s.peers_lost = state_.counters.peers_lost;
  s.keepalives_sent = state_.counters.keepalives_sent;
  s.deferred_posts = state_.counters.deferred_posts;
  s.overflow_copies = state_.counters.overflow_copies;
  s.window_acks_sent = state_.counters.window_acks_sent;
  s.window_ops_held = state_.counters.window_ops_held;
  s.signals_applied = state_.counters.signals_applied;
  s.atomics_native = state_.counters.atomics_native;
  s.atomics_emulated = state_.counters.atomics_emulated;
  s.atomics_applied = state_.counters.atomics_applied;
  s.notifications = state_.counters.notifications;
  s.window_take_backs = state_.counters.window_take_backs;
  s.window_credit_asks = state_.counters.window_credit_asks;
  for (uint16_t index : state_.in_stream_live) {
    if (const InStream* in = state_.in_streams[index].get()) {
      s.window_cq_room += in->cq_reserved;
      s.window_streams_waiting += in->starved ? 1 : 0;
    }
  }
  s.window_streams = state_.out_streams.size();
  s.window_streams += state_.in_stream_live.size();
  s.peers = state_.peers.size();
  s.mr_cache_hits = state_.registry->cache_hits();
  s.mr_cache_misses = state_.registry->cache_misses();
  return s;
}

}  // namespace xport::proto
