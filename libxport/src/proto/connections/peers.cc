// DeviceState's methods for peers and their channels (the channel pool's behaviour in this
// device): a peer by its device token, the channels and paths to it on each rail, and its end
// (closed, unreferenced, retired with its addresses).
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
  // The last user is gone: forget the peer's addresses (RDM channels share the rail endpoints,
  // so nothing else is open for it). A later connection makes them again.
  for (auto& ch : p.channels) {
    pool->add_ops_gone(ch->ops);
    forget_address(*ch);
  }
  peers.erase(p.token);
}

void DeviceState::forget_address(const pool::Channel& ch) {
  fabric::AddressVector* av = rails[ch.rail]->av();
  if (av == nullptr || ch.peer == FI_ADDR_UNSPEC) return;
  Status s = av->remove(ch.peer);
  if (!s.ok()) XPORT_LOG(debug, "removing ", ch.label, ": ", s.to_string());
}

Result<pool::Channel*> DeviceState::channel_to(pool::Peer& p, size_t rail, bool control,
                                               const std::vector<uint8_t>& address) {
  rail::Rail& r = *rails[rail];
  XPORT_ASSIGN_OR_RETURN(fi_addr_t a, r.av()->insert(address));
  auto ch = std::make_unique<pool::Channel>();
  ch->ep = control ? r.control() : r.data();
  ch->peer = a;
  ch->connected = true;
  ch->rail = static_cast<uint8_t>(rail);
  ch->label = core::str("rail ", r.name(), control ? " control" : " data", " peer ", a);
  pool::Channel* out = ch.get();
  p.channels.push_back(std::move(ch));
  return out;
}

Status DeviceState::set_paths(pool::Peer& p, const std::vector<RailAddresses>& remote) {
  const size_t common = std::min(rails.size(), remote.size());
  for (size_t i = 0; i < common; ++i) {
    const fabric::AddressVector* av = rails[i]->av();
    if (av == nullptr || av->capacity() == 0) continue;
    const bool has_data = i < p.paths.size() && p.paths[i].data != nullptr;
    const bool has_control = i < p.paths.size() && p.paths[i].control != nullptr;
    const size_t needed = (has_data ? 0 : 1) + (has_control ? 0 : 1);
    if (needed > 0 && av->used() + needed + kRefusalRoom > av->capacity()) {
      return core::error(Code::resource, "rail ", rails[i]->name(),
                         " has no room for another peer device: its address table holds ",
                         av->used(), " of ", av->capacity(), " addresses (libfabric's shm "
                         "maps 256 per endpoint's address vector; each peer device takes 2, ",
                         kRefusalRoom, " are kept for refusals)");
    }
  }
  if (p.paths.size() > common) p.paths.resize(common);
  for (size_t i = 0; i < common; ++i) {
    if (i < p.paths.size() && p.paths[i].data != nullptr && p.paths[i].control != nullptr) {
      continue;  // known already (another communicator to the same device)
    }
    if (i >= p.paths.size()) p.paths.resize(i + 1);
    pool::Path& path = p.paths[i];
    if (path.data == nullptr) {
      XPORT_ASSIGN_OR_RETURN(path.data, channel_to(p, i, false, remote[i].data));
    }
    if (path.control == nullptr) {
      XPORT_ASSIGN_OR_RETURN(path.control, channel_to(p, i, true, remote[i].control));
    }
  }
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
  auto ch = channel_to(p, 0, true, remote[0].control);
  if (!ch && ch.status().code() == Code::resource) {
    // The room kept for refusals is taken by earlier refused peers: those that nothing names
    // any more (their answers were handed to the provider) go now rather than at the next sweep.
    std::vector<pool::Peer*> done;
    for (auto& [token, other] : peers) {
      if (other.get() != &p && other->refused && other->refs <= 0) done.push_back(other.get());
    }
    for (pool::Peer* other : done) retire_peer(*other);
    if (!done.empty()) ch = channel_to(p, 0, true, remote[0].control);
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
