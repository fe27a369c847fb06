// Opening a rail's objects in order, and closing them in reverse.
#include "rail/rail.hpp"

namespace xport::rail {

Result<std::unique_ptr<Rail>> Rail::open(const fi_info* info, const RailConfig& config) {
  auto r = std::unique_ptr<Rail>(new Rail());
  r->config_ = config;
  r->next_key_ = config.first_key;
  XPORT_ASSIGN_OR_RETURN(r->domain_, fabric::Domain::open(info));
  XPORT_ASSIGN_OR_RETURN(r->cq_, fabric::CompletionQueue::open(*r->domain_, config.cq_size));
  if (r->connected_endpoints()) return r;

  XPORT_ASSIGN_OR_RETURN(r->av_, fabric::AddressVector::open(*r->domain_));
  auto ch = std::make_unique<pool::Channel>();
  ch->label = "rail " + r->name();
  ch->mr_endpoint = (r->domain_->mr_mode() & FI_MR_ENDPOINT) != 0;
  XPORT_ASSIGN_OR_RETURN(ch->owned_endpoint,
                         fabric::Endpoint::open(*r->domain_, r->domain_->info(), *r->cq_,
                                                r->av_.get(), "rail " + r->name()));
  ch->endpoint = ch->owned_endpoint.get();
  XPORT_ASSIGN_OR_RETURN(
      ch->owned_rx,
      memory::BufferPool::create(*r->domain_, ch->endpoint, config.rx_buffers, config.buffer_bytes,
                                 r->next_key(), fabric::OpType::rx_buffer, ch.get()));
  XPORT_ASSIGN_OR_RETURN(
      ch->owned_tx,
      memory::BufferPool::create(*r->domain_, ch->endpoint, config.tx_buffers, config.buffer_bytes,
                                 r->next_key(), fabric::OpType::tx_buffer, ch.get()));
  ch->rx = ch->owned_rx.get();
  ch->tx = ch->owned_tx.get();
  ch->connected = true;
  r->shared_ = std::move(ch);
  return r;
}

Rail::~Rail() {
  shared_.reset();
  pep_.reset();
  av_.reset();
  cq_.reset();
  domain_.reset();
}

Result<fabric::PassiveEndpoint*> Rail::passive() {
  if (!pep_) {
    XPORT_ASSIGN_OR_RETURN(pep_, fabric::PassiveEndpoint::listen(*domain_));
  }
  return pep_.get();
}

Result<std::unique_ptr<pool::Channel>> Rail::open_connected_channel(fi_info* info, size_t rx,
                                                                    size_t tx) {
  auto ch = std::make_unique<pool::Channel>();
  ch->label = "rail " + name() + " connection";
  ch->mr_endpoint = (domain_->mr_mode() & FI_MR_ENDPOINT) != 0;
  XPORT_ASSIGN_OR_RETURN(ch->owned_endpoint,
                         fabric::Endpoint::open(*domain_, info, *cq_, nullptr, ch->label));
  ch->endpoint = ch->owned_endpoint.get();
  XPORT_ASSIGN_OR_RETURN(ch->owned_rx, memory::BufferPool::create(
                                           *domain_, ch->endpoint, rx, config_.buffer_bytes,
                                           next_key(), fabric::OpType::rx_buffer, ch.get()));
  XPORT_ASSIGN_OR_RETURN(ch->owned_tx, memory::BufferPool::create(
                                           *domain_, ch->endpoint, tx, config_.buffer_bytes,
                                           next_key(), fabric::OpType::tx_buffer, ch.get()));
  ch->rx = ch->owned_rx.get();
  ch->tx = ch->owned_tx.get();
  return ch;
}

}  // namespace xport::rail
