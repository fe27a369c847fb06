// device_registered_bytes(): what a Device registers for itself, for xport-probe's locked-memory
// check: the engine's rail layout (the one Engine::open uses), laid out by the rail layer.
#include "proto/engine.hpp"
#include "rail/rail.hpp"
#include "xport/context.hpp"

namespace xport {

size_t device_registered_bytes(size_t rails, std::string_view provider) {
  return rails *
         rail::Rail::registered_bytes(proto::EngineConfig::from_knobs().rail_config(provider));
}

}  // namespace xport
