// GPU staging counters as stats-segment blocks (gpu/staging/telemetry.hpp).
#include "gpu/staging/telemetry.hpp"

#include <mutex>
#include <string>

#include "gpu/staging_counters.hpp"
#include "telemetry/block.hpp"
#include "telemetry/names.hpp"
#include "telemetry/publisher.hpp"

namespace xport::gpu {

using telemetry::BlockBuilder;
using telemetry::BlockKind;
using telemetry::CounterId;
using telemetry::LabelKey;

void append_staging_blocks(std::vector<telemetry::BlockRecord>& out) {
  for (int d = 0; d < gpu::kCountedGpus; ++d) {
    const gpu::StagingCounters& c = gpu::staging_counters(d);
    if (!c.used.load(std::memory_order_relaxed)) continue;
    BlockBuilder b(BlockKind::gpu_staging);
    b.label(LabelKey::cuda_device, std::to_string(d));
    auto r = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
    b.counter(CounterId::gpu_staging_to_host_bytes, r(c.to_host_bytes));
    b.counter(CounterId::gpu_staging_to_gpu_bytes, r(c.to_gpu_bytes));
    b.counter(CounterId::gpu_staging_copies_to_host, r(c.copies_to_host));
    b.counter(CounterId::gpu_staging_copies_to_gpu, r(c.copies_to_gpu));
    b.counter(CounterId::gpu_staging_copy_errors, r(c.copy_errors));
    b.counter(CounterId::gpu_staging_shadows, r(c.shadows));
    b.counter(CounterId::gpu_staging_shadow_bytes, r(c.shadow_bytes));
    b.counter(CounterId::gpu_staging_pool_bytes, r(c.pool_bytes));
    b.counter(CounterId::gpu_staging_pool_pinned_bytes, r(c.pool_pinned_bytes));
    b.counter(CounterId::gpu_staging_pool_in_use_bytes, r(c.pool_in_use_bytes));
    b.counter(CounterId::gpu_staging_pool_refusals, r(c.pool_refusals));
    out.push_back(b.record());
  }
}

void publish_staging() {
  static std::once_flag once;
  std::call_once(once, [] {
    telemetry::Publisher* p = telemetry::process_publisher();
    // The counters are static storage: the source stays registered for the process.
    if (p != nullptr) (void)p->add([](std::vector<telemetry::BlockRecord>& out) {
      append_staging_blocks(out);
    });
  });
}

}  // namespace xport::gpu
