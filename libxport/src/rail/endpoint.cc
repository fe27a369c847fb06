// Opening a rail endpoint with its buffers, and closing it in the order libfabric needs.
#include "rail/endpoint.hpp"

#include "core/format.hpp"

namespace xport::rail {

Result<std::unique_ptr<RailEndpoint>> RailEndpoint::open(fabric::Domain& domain, fi_info* info,
                                                         fabric::CompletionQueue& cq,
                                                         fabric::AddressVector* av,
                                                         const EndpointSizes& sizes,
                                                         uint8_t rail, std::string label) {
  auto e = std::unique_ptr<RailEndpoint>(new RailEndpoint());
  e->rail_ = rail;
  e->av_ = av;
  e->label_ = std::move(label);
  e->mr_endpoint_ = (domain.mr_mode() & FI_MR_ENDPOINT) != 0;
  XPORT_ASSIGN_OR_RETURN(e->endpoint_, fabric::Endpoint::open(domain, info, cq, av, e->label_));
  // Bounce buffers move messages only: local access, no peer may read or write them.
  XPORT_ASSIGN_OR_RETURN(
      e->rx_, memory::BounceBuffers::create(domain, e->endpoint_.get(), sizes.rx_buffers,
                                            sizes.buffer_bytes, FI_RECV, fabric::OpType::rx_buffer,
                                            e.get(), rail));
  XPORT_ASSIGN_OR_RETURN(
      e->tx_, memory::BounceBuffers::create(domain, e->endpoint_.get(), sizes.tx_buffers,
                                            sizes.buffer_bytes, FI_SEND, fabric::OpType::tx_buffer,
                                            e.get(), rail));
  if (sizes.flush && av != nullptr) {
    // The flush target lives and dies with its endpoint (bound to it under FI_MR_ENDPOINT);
    // flush() reads a received buffer into it through the endpoint's own address, which orders
    // earlier RDMA writes before the data is used. A read's target needs local write access,
    // which FI_READ grants.
    XPORT_ASSIGN_OR_RETURN(
        e->flush_, memory::BounceBuffers::create(domain, e->endpoint_.get(), 1, kFlushBufferBytes,
                                                 FI_READ, fabric::OpType::flush, e.get(), rail));
    // A native atomic's operand is read (FI_WRITE) and its result written (FI_READ) locally.
    XPORT_ASSIGN_OR_RETURN(
        e->atomic_,
        memory::BounceBuffers::create(domain, e->endpoint_.get(), kAtomicSlots, kAtomicSlotBytes,
                                      FI_READ | FI_WRITE, fabric::OpType::atomic, e.get(), rail));
    XPORT_ASSIGN_OR_RETURN(auto self, e->endpoint_->address());
    XPORT_ASSIGN_OR_RETURN(e->self_, av->insert(self));
  }
  return e;
}

Result<std::unique_ptr<RailEndpoint>> RailEndpoint::open_with_av(
    fabric::Domain& domain, fi_info* info, fabric::CompletionQueue& cq,
    std::unique_ptr<fabric::AddressVector> av, const EndpointSizes& sizes, uint8_t rail,
    std::string label) {
  fabric::AddressVector* raw = av.get();
  auto e = open(domain, info, cq, raw, sizes, rail, std::move(label));
  if (e) (*e)->own_av_ = std::move(av);
  return e;
}

void RailEndpoint::cancel_receives() {
  if (!endpoint_ || !rx_) return;
  for (size_t i = 0; i < rx_->count(); ++i) {
    endpoint_->cancel(&rx_->at(static_cast<uint32_t>(i)).ctx);
  }
}

void RailEndpoint::close_endpoint() {
  if (!endpoint_) return;
  failed = true;  // nothing is posted on it any more
  if (failure.empty()) failure = "the endpoint is closed";
  if (mr_endpoint_) {
    if (rx_) rx_->close_registration();
    if (tx_) tx_->close_registration();
    if (flush_) flush_->close_registration();
    if (atomic_) atomic_->close_registration();
  }
  endpoint_.reset();
}

RailEndpoint::~RailEndpoint() {
  if (endpoint_) {
    cancel_receives();
    close_endpoint();
  }
  rx_.reset();
  tx_.reset();
  flush_.reset();
  atomic_.reset();
}

}  // namespace xport::rail
