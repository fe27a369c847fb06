// Channel teardown in the order libfabric needs.
#include "pool/channel.hpp"

#include <rdma/fi_endpoint.h>

namespace xport::pool {

Channel::~Channel() {
  if (owned_endpoint) {
    if (owned_rx) {
      for (size_t i = 0; i < owned_rx->count(); ++i) {
        (void)fi_cancel(&owned_endpoint->get()->fid, &owned_rx->at(static_cast<uint32_t>(i)).ctx);
      }
    }
    if (mr_endpoint) {
      if (owned_rx) owned_rx->close_registration();
      if (owned_tx) owned_tx->close_registration();
      if (owned_flush) owned_flush->close_registration();
    }
    owned_endpoint.reset();
  }
  owned_rx.reset();
  owned_tx.reset();
  owned_flush.reset();
}

}  // namespace xport::pool
