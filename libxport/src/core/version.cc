// The library version, set by Meson from the project version.
#include "core/version_config.hpp"
#include "xport/xport.hpp"

namespace xport {

const char* version() { return XPORT_VERSION_STRING; }

}  // namespace xport
