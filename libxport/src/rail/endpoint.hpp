// A rail endpoint: one libfabric endpoint with its bounce buffers (receive, send, and for data
// endpoints the flush target), closed in the order libfabric needs. The rail's shared RDM
// endpoints are rail endpoints; so is each connection of a connected-endpoint provider.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "fabric/objects.hpp"
#include "memory/bounce_buffers.hpp"

namespace xport::rail {

struct EndpointSizes {
  size_t rx_buffers = 256;
  size_t tx_buffers = 256;
  size_t buffer_bytes = 8192 + 64;
  bool flush = false;  // a data endpoint: owns a flush target and knows its own address
};

class RailEndpoint {
 public:
  // Opens the endpoint on `domain` with `info` (the domain's, or an FI_CONNREQ's), bound to `cq`
  // (and `av` for RDM), and registers its buffers (bound to it under FI_MR_ENDPOINT).
  static Result<std::unique_ptr<RailEndpoint>> open(fabric::Domain& domain, fi_info* info,
                                                    fabric::CompletionQueue& cq,
                                                    fabric::AddressVector* av,
                                                    const EndpointSizes& sizes, uint8_t rail,
                                                    std::string label);
  // The same, bound to an address vector of its own, which closes after it.
  static Result<std::unique_ptr<RailEndpoint>> open_with_av(
      fabric::Domain& domain, fi_info* info, fabric::CompletionQueue& cq,
      std::unique_ptr<fabric::AddressVector> av, const EndpointSizes& sizes, uint8_t rail,
      std::string label);
  // Teardown order: cancel posted receives; under FI_MR_ENDPOINT close the bounce buffers' MRs
  // (bound to the endpoint) before it, else after it; free the buffers' memory only when both
  // are gone.
  ~RailEndpoint();
  RailEndpoint(const RailEndpoint&) = delete;
  RailEndpoint& operator=(const RailEndpoint&) = delete;

  fabric::Endpoint& endpoint() { return *endpoint_; }
  bool has_endpoint() const { return endpoint_ != nullptr; }
  memory::BounceBuffers& rx() { return *rx_; }
  memory::BounceBuffers& tx() { return *tx_; }
  memory::BounceBuffers* flush_target() { return flush_.get(); }
  // Data endpoints: slots for native atomics' operand, compare and result words.
  memory::BounceBuffers* atomic_slots() { return atomic_.get(); }
  fi_addr_t self() const { return self_; }  // own address (RDM data endpoints), for flush reads
  // An address vector of the endpoint's own (a communicator's own RDM endpoint), or nullptr
  // when it uses its shard's.
  fabric::AddressVector* own_av() { return own_av_.get(); }
  // The address vector it is bound to (its own, or its shard's); nullptr for connections.
  fabric::AddressVector* av() const { return av_; }
  uint8_t rail() const { return rail_; }
  const std::string& label() const { return label_; }

  // Receive buffers held by unexpected messages (waiting for their receive to be posted).
  uint32_t held = 0;
  // Receive buffers posted to the provider (their completions will reach the CQ).
  uint32_t posted_rx = 0;
  // A connected endpoint whose connection failed (shutdown, fatal error): posts go nowhere.
  bool failed = false;
  std::string failure;

  // Cancels every posted receive (their completions report FI_ECANCELED).
  void cancel_receives();
  // Closes the endpoint (and, under FI_MR_ENDPOINT, its buffers' registrations first); the
  // buffers' memory stays until this object goes.
  void close_endpoint();

 private:
  RailEndpoint() = default;
  std::unique_ptr<fabric::AddressVector> own_av_;  // declared first: closed last
  std::unique_ptr<fabric::Endpoint> endpoint_;
  std::unique_ptr<memory::BounceBuffers> rx_;
  std::unique_ptr<memory::BounceBuffers> tx_;
  std::unique_ptr<memory::BounceBuffers> flush_;
  std::unique_ptr<memory::BounceBuffers> atomic_;
  fi_addr_t self_ = FI_ADDR_UNSPEC;
  fabric::AddressVector* av_ = nullptr;
  bool mr_endpoint_ = false;
  uint8_t rail_ = 0;
  std::string label_;
};

// One slot: flush() reads a few bytes of a received buffer into it.
inline constexpr size_t kFlushBufferBytes = 64;
// Native atomics in flight per data endpoint, each with a slot for its operand, compare value and
// result (local access only, like every bounce buffer).
inline constexpr size_t kAtomicSlots = 128;
inline constexpr size_t kAtomicSlotBytes = 32;

}  // namespace xport::rail
