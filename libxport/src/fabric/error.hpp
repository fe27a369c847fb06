// libfabric return codes to Status values that name the call, the object and the provider text.
#pragma once

#include <string_view>

#include "core/format.hpp"

namespace xport::fabric {

// ret is a negative fi_errno; `what` names the call and its object ("fi_write on rail lo").
Status fi_status(int ret, std::string_view what);

}  // namespace xport::fabric
