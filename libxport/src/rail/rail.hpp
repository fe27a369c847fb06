// A rail: one NIC (libfabric domain) with its completion queue, address vector, and either the
// shared RDM endpoint with its bounce buffers, or a passive endpoint for connected channels.
#pragma once

#include <chrono>
#include <memory>
#include <string>

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

  // Bytes open() registers for a shared-endpoint (RDM) rail with this config: rx and tx bounce
  // buffers of the data and control endpoints, and the data endpoint's flush buffer. Connected
  // rails register rx + tx buffers per connection instead (open_connected_channel).
  static size_t registered_bytes(const RailConfig& config);

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

  // Health. A rail whose link is down is quarantined: new traffic avoids it; it is probed
  // again after a back-off and returns to service when its link is up.
  enum class State { up, quarantined };
  State state() const { return state_; }
  const char* state_name() const { return state_ == State::up ? "up" : "quarantined"; }
  // Reads the link state where the OS exposes it (sysfs operstate of the interface, or the
  // InfiniBand port state); true when unknown.
  bool link_up() const;
  void quarantine(const std::string& why, std::chrono::steady_clock::time_point retry_at);
  void restore();
  std::chrono::steady_clock::time_point retry_at() const { return retry_at_; }
  const std::string& quarantine_reason() const { return reason_; }
  // Fatal error completions in a row (reset by any successful completion on the rail).
  uint32_t& consecutive_failures() { return consecutive_failures_; }
  fabric::Counter& quarantines() { return quarantines_; }
  const fabric::Counter& quarantines() const { return quarantines_; }

  // Stripes of striped writes this rail carried out and in (telemetry).
  fabric::Counter& stripes_out() { return stripes_out_; }
  fabric::Counter& stripes_in() { return stripes_in_; }
  const fabric::Counter& stripes_out() const { return stripes_out_; }
  const fabric::Counter& stripes_in() const { return stripes_in_; }
  // Bytes peers wrote into this process through this rail (rendezvous data), which no local
  // endpoint posts and so no endpoint counts.
  fabric::Counter& bytes_in() { return bytes_in_; }
  const fabric::Counter& bytes_in() const { return bytes_in_; }

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
  fabric::Counter quarantines_;
  fabric::Counter bytes_in_;
  State state_ = State::up;
  uint32_t consecutive_failures_ = 0;
  std::string reason_;
  std::chrono::steady_clock::time_point retry_at_{};
  std::string link_file_;  // where link_up() reads, empty when the OS gives nothing

  Result<std::unique_ptr<pool::Channel>> open_shared(const char* role, bool low_latency);
};

}  // namespace xport::rail
