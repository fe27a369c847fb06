// The one place that reads the public handles' insides (each public class names it a friend):
// the api files build handles from what the engine returns and hand the engine their buffers.
#pragma once

#include <memory>
#include <optional>
#include <type_traits>

#include "gpu/staging/arrivals.hpp"
#include "gpu/staging/staging_pool.hpp"
#include "proto/engine.hpp"
#include "xport/comm.hpp"
#include "xport/context.hpp"
#include "xport/region.hpp"
#include "xport/window.hpp"

namespace xport {

namespace api {
// The one place that reads the public handles' insides.
struct Access {
  // What the engine registers and posts: the Region's own memory, or its host shadow.
  static proto::LocalBuffer local(const Region& r) {
    if (r.staged_) return {&r.state_, r.staged_->shadow_of(r.view_base_), r.view_length_};
    return {&r.state_, r.view_base_, r.view_length_};
  }
  static const std::shared_ptr<gpu::StagedMemory>& staged(const Region& r) { return r.staged_; }
  // The address the engine posts for the caller's p inside r (its shadow's, when staged); p
  // itself when outside r, which the engine then refuses by name.
  static const void* on_wire(const Region& r, const void* p, size_t len) {
    if (!r.staged_ || !r.contains(p, len)) return p;
    return r.staged_->shadow_of(p);
  }
  // A staged source [p, p+len) inside r: copied, in the call, into staging bytes of its own
  // (gpu/staging/staging_pool.hpp) that the engine posts from, so the caller may rewrite its
  // GPU buffer at once and later operations from the range never reach them. Nothing for host
  // memory, an empty range, or one outside r (the engine refuses that by name, as before).
  static Result<std::optional<gpu::StagedSource>> stage(const Region& r, const void* p, size_t len,
                                                   const char* what) {
    if (!r.staged_ || len == 0 || !r.contains(p, len)) return std::optional<gpu::StagedSource>();
    // (the Region's own device's pool: a Region of another device stays refused by the engine)
    auto* e = static_cast<proto::Engine*>(r.state_->owner.get());
    XPORT_ASSIGN_OR_RETURN(gpu::StagedSource s, gpu::stage_source(*e, *r.staged_, p, len, what));
    return std::optional<gpu::StagedSource>(std::move(s));
  }
  static Result<std::optional<gpu::StagedSource>> stage(const Region& r, size_t offset, size_t len,
                                                   const char* what) {
    if (!r.staged_ || offset > r.view_length_) return std::optional<gpu::StagedSource>();
    return stage(r, r.view_base_ + offset, len, what);
  }
  // The same, copied in pieces of `piece` bytes, started (a put in pieces posts each as it
  // lands); nothing where stage() gives nothing.
  static Result<std::optional<gpu::PiecedSource>> stage_pieces(const Region& r, size_t offset,
                                                              size_t len, size_t piece,
                                                              const char* what) {
    if (!r.staged_ || len == 0 || offset > r.view_length_ ||
        !r.contains(r.view_base_ + offset, len)) {
      return std::optional<gpu::PiecedSource>();
    }
    auto* e = static_cast<proto::Engine*>(r.state_->owner.get());
    XPORT_ASSIGN_OR_RETURN(gpu::PiecedSource s, gpu::start_pieced_source(
                                                    *e, *r.staged_, r.view_base_ + offset, len,
                                                    piece, what));
    return std::optional<gpu::PiecedSource>(std::move(s));
  }
  // The GPU address of [offset, +len) of a staged Region, or nullptr (host memory, outside it).
  static const uint8_t* gpu_range(const Region& r, size_t offset, size_t len) {
    if (!r.staged_ || offset > r.view_length_ || !r.contains(r.view_base_ + offset, len)) {
      return nullptr;
    }
    return r.view_base_ + offset;
  }
  static const proto::RemoteKey* key(const RemoteRegion& r) { return r.key_.get(); }
  static pool::CommId id(const SendComm& c) { return {c.id_, c.gen_}; }
  static pool::CommId id(const RecvComm& c) { return {c.id_, c.gen_}; }
  static const std::shared_ptr<proto::Engine>& engine(const SendComm& c) { return c.engine_; }
  static const std::shared_ptr<proto::Engine>& engine(const RecvComm& c) { return c.engine_; }

  static Region region(memory::RegionRef state, void* buf, size_t len,
                       std::shared_ptr<gpu::StagedMemory> staged, MemoryType type) {
    Region out;
    out.type_ = type;
    out.state_ = std::move(state);
    out.staged_ = std::move(staged);
    out.view_base_ = static_cast<uint8_t*>(buf);
    out.view_length_ = len;
    return out;
  }
  static RemoteRegion remote(proto::RemoteKey k) {
    RemoteRegion out;
    out.key_ = std::make_shared<const proto::RemoteKey>(std::move(k));
    return out;
  }
  template <typename Comm>
  static std::unique_ptr<Comm> comm(const std::shared_ptr<proto::Engine>& e, pool::CommId id) {
    auto out = std::unique_ptr<Comm>(new Comm());
    out->engine_ = e;
    out->id_ = id.index;
    out->gen_ = id.gen;
    if constexpr (std::is_same_v<Comm, RecvComm>) {
      out->staged_ = std::make_shared<gpu::StagedArrivals>();
    }
    return out;
  }
  static std::unique_ptr<PendingConnect> pending(const std::shared_ptr<proto::Engine>& e,
                                                 pool::CommId id, Deadline deadline) {
    auto out = std::unique_ptr<PendingConnect>(new PendingConnect());
    out->engine_ = e;
    out->id_ = id.index;
    out->gen_ = id.gen;
    out->deadline_ = deadline;
    return out;
  }
  static std::unique_ptr<Listener> listener(const std::shared_ptr<proto::Engine>& e,
                                            uint64_t token, std::vector<uint8_t> handle) {
    auto out = std::unique_ptr<Listener>(new Listener());
    out->engine_ = e;
    out->token_ = token;
    out->handle_ = std::move(handle);
    return out;
  }
  static const std::shared_ptr<proto::Engine>& engine(const Device& d) { return d.engine_; }
  static std::unique_ptr<Window> window(const std::shared_ptr<proto::Engine>& e, uint32_t id) {
    auto w = std::unique_ptr<Window>(new Window());
    w->engine_ = e;
    w->id_ = id;
    w->staged_ = std::make_shared<gpu::StagedArrivals>();
    w->local_clear_ = e->one_sided().local_clear(id);
    return w;
  }
};
}  // namespace api

}  // namespace xport
