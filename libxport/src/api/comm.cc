// Listener, PendingConnect, SendComm and RecvComm (xport/comm.hpp): two-sided communicators,
// thin handles over the engine's ids; receives into staged GPU memory are done once copied out.
#include "api/access.hpp"
#include "core/format.hpp"

namespace xport {

using api::Access;
using gpu::StagedArrivals;

Listener::~Listener() {
  if (engine_) engine_->connections().close_listener(token_);
}

Result<std::unique_ptr<RecvComm>> Listener::accept(Deadline deadline) {
  XPORT_ASSIGN_OR_RETURN(auto id, engine_->connections().accept(token_, deadline));
  return Access::comm<RecvComm>(engine_, id);
}

Result<std::unique_ptr<RecvComm>> Listener::try_accept() {
  XPORT_ASSIGN_OR_RETURN(auto id, engine_->connections().try_accept(token_));
  if (!id) return std::unique_ptr<RecvComm>();
  return Access::comm<RecvComm>(engine_, id);
}

PendingConnect::~PendingConnect() {
  if (engine_ && !finished_) engine_->connections().connect_abandon({id_, gen_});
}

Result<std::unique_ptr<SendComm>> PendingConnect::poll() {
  if (finished_) {
    return core::error(Code::invalid_argument, "PendingConnect::poll: the connection attempt "
                       "already ended (its SendComm or error was returned)");
  }
  auto r = engine_->connections().connect_poll({id_, gen_}, deadline_);
  if (!r.ok()) {
    finished_ = true;  // given up by the engine
    return r.status();
  }
  if (!*r) return std::unique_ptr<SendComm>();
  finished_ = true;
  return Access::comm<SendComm>(engine_, {id_, gen_});
}

SendComm::~SendComm() {
  if (engine_) engine_->connections().close_comm({id_, gen_});
}

Result<Request> SendComm::isend(const void* buf, size_t len, const Region& region, uint32_t tag,
                                PostMode mode) {
  XPORT_ASSIGN_OR_RETURN(auto staged, Access::stage(region, buf, len, "isend"));
  const proto::LocalBuffer local = staged ? staged->local() : Access::local(region);
  const void* wire = staged ? staged->bytes : Access::on_wire(region, buf, len);
  XPORT_ASSIGN_OR_RETURN(uint64_t seq, engine_->two_sided().isend({id_, gen_}, wire, len, local,
                                                                  tag, mode == PostMode::handoff));
  return Request{seq};
}

namespace {
Completion to_public(const proto::Completion& c) {
  Completion out;
  out.done = c.done;
  out.bytes = c.bytes;
  out.count = c.count;
  static_assert(kMaxGroupedRecvs == proto::kMaxGroup);
  for (size_t i = 0; i < kMaxGroupedRecvs; ++i) out.sizes[i] = c.sizes[i];
  return out;
}

Status not_a_message(const char* what) {
  return core::error(Code::invalid_argument, what, ": a send communicator has no flush requests");
}
}  // namespace

Result<Completion> SendComm::test(Request r, TestMode mode) {
  if (r.kind != Request::Kind::message) return not_a_message("test");
  XPORT_ASSIGN_OR_RETURN(
      auto c, engine_->two_sided().test_send({id_, gen_}, r.seq, mode == TestMode::progress));
  return to_public(c);
}

Result<size_t> SendComm::wait(Request r, Deadline d) {
  if (r.kind != Request::Kind::message) return not_a_message("wait");
  return engine_->two_sided().wait_send({id_, gen_}, r.seq, d);
}

RecvComm::~RecvComm() {
  if (engine_) engine_->connections().close_comm({id_, gen_});
}

Result<Request> RecvComm::irecv(void* buf, size_t len, const Region& region, uint32_t tag,
                                PostMode mode) {
  const RecvBuffer one{buf, len, &region, tag};
  return irecv(std::span(&one, 1), mode);
}

Result<Request> RecvComm::irecv(std::span<const RecvBuffer> buffers, PostMode mode) {
  std::array<proto::RecvBufferRef, kMaxGroupedRecvs> refs;
  std::vector<StagedArrivals::Target> staged;
  if (buffers.size() > refs.size()) {
    return core::error(Code::invalid_argument, "irecv: ", buffers.size(), " buffers (a grouped "
                       "receive takes 1..", kMaxGroupedRecvs, ")");
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i].region == nullptr) {
      return core::error(Code::invalid_argument, "irecv: buffer ", i, " names no Region");
    }
    const Region& r = *buffers[i].region;
    refs[i] = {const_cast<void*>(Access::on_wire(r, buffers[i].buf, buffers[i].len)),
               buffers[i].len, Access::local(r), buffers[i].tag};
    if (Access::staged(r) && r.contains(buffers[i].buf, buffers[i].len)) {
      staged.resize(buffers.size());
      staged[i] = {Access::staged(r), buffers[i].buf, buffers[i].len};
    }
  }
  XPORT_ASSIGN_OR_RETURN(
      uint64_t seq, engine_->two_sided().irecv({id_, gen_}, std::span(refs.data(), buffers.size()),
                                               mode == PostMode::handoff));
  if (!staged.empty()) staged_->expect(seq, std::move(staged));
  return Request{seq};
}

Result<Completion> RecvComm::test(Request r, TestMode mode) {
  const bool progress = mode == TestMode::progress;
  if (r.kind == Request::Kind::flush) {
    XPORT_ASSIGN_OR_RETURN(bool done,
                           engine_->two_sided().test_flush({id_, gen_}, r.seq, progress));
    Completion out;
    out.done = done;
    return out;
  }
  if (!staged_->expects(r.seq)) {
    XPORT_ASSIGN_OR_RETURN(auto c, engine_->two_sided().test({id_, gen_}, r.seq, progress));
    return to_public(c);
  }
  // Into staged GPU memory: done once the data is copied from the shadow to the GPU.
  Completion c;
  if (auto seen = staged_->recorded(r.seq)) {
    c = *seen;
  } else {
    auto e = engine_->two_sided().test({id_, gen_}, r.seq, progress);
    if (!e.ok()) {
      staged_->forget(r.seq);
      return e.status();
    }
    c = to_public(*e);
    if (!c.done) return c;
    if (c.count <= 1) c.sizes[0] = c.bytes;
    staged_->record(r.seq, c);
  }
  XPORT_ASSIGN_OR_RETURN(bool copied, staged_->arrived(r.seq, std::span(c.sizes.data(), c.count ? c.count : 1)));
  if (!copied) return Completion{};
  return c;
}

Result<size_t> RecvComm::wait(Request r, Deadline d) {
  if (r.kind == Request::Kind::message && !staged_->expects(r.seq)) {
    return engine_->two_sided().wait({id_, gen_}, r.seq, d);
  }
  proto::Engine::WaitState w;
  for (uint32_t spin = 0;; ++spin) {
    XPORT_ASSIGN_OR_RETURN(Completion c, test(r));
    if (c.done) return c.bytes;
    if (!engine_->between_passes(spin, d, w)) {
      return core::error(Code::timeout, "wait: ",
                         r.kind == Request::Kind::flush ? "flush " : "receive ", r.seq,
                         " on communicator ", id_, " did not complete before the deadline");
    }
  }
}

Status RecvComm::flush(const void* buf, size_t len, const Region& region, Deadline d) {
  return engine_->two_sided().flush({id_, gen_}, Access::on_wire(region, buf, len), len,
                                    Access::local(region), d);
}

Result<Request> RecvComm::iflush(const void* buf, size_t len, const Region& region) {
  XPORT_ASSIGN_OR_RETURN(
      uint64_t id, engine_->two_sided().iflush({id_, gen_}, Access::on_wire(region, buf, len), len,
                                               Access::local(region)));
  return Request{id, Request::Kind::flush};
}

}  // namespace xport
