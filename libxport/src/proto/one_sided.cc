// One-sided put/get over a communicator's channel, with local completion counted per window.
#include "core/log.hpp"
#include "proto/engine.hpp"

namespace xport::proto {
namespace {
constexpr size_t kWindowContexts = 256;
}

Result<uint32_t> Engine::open_window(uint16_t comm) {
  auto l = lock();
  CommState* c = comms_->find(comm);
  if (c == nullptr || c->user_closed) {
    return core::error(Code::invalid_argument, "window: communicator ", comm, " is not open");
  }
  if (c->phase != CommPhase::ready) {
    return c->phase == CommPhase::failed ? c->error
                                         : core::error(Code::invalid_argument,
                                                       "window: communicator is not connected");
  }
  auto w = std::make_unique<WindowState>();
  w->id = next_window_++;
  w->comm = comm;
  w->paths = c->paths;
  w->ctxs.resize(kWindowContexts);
  for (uint32_t i = 0; i < kWindowContexts; ++i) {
    w->ctxs[i].owner = w.get();
    w->ctxs[i].index = i;
    w->free.push_back(kWindowContexts - 1 - i);
  }
  for (Path& p : w->paths) p.data->refs += 1;
  const uint32_t id = w->id;
  windows_[id] = std::move(w);
  return id;
}

void Engine::close_window(uint32_t id) {
  auto l = lock();
  auto it = windows_.find(id);
  if (it == windows_.end()) return;
  it->second->closed = true;
  if (it->second->issued == it->second->completed) {
    for (Path& p : it->second->paths) p.data->refs -= 1;
    windows_.erase(it);
  }
}

Result<uint64_t> Engine::remote_address(const RemoteRegion& remote, size_t roff,
                                        size_t len) const {
  if (remote.keys_.empty()) return core::error(Code::invalid_argument, "empty RemoteRegion");
  if (roff > remote.length_ || len > remote.length_ - roff) {
    return core::error(Code::invalid_argument, "remote range [", roff, ", +", len,
                       ") is outside the remote region of ", remote.length_, " bytes");
  }
  return remote.virt_addr_ ? remote.base_ + roff : remote.mr_offset_ + roff;
}

Status Engine::put(uint32_t window, const Region& local, size_t loff, const RemoteRegion& remote,
                   size_t roff, size_t len) {
  return rma(window, fabric::OpType::put, local, loff, remote, roff, len);
}

Status Engine::get(uint32_t window, const Region& local, size_t loff, const RemoteRegion& remote,
                   size_t roff, size_t len) {
  return rma(window, fabric::OpType::get, local, loff, remote, roff, len);
}

Status Engine::rma(uint32_t window, fabric::OpType op, const Region& local, size_t loff,
                   const RemoteRegion& remote, size_t roff, size_t len) {
  const char* what = op == fabric::OpType::put ? "put" : "get";
  auto l = lock();
  auto it = windows_.find(window);
  if (it == windows_.end() || it->second->closed) {
    return core::error(Code::invalid_argument, what, ": window ", window, " is not open");
  }
  WindowState* w = it->second.get();
  for (const Path& p : w->paths) {
    if (p.data->failed) return core::error(Code::peer_lost, what, ": ", p.data->failure);
  }
  if (!local.valid() || local.state_->engine.get() != this) {
    return core::error(Code::invalid_argument, what, ": the local Region is empty or from "
                                                     "another device");
  }
  if (loff > local.length() || len > local.length() - loff) {
    return core::error(Code::invalid_argument, what, ": local range [", loff, ", +", len,
                       ") is outside the local region of ", local.length(), " bytes");
  }
  auto raddr = remote_address(remote, roff, len);
  if (!raddr.ok()) return raddr.status().with_context(what);
  if (len == 0) return Status::success();
  // Large transfers are striped over the rails both the window and the remote key cover.
  const uint32_t rails =
      static_cast<uint32_t>(std::min(w->paths.size(), remote.keys_.size()));
  RailList healthy;
  const uint32_t up = healthy_rails(rails, healthy);
  if (up == 0) return no_rail_error(rails, what);
  const uint32_t n = stripe_count(config_.stripe, len, up);
  const uint32_t first = w->next_stripe++ % up;
  for (uint32_t i = 0; i < n; ++i) {
    for (auto until = Deadline::after(config_.eagain_timeout);
         w->free.empty() && !until.expired();) {
      (void)progress_locked();
    }
    if (w->free.empty()) {
      return core::error(Code::again, what, ": ", kWindowContexts,
                         " operations outstanding on the window; call quiet()");
    }
    const uint32_t rail = healthy[(first + i) % up];
    const uint64_t off = stripe_offset(config_.stripe, len, n, i);
    const uint64_t end = stripe_offset(config_.stripe, len, n, i + 1);
    fabric::OpContext* ctx = &w->ctxs[w->free.back()];
    w->free.pop_back();
    ctx->type = op;
    ctx->slot = static_cast<uint16_t>(rail);
    uint8_t* p = static_cast<uint8_t*>(local.base()) + loff + off;
    void* desc = local.state_->mrs[rail]->desc();
    pool::Channel* ch = w->paths[rail].data;
    PendingRma rma{ch, ctx, p, end - off, desc, *raddr + off, remote.keys_[rail],
                   Deadline::Clock::now()};
    Status st = post_rma(rma);
    if (st.code() == Code::again) {
      pending_rma_.push_back(rma);  // progress posts it; quiet() waits for it
      st = Status::success();
    }
    if (!st.ok()) {
      note_failure(rail, st);
      w->free.push_back(ctx->index);
      // Stripes already posted complete (or fail) on their own; quiet() reports them.
      return st.with_context(core::str(what, " stripe ", i, " of ", n, " on rail ",
                                        rails_[rail]->name()));
    }
    if (n > 1) rails_[rail]->stripes_out().add();
    w->issued += 1;
  }
  return Status::success();
}

void Engine::on_window_done(fabric::OpContext* ctx, Status status) {
  auto* w = static_cast<WindowState*>(ctx->owner);
  w->completed += 1;
  w->free.push_back(ctx->index);
  w->paths[ctx->slot % w->paths.size()].data->endpoint->count_completion(!status.ok());
  if (!status.ok() && w->first_error.ok()) {
    w->first_error = std::move(status).with_context(ctx->type == fabric::OpType::put ? "put"
                                                                                     : "get");
  }
  if (w->closed && w->issued == w->completed) {
    for (Path& p : w->paths) p.data->refs -= 1;
    windows_.erase(w->id);
  }
}

Status Engine::quiet(uint32_t window, Deadline deadline) {
  WindowState* w = nullptr;
  {
    auto l = lock();
    auto it = windows_.find(window);
    if (it == windows_.end()) {
      return core::error(Code::invalid_argument, "quiet: window ", window, " is not open");
    }
    w = it->second.get();
    if (w->issued == w->quiet_mark && w->completed == w->issued && w->first_error.ok()) {
      return Status::success();  // nothing issued since the last quiet
    }
  }
  Status s = wait_until(
      deadline, [&] { return w->completed == w->issued; },
      "quiet: operations still outstanding at the deadline");
  auto l = lock();
  if (!s.ok()) {
    return core::error(Code::timeout, "quiet: ", w->issued - w->completed, " of ", w->issued,
                       " operations still outstanding at the deadline");
  }
  w->quiet_mark = w->issued;
  Status e = std::move(w->first_error);
  w->first_error = Status();
  return e;
}

uint64_t Engine::window_issued(uint32_t window) const {
  auto l = lock();
  auto it = windows_.find(window);
  return it == windows_.end() ? 0 : it->second->issued;
}

uint64_t Engine::window_completed(uint32_t window) const {
  auto l = lock();
  auto it = windows_.find(window);
  return it == windows_.end() ? 0 : it->second->completed;
}

}  // namespace xport::proto
