// Fuzzes the stats-segment decoder (bytes another process wrote) and the segment name parser.
// Short inputs are also decoded zero-padded to the full segment size, so the fuzzer reaches the
// block table without producing 256 KiB inputs.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "telemetry/names.hpp"
#include "telemetry/segment_format.hpp"
#include "telemetry/segment_reader.hpp"

namespace {

void check(const xport::telemetry::DecodeResult& r) {
  using namespace xport::telemetry;
  if (!r.ok()) return;
  // What decodes is within the format's bounds and speaks only known label names.
  if (r.snapshot.blocks.size() > static_cast<size_t>(kMaxBlocks)) __builtin_trap();
  if (r.snapshot.generation % 2 != 0) __builtin_trap();
  for (const auto& b : r.snapshot.blocks) {
    if (b.labels.size() > static_cast<size_t>(kBlockLabels)) __builtin_trap();
    if (b.counters.size() > static_cast<size_t>(kBlockCounters)) __builtin_trap();
    for (const auto& l : b.labels) {
      if (label_key_name(l.key) == nullptr || l.value.empty() || l.value.size() > kLabelValueMax)
        __builtin_trap();
    }
    for (const auto& [id, v] : b.counters) {
      if (id == 0) __builtin_trap();
      (void)find_counter(id);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace xport::telemetry;
  check(decode_segment(std::span<const uint8_t>(data, size)));
  if (size < kSegmentSize) {
    static std::vector<uint8_t> padded(kSegmentSize);
    std::memset(padded.data(), 0, padded.size());
    std::memcpy(padded.data(), data, size);
    check(decode_segment(padded));
  }
  FileIdentity id;
  std::string name(reinterpret_cast<const char*>(data), size < 64 ? size : 64);
  if (parse_segment_name(name, &id) && id.pid == 0) __builtin_trap();
  return 0;
}
