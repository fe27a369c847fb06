// DeviceState's methods for peers and their channels (the channel pool's behaviour in this
// device): a peer by its device token, the channels and paths to it on each rail, and its end
// (closed, unreferenced, retired with its addresses).
#include <algorithm>
#include <limits>

#include "core/log.hpp"
#include "proto/control.hpp"
#include "proto/device_state.hpp"

namespace xport::proto {

void DeviceState::drop_own(pool::Channel* ch) {
  if (ch == nullptr) return;
  pool->detach(*ch);
  std::unique_ptr<pool::Channel> gone = pool->release(*ch);
  if (!gone) return;
  if (gone->owned) {
    control->retire(std::move(gone));  // its address vector goes with its endpoint
    return;
  }
  forget_address(*gone);
}

pool::Peer* DeviceState::peer_for(uint64_t token) {
  auto& slot = peers[token];
  if (!slot) {
    slot = std::make_unique<pool::Peer>();
    slot->token = token;
    slot->last_heard = Clock::now();
    if (device_closed_in_process(token)) {
      slot->closed = true;
      slot->dead = true;
      slot->death = "the peer device in this process closed";
    }
  }
  return slot.get();
}

void DeviceState::close_peer(pool::Peer& p, const Status& why) {
  p.closed = true;
  for (auto& ch : p.channels) ch->gone = true;
  fail_peer(p, why);
}

Status DeviceState::check_open(const pool::Peer& p, const char* what) {
  if (!p.closed) return Status::success();
  return core::error(Code::closed, what, ": the peer device (", std::hex, p.token, std::dec,
                     ") in this process closed");
}

void DeviceState::unref(pool::Peer* p) {
  if (p == nullptr || --p->refs > 0) return;
  // Retired after a linger (PeerHealth::check), so a device that is reconnected to at once
  // keeps its channels, and a message just handed to the provider is not cut off.
  p->idle_since = Clock::now();
}

void DeviceState::retire_peer(pool::Peer& p) {
  // The last user is gone: forget the peer's addresses (RDM channels share the shards'
  // endpoints, so nothing else is open for it), and its place on each rail's shard. A later
  // connection makes them again.
  for (auto& ch : p.channels) {
    pool->add_ops_gone(ch->ops);
    forget_address(*ch);
  }
  for (size_t i = 0; i < p.shards.size() && i < rails.size(); ++i) {
    if (p.shards[i] == pool::Peer::kUnplaced || p.shards[i] >= rails[i]->shard_count()) continue;
    rail::Shard& s = rails[i]->shard(p.shards[i]);
    if (s.peers > 0) s.peers -= 1;
    s.promised -= std::min<size_t>(s.promised, p.promised[i]);
  }
  peers.erase(p.token);
}

void DeviceState::forget_address(const pool::Channel& ch) {
  fabric::AddressVector* av = ch.ep != nullptr ? ch.ep->av() : nullptr;
  if (av == nullptr || ch.peer == FI_ADDR_UNSPEC) return;
  Status s = av->remove(ch.peer);
  if (!s.ok()) XPORT_LOG(debug, "removing ", ch.label, ": ", s.to_string());
}

bool DeviceState::shard_has_room(const rail::Shard& s, size_t entries) const {
  if (config.shard_peers != 0 && shards && s.peers >= config.shard_peers) return false;
  const fabric::AddressVector& av = *s.av;
  if (av.capacity() == 0) return true;
  // Its endpoints' own addresses, and what its peers were promised (each may hold fewer so far:
  // one asked at its door holds that entry alone until it answers). Where shards may open, the
  // door keeps room for first requests of peers living elsewhere (each maps its control
  // endpoint there).
  const size_t own = s.control ? 2 : 1;
  const size_t taken = std::max(av.used(), own + s.promised);
  const bool more = shards && config.max_shards > 1;
  const size_t reserve = s.index != 0 ? 0 : kRefusalRoom + (more ? kDoorRoom : 0);
  return taken + entries + reserve <= av.capacity();
}

Result<rail::Shard*> DeviceState::place(pool::Peer& p, size_t rail_index, uint8_t entries) {
  rail::Rail& r = *rails[rail_index];
  if (p.shards.size() <= rail_index) {
    p.shards.resize(rail_index + 1, pool::Peer::kUnplaced);
    p.promised.resize(rail_index + 1, 0);
  }
  uint16_t& at = p.shards[rail_index];
  uint8_t& promised = p.promised[rail_index];
  if (at != pool::Peer::kUnplaced) {
    rail::Shard& s = r.shard(at);
    if (promised < entries) {
      s.promised += entries - promised;
      promised = entries;
    }
    return &s;
  }
  rail::Shard* found = nullptr;
  for (size_t i = 0; i < r.shard_count() && found == nullptr; ++i) {
    if (shard_has_room(r.shard(i), entries)) found = &r.shard(i);
  }
  if (found == nullptr && shards && r.shard_count() < config.max_shards) {
    // Its receive buffers take room in the rail's CQ, as shard 0's do.
    const rail::RailConfig& rc = r.config();
    const size_t rx = rc.shard_rx_buffers * (rc.separate_control ? 2 : 1);
    if (r.cq_free() < rx + kShardCqSlack) {
      return core::error(Code::resource, "rail ", r.name(), " has no room for another peer "
                         "device: a shard's ", rx, " receive buffers find ", r.cq_free(),
                         " free CQ entries (XPORT_CQ_ENTRIES)");
    }
    auto opened = r.open_shard();
    if (!opened) {
      return core::error(Code::resource, "rail ", r.name(), " has no room for another peer "
                         "device: ", opened.status().message());
    }
    found = *opened;
    Status posted;
    for (rail::RailEndpoint* ep : {found->data.get(), found->control.get()}) {
      if (ep != nullptr && posted.ok()) posted = control->post_receives(ep);
    }
    if (!posted.ok()) {
      return core::error(Code::resource, "rail ", r.name(), " has no room for another peer "
                         "device: its shard ", found->index, " opened, but ", posted.message());
    }
    XPORT_LOG(info, "rail ", r.name(), ": endpoint shard ", found->index, " opened (",
              peers.size(), " peer devices known)");
  }
  if (found == nullptr) {
    const fabric::AddressVector& av = *r.shard(r.shard_count() - 1).av;
    return core::error(Code::resource, "rail ", r.name(),
                       " has no room for another peer device: its ", r.shard_count(),
                       " endpoint shards are full (XPORT_MAX_SHARDS), the last one's address "
                       "table holds ", av.used(), " of ", av.capacity(), " addresses (libfabric's "
                       "shm maps 256 per endpoint's address vector; each peer device takes 2, or "
                       "3 where this device asked it first; ", kRefusalRoom, " of shard 0's are "
                       "kept for refusals)");
  }
  at = found->index;
  found->peers += 1;
  found->promised += entries;
  promised = entries;
  return found;
}

void DeviceState::settle_promises(pool::Peer& p) {
  for (size_t i = 0; i < p.shards.size() && i < rails.size(); ++i) {
    if (p.shards[i] == pool::Peer::kUnplaced) continue;
    rail::Shard& s = rails[i]->shard(p.shards[i]);
    size_t held = 0;
    for (const auto& ch : p.channels) held += ch->ep != nullptr && ch->ep->av() == s.av.get();
    const uint8_t now = static_cast<uint8_t>(
        std::clamp<size_t>(held, kPeerAddresses, std::numeric_limits<uint8_t>::max()));
    s.promised = s.promised - std::min<size_t>(s.promised, p.promised[i]) + now;
    p.promised[i] = now;
  }
}

Result<std::vector<RailAddresses>> DeviceState::local_addresses(pool::Peer& p) {
  std::vector<RailAddresses> out;
  for (size_t i = 0; i < rails.size(); ++i) {
    XPORT_ASSIGN_OR_RETURN(rail::Shard * s, place(p, i));
    RailAddresses a;
    XPORT_ASSIGN_OR_RETURN(a.data, s->data->endpoint().address());
    XPORT_ASSIGN_OR_RETURN(a.control, s->control_ep()->endpoint().address());
    out.push_back(std::move(a));
  }
  return out;
}

void DeviceState::release_knock(pool::Peer& p, const rail::RailEndpoint* ep,
                                const std::vector<RailAddresses>& addresses) {
  if (ep == nullptr || ep->av() == nullptr || ep->av()->capacity() == 0) return;
  const size_t rail = ep->rail();
  if (rail >= addresses.size() || addresses[rail].control.empty()) return;
  for (const auto& ch : p.channels) {
    if (ch->ep != nullptr && ch->ep->av() == ep->av()) return;  // it lives (or was answered) here
  }
  // shm takes the name it mapped at the request (the same entry), and lets it go at the removal.
  auto a = ep->av()->insert(addresses[rail].control);
  if (a) (void)ep->av()->remove(*a);
}

Result<pool::Channel*> DeviceState::channel_on(pool::Peer& p, rail::Shard& shard, size_t rail,
                                               bool control,
                                               const std::vector<uint8_t>& address) {
  rail::Rail& r = *rails[rail];
  XPORT_ASSIGN_OR_RETURN(fi_addr_t a, shard.av->insert(address));
  auto ch = std::make_unique<pool::Channel>();
  ch->ep = control ? shard.control_ep() : shard.data.get();
  ch->peer = a;
  ch->address = address;
  ch->connected = true;
  ch->rail = static_cast<uint8_t>(rail);
  ch->label = core::str("rail ", r.name(), shard.index == 0 ? "" : " shard ",
                        shard.index == 0 ? "" : std::to_string(shard.index),
                        control ? " control" : " data", " peer ", a);
  pool::Channel* out = ch.get();
  p.channels.push_back(std::move(ch));
  return out;
}

Result<pool::Channel*> DeviceState::door_channel(pool::Peer& p,
                                                 const std::vector<uint8_t>& address) {
  XPORT_ASSIGN_OR_RETURN(rail::Shard * shard, place(p, 0, kDoorPeerAddresses));
  return channel_on(p, *shard, 0, true, address);
}

Status DeviceState::set_paths(pool::Peer& p, const std::vector<RailAddresses>& remote) {
  const size_t common = std::min(rails.size(), remote.size());
  std::vector<rail::Shard*> at(common, nullptr);
  for (size_t i = 0; i < common; ++i) {
    XPORT_ASSIGN_OR_RETURN(at[i], place(p, i));
  }
  if (p.refused) {
    // Answered once from the door's room for refusals; now it has a place of its own (the
    // channel stays with the peer until it retires: the refusal may still be on its way).
    p.refused = false;
    if (!p.paths.empty()) p.paths[0].control = nullptr;
  }
  if (p.paths.size() > common) p.paths.resize(common);
  if (p.paths.size() < common) p.paths.resize(common);
  // A channel is kept while it posts from the peer's shard to the address given now.
  const auto current = [&](const pool::Channel* ch, rail::RailEndpoint* ep,
                           const std::vector<uint8_t>& address) {
    return ch != nullptr && ch->ep == ep && (address.empty() || ch->address.empty() ||
                                             ch->address == address);
  };
  for (size_t i = 0; i < common; ++i) {
    pool::Path& path = p.paths[i];
    rail::Shard& s = *at[i];
    if (!current(path.data, s.data.get(), remote[i].data)) {
      XPORT_ASSIGN_OR_RETURN(path.data, channel_on(p, s, i, false, remote[i].data));
    }
    if (!current(path.control, s.control_ep(), remote[i].control)) {
      XPORT_ASSIGN_OR_RETURN(path.control, channel_on(p, s, i, true, remote[i].control));
    }
  }
  settle_promises(p);
  if (common < std::max(rails.size(), remote.size())) {
    XPORT_LOG(info, "pairing over ", common, " common rails (this device has ", rails.size(),
              ", the peer ", remote.size(), ")");
  }
  return Status::success();
}

pool::Channel* DeviceState::refusal_channel(pool::Peer& p,
                                            const std::vector<RailAddresses>& remote) {
  if (!p.paths.empty() && p.paths[0].control != nullptr) return p.paths[0].control;
  if (remote.empty() || rails.empty()) return nullptr;
  // From the door (shard 0), where the request came in; the peer is placed nowhere.
  auto ch = channel_on(p, rails[0]->shard(0), 0, true, remote[0].control);
  if (!ch && ch.status().code() == Code::resource) {
    // The room kept for refusals is taken by earlier refused peers: those that nothing names
    // any more (their answers were handed to the provider) go now rather than at the next sweep.
    std::vector<pool::Peer*> done;
    for (auto& [token, other] : peers) {
      if (other.get() != &p && other->refused && other->refs <= 0) done.push_back(other.get());
    }
    for (pool::Peer* other : done) retire_peer(*other);
    if (!done.empty()) ch = channel_on(p, rails[0]->shard(0), 0, true, remote[0].control);
  }
  if (!ch) {
    XPORT_LOG(warn, "cannot answer a refused peer (", std::hex, p.token, std::dec,
              "): ", ch.status().to_string());
    return nullptr;
  }
  if (p.paths.empty()) p.paths.resize(1);
  p.paths[0].control = *ch;
  p.refused = true;
  return *ch;
}

}  // namespace xport::proto
