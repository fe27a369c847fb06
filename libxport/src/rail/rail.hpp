// A rail: one NIC (libfabric domain) with its completion queue, address vector, and either the
// shared RDM endpoint with its bounce buffers, or a passive endpoint for connected channels.
#pragma once

#include <memory>

#include "fabric/objects.hpp"
#include "memory/buffer_pool.hpp"
#include "pool/channel.hpp"

namespace xport::rail {

struct RailConfig {
  size_t rx_buffers = 256;
  size_t tx_buffers = 256;
  size_t buffer_bytes = 8192 + 64;
  size_t cq_size = 4096;
  uint64_t first_key = 1;
};

class Rail {
 public:
  static Result<std::unique_ptr<Rail>> open(const fi_info* info, const RailConfig& config);
  ~Rail();

  fabric::Domain& domain() { return *domain_; }
  fabric::CompletionQueue& cq() { return *cq_; }
  fabric::AddressVector* av() { return av_.get(); }
  bool connected_endpoints() const { return domain_->connected_endpoints(); }
  const std::string& name() const { return domain_->name(); }
  const RailConfig& config() const { return config_; }

  // RDM: the shared data endpoint (payload, eager messages, rendezvous writes) and the control
  // endpoint (connection set-up, clear-to-send, aborts; low-latency traffic class where the
  // provider takes it), each with its bounce buffers. Connected endpoints: nullptr.
  pool::Channel* data_channel() { return data_.get(); }
  pool::Channel* control_channel() { return control_.get(); }
  bool low_latency_control() const { return low_latency_; }

  // Connected endpoints: the passive endpoint, opened on first use.
  Result<fabric::PassiveEndpoint*> passive();

  // Connected endpoints: a channel with its own endpoint and bounce buffers.
  // `info` is the domain's info (connect) or an FI_CONNREQ's (accept).
  Result<std::unique_ptr<pool::Channel>> open_connected_channel(fi_info* info, size_t rx,
                                                                size_t tx);

  // Stripes of striped writes this rail carried out and in (telemetry).
  fabric::Counter& stripes_out() { return stripes_out_; }
  fabric::Counter& stripes_in() { return stripes_in_; }
  const fabric::Counter& stripes_out() const { return stripes_out_; }
  const fabric::Counter& stripes_in() const { return stripes_in_; }

  // A requested key unique within this domain (for providers without FI_MR_PROV_KEY).
  uint64_t next_key() { return next_key_++; }

 private:
  Rail() = default;
  RailConfig config_;
  uint64_t next_key_ = 1;
  // Declaration order is close order reversed: buffers' MRs, endpoints, then AV/CQ/domain.
  std::unique_ptr<fabric::Domain> domain_;
  std::unique_ptr<fabric::CompletionQueue> cq_;
  std::unique_ptr<fabric::AddressVector> av_;
  std::unique_ptr<fabric::PassiveEndpoint> pep_;
  std::unique_ptr<pool::Channel> data_;
  std::unique_ptr<pool::Channel> control_;
  bool low_latency_ = false;
  fabric::Counter stripes_out_;
  fabric::Counter stripes_in_;

  Result<std::unique_ptr<pool::Channel>> open_shared(const char* role, bool low_latency);
};

}  // namespace xport::rail
