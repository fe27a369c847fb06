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

  // RDM: the channel of the shared endpoint (no peer). Connected endpoints: nullptr.
  pool::Channel* shared_channel() { return shared_.get(); }

  // Connected endpoints: the passive endpoint, opened on first use.
  Result<fabric::PassiveEndpoint*> passive();

  // Connected endpoints: a channel with its own endpoint and bounce buffers.
  // `info` is the domain's info (connect) or an FI_CONNREQ's (accept).
  Result<std::unique_ptr<pool::Channel>> open_connected_channel(fi_info* info, size_t rx,
                                                                size_t tx);

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
  std::unique_ptr<pool::Channel> shared_;
};

}  // namespace xport::rail
