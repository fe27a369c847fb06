// Opening a rail's objects in order, and closing them in reverse.
#include "rail/rail.hpp"

#include "core/format.hpp"

#include <fstream>
#include <string>

namespace xport::rail {
namespace {
// One slot: flush() reads a few bytes of a received buffer into it.
constexpr size_t kFlushBufferBytes = 64;
}  // namespace

Result<std::unique_ptr<Rail>> Rail::open(const fi_info* info, const RailConfig& config) {
  auto r = std::unique_ptr<Rail>(new Rail());
  r->config_ = config;
  r->next_key_ = config.first_key;
  XPORT_ASSIGN_OR_RETURN(r->domain_, fabric::Domain::open(info));
  // Netdev-backed domains (tcp, sockets: the domain is the interface) expose operstate;
  // RDMA devices expose their first port's state.
  for (const std::string& f : {"/sys/class/net/" + r->name() + "/operstate",
                               "/sys/class/infiniband/" + r->name() + "/ports/1/state"}) {
    if (std::ifstream(f).good()) {
      r->link_file_ = f;
      break;
    }
  }
  XPORT_ASSIGN_OR_RETURN(r->cq_, fabric::CompletionQueue::open(*r->domain_, config.cq_size));
  if (r->connected_endpoints()) return r;

  XPORT_ASSIGN_OR_RETURN(r->av_, fabric::AddressVector::open(*r->domain_));
  XPORT_ASSIGN_OR_RETURN(r->data_, r->open_shared("data", false));
  auto control = r->open_shared("control", true);
  if (!control.ok()) control = r->open_shared("control", false);  // no FI_TC_LOW_LATENCY here
  else r->low_latency_ = true;
  if (!control.ok()) return control.status();
  r->control_ = std::move(control).value();
  return r;
}

Result<std::unique_ptr<pool::Channel>> Rail::open_shared(const char* role, bool low_latency) {
  fabric::InfoPtr info = fabric::dup_info(domain_->info());
  if (low_latency) info->tx_attr->tclass = FI_TC_LOW_LATENCY;
  auto ch = std::make_unique<pool::Channel>();
  ch->label = core::str("rail ", name(), " ", role);
  ch->mr_endpoint = (domain_->mr_mode() & FI_MR_ENDPOINT) != 0;
  XPORT_ASSIGN_OR_RETURN(ch->owned_endpoint,
                         fabric::Endpoint::open(*domain_, info.get(), *cq_, av_.get(), ch->label));
  ch->endpoint = ch->owned_endpoint.get();
  XPORT_ASSIGN_OR_RETURN(
      ch->owned_rx,
      memory::BufferPool::create(*domain_, ch->endpoint, config_.rx_buffers, config_.buffer_bytes,
                                 next_key(), fabric::OpType::rx_buffer, ch.get()));
  XPORT_ASSIGN_OR_RETURN(
      ch->owned_tx,
      memory::BufferPool::create(*domain_, ch->endpoint, config_.tx_buffers, config_.buffer_bytes,
                                 next_key(), fabric::OpType::tx_buffer, ch.get()));
  ch->rx = ch->owned_rx.get();
  ch->tx = ch->owned_tx.get();
  ch->connected = true;
  if (!low_latency && std::string(role) == "data") {
    // The flush buffer lives and dies with its endpoint (registered, and bound to it under
    // FI_MR_ENDPOINT); flush() reads a received buffer into it through the endpoint's own
    // address, which orders earlier RDMA writes before the data is used.
    XPORT_ASSIGN_OR_RETURN(
        ch->owned_flush, memory::BufferPool::create(*domain_, ch->endpoint, 1, kFlushBufferBytes,
                                                    next_key(), fabric::OpType::flush, ch.get()));
    XPORT_ASSIGN_OR_RETURN(auto self, ch->endpoint->address());
    XPORT_ASSIGN_OR_RETURN(ch->self, av_->insert(self));
  }
  return ch;
}

size_t Rail::registered_bytes(const RailConfig& c) {
  // Mirrors open_shared(): two endpoints with rx + tx pools each, one 64-byte flush slot.
  const size_t endpoint = memory::BufferPool::footprint(c.rx_buffers, c.buffer_bytes) +
                          memory::BufferPool::footprint(c.tx_buffers, c.buffer_bytes);
  return 2 * endpoint + memory::BufferPool::footprint(1, kFlushBufferBytes);
}

bool Rail::link_up() const {
  if (link_file_.empty()) return true;
  std::ifstream in(link_file_);
  std::string word;
  if (!(in >> word)) return true;
  // operstate: up / unknown (loopback) / down / lowerlayerdown / dormant ...;
  // InfiniBand: "4: ACTIVE", "1: DOWN", ...
  if (link_file_.find("/infiniband/") != std::string::npos) {
    std::string state;
    in >> state;
    return state == "ACTIVE";
  }
  return word == "up" || word == "unknown";
}

void Rail::quarantine(const std::string& why, std::chrono::steady_clock::time_point retry_at) {
  if (state_ != State::quarantined) quarantines_.add();
  state_ = State::quarantined;
  reason_ = why;
  retry_at_ = retry_at;
}

void Rail::restore() {
  state_ = State::up;
  reason_.clear();
}

Rail::~Rail() {
  control_.reset();
  data_.reset();
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
