// Engine: the progress pass (reading every rail's CQ into the dispatch table, retrying what
// is queued), waiting between passes, housekeeping, a rail's failure, and the test hooks
// (injected traffic, an early clear-to-send).
#include "proto/engine.hpp"

#include <algorithm>
#include <mutex>
#include <thread>

#include "core/knob.hpp"
#include "core/log.hpp"

namespace xport::proto {

Status Engine::progress() { return progress_counted().status(); }

Result<size_t> Engine::progress_counted() {
  refresh_links();
  Lock l(state_);
  pass_handled_ = 0;
  progress_locked();
  return pass_handled_;
}

void Engine::refresh_links() {
  if (!links_due_.load(std::memory_order_relaxed)) return;
  if (!links_due_.exchange(false, std::memory_order_relaxed)) return;  // another thread took it
  // File I/O, with no lock held; the results are applied under the lock by progress.
  for (auto& r : state_.rails) r->health().refresh_link();
  links_fresh_.store(true, std::memory_order_relaxed);
}

size_t Engine::poll_cqs() {
  size_t handled = 0;
  for (size_t i = 0; i < state_.rails.size(); ++i) {
    rail::Rail& r = *state_.rails[i];
    if (r.cq_failed()) continue;
    dispatch_.polling(i);
    auto n = r.cq().poll(
        state_.config.cq_batch, [this](const fi_cq_data_entry& e) { dispatch_.done(e); },
        [this](void* ctx, Status s, int err) { dispatch_.failed(ctx, s, err); });
    if (!n.ok()) {
      // The CQ itself failed (overrun, a dead device): the rail is out of service for good;
      // other rails and their communicators go on.
      fail_rail(static_cast<uint32_t>(i),
                Status(Code::closed, core::str("rail ", r.name(), ": ", n.status().message())));
      continue;
    }
    handled += *n;
  }
  return handled;
}

void Engine::progress_locked() {
  if (state_.in_progress || state_.shut_down) return;
  state_.in_progress = true;
  // Receive buffers handled in the previous pass (Control::repost_later), and posts the
  // provider refused, go back before the CQs are read.
  if (control_.receives_waiting()) control_.retry_receives();
  // A bounded batch from every rail's CQ per pass: no rail starves another. Threads asleep in
  // a blocking wait are woken when it handled something (theirs may be among it).
  if (const size_t handled = poll_cqs(); handled > 0) {
    pass_handled_ += handled;
    handled_gen_.store(handled_gen_.load(std::memory_order_relaxed) + 1,
                       std::memory_order_relaxed);
    if (waker_.sleepers().load(std::memory_order_relaxed) != 0) waker_.ring();
  }
  if (state_.connected_endpoints()) {
    Status s = connections_.progress_events();
    if (!s.ok()) XPORT_LOG(warn, "connection events: ", s.to_string());
    if (connections_.shutdowns_pending()) {
      // What a peer sent before it shut down (its CLOSE, the completions of what it took) can
      // reach the CQ in the same provider call that reported the shutdown: read it first, so
      // those sends complete as taken rather than fail with the connection.
      for (int batches = 0; batches < 64 && poll_cqs() > 0; ++batches) {
      }
      connections_.apply_shutdowns();
    }
  }
  // Posts queued for a retry (most passes have none).
  if (control_.queued()) control_.retry();
  if (eager_.queued()) eager_.retry();
  if (rendezvous_.queued()) rendezvous_.retry();
  // (one-sided: queued posts, and stream pieces held behind a fence, an uncounted get or credits,
  // which nothing else releases once the target's answers have come)
  if (one_sided_.queued()) one_sided_.retry();
  if (one_sided_.copying()) one_sided_.poll_copies();
  if (flusher_.queued()) flusher_.retry();
  if (++passes_ >= kPassesPerCheck || due_check_.load(std::memory_order_relaxed)) {
    passes_ = 0;
    due_check_.store(false, std::memory_order_relaxed);
    housekeeping();
  }
  state_.in_progress = false;
}

bool Engine::between_passes(uint32_t spin, const Deadline& d, WaitState& w) {
  if (state_.config.spin_gather.count() > 0 && !w.sleeping) {
    // A pass that handled completions (any thread's) and did not end this wait: the peer's
    // next messages gather before the next poll (XPORT_SPIN_GATHER_NS).
    const uint64_t gen = handled_gen_.load(std::memory_order_relaxed);
    if (w.paused_gen != UINT64_MAX && gen != w.paused_gen) {
      const auto until = Clock::now() + state_.config.spin_gather;
      do {
        for (int i = 0; i < 4; ++i) core::cpu_relax();
      } while (Clock::now() < until);
    }
    w.paused_gen = gen;
  }
  // Spinning, the clock is read every kSpinsPerYield passes; asleep, one pass per wake-up (64
  // passes after each 10 ms sleep were most of an idle wait's CPU on tcp;ofi_rxm).
  // Not after the first pass either: most waits of a ping-pong end within a few passes, and
  // a yield is a system call (on this VM ~0.3 µs of an 0.8 µs one-way shm message).
  if (!w.sleeping && (spin == 0 || spin % kSpinsPerYield != 0)) return true;
  if (d.expired()) return false;
  const auto now = Clock::now();
  if (w.began == Clock::time_point{}) w.began = now;
  const bool block = d.wait_mode() == WaitMode::block ||
                     (d.wait_mode() == WaitMode::by_knob && state_.config.block_waits);
  if (block) {
    if (w.sleep_after == Clock::time_point{}) w.sleep_after = now + state_.config.wait_spin;
    if (now >= w.sleep_after) {
      w.sleeping = true;
      sleep_once(d, w);
      return true;
    }
  }
  // The core goes to another thread only once the wait has lasted kYieldAfter: a thread that
  // shares its core with what it waits for still gets out of the way.
  if (now - w.began >= kYieldAfter) std::this_thread::yield();
  return true;
}

void Engine::open_waker_locked() {
  if (waker_.is_open() || waker_failed_) return;
  Status s = waker_.open();
  for (auto& r : state_.rails) {
    if (!s.ok()) break;
    if (r->cq().wait_fd() >= 0) s = waker_.watch(r->cq().wait_fd());
  }
  if (s.ok() && state_.connected_endpoints()) {
    // Connection events: the EQ's wait object, where it has one (else the tick).
    fid_eq* eq = state_.rails.empty() ? nullptr : state_.rails[0]->domain().eq();
    int fd = -1;
    if (eq != nullptr && fi_control(&eq->fid, FI_GETWAIT, &fd) == 0 && fd >= 0) {
      s = waker_.watch(fd);
      eq_watched_ = s.ok();
    }
  }
  if (!s.ok()) {
    waker_failed_ = true;  // waits spin instead; said once
    XPORT_LOG(warn, "blocking waits spin instead: ", s.to_string());
  }
}

void Engine::sleep_once(const Deadline& d, WaitState& w) {
  bool can_sleep = true;
  bool every_cq_has_fd = true;
  {
    Lock l(state_);
    open_waker_locked();
    if (waker_failed_ || state_.shut_down) {
      can_sleep = false;
    } else if (w.seen_gen != handled_gen_.load(std::memory_order_relaxed)) {
      // Completions were handled since this wait last looked: one more pass first, and after
      // a wake-up by traffic a spin again (more may follow at once).
      if (w.seen_gen != UINT64_MAX) {
        w.sleeping = false;
        w.sleep_after = Clock::now() + state_.config.wait_spin;
      }
      w.seen_gen = handled_gen_.load(std::memory_order_relaxed);
      w.idle_sleeps = 0;
      can_sleep = false;
    } else {
      for (auto& r : state_.rails) {
        if (r->cq_failed()) continue;
        if (r->cq().wait_fd() < 0) {
          every_cq_has_fd = false;
          continue;
        }
        fid_t f = &r->cq().get()->fid;
        if (fi_trywait(r->domain().fabric(), &f, 1) != 0) {  // entries to read first
          can_sleep = false;
          break;
        }
      }
      if (state_.connected_endpoints() && !eq_watched_) every_cq_has_fd = false;
      if (can_sleep && eq_watched_) {
        // The EQ's wait object stays readable until fi_trywait clears it.
        fid_t f = &state_.rails[0]->domain().eq()->fid;
        if (fi_trywait(state_.rails[0]->domain().fabric(), &f, 1) != 0) can_sleep = false;
      }
      if (can_sleep) waker_.sleepers().fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (!can_sleep) {
    std::this_thread::yield();
    return;
  }
  // Asleep on wait objects, a sleep still ends after a tick for what no wait object covers
  // (tcp;ofi_rxm's connection set-up, link states, peer health): 10 ms, doubling to 50 ms
  // while nothing is handled. Where a CQ has no wait object: 100 µs, doubling to 8 ms (a
  // message soon after the wait began is seen soon; an idle wait wakes 125 times a second).
  using std::chrono::microseconds;
  const microseconds first = every_cq_has_fd ? microseconds(10000) : microseconds(100);
  const microseconds most = every_cq_has_fd ? microseconds(50000) : microseconds(8000);
  const microseconds tick = std::min(first * (1u << std::min(w.idle_sleeps, 7u)), most);
  ++w.idle_sleeps;
  const auto left = std::chrono::duration_cast<std::chrono::microseconds>(d.remaining());
  waker_.sleep(std::min(tick, left));
  waker_.sleepers().fetch_sub(1, std::memory_order_relaxed);
  // Timers are due by the clock, not by passes (one pass per wake-up): the next pass looks.
  due_check_.store(true, std::memory_order_relaxed);
}

void Engine::housekeeping() {
  const auto now = Clock::now();
  if (state_.config.rail_check.count() != 0 && now >= next_link_read_) {
    next_link_read_ = now + state_.config.rail_check;
    links_due_.store(true, std::memory_order_relaxed);  // read by the next test() or progress()
  }
  const bool fresh = links_fresh_.load(std::memory_order_relaxed) &&
                     links_fresh_.exchange(false, std::memory_order_relaxed);
  if (state_.config.rail_check.count() != 0 && (fresh || now >= next_rail_check_)) {
    next_rail_check_ = now + state_.config.rail_check;
    apply_link_states(now);
  }
  if (now >= next_health_check_) {
    next_health_check_ = now + PeerHealth::kInterval;
    health_.check(now);
    control_.reap_retired(false);
  }
}

void Engine::fail_rail(uint32_t rail, const Status& why) {
  rail::Rail& r = *state_.rails[rail];
  XPORT_LOG(warn, why.to_string(), ": out of service for good");
  r.set_cq_failed();
  state_.note_failure(rail, why);  // quarantine, tell the peers, resend what may be lost
  // Sends with something in flight on it: failed (their completions will never come).
  std::vector<CommId> ids;
  state_.comms->for_each([&](uint16_t, CommState& c) { ids.push_back(c.id); });
  for (CommId id : ids) {
    CommState* c = state_.comm(id);
    if (c == nullptr || !c->is_send) continue;
    for (SendSlot& s : c->sends) {
      if (!s.active || s.outstanding == 0) continue;
      uint32_t lost = 0;
      if (s.eager && !s.queued && s.ctx.size() > 0 && s.ctx[0].type == fabric::OpType::eager_send &&
          s.ctx[0].rail == rail) {
        lost = 1;
      }
      for (uint32_t i = 0; i < s.stripes; ++i) {
        if ((s.stripes_posted & (1u << i)) && s.ctx[i].rail == rail) {
          s.stripes_posted &= ~(1u << i);
          ++s.stripes_done;
          ++lost;
        }
      }
      if (lost == 0) continue;
      state_.fail_send(*c, s, why);
      for (uint32_t k = 0; k < lost && (c = state_.comm(id)) != nullptr; ++k) state_.release(*c, s);
    }
  }
  // Posts queued for it would go to a dead NIC: eager sends and stripes fail with their
  // requests; control messages are dropped (what matters was sent again on the other rails).
  eager_.fail_rail(rail, why);
  rendezvous_.fail_rail(rail, why);
  control_.fail_rail(rail);
  // Bounce buffers with the provider on its endpoints (the rail's, and RDM communicators' own):
  // receives never come back, sends never complete (a headered eager send fails with its
  // request).
  std::vector<rail::RailEndpoint*> eps;
  for (rail::RailEndpoint* ep : r.endpoints()) {
    if (ep != nullptr) eps.push_back(ep);
  }
  state_.pool->for_each([&](const pool::Channel& ch) {
    if (ch.owned && ch.rail == rail && !state_.connected_endpoints()) {
      eps.push_back(ch.owned.get());
    }
  });
  for (rail::RailEndpoint* ep : eps) {
    ep->posted_rx = 0;
    control_.forget_receives(ep);
    for (size_t i = 0; i < ep->tx().count(); ++i) {
      memory::Buffer& b = ep->tx().at(static_cast<uint32_t>(i));
      if (!b.in_use) continue;
      if (b.ctx.type == fabric::OpType::eager_buffer) {
        eager_.on_sent(&b.ctx, why, &b);
      } else {
        ep->tx().give_back(&b);
      }
    }
  }
  one_sided_.fail_rail(rail, why);
  flusher_.fail_rail(rail, why);
}

void Engine::apply_link_states(Clock::time_point now) {
  for (auto& r : state_.rails) {
    if (r->cq_failed()) continue;  // never back: its CQ is gone
    rail::Health& h = r->health();
    const bool up = h.link_up();
    if (h.state() == rail::Health::State::up && !up) {
      h.quarantine("link down", now + state_.config.rail_retry);
      XPORT_LOG(warn, "rail ", r->name(), " quarantined: link down; new traffic avoids it");
      state_.announce_rail_state(r->index(), false);
      // What this device sent on it may never arrive: it goes again on the rails left (its
      // peers do the same for theirs when they hear of it).
      state_.resend_after_rail_loss(nullptr);
    } else if (h.state() == rail::Health::State::quarantined) {
      if (!up) {
        h.quarantine(h.reason(), now + state_.config.rail_retry);  // back off again
      } else if (now >= h.retry_at()) {
        h.restore();
        XPORT_LOG(info, "rail ", r->name(), " back in service: link up");
        state_.announce_rail_state(r->index(), true);
      }
    }
  }
}

namespace {
// A receive buffer outside every pool, for injected traffic: nothing may hold it.
struct Scratch {
  std::vector<uint8_t> bytes;
  memory::Buffer buffer;
  explicit Scratch(const uint8_t* p, size_t len) : bytes(p, p + len) {
    buffer.data = bytes.data();
  }
};
}  // namespace

void Engine::inject_message(size_t rail, const uint8_t* bytes, size_t len) {
  Lock l(state_);
  if (rail >= state_.rails.size() || state_.shut_down) return;
  auto h = decode_header(bytes, len);
  if (!h) {
    state_.miss();
    return;
  }
  Scratch s(bytes, len);
  bool hold = false;
  dispatch_.polling(rail);
  dispatch_.route(Message{*h, s.bytes.data() + sizeof(MsgHeader), len - sizeof(MsgHeader), nullptr,
                          &s.buffer, &hold});
}

void Engine::inject_cq_data(size_t rail, uint64_t data, const uint8_t* payload, size_t len,
                            bool eager) {
  Lock l(state_);
  if (rail >= state_.rails.size() || state_.shut_down) return;
  dispatch_.polling(rail);
  if (!eager) {
    dispatch_.write_landed(data, len, static_cast<uint32_t>(rail));
    return;
  }
  if (state_.rails[rail]->data() == nullptr) return;
  Scratch s(payload, len);
  bool hold = false;
  dispatch_.eager_arrived(nullptr, &s.buffer, data, len, &hold);
}

bool Engine::early_cts_for_test(CommId comm, uint64_t seq) {
  Lock l(state_);
  CommState* c = state_.comm(comm);
  if (c == nullptr || !c->is_send || c->depth == 0) return false;
  const EarlyCts& e = c->early_cts[c->slot_of(seq)];
  return e.valid && e.cts.seq == seq;
}

}  // namespace xport::proto
