// A rail: one NIC (libfabric domain) with its completion queue, and either RDM endpoint shards
// (each a data and a control endpoint with their bounce buffers and an address vector of their
// own; shard 0 is the rail's, the others open as peers need them) or a passive endpoint from
// which connected endpoints are made. Also the rail's health and its CQ's room.
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "fabric/objects.hpp"
#include "rail/endpoint.hpp"
#include "rail/health.hpp"

namespace xport::rail {

struct RailConfig {
  size_t rx_buffers = 256;
  size_t tx_buffers = 256;
  size_t buffer_bytes = 8192 + 64;
  // The control endpoint of an RDM rail carries no eager messages: its buffers need only hold
  // the largest control message (0: buffer_bytes).
  size_t control_buffer_bytes = 0;
  // RDM: control messages on an endpoint of their own (low-latency traffic class), or on the
  // data endpoint.
  bool separate_control = true;
  // Entries the CQ holds. Every operation that will complete on it (posted receives, sends,
  // writes, reads, and the remote-CQ-data writes a peer was cleared to send) takes room before it
  // is posted and gives it back when its entry is read (see cq_take()).
  size_t cq_size = 16384;
  // Open the CQ with a wait object (FI_WAIT_FD) where the provider has one, for waits that
  // sleep (XPORT_WAIT=block); without one where it has none (shm), or when false.
  bool cq_wait_fd = false;
  // RDM: the provider queue of shard 0's control endpoint, the door every peer's first request
  // knocks on (0: the provider's default). On shm it bounds how many first requests one progress
  // pass can map into that shard's address table (docs/pool.md, "Shards"); the endpoint posts no
  // more receive buffers than it holds.
  size_t door_queue = 0;
  // RDM: receive and send buffers of each endpoint of a shard opened later (open_shard).
  size_t shard_rx_buffers = 32;
  size_t shard_tx_buffers = 32;
};

// RDM: a data and a control endpoint (the data endpoint when the rail has no separate control)
// bound to the rail's CQ and to an address vector of their own. A peer device lives on one shard
// of each rail: its addresses are in that shard's address vector, and its channels post on that
// shard's endpoints. Shards exist because a provider's address table can be bounded (shm: 256
// per address vector); with no bound every peer lives on shard 0 unless XPORT_SHARD_PEERS says
// otherwise.
struct Shard {
  // Declaration order is close order reversed: endpoints (and their buffers' MRs), then the AV.
  std::unique_ptr<fabric::AddressVector> av;
  std::unique_ptr<RailEndpoint> data;
  std::unique_ptr<RailEndpoint> control;  // nullptr: control messages use `data`
  uint16_t index = 0;
  uint32_t peers = 0;  // peer devices placed on it (DeviceState::place)
  size_t promised = 0;  // address-table entries promised to them (DeviceState::kPeerAddresses)
  RailEndpoint* control_ep() { return control ? control.get() : data.get(); }
};

class Rail {
 public:
  static Result<std::unique_ptr<Rail>> open(const fi_info* info, const RailConfig& config,
                                            uint8_t index);
  ~Rail();

  // Bytes open() registers for a shared-endpoint (RDM) rail with this config: rx and tx bounce
  // buffers of the data and control endpoints (the control endpoint's of control-message size),
  // and the data endpoint's flush target and atomic slots. Connected
  // rails register rx + tx buffers per connection instead (open_connection). Each shard opened
  // later registers shard_registered_bytes.
  static size_t registered_bytes(const RailConfig& config);
  static size_t shard_registered_bytes(const RailConfig& config);

  uint8_t index() const { return index_; }
  fabric::Domain& domain() { return *domain_; }
  const fabric::Domain& domain() const { return *domain_; }
  fabric::CompletionQueue& cq() { return *cq_; }
  const fabric::CompletionQueue& cq() const { return *cq_; }
  fabric::AddressVector* av() { return shards_.empty() ? nullptr : shards_[0]->av.get(); }
  bool connected_endpoints() const { return domain_->connected_endpoints(); }
  const std::string& name() const { return domain_->name(); }
  const RailConfig& config() const { return config_; }

  // RDM: shard 0's data endpoint (payload, eager messages, rendezvous writes) and control
  // endpoint (connection set-up, clear-to-send, credits, aborts; low-latency traffic class where
  // the provider takes it), which is the data endpoint unless RailConfig::separate_control.
  // Shard 0's control endpoint is the rail's door: handles and window keys name it. Connected
  // endpoints: nullptr.
  RailEndpoint* data() { return shards_.empty() ? nullptr : shards_[0]->data.get(); }
  RailEndpoint* control() { return shards_.empty() ? nullptr : shards_[0]->control_ep(); }
  const RailEndpoint* data() const { return shards_.empty() ? nullptr : shards_[0]->data.get(); }
  const RailEndpoint* control() const {
    return shards_.empty() ? nullptr : shards_[0]->control_ep();
  }
  bool separate_control() const { return !shards_.empty() && shards_[0]->control != nullptr; }
  // The distinct RDM endpoints of every shard (data, then control when separate).
  std::vector<RailEndpoint*> endpoints();
  bool low_latency_control() const { return low_latency_; }

  // RDM shards: shard 0 opens with the rail; open_shard adds one (its receive buffers are the
  // caller's to post). Shards stay open until the rail closes.
  size_t shard_count() const { return shards_.size(); }
  Shard& shard(size_t i) { return *shards_[i]; }
  const Shard& shard(size_t i) const { return *shards_[i]; }
  Result<Shard*> open_shard();

  // Connected endpoints: the passive endpoint, opened on first use.
  Result<fabric::PassiveEndpoint*> passive();
  // Connected endpoints: a connection with its own endpoint and bounce buffers. `info` is the
  // domain's (connect) or an FI_CONNREQ's (accept).
  Result<std::unique_ptr<RailEndpoint>> open_connection(fi_info* info, size_t rx, size_t tx);

  // RDM: a data endpoint of one communicator's own (XPORT_POOL_GROUPS=0, docs/pool.md), on
  // the rail's CQ with an address vector of its own, with `rx` receive and `tx` send buffers,
  // its flush target and atomic slots, and provider queues no deeper than its buffers need.
  Result<std::unique_ptr<RailEndpoint>> open_own_data(size_t rx, size_t tx);

  Health& health() { return health_; }
  const Health& health() const { return health_; }
  bool in_service() const { return health_.state() == Health::State::up; }
  // The CQ itself failed (a read error, not an error entry): the rail is out of service for
  // good, its CQ is read no more, and what was in flight on it was failed.
  bool cq_failed() const { return cq_failed_; }
  void set_cq_failed() { cq_failed_ = true; }

  // CQ room (under the engine lock): take before posting an operation that will complete on this
  // CQ, give back when its entry (success or error) is read. Never over-committed, so the CQ
  // cannot overrun.
  bool cq_take(size_t n = 1) {
    if (cq_used_ + n > config_.cq_size) return false;
    cq_used_ += n;
    return true;
  }
  void cq_give(size_t n = 1) { cq_used_ = cq_used_ >= n ? cq_used_ - n : 0; }
  size_t cq_used() const { return cq_used_; }
  size_t cq_free() const { return config_.cq_size > cq_used_ ? config_.cq_size - cq_used_ : 0; }

  // Stripes of striped writes this rail carried out and in, and bytes peers wrote into this
  // process through it (rendezvous data, which no local endpoint posts or counts).
  fabric::Counter& stripes_out() { return stripes_out_; }
  fabric::Counter& stripes_in() { return stripes_in_; }
  fabric::Counter& bytes_in() { return bytes_in_; }
  const fabric::Counter& stripes_out() const { return stripes_out_; }
  const fabric::Counter& stripes_in() const { return stripes_in_; }
  const fabric::Counter& bytes_in() const { return bytes_in_; }

 private:
  Rail(std::string name) : health_(std::move(name)) {}
  RailConfig config_;
  uint8_t index_ = 0;
  // Declaration order is close order reversed: endpoints (and their buffers' MRs), then
  // AV/CQ/domain.
  std::unique_ptr<fabric::Domain> domain_;
  std::unique_ptr<fabric::CompletionQueue> cq_;
  std::unique_ptr<fabric::PassiveEndpoint> pep_;
  std::vector<std::unique_ptr<Shard>> shards_;
  bool low_latency_ = false;
  Result<std::unique_ptr<Shard>> make_shard(uint16_t index, size_t rx, size_t tx);
  Health health_;
  bool cq_failed_ = false;
  size_t cq_used_ = 0;
  fabric::Counter stripes_out_;
  fabric::Counter stripes_in_;
  fabric::Counter bytes_in_;
};

}  // namespace xport::rail
