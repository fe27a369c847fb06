// xport-scale --mode one-sided, the target's side: N windows opened by the target's key, rounds
// of put_signal into each initiator's own slot, latency samples. The target has no window of
// its own (one would add a stream to what is measured): it waits for a signal word as
// Window::wait_signal does, by progress passes and an acquire load of the word.
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "initiators.hpp"
#include "target.hpp"

namespace scale {

using namespace xport;

namespace {

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};

// The target's region, what each initiator's word should read, and the checks.
class Slots {
 public:
  Slots(Target& t, uint8_t* mem) : t_(t), mem_(mem), expect_(t.n, 0), live_(t.n, false) {}

  std::vector<bool>& live() { return live_; }
  uint64_t expected(size_t i) const { return expect_[i]; }
  uint64_t word(size_t i) const {
    return std::atomic_ref<uint64_t>(
               *reinterpret_cast<uint64_t*>(mem_ + word_offset(i, t_.n, t_.opt.size)))
        .load(std::memory_order_acquire);
  }
  // Initiator i is to signal once more.
  void expect_next(size_t i) { expect_[i] += 1; }

  // Whether i's word reached its expected value (then its slot is checked: the put's data is
  // delivered before its signal is applied). Wrong bytes are counted bad; an overshoot too, and
  // the initiator is then no longer followed.
  bool arrived(size_t i, const char* when) {
    const uint64_t v = word(i), e = expect_[i];
    if (v == e) {
      const size_t size = t_.opt.size;
      const size_t at = check_pattern(mem_ + slot_offset(i, size), size, i, e, size);
      if (at != size) {  // counted; its later puts are still checked
        t_.rec.bad += 1;
        t_.note(std::string(when) + ": initiator " + std::to_string(i) +
                    "'s slot differs from what it put at byte " + std::to_string(at) + " (signal " +
                    std::to_string(e) + ")",
                "data");
      } else {
        t_.rec.bytes_verified += size;
        t_.rec.signals_verified += 1;
      }
      return true;
    }
    if (static_cast<int64_t>(v - e) > 0) {
      fail(i, std::string(when) + ": initiator " + std::to_string(i) + "'s signal word reads " +
                  std::to_string(v) + ", expected " + std::to_string(e) + " (an extra signal)");
      return true;
    }
    return false;
  }
  void fail(size_t i, const std::string& why) {
    t_.rec.bad += 1;
    t_.note(why, "data");
    live_[i] = false;
  }
  void missing(size_t i, const char* when) {
    fail(i, std::string(when) + ": initiator " + std::to_string(i) + "'s signal word reads " +
                std::to_string(word(i)) + ", expected " + std::to_string(expect_[i]) +
                " after its quiet returned");
  }

 private:
  Target& t_;
  uint8_t* mem_;
  std::vector<uint64_t> expect_;
  std::vector<bool> live_;
};

// The initiators a step's answers name as failed: counted, and no longer expected.
void drop_failed(Target& t, Slots& slots, const std::vector<std::string>& lines,
                 std::vector<size_t>* pending) {
  for (const auto& line : lines) {
    const auto w = words(line);
    for (size_t i : parse_index_list(field(w, "bad"))) {
      if (i >= t.n || !slots.live()[i]) continue;
      slots.live()[i] = false;
      t.rec.bad += 1;
      if (pending != nullptr) std::erase(*pending, i);
    }
    t.note(error_of(line), field(w, "code"));
  }
}

Status rounds(Target& t, Slots& slots) {
  const int total = rounds_of(t.opt);
  const Deadline dl = t.phase_with_grace();
  const uint64_t start = now_ns();
  std::vector<size_t> pending;
  pending.reserve(t.n);
  auto scan = [&] {
    t.progress(&t.serving);
    for (size_t k = 0; k < pending.size();) {
      if (slots.arrived(pending[k], "rounds")) {
        pending[k] = pending.back();
        pending.pop_back();
      } else {
        ++k;
      }
    }
  };
  for (int r = 1; r <= total; ++r) {
    pending.clear();
    for (size_t i = 0; i < t.n; ++i) {
      if (!slots.live()[i]) continue;
      slots.expect_next(i);
      pending.push_back(i);
    }
    if (pending.empty()) break;
    const uint64_t r0 = now_ns();
    XPORT_RETURN_IF_ERROR(t.hosts->send_all("ROUND " + std::to_string(r)));
    XPORT_ASSIGN_OR_RETURN(auto lines, t.hosts->expect_all("DONE", dl, scan));
    drop_failed(t, slots, lines, &pending);
    // Every quiet returned: each signal was applied (by this process's progress) before its
    // acknowledgement left. A short grace all the same before calling a word missing.
    const Deadline grace = Deadline::after(std::chrono::seconds(2));
    while (!pending.empty() && !grace.expired()) scan();
    for (size_t i : pending) slots.missing(i, "rounds");
    t.rec.rounds_done = r;
    t.rec.rounds_s = static_cast<double>(now_ns() - start) / 1e9;
    t.rec.round_ms_max = std::max(t.rec.round_ms_max, static_cast<double>(now_ns() - r0) / 1e6);
  }
  return Status();
}

Status latency(Target& t, Slots& slots) {
  std::vector<size_t> live;
  for (size_t i = 0; i < t.n; ++i) {
    if (slots.live()[i]) live.push_back(i);
  }
  const size_t m = std::min(live.size(), static_cast<size_t>(t.opt.latency_peers));
  const Deadline dl = t.phase_with_grace();
  t.rec.latency_peers = m;
  for (size_t s = 0; s < m; ++s) {
    const size_t i = live[s * live.size() / m];  // spread over the initiators (and hosts)
    const size_t h = t.hosts->owner(i);
    for (int k = 0; k < t.opt.latency_samples && slots.live()[i]; ++k) {
      slots.expect_next(i);
      uint64_t t1 = 0;
      bool seen = false;
      auto watch = [&] {
        t.progress();
        if (!seen && slots.arrived(i, "latency")) {
          t1 = now_ns();
          seen = true;
        }
      };
      XPORT_RETURN_IF_ERROR(
          t.hosts->send(h, "PING " + std::to_string(i) + " " + std::to_string(slots.expected(i))));
      XPORT_ASSIGN_OR_RETURN(std::string pong, t.hosts->expect(h, "PONG", dl, watch));
      if (const std::string e = error_of(pong); !e.empty()) {
        slots.live()[i] = false;
        t.rec.bad += 1;
        t.note(e, "");
        break;
      }
      const Deadline grace = Deadline::after(std::chrono::seconds(2));
      while (!seen && !grace.expired()) watch();
      if (!seen) {
        slots.missing(i, "latency");
        break;
      }
      const uint64_t t0 = field_u64(words(pong), "t0");
      if (t1 >= t0) t.rec.latencies_us.push_back(static_cast<double>(t1 - t0) / 1e3);
    }
  }
  return Status();
}

}  // namespace

Status run_one_sided(Target& t) {
  const size_t bytes = region_bytes(t.n, t.opt.size);
  std::unique_ptr<uint8_t, FreeDeleter> mem(static_cast<uint8_t*>(std::aligned_alloc(4096, bytes)));
  if (!mem) return Status(Code::resource, "out of memory for the target's region");
  std::memset(mem.get(), 0, bytes);
  XPORT_ASSIGN_OR_RETURN(Region region, t.dev->register_memory(mem.get(), bytes));
  Status s = [&]() -> Status {
    XPORT_RETURN_IF_ERROR(t.start_hosts(
        "HELLO mode=one peers=" + std::to_string(t.n) + " size=" + std::to_string(t.opt.size) +
        " threads=" + std::to_string(t.opt.threads) + " corrupt=" + std::to_string(t.opt.corrupt) +
        " key=" + bench::hex(region.export_key())));
    t.costs_before();
    const uint64_t t0 = now_ns();
    XPORT_RETURN_IF_ERROR(t.hosts->send_all("OPEN"));
    XPORT_ASSIGN_OR_RETURN(
        auto lines, t.hosts->expect_all("OPENED", t.phase_with_grace(), [&] { t.progress(); }));
    t.rec.open_s = static_cast<double>(now_ns() - t0) / 1e9;
    Slots slots(t, mem.get());
    slots.live() = t.opened(lines);
    t.costs_after();
    t.rec.progress_idle = t.idle(t.opt.idle_passes);
    Status r = rounds(t, slots);
    const PassTimes& p = t.serving;
    t.rec.progress_serving = {p.count(), p.mean_us(), p.percentile_us(0.5), p.percentile_us(0.99),
                              p.max_us()};
    if (r.ok() && t.opt.latency_peers > 0) r = latency(t, slots);
    const Stats st = t.dev->stats();
    t.rec.deferred_posts = st.deferred_posts;
    t.rec.signals_applied = st.signals_applied;
    t.rec.window_cq_room = st.window_cq_room;
    t.rec.streams_waiting = st.window_streams_waiting;
    t.rec.take_backs = st.window_take_backs;
    return r;
  }();
  // The initiators close their windows before the region goes.
  t.note(s);
  if (t.hosts) t.finish();
  if (!t.ended) (void)mem.release();  // a stuck thread may still hold a window into it
  return s;
}

}  // namespace scale
