// Flush reads on every rail of a communicator.
#include "proto/flush.hpp"

namespace xport::proto {

void Flusher::register_handlers(Dispatch& d) {
  d.completion<&Flusher::read_done, &Flusher::read_failed>(fabric::OpType::flush, this);
}

Result<uint64_t> Flusher::start(CommState& c, const uint8_t* buf, size_t len,
                                const RegionRef& region) {
  if (len == 0 || c.connection) return uint64_t{0};
  auto f = std::make_unique<FlushState>();
  f->id = state_.next_flush++;
  f->comm = c.id;
  f->region = region;
  for (const pool::Path& p : c.paths) {
    if (p.data->ep->flush_target() != nullptr) f->eps.push_back(p.data->ep);
  }
  if (f->eps.empty()) return uint64_t{0};
  f->ctx.resize(f->eps.size());
  f->pending.assign(f->eps.size(), 0);
  f->remaining = static_cast<uint32_t>(f->eps.size());
  const uint64_t raddr = region->remote_address(buf);
  FlushState& fs = *f;
  const uint64_t id = f->id;
  state_.flushes[id] = std::move(f);
  for (uint32_t i = 0; i < fs.eps.size(); ++i) {
    fabric::OpContext& ctx = fs.ctx[i];
    ctx.type = fabric::OpType::flush;
    ctx.owner = &fs;
    ctx.index = i;
    ctx.rail = fs.eps[i]->rail();
    ctx.seq = raddr;
    ctx.stripe = static_cast<uint32_t>(std::min<size_t>(len, 4));  // bytes read
    Status st = post(fs, i);
    if (st.ok()) fs.pending[i] = 1;
    if (st.code() == Code::again) {
      unposted_.push({id, i});
    } else if (!st.ok()) {
      if (fs.error.ok()) fs.error = st.with_context("flush");
      fs.remaining -= 1;
    }
  }
  return id;
}

Status Flusher::post(FlushState& f, uint32_t i) {
  rail::RailEndpoint* ep = f.eps[i];
  rail::Rail& r = *state_.rails[ep->rail()];
  if (!r.cq_take()) return Status(Code::again, "CQ full");
  memory::Buffer& target = ep->flush_target()->at(0);
  const fabric::OpContext& ctx = f.ctx[i];
  Status st = ep->endpoint().read(target.data, ctx.stripe, ep->flush_target()->desc(), ep->self(),
                                  ctx.seq, f.region->key(ep->rail()), &f.ctx[i]);
  if (!st.ok()) r.cq_give();
  return st;
}

void Flusher::retry() {
  unposted_.retry([&](PendingQueue<Read>::Entry& e) {
    auto it = state_.flushes.find(e.post.flush);
    if (it == state_.flushes.end()) return false;
    FlushState& f = *it->second;
    const uint32_t i = e.post.index;
    Status st = post(f, i);
    if (st.ok()) f.pending[i] = 1;
    if (st.code() == Code::again) return true;
    if (!st.ok()) {
      if (f.error.ok()) f.error = st.with_context("flush");
      if (--f.remaining == 0 && f.abandoned) state_.flushes.erase(it);
    }
    return false;
  });
}

void Flusher::on_done(fabric::OpContext* ctx, const Status& st) {
  auto* f = static_cast<FlushState*>(ctx->owner);
  f->pending[ctx->index] = 0;
  f->eps[ctx->index]->endpoint().count_completion(!st.ok());
  if (!st.ok() && f->error.ok()) f->error = st.with_context("flush");
  if (--f->remaining == 0 && f->abandoned) state_.flushes.erase(f->id);
}

bool Flusher::done(uint64_t id) const {
  auto it = state_.flushes.find(id);
  return it == state_.flushes.end() || it->second->remaining == 0;
}

Status Flusher::finish(uint64_t id) {
  auto it = state_.flushes.find(id);
  if (it == state_.flushes.end()) return Status::success();
  Status e = std::move(it->second->error);
  state_.flushes.erase(it);
  return e;
}

void Flusher::fail_rail(uint32_t rail, const Status& why) {
  // (By id and index: completing a read may erase an abandoned flush.)
  std::vector<std::pair<uint64_t, uint32_t>> lost;
  for (auto& [id, f] : state_.flushes) {
    for (uint32_t i = 0; i < f->eps.size(); ++i) {
      if (f->pending[i] && f->eps[i]->rail() == rail) lost.emplace_back(id, i);
    }
  }
  for (auto [id, i] : lost) {
    auto it = state_.flushes.find(id);
    if (it != state_.flushes.end() && it->second->pending[i]) on_done(&it->second->ctx[i], why);
  }
  unposted_.drop_if([&](PendingQueue<Read>::Entry& e) {
    auto it = state_.flushes.find(e.post.flush);
    if (it == state_.flushes.end() || it->second->eps[e.post.index]->rail() != rail) return false;
    FlushState& f = *it->second;
    if (f.error.ok()) f.error = why;
    if (--f.remaining == 0 && f.abandoned) state_.flushes.erase(it);
    return true;
  });
}

void Flusher::abandon(uint64_t id) {
  auto it = state_.flushes.find(id);
  if (it == state_.flushes.end()) return;
  if (it->second->remaining == 0) {
    state_.flushes.erase(it);
  } else {
    it->second->abandoned = true;  // its reads still name it
  }
}

void Flusher::abandon_comm(CommId comm) {
  std::vector<uint64_t> ids;
  for (auto& [id, f] : state_.flushes) {
    if (f->comm == comm && !f->abandoned) ids.push_back(id);
  }
  for (uint64_t id : ids) abandon(id);
}

bool Flusher::owned_by(uint64_t id, CommId comm) const {
  auto it = state_.flushes.find(id);
  return it != state_.flushes.end() && it->second->comm == comm && !it->second->abandoned;
}

}  // namespace xport::proto
