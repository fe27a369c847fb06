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
  w->ch = c->ch;
  w->ctxs.resize(kWindowContexts);
  for (uint32_t i = 0; i < kWindowContexts; ++i) {
    w->ctxs[i].owner = w.get();
    w->ctxs[i].index = i;
    w->free.push_back(kWindowContexts - 1 - i);
  }
  c->ch->refs += 1;
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
    it->second->ch->refs -= 1;
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
  return remote.virt_addr_ ? remote.base_ + roff : roff;
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
  if (w->ch->failed) return core::error(Code::peer_lost, what, ": ", w->ch->failure);
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
  for (auto until = Deadline::after(config_.eagain_timeout); w->free.empty() && !until.expired();) {
    (void)progress_locked();
  }
  if (w->free.empty()) {
    return core::error(Code::again, what, ": ", kWindowContexts,
                       " operations outstanding on the window; call quiet()");
  }
  fabric::OpContext* ctx = &w->ctxs[w->free.back()];
  w->free.pop_back();
  ctx->type = op;
  uint8_t* p = local.state_->base + loff;
  void* desc = local.state_->mrs[0]->desc();
  Status st = op == fabric::OpType::put
                  ? w->ch->endpoint->write(p, len, desc, w->ch->peer, *raddr, remote.keys_[0],
                                           ctx, false, 0, true)
                  : w->ch->endpoint->read(p, len, desc, w->ch->peer, *raddr, remote.keys_[0],
                                          ctx, true);
  if (!st.ok()) {
    w->free.push_back(ctx->index);
    return st.with_context(what);
  }
  w->issued += 1;
  return Status::success();
}

void Engine::on_window_done(fabric::OpContext* ctx, Status status) {
  auto* w = static_cast<WindowState*>(ctx->owner);
  w->completed += 1;
  w->free.push_back(ctx->index);
  w->ch->endpoint->count_completion(!status.ok());
  if (!status.ok() && w->first_error.ok()) {
    w->first_error = std::move(status).with_context(ctx->type == fabric::OpType::put ? "put"
                                                                                     : "get");
  }
  if (w->closed && w->issued == w->completed) {
    w->ch->refs -= 1;
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
