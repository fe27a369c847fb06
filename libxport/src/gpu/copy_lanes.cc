// The copy queues the shadows of one GPU share (gpu/copy_lanes.hpp).
#include "gpu/copy_lanes.hpp"

#include <algorithm>
#include <map>
#include <tuple>

namespace xport::gpu {

namespace {
// (driver, GPU, context) -> the lanes its live shadows share.
using LanesKey = std::tuple<const Driver*, int, const void*>;
std::mutex g_mu;
std::map<LanesKey, std::weak_ptr<CopyLanes>> g_lanes;
}  // namespace

Result<std::shared_ptr<CopyLanes>> CopyLanes::of(Driver& driver, const PointerInfo& info) {
  const LanesKey key{&driver, info.gpu, info.context};
  {
    std::lock_guard<std::mutex> g(g_mu);
    if (auto it = g_lanes.find(key); it != g_lanes.end()) {
      if (auto live = it->second.lock()) return live;
    }
  }
  // Opened outside the lock (the driver can take its time); a registration of the same GPU
  // that raced this one may have opened them first: then its own are used.
  std::shared_ptr<CopyLanes> made(new CopyLanes(driver, info));
  for (size_t i = 0; i < kLanes; ++i) {
    XPORT_ASSIGN_OR_RETURN(std::unique_ptr<CopyQueue> q, driver.open_copy_queue(info));
    made->lanes_.push_back(std::move(q));
  }
  XPORT_ASSIGN_OR_RETURN(made->ahead_, driver.open_copy_queue(info));
  std::lock_guard<std::mutex> g(g_mu);
  for (auto it = g_lanes.begin(); it != g_lanes.end();) {
    it = it->second.expired() ? g_lanes.erase(it) : std::next(it);
  }
  auto& slot = g_lanes[key];
  if (auto live = slot.lock()) return live;
  slot = made;
  return made;
}

CopyLanes::~CopyLanes() {
  lanes_.clear();  // (a CudaCopyQueue waits for its copies as it goes)
  if (ahead_) (void)ahead_->synchronize();
}

std::shared_ptr<CopyQueue> CopyLanes::next() {
  std::lock_guard<std::mutex> g(mu_);
  return lanes_[next_++ % lanes_.size()];
}

void CopyLanes::failed(const std::shared_ptr<CopyQueue>& q) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (std::find(lanes_.begin(), lanes_.end(), q) == lanes_.end()) return;  // (replaced)
  }
  auto fresh = driver_.open_copy_queue(info_);  // (outside mu_: it can wait for the GPU)
  if (!fresh.ok()) return;  // (the failed one stays: its copies fail, saying why)
  std::lock_guard<std::mutex> g(mu_);
  auto it = std::find(lanes_.begin(), lanes_.end(), q);
  if (it != lanes_.end()) *it = std::move(fresh).value();
}

}  // namespace xport::gpu
