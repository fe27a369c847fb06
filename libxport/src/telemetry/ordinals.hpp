// Lowest-free ordinals for telemetry labels (`device`, `proxy`): a process that opens and closes
// objects for ever keeps its label values, and so its series, bounded.
#pragma once

#include <mutex>
#include <set>

namespace xport::telemetry {

class Ordinals {
 public:
  int take() {
    std::lock_guard<std::mutex> l(mu_);
    int n = 0;
    while (used_.count(n)) ++n;
    used_.insert(n);
    return n;
  }
  void give(int n) {
    std::lock_guard<std::mutex> l(mu_);
    used_.erase(n);
  }

 private:
  std::mutex mu_;
  std::set<int> used_;
};

}  // namespace xport::telemetry
