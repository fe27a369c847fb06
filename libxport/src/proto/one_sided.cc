// One-sided put/get with local completion counted per window by ticket.
#include "proto/one_sided.hpp"

#include "core/log.hpp"

namespace xport::proto {

Result<uint32_t> OneSided::open(CommState& c) {
  auto w = std::make_unique<WindowState>();
  w->id = core_.next_window++;
  w->comm = c.id;
  w->peer = c.peer;
  w->paths = c.paths;
  w->ops.resize(kOps);
  for (uint32_t i = 0; i < kOps; ++i) {
    w->ops[i].ctx.owner = w.get();
    w->ops[i].ctx.index = i;
    w->free.push_back(kOps - 1 - i);
  }
  core_.ref(c.peer);
  core_.hold(c);
  const uint32_t id = w->id;
  core_.windows[id] = std::move(w);
  return id;
}

void OneSided::maybe_erase(WindowState& w) {
  if (!w.closed || w.free.size() != w.ops.size()) return;
  const CommId comm = w.comm;
  pool::Peer* peer = w.peer;
  core_.windows.erase(w.id);
  if (CommState* c = core_.comm(comm)) core_.release(*c);
  core_.unref(peer);
}

void OneSided::close(uint32_t id) {
  auto it = core_.windows.find(id);
  if (it == core_.windows.end()) return;
  it->second->closed = true;
  maybe_erase(*it->second);
}

Status OneSided::rma(uint32_t window, fabric::OpType op, const RegionRef& local, uint8_t* lbuf,
                     size_t len, const RemoteKey& remote, size_t roff) {
  const char* what = op == fabric::OpType::put ? "put" : "get";
  auto it = core_.windows.find(window);
  if (it == core_.windows.end() || it->second->closed) {
    return core::error(Code::invalid_argument, what, ": window ", window, " is not open");
  }
  WindowState& w = *it->second;
  if (w.peer != nullptr && w.peer->dead) {
    return core::error(Code::peer_lost, what, ": the peer is lost (", w.peer->death, ")");
  }
  for (const pool::Path& p : w.paths) {
    if (p.data->failed()) return core::error(Code::peer_lost, what, ": ", p.data->failure());
  }
  if (w.peer != nullptr && remote.device_token != w.peer->token) {
    return core::error(Code::invalid_argument, what, ": the remote key was exported by another "
                       "device (token ", std::hex, remote.device_token, ") than this window's "
                       "peer (", w.peer->token, ")");
  }
  if (remote.keys.empty()) return core::error(Code::invalid_argument, what, ": empty RemoteRegion");
  if (roff > remote.length || len > remote.length - roff) {
    return core::error(Code::invalid_argument, what, ": remote range [", roff, ", +", len,
                       ") is outside the remote region of ", remote.length, " bytes");
  }
  if (len == 0) return Status::success();
  const uint64_t raddr = (remote.virt_addr ? remote.base : remote.mr_offset) + roff;
  // Large transfers are striped over the rails both the window and the remote key cover.
  const uint32_t rails = static_cast<uint32_t>(std::min(w.paths.size(), remote.keys.size()));
  Core::RailList healthy;
  const uint32_t up = core_.healthy_rails(rails, healthy, w.peer);
  if (up == 0) return core_.no_rail_error(rails, w.peer, what);
  const uint32_t n = stripe_count(core_.config.stripe, len, up);
  if (w.free.size() < n) {
    return core::error(Code::again, what, ": ", kOps, " operations outstanding on the window; "
                       "call quiet()");
  }
  const uint32_t first = w.next_stripe++ % up;
  const uint64_t ticket = w.next_ticket++;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t rail = healthy[(first + i) % up];
    const uint64_t off = stripe_offset(core_.config.stripe, len, n, i);
    const uint64_t end = stripe_offset(core_.config.stripe, len, n, i + 1);
    const uint32_t index = w.free.back();
    w.free.pop_back();
    WindowOp& o = w.ops[index];
    o.busy = true;
    o.region = local;
    o.ctx.type = op;
    o.ctx.rail = static_cast<uint8_t>(rail);
    o.ctx.seq = ticket;
    o.ctx.stripe = i;
    w.note_issued(index);
    w.issued += 1;
    Status st = post(w, index, lbuf + off, end - off, raddr + off, remote.keys[rail]);
    if (st.code() == Code::again) {
      ++core_.counters.deferred_posts;
      core_.pending_rma.push_back(
          {w.id, index, lbuf + off, end - off, raddr + off, remote.keys[rail], Clock::now()});
      continue;  // progress posts it; quiet() waits for it
    }
    if (!st.ok()) {
      core_.note_failure(rail, st);
      // Stripes already posted complete (or fail) on their own; quiet() reports them.
      finish(w, index, Status());
      return st.with_context(core::str(what, " stripe ", i, " of ", n, " on rail ",
                                        core_.rails[rail]->name()));
    }
    if (n > 1) core_.rails[rail]->stripes_out().add();
  }
  return Status::success();
}

Status OneSided::post(WindowState& w, uint32_t op, uint8_t* local, size_t len, uint64_t raddr,
                      uint64_t key) {
  WindowOp& o = w.ops[op];
  const uint8_t rail = o.ctx.rail;
  pool::Channel* ch = w.paths[rail].data;
  rail::Rail& r = *core_.rails[rail];
  if (!r.cq_take()) return Status(Code::again, "CQ full");
  void* desc = o.region->desc(rail);
  Status st = o.ctx.type == fabric::OpType::put
                  ? ch->ep->endpoint().write(local, len, desc, ch->peer, raddr, key, &o.ctx)
                  : ch->ep->endpoint().read(local, len, desc, ch->peer, raddr, key, &o.ctx);
  if (!st.ok()) r.cq_give();
  return st;
}

void OneSided::retry() {
  for (size_t n = core_.pending_rma.size(); n > 0 && !core_.pending_rma.empty(); --n) {
    PendingRma p = core_.pending_rma.front();
    core_.pending_rma.pop_front();
    auto it = core_.windows.find(p.window);
    if (it == core_.windows.end()) continue;  // cannot happen: a busy op keeps its window
    WindowState& w = *it->second;
    Status st = post(w, p.op, p.local, p.len, p.raddr, p.key);
    if (st.ok()) continue;
    if (st.code() == Code::again && !core_.expired(p.since)) {
      core_.pending_rma.push_back(p);
      continue;
    }
    finish(w, p.op, st.with_context(w.ops[p.op].ctx.type == fabric::OpType::put ? "put" : "get"));
  }
}

void OneSided::finish(WindowState& w, uint32_t index, const Status& st) {
  WindowOp& o = w.ops[index];
  if (!st.ok() && w.first_error.ok()) w.first_error = st;
  o.busy = false;
  o.region.reset();  // (under the lock: released at once, as the engine's own)
  w.completed += 1;
  w.free.push_back(index);
  maybe_erase(w);
}

void OneSided::on_done(fabric::OpContext* ctx, const Status& st) {
  auto* w = static_cast<WindowState*>(ctx->owner);
  w->paths[ctx->rail].data->ep->endpoint().count_completion(!st.ok());
  finish(*w, ctx->index,
         st.ok() ? st : st.with_context(ctx->type == fabric::OpType::put ? "put" : "get"));
}

void OneSided::fail_rail(uint32_t rail, const Status& why) {
  std::erase_if(core_.pending_rma, [&](const PendingRma& p) {
    auto it = core_.windows.find(p.window);
    return it != core_.windows.end() && it->second->ops[p.op].ctx.rail == rail;
  });
  // (By id and index: finishing an operation may erase its closed window.)
  std::vector<std::pair<uint32_t, uint32_t>> lost;
  for (auto& [id, w] : core_.windows) {
    for (uint32_t i = 0; i < w->ops.size(); ++i) {
      if (w->ops[i].busy && w->ops[i].ctx.rail == rail) lost.emplace_back(id, i);
    }
  }
  for (auto [id, i] : lost) {
    auto it = core_.windows.find(id);
    if (it != core_.windows.end() && it->second->ops[i].busy) on_done(&it->second->ops[i].ctx, why);
  }
}

Result<uint64_t> OneSided::quiet_target(uint32_t window) {
  auto it = core_.windows.find(window);
  if (it == core_.windows.end() || it->second->closed) {
    return core::error(Code::invalid_argument, "quiet: window ", window, " is not open");
  }
  return it->second->next_ticket;
}

bool OneSided::completed_below(uint32_t window, uint64_t target) const {
  auto it = core_.windows.find(window);
  return it == core_.windows.end() || it->second->oldest_outstanding() >= target;
}

Status OneSided::take_error(uint32_t window, uint64_t target) {
  auto it = core_.windows.find(window);
  if (it == core_.windows.end()) return Status::success();
  it->second->quiet_mark = std::max(it->second->quiet_mark, target);
  Status e = std::move(it->second->first_error);
  it->second->first_error = Status();
  return e;
}

}  // namespace xport::proto
