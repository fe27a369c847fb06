// Staging bytes of GPU sources (gpu/staging/staging_pool.hpp).
#include "gpu/staging/staging_pool.hpp"

#include <algorithm>
#include <cstdlib>

#include "core/format.hpp"
#include "core/knob.hpp"
#include "gpu/staging_counters.hpp"

namespace xport::gpu {

namespace {
size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Storage of the leases' shared state (one block per operation in flight), recycled: once the
// pool has seen as many operations in flight, staging one allocates nothing. Outlives the pool
// (a block goes back after its chunk gave its bytes back and let go of the pool).
struct BlockCache {
  std::mutex mu;
  std::vector<void*> free;
  size_t size = 0;  // the one block size asked for (the control block of a Chunk)
  ~BlockCache() {
    for (void* p : free) ::operator delete(p);
  }
};

template <typename T>
struct CachedAllocator {
  using value_type = T;
  std::shared_ptr<BlockCache> cache;
  explicit CachedAllocator(std::shared_ptr<BlockCache> c) : cache(std::move(c)) {}
  template <typename U>
  CachedAllocator(const CachedAllocator<U>& o) : cache(o.cache) {}  // NOLINT: rebinding
  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    {
      std::lock_guard<std::mutex> g(cache->mu);
      if (bytes == cache->size && !cache->free.empty()) {
        void* p = cache->free.back();
        cache->free.pop_back();
        return static_cast<T*>(p);
      }
    }
    return static_cast<T*>(::operator new(bytes));
  }
  void deallocate(T* p, size_t n) {
    const size_t bytes = n * sizeof(T);
    {
      std::lock_guard<std::mutex> g(cache->mu);
      if (cache->size == 0) cache->size = bytes;
      if (bytes == cache->size) {
        cache->free.push_back(p);
        return;
      }
    }
    ::operator delete(p);
  }
  template <typename U>
  bool operator==(const CachedAllocator<U>& o) const { return cache == o.cache; }
};
}  // namespace

struct StagingPool::Chunk {
  std::shared_ptr<StagingPool> pool;
  std::shared_ptr<Slab> slab;
  size_t offset = 0;
  size_t length = 0;
  Chunk(std::shared_ptr<StagingPool> p, std::shared_ptr<Slab> s, size_t off, size_t len)
      : pool(std::move(p)), slab(std::move(s)), offset(off), length(len) {}
  ~Chunk() { pool->give(*slab, offset, length); }
};

StagingPool::StagingPool(proto::Engine& engine, gpu::Driver& driver, int gpu, size_t bound)
    : engine_(engine),
      driver_(driver),
      gpu_(gpu),
      bound_(bound / kGranule * kGranule),
      blocks_(std::make_shared<BlockCache>()) {}

StagingPool::~StagingPool() {
  // No chunk is out (each holds the pool): every slab is unused and goes now.
  gpu::StagingCounters& c = gpu::staging_counters(gpu_);
  for (auto& s : slabs_) {
    c.pool_bytes.fetch_sub(s->length, std::memory_order_relaxed);
    if (s->pinned) c.pool_pinned_bytes.fetch_sub(s->length, std::memory_order_relaxed);
  }
}

size_t StagingPool::largest() const {
  std::lock_guard<std::mutex> g(mu_);
  // The largest page-locked slab, or what the bound leaves beside the page-locked slabs (before
  // any is made: the first, which a registration makes).
  const size_t pinned = pinned_ != 0 ? pinned_ : std::min(bound_, kWarmSlab);
  return std::max(pinned_most_ != 0 ? pinned_most_ : pinned, bound_ - pinned);
}

Result<std::shared_ptr<StagingPool::Slab>> StagingPool::make_slab(size_t length, bool pinned) {
  void* mem = nullptr;
  if (pinned) {
    XPORT_ASSIGN_OR_RETURN(mem, driver_.alloc_pinned(length));
  } else {
    mem = std::aligned_alloc(kGranule, length);
    if (mem == nullptr) {
      return core::error(Code::resource, "GPU staging pool: no host memory for a slab of ",
                         length, " bytes");
    }
  }
  gpu::Driver* d = &driver_;
  std::shared_ptr<void> owner(mem, [d, pinned](void* p) {
    if (pinned) {
      d->free_pinned(p);
    } else {
      std::free(p);
    }
  });
  auto ref = engine_.memory().register_memory(mem, length);
  if (!ref.ok()) return ref.status().with_context("GPU staging pool: registering a slab");
  auto s = std::make_shared<Slab>();
  s->memory = std::move(owner);
  s->base = static_cast<uint8_t*>(mem);
  s->length = length;
  s->pinned = pinned;
  s->ref = std::move(ref).value();
  s->free.emplace_back(0, length);
  gpu::StagingCounters& c = gpu::staging_counters(gpu_);
  c.used.store(true, std::memory_order_relaxed);
  c.pool_bytes.fetch_add(length, std::memory_order_relaxed);
  if (pinned) c.pool_pinned_bytes.fetch_add(length, std::memory_order_relaxed);
  return s;
}

Status StagingPool::warm(size_t region) {
  size_t length = 0;
  {
    std::lock_guard<std::mutex> g(mu_);
    const size_t target = std::min({bound_, std::max(kWarmSlab, std::min(region, kPinnedMost))});
    if (pinned_most_ >= target) return Status::success();
    length = std::min(round_up(target, kGranule), bound_ - std::min(bound_, total_));
    if (length <= pinned_most_) return Status::success();  // (the pool is at its bound)
    total_ += length;  // reserved while it is made
  }
  auto s = make_slab(length, true);
  std::vector<std::shared_ptr<Slab>> dropped;  // freed outside the lock
  std::lock_guard<std::mutex> g(mu_);
  if (!s.ok()) {
    total_ -= length;
    return s.status();
  }
  // Smaller page-locked slabs not in use make way for it.
  gpu::StagingCounters& c = gpu::staging_counters(gpu_);
  std::erase_if(slabs_, [&](const std::shared_ptr<Slab>& x) {
    if (!x->pinned || x->used != 0) return false;
    total_ -= x->length;
    pinned_ -= x->length;
    c.pool_bytes.fetch_sub(x->length, std::memory_order_relaxed);
    c.pool_pinned_bytes.fetch_sub(x->length, std::memory_order_relaxed);
    dropped.push_back(x);
    return true;
  });
  pinned_ += length;
  pinned_most_ = length;
  // (page-locked slabs first: carve() takes from them before host memory)
  auto at = std::find_if(slabs_.begin(), slabs_.end(),
                         [](const std::shared_ptr<Slab>& x) { return !x->pinned; });
  slabs_.insert(at, std::move(s).value());
  return Status::success();
}

uint8_t* StagingPool::carve(size_t n, std::shared_ptr<Slab>* slab) {
  for (auto& s : slabs_) {
    for (size_t i = 0; i < s->free.size(); ++i) {
      auto& [off, len] = s->free[i];
      if (len < n) continue;
      uint8_t* p = s->base + off;
      off += n;
      len -= n;
      if (len == 0) s->free.erase(s->free.begin() + static_cast<std::ptrdiff_t>(i));
      s->used += n;
      *slab = s;
      return p;
    }
  }
  return nullptr;
}

void StagingPool::give(Slab& slab, size_t offset, size_t n) {
  {
    std::lock_guard<std::mutex> g(mu_);
    auto& f = slab.free;
    auto it = std::lower_bound(f.begin(), f.end(), std::make_pair(offset, size_t{0}));
    it = f.insert(it, {offset, n});
    // Coalesce with the neighbours.
    if (it + 1 != f.end() && it->first + it->second == (it + 1)->first) {
      it->second += (it + 1)->second;
      f.erase(it + 1);
    }
    if (it != f.begin() && (it - 1)->first + (it - 1)->second == it->first) {
      (it - 1)->second += it->second;
      f.erase(it);
    }
    slab.used -= n;
  }
  gpu::staging_counters(gpu_).pool_in_use_bytes.fetch_sub(n, std::memory_order_relaxed);
}

StagedSource StagingPool::lease(const std::shared_ptr<Slab>& slab, uint8_t* bytes, size_t n,
                                size_t length) {
  gpu::staging_counters(gpu_).pool_in_use_bytes.fetch_add(length, std::memory_order_relaxed);
  auto chunk = std::allocate_shared<Chunk>(
      CachedAllocator<Chunk>(std::static_pointer_cast<BlockCache>(blocks_)), shared_from_this(),
      slab, static_cast<size_t>(bytes - slab->base), length);
  StagedSource out;
  out.ref = memory::RegionRef(std::move(chunk), slab->ref.get());
  out.bytes = bytes;
  out.length = n;
  return out;
}

Result<StagedSource> StagingPool::take(size_t n, const char* what) {
  const size_t need = round_up(std::max<size_t>(n, 1), kGranule);
  if (need > largest()) {
    return core::error(Code::resource, what, ": ", n, " bytes from staged GPU memory are more "
                       "than its staging pool can hold for one operation (", largest(),
                       " bytes, XPORT_GPU_STAGING_POOL=", bound_, "): raise "
                       "XPORT_GPU_STAGING_POOL or split the operation");
  }
  for (;;) {
    std::vector<std::shared_ptr<Slab>> dropped;  // freed outside the lock (deregistration)
    size_t grow = 0;
    {
      std::lock_guard<std::mutex> g(mu_);
      std::shared_ptr<Slab> slab;
      if (uint8_t* p = carve(need, &slab)) return lease(slab, p, n, need);
      if (total_ + need > bound_) {
        // Slabs grown earlier and unused now make room (the page-locked one stays).
        std::erase_if(slabs_, [&](const std::shared_ptr<Slab>& s) {
          if (s->pinned || s->used != 0 || total_ + need <= bound_) return false;
          total_ -= s->length;
          dropped.push_back(s);
          return true;
        });
      }
      if (total_ + need > bound_) {
        gpu::staging_counters(gpu_).pool_refusals.fetch_add(1, std::memory_order_relaxed);
        return core::error(Code::again, what, ": the staging pool of GPU ", gpu_, " has no ",
                           need, " bytes free (", total_, " of XPORT_GPU_STAGING_POOL=", bound_,
                           " held by operations from GPU memory in flight): complete some and "
                           "call again");
      }
      grow = std::min(std::max(kSlab, round_up(need, kSlab)), bound_ - total_);
      total_ += grow;  // reserved while it is made
    }
    gpu::StagingCounters& c = gpu::staging_counters(gpu_);
    for (auto& s : dropped) {
      c.pool_bytes.fetch_sub(s->length, std::memory_order_relaxed);
    }
    dropped.clear();
    auto s = make_slab(grow, false);
    std::lock_guard<std::mutex> g(mu_);
    if (!s.ok()) {
      total_ -= grow;
      return s.status().with_context(what);
    }
    slabs_.push_back(std::move(s).value());
    // (carved on the next round: another thread may have taken part of it meanwhile)
  }
}

namespace {
// The pools of one device, by GPU: the engine's attachment.
struct Pools {
  std::mutex mu;
  std::map<int, std::shared_ptr<StagingPool>> by_gpu;
};
}  // namespace

std::shared_ptr<StagingPool> staging_pool(proto::Engine& engine, int gpu) {
  std::shared_ptr<void> a = engine.attachment([] { return std::make_shared<Pools>(); });
  if (!a) return nullptr;
  auto* pools = static_cast<Pools*>(a.get());
  std::lock_guard<std::mutex> g(pools->mu);
  auto& slot = pools->by_gpu[gpu];
  if (!slot) {
    const auto bound = static_cast<size_t>(core::knob_int(core::KnobId::gpu_staging_pool));
    slot = std::make_shared<StagingPool>(engine, gpu::driver(), gpu, bound);
  }
  return slot;
}

Result<StagedSource> stage_source(proto::Engine& engine, gpu::StagedMemory& m, const void* p,
                                  size_t n, const char* what) {
  XPORT_ASSIGN_OR_RETURN(PiecedSource s, start_pieced_source(engine, m, p, n, 0, what));
  if (Status st = s.copy->wait(); !st.ok()) return st.with_context(what);
  return std::move(s.bytes);
}

Result<PiecedSource> start_pieced_source(proto::Engine& engine, gpu::StagedMemory& m,
                                         const void* p, size_t n, size_t piece, const char* what) {
  std::shared_ptr<StagingPool> pool = staging_pool(engine, m.gpu());
  if (!pool) return core::error(Code::closed, what, ": the device is closed");
  PiecedSource out;
  XPORT_ASSIGN_OR_RETURN(out.bytes, pool->take(n, what));
  auto c = m.start_copy_in_to(out.bytes.bytes, p, n, piece);
  if (!c.ok()) return c.status().with_context(what);
  out.copy = std::move(c).value();
  // (dropped early, under the engine's lock when its stream fails: the bytes stay taken until
  // the copy into them is done, and nothing waits for it)
  out.copy->keep_until_done(out.bytes.ref);
  return out;
}

}  // namespace xport::gpu
