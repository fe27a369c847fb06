// The ring through which GPU kernels hand one-sided operations to the host proxy
// (docs/semantics.md, "GPU-initiated operations"): fixed 64-byte descriptors in page-locked host
// memory mapped into the GPU, a lap flag per slot, the producers' and the consumer's indices and
// the abort word each on a cache line of its own. Included by host code and by xport/device.cuh
// (nvcc), so: plain structs, fixed sizes, no library types.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define XPORT_RING_FN __host__ __device__
#else
#define XPORT_RING_FN
#endif

namespace xport::gpu_ring {

enum class Op : uint8_t {
  none = 0,
  put = 1,                 // local region -> remote region
  put_signal = 2,          // ... then the remote signal word gets `value` (add or set)
  signal = 3,              // the remote signal word alone
  put_signal_counter = 4,  // put_signal, and the local counter word counts its completion
  signal_counter = 5,
  quiet = 6,               // completes once every earlier descriptor of the ring is delivered
};

enum class SignalOp : uint8_t { add = 0, set = 1 };

// One operation. `lap` is written last (after a system-wide fence): the consumer takes slot i of
// lap k only once it reads lap == k + 1, so slots are never cleared.
struct alignas(64) Descriptor {
  uint32_t lap;
  uint8_t op;             // Op
  uint8_t signal_op;      // SignalOp
  uint8_t weak;           // 0: strong signal (covers every earlier operation to the peer)
  uint8_t reserved0;
  uint16_t window;        // the proxy's window (peer) index
  uint16_t local_region;  // the proxy's region table: source of a put
  uint16_t remote_region; // ... destination of a put
  uint16_t signal_region; // ... the remote region holding the signal word
  uint16_t counter_region;  // local region holding the counter word
  uint16_t reserved1;
  uint32_t counter_word;    // counter's offset / 8
  uint64_t local_offset;
  uint64_t remote_offset;
  uint64_t length;
  uint64_t signal_offset;
  uint64_t value;
};
static_assert(sizeof(Descriptor) == 64, "one descriptor per 64-byte line");
static_assert(offsetof(Descriptor, lap) == 0);
static_assert(offsetof(Descriptor, local_offset) == 24);
static_assert(offsetof(Descriptor, value) == 56);

// Errors kernels can read in Header::abort (0: running).
enum class Abort : uint32_t {
  none = 0,
  stopped = 1,    // the proxy closed the ring
  failed = 2,     // an operation failed: the host's last error says which (Proxy::last_error)
  timeout = 3,    // a kernel's wait passed its deadline (set by the kernel, read by the host)
  bad_descriptor = 4,
};

struct Header {
  uint32_t magic;          // kMagic
  uint32_t version;        // kVersion
  uint32_t capacity;       // slots, a power of two
  uint32_t reserved;
  alignas(64) uint64_t head;       // producers: next slot to take (atomic add)
  alignas(64) uint64_t tail;       // consumer: slots taken off the ring (their room is free again)
  alignas(64) uint64_t completed;  // consumer: descriptors whose operation completed, in order
  alignas(64) uint32_t abort;      // Abort
};
static_assert(sizeof(Header) == 320 && offsetof(Header, abort) == 256);
static_assert(offsetof(Header, head) == 64 && offsetof(Header, tail) == 128);
static_assert(offsetof(Header, completed) == 192);

inline constexpr uint32_t kMagic = 0x78707267;  // "xprg"
inline constexpr uint32_t kVersion = 1;

// The ring as kernels reach it (GpuProxy::ring() gives it): the header and slots at their
// device-mapped addresses, and the producers' counter in GPU memory (device-scope atomics: no
// PCIe atomics needed).
struct DeviceRing {
  Header* header;
  Descriptor* slots;
  unsigned long long* head;
  uint32_t capacity;
};

// Bytes of a ring of `capacity` slots: the header, then the slots.
XPORT_RING_FN inline constexpr size_t ring_bytes(uint32_t capacity) {
  return sizeof(Header) + static_cast<size_t>(capacity) * sizeof(Descriptor);
}

// The lap flag slot `position` carries once filled.
XPORT_RING_FN inline constexpr uint32_t lap_of(uint64_t position, uint32_t capacity) {
  return static_cast<uint32_t>(position / capacity) + 1;
}

}  // namespace xport::gpu_ring
