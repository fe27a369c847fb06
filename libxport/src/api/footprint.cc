// device_registered_bytes(): what a Device registers for itself, for xport-probe's locked-memory
// check. The rail layer owns the buffer layout; the buffer size is the engine's (see below).
#include <algorithm>

#include "proto/engine.hpp"
#include "proto/wire.hpp"
#include "rail/rail.hpp"
#include "xport/context.hpp"

namespace xport {

size_t device_registered_bytes(size_t rails) {
  const proto::EngineConfig cfg = proto::EngineConfig::from_knobs();
  rail::RailConfig rc;
  rc.rx_buffers = cfg.rx_buffers;
  rc.tx_buffers = cfg.tx_buffers;
  // The same size Engine::open gives a bounce buffer: an eager message or the largest control
  // message (a CONN_REQ), behind a header. Keep the two in step: proto computes it inside
  // Engine::open and exposes no RailConfig.
  rc.buffer_bytes = sizeof(proto::MsgHeader) +
                    std::max(cfg.eager_max, sizeof(proto::ConnBody) + proto::kMaxConnAddressBytes);
  return rails * rail::Rail::registered_bytes(rc);
}

}  // namespace xport
