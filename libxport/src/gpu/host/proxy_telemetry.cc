// A GpuProxy's counters as a stats-segment block (gpu/host/proxy_telemetry.hpp).
#include "gpu/host/proxy_telemetry.hpp"

#include <string>

#include "telemetry/block.hpp"
#include "telemetry/names.hpp"
#include "telemetry/ordinals.hpp"
#include "telemetry/publisher.hpp"

namespace xport::gpu {
namespace {

using telemetry::BlockBuilder;
using telemetry::BlockKind;
using telemetry::CounterId;
using telemetry::LabelKey;

// Proxies are numbered by the lowest free ordinal, like devices: the label stays bounded in a
// process that opens and closes proxies for ever.
telemetry::Ordinals g_proxy_ordinals;

struct ProxyTelemetry {
  int ordinal = 0;
  std::unique_ptr<telemetry::Registration> registration;
  ~ProxyTelemetry() {
    registration.reset();  // first: no snapshot runs with the ordinal given back
    g_proxy_ordinals.give(ordinal);
  }
};

}  // namespace

void append_proxy_block(const GpuProxyStats& s, int proxy, int gpu,
                        std::vector<telemetry::BlockRecord>& out) {
  BlockBuilder b(BlockKind::gpu_proxy);
  b.label(LabelKey::proxy, std::to_string(proxy));
  b.label(LabelKey::cuda_device, std::to_string(gpu));
  b.counter(CounterId::gpu_proxy_descriptors, s.descriptors);
  b.counter(CounterId::gpu_proxy_batches, s.batches);
  b.counter(CounterId::gpu_proxy_completed, s.completed);
  b.counter(CounterId::gpu_proxy_in_flight, s.in_flight);
  b.counter(CounterId::gpu_proxy_queued, s.queued);
  b.counter(CounterId::gpu_proxy_batch_max, s.max_occupancy);
  b.counter(CounterId::gpu_proxy_capacity, s.capacity);
  b.counter(CounterId::gpu_proxy_again, s.again);
  b.counter(CounterId::gpu_proxy_timeouts, s.timeouts);
  b.counter(CounterId::gpu_proxy_failures, s.failures);
  out.push_back(b.record());
}

std::shared_ptr<void> attach_proxy_telemetry(std::function<GpuProxyStats()> read, int gpu) {
  telemetry::Publisher* p = telemetry::process_publisher();
  if (p == nullptr) return nullptr;
  auto t = std::make_shared<ProxyTelemetry>();
  t->ordinal = g_proxy_ordinals.take();
  const int ordinal = t->ordinal;
  uint64_t id = p->add([read = std::move(read), ordinal, gpu](std::vector<telemetry::BlockRecord>& out) {
    append_proxy_block(read(), ordinal, gpu, out);
  });
  if (id == 0) return nullptr;
  t->registration = std::make_unique<telemetry::Registration>(p, id);
  return t;
}

}  // namespace xport::gpu
