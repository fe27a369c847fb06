// The default deadline of library waits comes from XPORT_TIMEOUT_MS.
#include "xport/deadline.hpp"

#include "core/knob.hpp"

namespace xport {

Deadline Deadline::from_knob() {
  return Deadline::after(std::chrono::milliseconds(core::knob_int(core::KnobId::timeout_ms)));
}

}  // namespace xport
