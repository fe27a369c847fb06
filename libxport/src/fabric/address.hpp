// Checks of peer addresses that came from outside (handles, connection requests, keys) against
// the address format of the domain that would take them, before any provider sees them.
#pragma once

#include <cstdint>
#include <span>

#include "xport/status.hpp"

namespace xport::fabric {

// Refuses, naming why, a socket address (FI_SOCKADDR, FI_SOCKADDR_IN, FI_SOCKADDR_IN6 domains)
// that is not a whole destination of the domain's family: the exact size of its sockaddr, the
// family the format names, a port and a host that is not the wildcard (the checks libfabric's
// own util AV makes, made before it: libfabric 1.17's rxm AV takes the length of whatever it
// is given as its own address length first — an address of no known family sets it to 0 — and
// then refuses every later real address as too large). Other formats are not checked here.
Status check_peer_address(uint32_t addr_format, std::span<const uint8_t> address);

}  // namespace xport::fabric
