// TwoSidedCalls: the two-sided calls of the public API (isend, grouped irecv, test and wait,
// flush and iflush), checked here and carried out by the eager, rendezvous, matching and flush
// parts.
#include "proto/two_sided/calls.hpp"

#include <optional>
#include <thread>
#include <utility>

#include "core/log.hpp"

namespace xport::proto {

CommState* TwoSidedCalls::comm_for(CommId id, bool is_send, const char* op, Status* err) {
  CommState* c = state_.comm(id);
  if (c == nullptr || c->is_send != is_send || c->user_closed) {
    *err = core::error(Code::invalid_argument, op, ": communicator ", id.index, " is not open");
    return nullptr;
  }
  return c;
}

namespace {

// A send's completion: one buffer of `len` bytes.
Completion sent(size_t len) {
  Completion out;
  out.done = true;
  out.bytes = len;
  out.count = 1;
  out.sizes[0] = len;
  return out;
}

Status device_busy(const char* op) {
  return Status(Code::again, core::str(op, ": the device is busy (another thread holds it; "
                                       "PostMode::handoff does not wait): call again"));
}

}  // namespace

Result<uint64_t> TwoSidedCalls::isend(CommId comm, const void* buf, size_t len,
                                      const LocalBuffer& region, uint32_t tag, bool handoff) {
  Lock l = handoff ? Lock(state_, std::try_to_lock) : Lock(state_);
  if (!l.owns()) return device_busy("isend");
  Status err;
  CommState* c = comm_for(comm, true, "isend", &err);
  if (c == nullptr) return err;
  if (c->phase == Phase::failed) return c->error;
  XPORT_RETURN_IF_ERROR(memory_.check_local(region, buf, len, "isend"));
  XPORT_RETURN_IF_ERROR(state_.check_usable(c->paths, c->peer, "isend"));
  if (len >= kLengthUnknown && len > c->eager_max) {
    return core::error(Code::unsupported, "isend: a message of ", len, " bytes: messages of "
                       "4 GiB or more must be split by the caller (the CQ data carries 32 bits "
                       "of length)");
  }
  const uint64_t seq = c->next_seq;
  const uint16_t slot = c->slot_of(seq);
  SendSlot& s = c->sends[slot];
  InjectedTicket* ticket = c->ticket_of(seq);
  // The slot's previous send is outstanding while it is active, or injected and not yet
  // reported by test() or wait() (its ticket held).
  if (s.active || (ticket != nullptr && ticket->seq1.load(std::memory_order_acquire) != 0)) {
    return core::error(Code::again, "isend: ", c->depth, " sends are outstanding on communicator ",
                       comm.index, " (test() them, or raise XPORT_MAX_REQUESTS)");
  }
  s.reset();
  s.active = true;
  s.seq = seq;
  s.buf = static_cast<const uint8_t*>(buf);
  s.len = len;
  s.tag = tag;
  // The common small message is injected at once and done before isend returns, so its slot
  // holds no reference to the Region.
  const Eager::Inject inject = eager_.try_inject(*c, s, slot, *region.region);
  if (inject != Eager::Inject::done) {
    if (s.ctx.size() < c->paths.size()) s.ctx.resize(c->paths.size());
    s.region = *region.region;
    // A headered eager message from GPU memory the provider registered (FI_HMEM) needs a send
    // that gathers two buffers (Eager::post); without one, rendezvous writes it from the Region.
    const bool headered = !eager_.headerless(tag);
    const bool device_source = s.region && s.region->cuda_device >= 0;
    s.eager =
        len <= c->eager_max && !(device_source && headered && len > 0 && state_.iov_limit < 2);
  }
  if (s.eager) {
    // No clear-to-send needed: the receiver holds an unexpected message until its receive is
    // posted, and credits bound how many it may have to hold.
    EarlyCts& e = c->early_cts[slot];
    if (e.valid && e.cts.seq == seq) e.valid = false;
  }
  // (A refused inject is queued for progress: the busy provider is not asked again at once.)
  Status st = inject == Eager::Inject::done   ? Status::success()
              : inject == Eager::Inject::busy ? eager_.defer(*c, s, slot)
              : s.eager                       ? eager_.start(*c, s, slot)
                                              : rendezvous_.start(*c, s, slot, handoff);
  if (!st.ok()) {
    // Nothing of it was posted: the request never existed.
    s.active = false;
    s.region.reset();
    return st.with_context("isend");
  }
  if (inject == Eager::Inject::done && ticket != nullptr) {
    // Done already: the slot is free, and test() or wait() report it from the ticket.
    s.active = false;
    ticket->len.store(len, std::memory_order_relaxed);
    ticket->seq1.store(seq + 1, std::memory_order_release);
  }
  c->next_seq += 1;
  return seq;
}

Result<uint64_t> TwoSidedCalls::irecv(CommId comm, std::span<const RecvBufferRef> buffers,
                                      bool handoff) {
  Lock l = handoff ? Lock(state_, std::try_to_lock) : Lock(state_);
  if (!l.owns()) return device_busy("irecv");
  Status err;
  CommState* c = comm_for(comm, false, "irecv", &err);
  if (c == nullptr) return err;
  if (c->phase == Phase::failed) return c->error;
  if (buffers.empty() || buffers.size() > kMaxGroup) {
    return core::error(Code::invalid_argument, "irecv: ", buffers.size(), " buffers (a grouped "
                       "receive takes 1..", kMaxGroup, ")");
  }
  if (buffers.size() > c->depth) {
    return core::error(Code::invalid_argument, "irecv: ", buffers.size(), " buffers, but ",
                       "communicator ", comm.index, " allows ", c->depth, " outstanding "
                       "receives (XPORT_MAX_REQUESTS)");
  }
  std::array<Matching::Buffer, kMaxGroup> group;
  for (size_t i = 0; i < buffers.size(); ++i) {
    const RecvBufferRef& b = buffers[i];
    XPORT_RETURN_IF_ERROR(
        memory_.check_local(b.region, b.buf, b.len,
                            buffers.size() == 1 ? "irecv" : core::str("irecv buffer ", i).c_str()));
    group[i] = {static_cast<uint8_t*>(b.buf), b.len, b.region.region, b.tag};
  }
  XPORT_RETURN_IF_ERROR(state_.check_usable(c->paths, c->peer, "irecv"));
  const uint64_t seq = c->next_seq;
  if (c->peer_closed && seq >= c->peer_sent) {
    return core::error(Code::closed, "irecv: the peer closed communicator ", comm.index,
                       " after ", c->peer_sent, " messages");
  }
  Status st = matching_.post(*c, std::span(group.data(), buffers.size()));
  if (!st.ok()) return buffers.size() == 1 ? st : std::move(st).with_context("grouped receive");
  return seq;
}

std::optional<size_t> TwoSidedCalls::take_injected(CommId comm, uint64_t seq, bool progress) {
  // No lock: the communicator is open (its SendComm is the caller's) and its tickets stay put.
  // With progress asked for, every 16th call goes the locked way all the same and makes its
  // pass there, so a caller that only ever tests injected sends still moves a provider that
  // progresses manually (as Window::wait_local does for puts). (A relaxed count: concurrent
  // callers may lose increments, never correctness.)
  CommState* c = state_.comm(comm);
  if (c == nullptr) return std::nullopt;
  if (progress) {
    const uint32_t q = c->quick_answers.load(std::memory_order_relaxed);
    c->quick_answers.store(q + 1, std::memory_order_relaxed);
    if ((q & 15) == 15) return std::nullopt;
  }
  size_t len = 0;
  if (!c->take_injected(seq, &len)) return std::nullopt;
  return len;
}

Result<Completion> TwoSidedCalls::test_send(CommId comm, uint64_t seq, bool progress) {
  if (std::optional<size_t> len = take_injected(comm, seq, progress)) return sent(*len);
  return test(comm, seq, progress);
}

Result<size_t> TwoSidedCalls::wait_send(CommId comm, uint64_t seq, Deadline deadline) {
  // A wait whose request is done makes no pass (wait() did none either: finish_locked first).
  if (std::optional<size_t> len = take_injected(comm, seq, false)) return *len;
  return wait(comm, seq, deadline);
}

Result<Completion> TwoSidedCalls::test(CommId comm, uint64_t seq, bool progress) {
  if (!progress) {
    Lock l(state_, std::try_to_lock);
    if (!l.owns()) return Completion{};  // progress is under way in another thread
    return test_locked(comm, seq);
  }
  driver_.refresh_links();
  Lock l(state_);
  driver_.progress_locked();
  return test_locked(comm, seq);
}

Result<Completion> TwoSidedCalls::test_locked(CommId comm, uint64_t seq) {
  CommState* c = state_.comm(comm);
  if (c == nullptr || c->user_closed || c->depth == 0) {
    return core::error(Code::invalid_argument, "test: communicator ", comm.index, " is not open");
  }
  if (!c->is_send) {
    XPORT_ASSIGN_OR_RETURN(GroupOutcome g, matching_.take(*c, seq));
    return Completion{g.done, g.bytes, g.count, g.sizes};
  }
  const uint16_t slot = c->slot_of(seq);
  SendSlot& s = c->sends[slot];
  if (size_t len = 0; c->take_injected(seq, &len)) return sent(len);
  if (!s.active || s.seq != seq) {
    return core::error(Code::invalid_argument, "test: request ", seq,
                       " is not outstanding on communicator ", comm.index,
                       " (completed already, or never issued)");
  }
  if (!s.done()) return Completion{};
  if (Status e = s.retire(); !e.ok()) return e;
  return sent(s.len);
}

std::optional<Result<size_t>> TwoSidedCalls::finish_locked(CommId comm, uint64_t seq) {
  CommState* c = state_.comm(comm);
  if (c != nullptr && !c->user_closed && c->depth != 0) {
    if (c->is_send) {
      if (size_t len = 0; c->take_injected(seq, &len)) return Result<size_t>(len);
      SendSlot& s = c->sends[c->slot_of(seq)];
      if (s.active && s.seq == seq) {
        if (!s.done()) return std::nullopt;
        if (Status e = s.retire(); !e.ok()) return Result<size_t>(std::move(e));
        return Result<size_t>(s.len);
      }
    } else {
      RecvSlot& r = c->recvs[c->slot_of(seq)];
      if (r.active && r.seq == seq && r.group_base == seq && r.group_n == 1) {
        // A one-buffer receive: Matching::take's outcome without its loops over the group.
        if (!r.finished) return std::nullopt;
        r.retire();
        if (!r.error.ok()) return Result<size_t>(std::exchange(r.error, Status()));
        return Result<size_t>(r.assigned ? r.bytes : 0);
      }
      if (matching_.pending(*c, seq)) return std::nullopt;
    }
  }
  // A group, or a request that is not outstanding (test_locked says which), or a closed
  // communicator.
  Result<Completion> t = test_locked(comm, seq);
  if (!t.ok()) return Result<size_t>(t.status());
  if (!t->done) return std::nullopt;
  return Result<size_t>(t->bytes);
}

Result<size_t> TwoSidedCalls::wait(CommId comm, uint64_t seq, Deadline deadline) {
  Driver::WaitState w;
  for (uint32_t spin = 0;; ++spin) {
    driver_.refresh_links();
    {
      Lock l(state_);
      // A request done already (an injected send) needs no progress pass first; a pending one
      // (most receives of a ping-pong) goes to its pass under the same lock.
      if (spin == 0) {
        if (auto done = finish_locked(comm, seq)) return std::move(*done);
      }
      driver_.progress_locked();
      if (auto done = finish_locked(comm, seq)) return std::move(*done);
    }
    if (!driver_.between_passes(spin, deadline, w)) {
      return core::error(Code::timeout, "wait: request ", seq, " on communicator ", comm.index,
                         " did not complete before the deadline");
    }
  }
}

Result<uint64_t> TwoSidedCalls::iflush(CommId comm, const void* buf, size_t len,
                                       const LocalBuffer& region) {
  Lock l(state_);
  Status err;
  CommState* c = comm_for(comm, false, "flush", &err);
  if (c == nullptr) return err;
  XPORT_RETURN_IF_ERROR(memory_.check_local(region, buf, len, "flush"));
  return flusher_.start(*c, static_cast<const uint8_t*>(buf), len, *region.region);
}

Result<bool> TwoSidedCalls::test_flush(CommId comm, uint64_t id, bool progress) {
  if (progress) driver_.refresh_links();
  Lock l = progress ? Lock(state_) : Lock(state_, std::try_to_lock);
  if (progress) driver_.progress_locked();
  if (id == 0) return true;  // nothing was to be read
  if (!l.owns()) return false;  // progress is under way in another thread
  if (!flusher_.owned_by(id, comm)) {
    return core::error(Code::invalid_argument, "test: flush ", id, " is not outstanding on "
                       "communicator ", comm.index, " (completed already, or never issued)");
  }
  if (!flusher_.done(id)) return false;
  XPORT_RETURN_IF_ERROR(flusher_.finish(id));
  return true;
}

Status TwoSidedCalls::flush(CommId comm, const void* buf, size_t len, const LocalBuffer& region,
                            Deadline deadline) {
  XPORT_ASSIGN_OR_RETURN(uint64_t id, iflush(comm, buf, len, region));
  if (id == 0) return Status::success();
  Status s = wait_until(deadline, [&] { return flusher_.done(id); },
                        "flush: the reads did not complete before the deadline");
  Lock l(state_);
  if (!s.ok()) {
    flusher_.abandon(id);
    return s;
  }
  return flusher_.finish(id);
}

}  // namespace xport::proto
