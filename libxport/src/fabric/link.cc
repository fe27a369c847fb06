// What the provider says about a domain's link (link.hpp).
#include "fabric/link.hpp"

#include <rdma/fabric.h>

namespace xport::fabric {

uint64_t nic_link_speed(const fi_info* info) {
  if (info == nullptr || info->nic == nullptr || info->nic->link_attr == nullptr) return 0;
  return static_cast<uint64_t>(info->nic->link_attr->speed);
}

}  // namespace xport::fabric
