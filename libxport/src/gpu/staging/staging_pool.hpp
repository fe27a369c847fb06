// Staging bytes of GPU sources: every operation from staged GPU memory (isend, put, put_signal*,
// a transfer's puts, the GPU proxy's and GIN's puts through them) copies its source, in the call,
// into bytes of its own taken from its device's pool; the engine posts from them and gives them
// back at the operation's local completion. So no operation reads bytes written after its call,
// however many are in flight from one GPU range (docs/semantics.md, "GPU memory").
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "gpu/driver.hpp"
#include "gpu/staged_memory.hpp"
#include "proto/engine.hpp"

namespace xport::gpu {

// One operation's staging bytes: what the engine posts from. `ref` aliases the registration of
// the slab they lie in and owns them: the engine keeps a copy with the operation until it is
// locally complete, and the last copy gives the bytes back to the pool.
struct StagedSource {
  memory::RegionRef ref;
  uint8_t* bytes = nullptr;
  size_t length = 0;
  proto::LocalBuffer local() const { return {&ref, bytes, length}; }
};

// A device's pool for the sources in one GPU's memory: slabs of host memory registered on every
// rail of the device, cut into chunks (4 KiB granules, first fit) for operations in flight,
// reused, kept until the device closes. A page-locked slab is made when the device registers a
// staged Region of that GPU larger than the page-locked slab it has (a registration allocates
// page-locked memory anyway): as long as the Region (at least kWarmSlab, at most kPinnedMost,
// within the bound), replacing smaller page-locked slabs not in use. Slabs grown on demand in
// the call that needs them are ordinary host memory, so that no page-locked allocation happens
// while kernels may run (CUDA makes such an allocation wait for them: a proxy thread waiting so
// for a kernel that waits on the proxy would never return). Host-memory slabs are freed when
// the pool is at its bound and a request fits nowhere while they are unused. Thread-safe;
// nothing waits under its lock, and the engine's lock is never taken under it.
class StagingPool : public std::enable_shared_from_this<StagingPool> {
 public:
  static constexpr size_t kGranule = 4096;
  static constexpr size_t kWarmSlab = size_t{16} << 20;
  static constexpr size_t kSlab = size_t{4} << 20;  // least size of a slab grown later
  static constexpr size_t kPinnedMost = size_t{256} << 20;

  // `bound`: XPORT_GPU_STAGING_POOL.
  StagingPool(proto::Engine& engine, gpu::Driver& driver, int gpu, size_t bound);
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  // A staged Region of `region` bytes of this GPU is being registered (a time when a page-locked
  // allocation cannot wait for a running kernel): the pool's page-locked part grows to that
  // length (at least kWarmSlab, at most kPinnedMost, within the bound), so that an operation
  // from it is copied into page-locked bytes, at full speed.
  Status warm(size_t region);
  // `n` bytes (n > 0) for one operation: Code::again while the pool is at its bound (nothing is
  // taken; operations in flight give theirs back as they complete), Code::resource naming the
  // knob for more than the pool can ever hold at once (largest()).
  Result<StagedSource> take(size_t n, const char* what);
  // The largest operation the pool can ever hold.
  size_t largest() const;
  size_t bound() const { return bound_; }

 private:
  struct Slab {
    std::shared_ptr<void> memory;  // freed after `ref` (declared before it) is let go
    uint8_t* base = nullptr;
    size_t length = 0;
    bool pinned = false;
    memory::RegionRef ref;  // its registration on every rail
    std::vector<std::pair<size_t, size_t>> free;  // [offset, length), sorted, coalesced
    size_t used = 0;
  };
  // The bytes of one operation: given back when the last copy of its StagedSource::ref goes.
  struct Chunk;
  // A chunk of `n` (granules) in a slab under the lock, or nullptr.
  uint8_t* carve(size_t n, std::shared_ptr<Slab>* slab);
  void give(Slab& slab, size_t offset, size_t n);
  // A new slab of `length` bytes (made without the lock; `pinned`: page-locked).
  Result<std::shared_ptr<Slab>> make_slab(size_t length, bool pinned);
  StagedSource lease(const std::shared_ptr<Slab>& slab, uint8_t* bytes, size_t n,
                     size_t length);

  proto::Engine& engine_;
  gpu::Driver& driver_;
  const int gpu_;
  const size_t bound_;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<Slab>> slabs_;  // slabs_[0]: the page-locked one, once made
  size_t total_ = 0;     // bytes of every slab, and of slabs being made (reserved)
  size_t pinned_ = 0;       // bytes of page-locked slabs
  size_t pinned_most_ = 0;  // the largest of them
  std::shared_ptr<void> blocks_;  // recycled storage of the leases (staging_pool.cc)
};

// The pool of GPU `gpu`'s sources on the engine's device (made on first use), or nullptr once
// the device is shut down.
std::shared_ptr<StagingPool> staging_pool(proto::Engine& engine, int gpu);

// [p, p+n) of the staged GPU range `m`, copied (done when it returns) into staging bytes of its
// own from the engine's pool for m's GPU.
Result<StagedSource> stage_source(proto::Engine& engine, gpu::StagedMemory& m, const void* p,
                                  size_t n, const char* what);

// A source copied in piece by piece while its operation's pieces wait for their bytes: its
// staging bytes, and the copy (which, going first, waits for what it still writes there).
struct PiecedSource {
  StagedSource bytes;
  std::unique_ptr<StagedCopyIn> copy;
};
// [p, p+n) of `m` into staging bytes of its own, copied in pieces of `piece` bytes: started.
Result<PiecedSource> start_pieced_source(proto::Engine& engine, gpu::StagedMemory& m,
                                         const void* p, size_t n, size_t piece, const char* what);

}  // namespace xport::gpu
