// The link rate libfabric reports for a domain (fi_info->nic->link_attr->speed), for
// Device::rail_info(); sysfs is the topology layer's (topology::rail_link).
#pragma once

#include <cstdint>

struct fi_info;

namespace xport::fabric {

// Bits per second, 0 when the provider reports no NIC or no speed (tcp, shm, sockets).
uint64_t nic_link_speed(const fi_info* info);

}  // namespace xport::fabric
