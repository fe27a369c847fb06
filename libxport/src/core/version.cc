// The library version, set by Meson from the project version, and the tree it was built from.
#include "core/build_id.hpp"
#include "core/version_config.hpp"
#include "xport/xport.hpp"

namespace xport {

const char* version() { return XPORT_VERSION_STRING; }
const char* build_id() { return XPORT_BUILD_ID; }

}  // namespace xport
