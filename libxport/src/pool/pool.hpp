// The channel pool of a device (docs/pool.md): connections to peers, keyed by (local rail, peer,
// remote rail, direction, group, slot), shared by the communicators placed on them. A channel
// is refcounted by its communicators; the pool owns it until its last user is gone, when it is
// taken out by its key and retired. Provider handles (a connection's fid) only lead to a key.
//
// Placement: the k-th communicator towards a peer (k = how many it has there now) joins group
// k % groups and slot (k / groups) % channels of that group; the first on a slot opens the
// channel (a primary), the later ones join it (secondaries). groups == 0: no sharing, every
// communicator gets a slot of its own.
//
// The RDM providers' channels (the rail's shared endpoints plus a peer's address) belong to
// their peer (pool/peer.hpp) and are counted here, not keyed: an RDM endpoint already carries
// every communicator and peer of its rail.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <rdma/fabric.h>

#include "pool/channel.hpp"

namespace xport::pool {

class Pool {
 public:
  Pool(uint32_t groups, uint32_t channels) : groups_(groups), channels_(channels) {}

  uint32_t groups() const { return groups_; }
  uint32_t channels_per_group() const { return channels_; }

  // The key a new communicator towards `peer` takes in direction `out`.
  ChannelKey place(uint8_t rail, uint64_t peer) {
    auto it = attached_.find({peer, Direction::out});
    const uint64_t k = it == attached_.end() ? 0 : it->second;
    ChannelKey key{rail, peer, rail, Direction::out, 0, 0};
    if (groups_ == 0) {
      key.group = kOwnGroup;
      key.slot = next_own_++;
    } else {
      key.group = static_cast<uint32_t>(k % groups_);
      key.slot = static_cast<uint32_t>((k / groups_) % channels_);
    }
    return key;
  }
  // The key of a connection a peer opened to this device: its group (as the connector placed
  // it) and a slot of this side's numbering (a connector's slot may be reused before this side
  // has retired its end of the previous connection on it).
  ChannelKey accepted(uint8_t rail, uint64_t peer, uint32_t group) {
    return ChannelKey{rail, peer, rail, Direction::in, group, next_in_++};
  }

  Channel* find(const ChannelKey& key) const {
    auto it = channels_by_key_.find(key);
    return it == channels_by_key_.end() ? nullptr : it->second.get();
  }
  Channel* add(const ChannelKey& key, std::unique_ptr<Channel> ch) {
    ch->key = key;
    Channel* raw = ch.get();
    channels_by_key_[key] = std::move(ch);
    return raw;
  }
  // A failed channel gives up its key (a new channel may take it) and stays the pool's until
  // its last user is gone.
  void orphan(const ChannelKey& key) {
    auto it = channels_by_key_.find(key);
    if (it == channels_by_key_.end()) return;
    orphans_.push_back(std::move(it->second));
    channels_by_key_.erase(it);
  }
  // Teardown: the channel leaves the pool, by its full key (or from the orphans), for the
  // caller to close; its operations stay counted.
  std::unique_ptr<Channel> release(Channel& ch) {
    std::unique_ptr<Channel> out;
    auto it = channels_by_key_.find(ch.key);
    if (it != channels_by_key_.end() && it->second.get() == &ch) {
      out = std::move(it->second);
      channels_by_key_.erase(it);
    } else {
      for (auto o = orphans_.begin(); o != orphans_.end(); ++o) {
        if (o->get() != &ch) continue;
        out = std::move(*o);
        orphans_.erase(o);
        break;
      }
    }
    if (out == nullptr) return nullptr;
    if (out->fid != nullptr) by_fid_.erase(out->fid);
    ops_gone_ += out->ops;
    return out;
  }
  // A connection's provider handle, for its events (never for teardown).
  void bind(fid_t fid, Channel& ch) {
    ch.fid = fid;
    by_fid_[fid] = &ch;
  }
  Channel* by_fid(fid_t fid) const {
    auto it = by_fid_.find(fid);
    return it == by_fid_.end() ? nullptr : it->second;
  }

  // A communicator starts (attach) or stops (detach) using `ch`; it is counted as a primary
  // or secondary once (count_role: false for the further rails of a communicator's own
  // channels).
  void attach(Channel& ch, bool primary, bool count_role = true) {
    ++ch.refs;
    ++attached_[{ch.key.peer, ch.key.dir}];
    if (count_role) ++(primary ? primaries_ : secondaries_);
  }
  // True when it was the channel's last user.
  bool detach(Channel& ch) {
    auto it = attached_.find({ch.key.peer, ch.key.dir});
    if (it != attached_.end() && --it->second == 0) attached_.erase(it);
    return --ch.refs <= 0;
  }

  // Every channel the pool holds, keyed or orphaned.
  template <typename F>
  void for_each(F&& f) const {
    for (const auto& [key, ch] : channels_by_key_) f(*ch);
    for (const auto& ch : orphans_) f(*ch);
  }
  size_t size() const { return channels_by_key_.size() + orphans_.size(); }
  uint64_t primaries() const { return primaries_; }
  uint64_t secondaries() const { return secondaries_; }
  // RDM channels are made for a peer's first communicator and reused by the others.
  void count_rdm(bool primary) { ++(primary ? primaries_ : secondaries_); }
  uint64_t ops_gone() const { return ops_gone_; }
  void add_ops_gone(uint64_t ops) { ops_gone_ += ops; }

 private:
  uint32_t groups_;
  uint32_t channels_;
  std::map<ChannelKey, std::unique_ptr<Channel>> channels_by_key_;
  std::vector<std::unique_ptr<Channel>> orphans_;
  std::map<fid_t, Channel*> by_fid_;
  std::map<std::pair<uint64_t, Direction>, uint64_t> attached_;
  uint32_t next_own_ = 0;
  uint32_t next_in_ = 0;
  uint64_t primaries_ = 0;
  uint64_t secondaries_ = 0;
  uint64_t ops_gone_ = 0;
};

}  // namespace xport::pool
