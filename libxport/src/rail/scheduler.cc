// The rail scheduler's cold path: the error when no rail towards a peer is usable.
#include "rail/scheduler.hpp"

#include <string>

#include "core/format.hpp"

namespace xport::rail {

Status Scheduler::none_usable(size_t limit, const char* what) const {
  std::string why;
  for (size_t i = 0; i < limit; ++i) {
    const std::string reason = !rails_[i]->in_service() ? rails_[i]->health().reason()
                                                        : std::string("out of service at the peer");
    why += core::str(why.empty() ? "" : ", ", rails_[i]->name(), ": ", reason);
  }
  return core::error(Code::closed, what, ": every rail shared with the peer is quarantined (", why,
                     "); retry when a link is back");
}

}  // namespace xport::rail
