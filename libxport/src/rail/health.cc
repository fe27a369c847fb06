// Reading a rail's link state through the topology layer's one sysfs reader.
#include "rail/health.hpp"

#include "topology/live.hpp"

namespace xport::rail {

Health::Health(std::string rail, std::string sysfs_root)
    : rail_(std::move(rail)), sysfs_root_(std::move(sysfs_root)) {}

void Health::refresh_link() {
  const topology::RailLink l = topology::rail_link_in(sysfs_root_, rail_);
  // Nothing readable (shm, a provider's virtual domain): no link to lose.
  link_up_.store(l.kind.empty() || l.up(), std::memory_order_release);
}

void Health::quarantine(const std::string& why, Clock::time_point retry_at) {
  if (state_ != State::quarantined) quarantines_.add();
  state_ = State::quarantined;
  reason_ = why;
  retry_at_ = retry_at;
}

void Health::restore() {
  state_ = State::up;
  reason_.clear();
  consecutive_failures_ = 0;
}

}  // namespace xport::rail
