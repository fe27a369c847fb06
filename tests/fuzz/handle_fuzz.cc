// Fuzzes the connection-handle, remote-key and GpuHost team-hello decoders: any bytes, no
// crash, no overread.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gpu/host/team_hello.hpp"
#include "proto/wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  auto h = xport::proto::decode_handle(bytes);
  if (h.ok()) {
    // A handle that decodes must re-encode to the same bytes (what follows them being zero
    // padding), within NCCL's 128.
    auto again = xport::proto::encode_handle(*h);
    if (!again.ok() || again->size() > size || size > xport::proto::kMaxHandleBytes ||
        std::memcmp(again->data(), data, again->size()) != 0) {
      __builtin_trap();
    }
    for (size_t i = again->size(); i < size; ++i) {
      if (data[i] != 0) __builtin_trap();
    }
  }
  auto k = xport::proto::decode_key(bytes);
  if (k.ok() && k->length == 0) __builtin_trap();
  xport::gpu::TeamHello th;
  if (xport::gpu::decode_team_hello(bytes, &th)) {  // a hello that decodes re-encodes alike
    uint8_t again[xport::gpu::kTeamHelloBytes];
    xport::gpu::encode_team_hello(th, again);
    if (size != sizeof(again) || std::memcmp(again, data, size) != 0) __builtin_trap();
  }
  return 0;
}
