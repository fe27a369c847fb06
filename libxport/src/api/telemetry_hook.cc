// Device -> telemetry source: the publisher thread calls Engine::stats() (which takes the engine
// mutex briefly, once per XPORT_TELEMETRY_INTERVAL_MS) and converts it with stats_blocks.
#include "api/telemetry_hook.hpp"

#include <map>
#include <string>

#include "core/log.hpp"
#include "fabric/provider.hpp"
#include "proto/engine.hpp"
#include "telemetry/ordinals.hpp"
#include "telemetry/publisher.hpp"
#include "telemetry/stats_blocks.hpp"

namespace xport::api {
namespace {

// Devices are numbered by the lowest free ordinal, so the `device` label stays bounded in a
// process that opens and closes devices for ever.
telemetry::Ordinals g_ordinals;

// fi_getinfo over every provider is slow (milliseconds to seconds with hardware providers):
// once per process.
const std::map<std::string, std::string>& nic_pci_by_domain() {
  static const std::map<std::string, std::string> m = [] {
    std::map<std::string, std::string> out;
    for (const auto& a : fabric::nic_attributes()) {
      if (!a.pci.empty()) out.emplace(a.domain, a.pci);
    }
    return out;
  }();
  return m;
}

struct DeviceTelemetry {
  int ordinal = 0;
  std::unique_ptr<telemetry::Registration> registration;
  ~DeviceTelemetry() {
    registration.reset();  // first: no snapshot may run with the ordinal given back
    g_ordinals.give(ordinal);
  }
};

}  // namespace

std::shared_ptr<void> attach_device_telemetry(const std::shared_ptr<proto::Engine>& engine,
                                              const Capabilities& caps, bool thread_safe) {
  telemetry::Publisher* publisher = telemetry::process_publisher();
  if (publisher == nullptr) return nullptr;
  if (!thread_safe) {
    XPORT_LOG(info, "telemetry: a device opened with thread_safe = false is not published");
    return nullptr;
  }
  auto t = std::make_shared<DeviceTelemetry>();
  t->ordinal = g_ordinals.take();
  telemetry::DeviceLabels labels;
  labels.device = std::to_string(t->ordinal);
  labels.provider = caps.provider;
  labels.fabric = caps.fabric;
  labels.domain = caps.domain;
  labels.nic_pci = nic_pci_by_domain();
  std::weak_ptr<proto::Engine> weak = engine;
  uint64_t id = publisher->add([weak, labels](std::vector<telemetry::BlockRecord>& out) {
    if (auto e = weak.lock()) telemetry::append_stats_blocks(e->stats(), labels, out);
  });
  if (id == 0) return nullptr;  // t's destructor gives the ordinal back
  t->registration = std::make_unique<telemetry::Registration>(publisher, id);
  return t;
}

}  // namespace xport::api
