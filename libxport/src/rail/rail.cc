// Opening a rail's objects in order, and closing them in reverse.
#include "rail/rail.hpp"

#include <algorithm>

#include "core/format.hpp"

namespace xport::rail {

Result<std::unique_ptr<Rail>> Rail::open(const fi_info* info, const RailConfig& config,
                                         uint8_t index) {
  const std::string name = info->domain_attr->name != nullptr ? info->domain_attr->name : "?";
  auto r = std::unique_ptr<Rail>(new Rail(name));
  r->config_ = config;
  r->index_ = index;
  XPORT_ASSIGN_OR_RETURN(r->domain_, fabric::Domain::open(info));
  XPORT_ASSIGN_OR_RETURN(r->cq_, fabric::CompletionQueue::open(*r->domain_, config.cq_size,
                                                                config.cq_wait_fd));
  if (r->connected_endpoints()) return r;
  XPORT_ASSIGN_OR_RETURN(auto first, r->make_shard(0, config.rx_buffers, config.tx_buffers));
  r->shards_.push_back(std::move(first));
  return r;
}

Result<std::unique_ptr<Shard>> Rail::make_shard(uint16_t index, size_t rx, size_t tx) {
  auto s = std::make_unique<Shard>();
  s->index = index;
  const std::string name = core::str("rail ", this->name(), index == 0 ? "" : " shard ",
                                     index == 0 ? "" : std::to_string(index));
  XPORT_ASSIGN_OR_RETURN(s->av, fabric::AddressVector::open(*domain_));
  EndpointSizes sizes{rx, tx, config_.buffer_bytes, true};
  XPORT_ASSIGN_OR_RETURN(s->data, RailEndpoint::open(*domain_, domain_->info(), *cq_,
                                                     s->av.get(), sizes, index_,
                                                     core::str(name, " data")));
  if (!config_.separate_control) return s;
  sizes.flush = false;
  if (config_.control_buffer_bytes != 0) sizes.buffer_bytes = config_.control_buffer_bytes;
  fabric::InfoPtr low = fabric::dup_info(domain_->info());
  if (index == 0 && config_.door_queue != 0 && low->rx_attr != nullptr) {
    low->rx_attr->size = std::min(low->rx_attr->size, config_.door_queue);
  }
  if (low->rx_attr != nullptr && low->rx_attr->size > 0) {
    sizes.rx_buffers = std::min(sizes.rx_buffers, low->rx_attr->size);
  }
  fabric::InfoPtr plain = fabric::dup_info(low.get());
  low->tx_attr->tclass = FI_TC_LOW_LATENCY;
  auto control = RailEndpoint::open(*domain_, low.get(), *cq_, s->av.get(), sizes, index_,
                                    core::str(name, " control"));
  if (control) {
    low_latency_ = true;
  } else {  // no FI_TC_LOW_LATENCY here
    control = RailEndpoint::open(*domain_, plain.get(), *cq_, s->av.get(), sizes, index_,
                                 core::str(name, " control"));
  }
  if (!control) return control.status();
  s->control = std::move(control).value();
  return s;
}

Result<Shard*> Rail::open_shard() {
  if (connected_endpoints() || shards_.empty()) {
    return core::error(Code::unsupported, "rail ", name(), ": shards are for RDM endpoints");
  }
  XPORT_ASSIGN_OR_RETURN(auto s, make_shard(static_cast<uint16_t>(shards_.size()),
                                            config_.shard_rx_buffers, config_.shard_tx_buffers));
  shards_.push_back(std::move(s));
  return shards_.back().get();
}

std::vector<RailEndpoint*> Rail::endpoints() {
  std::vector<RailEndpoint*> out;
  for (auto& s : shards_) {
    if (s->data) out.push_back(s->data.get());
    if (s->control) out.push_back(s->control.get());
  }
  return out;
}

size_t Rail::registered_bytes(const RailConfig& c) {
  // Mirrors open(): one or two endpoints with rx + tx bounce buffers each, one 64-byte flush
  // target and the data endpoint's atomic slots.
  const auto endpoint = [&](size_t bytes) {
    return memory::BounceBuffers::footprint(c.rx_buffers, bytes) +
           memory::BounceBuffers::footprint(c.tx_buffers, bytes);
  };
  const size_t control = c.control_buffer_bytes != 0 ? c.control_buffer_bytes : c.buffer_bytes;
  // The door's receive buffers are no more than its provider queue (a provider may cap them
  // lower still).
  const size_t door_rx = c.door_queue != 0 ? std::min(c.rx_buffers, c.door_queue) : c.rx_buffers;
  const size_t door = memory::BounceBuffers::footprint(door_rx, control) +
                      memory::BounceBuffers::footprint(c.tx_buffers, control);
  return endpoint(c.buffer_bytes) + (c.separate_control ? door : 0) +
         memory::BounceBuffers::footprint(1, kFlushBufferBytes) +
         memory::BounceBuffers::footprint(kAtomicSlots, kAtomicSlotBytes);
}

size_t Rail::shard_registered_bytes(const RailConfig& c) {
  const auto endpoint = [&](size_t bytes) {
    return memory::BounceBuffers::footprint(c.shard_rx_buffers, bytes) +
           memory::BounceBuffers::footprint(c.shard_tx_buffers, bytes);
  };
  const size_t control = c.control_buffer_bytes != 0 ? c.control_buffer_bytes : c.buffer_bytes;
  return endpoint(c.buffer_bytes) + (c.separate_control ? endpoint(control) : 0) +
         memory::BounceBuffers::footprint(1, kFlushBufferBytes) +
         memory::BounceBuffers::footprint(kAtomicSlots, kAtomicSlotBytes);
}

Rail::~Rail() {
  while (!shards_.empty()) shards_.pop_back();  // the last opened closes first
  pep_.reset();
  cq_.reset();
  domain_.reset();
}

Result<fabric::PassiveEndpoint*> Rail::passive() {
  if (!pep_) {
    XPORT_ASSIGN_OR_RETURN(pep_, fabric::PassiveEndpoint::listen(*domain_));
  }
  return pep_.get();
}

Result<std::unique_ptr<RailEndpoint>> Rail::open_connection(fi_info* info, size_t rx, size_t tx) {
  // No more receive buffers than the endpoint's receive queue holds: the rest would meet
  // -FI_EAGAIN at every progress pass for ever.
  if (info->rx_attr != nullptr && info->rx_attr->size > 0) rx = std::min(rx, info->rx_attr->size);
  EndpointSizes sizes{rx, tx, config_.buffer_bytes, false};
  return RailEndpoint::open(*domain_, info, *cq_, nullptr, sizes, index_,
                            core::str("rail ", name(), " connection"));
}

Result<std::unique_ptr<RailEndpoint>> Rail::open_own_data(size_t rx, size_t tx) {
  fabric::InfoPtr info = fabric::dup_info(domain_->info());
  // Queues sized for this endpoint's buffers (and rendezvous writes besides): a provider
  // that allocates per queue entry (shm's region) allocates no more than one user needs.
  const size_t rx_queue = std::max<size_t>(rx, 64);
  const size_t tx_queue = std::max<size_t>(4 * tx, 256);
  if (info->rx_attr != nullptr && info->rx_attr->size > rx_queue) info->rx_attr->size = rx_queue;
  if (info->tx_attr != nullptr && info->tx_attr->size > tx_queue) info->tx_attr->size = tx_queue;
  EndpointSizes sizes{rx, tx, config_.buffer_bytes, true};
  // An address vector of its own: it names only its peer's endpoint and itself, and
  // tcp;ofi_rxm keeps its connection state per address vector entry.
  XPORT_ASSIGN_OR_RETURN(auto av, fabric::AddressVector::open(*domain_));
  return RailEndpoint::open_with_av(*domain_, info.get(), *cq_, std::move(av), sizes, index_,
                                    core::str("rail ", name(), " own data"));
}

}  // namespace xport::rail
