// xport-scale --mode two-sided, the target's side: N communicators from N initiator devices to
// one listener, then rounds of a message of each size from every initiator, each verified.
// Which comm is whose the first message says (its first 8 bytes name the initiator); every
// later one on that comm must name the same.
#include <cstdlib>
#include <cstring>

#include "target.hpp"

namespace scale {

using namespace xport;

namespace {

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};

// At most this much receive buffer at the target: comms beyond it are served in batches.
constexpr size_t kReceiveBytes = size_t{64} << 20;

class Receiver {
 public:
  Receiver(Target& t, std::vector<std::unique_ptr<RecvComm>>& comms)
      : t_(t),
        comms_(comms),
        owner_(comms.size(), SIZE_MAX),
        claimed_(t.n, false),
        dead_(comms.size(), false) {}

  // One message of `size` from every comm, in batches of what the buffer holds.
  void round(uint8_t* buf, const Region& region, size_t slots_bytes, size_t size, uint64_t r,
             Deadline dl) {
    const size_t batch = std::max<size_t>(1, slots_bytes / size);
    for (size_t b0 = 0; b0 < comms_.size(); b0 += batch) {
      const size_t b1 = std::min(comms_.size(), b0 + batch);
      std::vector<std::pair<size_t, Request>> posted;
      for (size_t c = b0; c < b1; ++c) {
        if (dead_[c]) continue;
        auto req = comms_[c]->irecv(buf + (c - b0) * size, size, region);
        if (!req.ok()) {
          fail(c, req.status().with_context("irecv on comm " + std::to_string(c)));
          continue;
        }
        posted.emplace_back(c, *req);
      }
      // Timed progress passes, then a look at each receive (test() without a pass of its own).
      while (!posted.empty()) {
        t_.progress(&t_.serving);
        for (size_t k = 0; k < posted.size();) {
          const auto [c, req] = posted[k];
          auto got = comms_[c]->test(req, TestMode::observe);
          if (got.ok() && !got->done && !dl.expired()) {
            ++k;
            continue;
          }
          if (!got.ok()) {
            fail(c, got.status().with_context("receive on comm " + std::to_string(c)));
          } else if (!got->done) {
            fail(c, Status(Code::timeout, "receive on comm " + std::to_string(c) +
                                              ": no message within the timeout"));
          } else {
            check(c, buf + (c - b0) * size, got->bytes, size, r);
          }
          posted[k] = posted.back();
          posted.pop_back();
        }
      }
    }
  }

 private:
  void fail(size_t c, const Status& s) {
    dead_[c] = true;
    t_.rec.bad += 1;
    t_.note(s);
  }
  // Wrong data: counted, and the comm goes on (its later messages are still checked).
  void wrong(size_t c, const std::string& why) {
    t_.rec.bad += 1;
    t_.note("comm " + std::to_string(c) + ": " + why, "data");
  }

  void check(size_t c, uint8_t* p, size_t got, size_t size, uint64_t r) {
    if (got != size) {
      return wrong(c,
                   "received " + std::to_string(got) + " bytes, expected " + std::to_string(size));
    }
    uint64_t id = 0;
    std::memcpy(&id, p, 8);
    if (owner_[c] == SIZE_MAX) {
      if (id >= t_.n || claimed_[id]) {
        return wrong(c, "its first message names initiator " + std::to_string(id) +
                            (id < t_.n ? ", which another comm carries" : ", out of range"));
      }
      claimed_[id] = true;
      owner_[c] = id;
    } else if (owner_[c] != id) {
      return wrong(c, "a message names initiator " + std::to_string(id) + ", the comm is " +
                          std::to_string(owner_[c]) + "'s");
    }
    // The first word carried the name; with the pattern's own first word there, the whole
    // message must be the pattern.
    uint8_t head[8];
    fill_pattern(head, 8, id, r, size);
    std::memcpy(p, head, 8);
    const size_t at = check_pattern(p, size, id, r, size);
    if (at != size) {
      return wrong(c, "initiator " + std::to_string(id) + "'s message of " + std::to_string(size) +
                          " B (round " + std::to_string(r) + ") differs at byte " +
                          std::to_string(at));
    }
    t_.rec.bytes_verified += size;
    t_.rec.signals_verified += 1;
  }

  Target& t_;
  std::vector<std::unique_ptr<RecvComm>>& comms_;
  std::vector<size_t> owner_;  // comm -> initiator, from its first message
  std::vector<bool> claimed_;
  std::vector<bool> dead_;
};

}  // namespace

Status run_two_sided(Target& t) {
  XPORT_ASSIGN_OR_RETURN(auto listener, t.dev->listen());
  size_t largest = 0;
  for (size_t s : t.opt.sizes) largest = std::max(largest, s);
  std::vector<std::unique_ptr<RecvComm>> comms;
  std::unique_ptr<uint8_t, FreeDeleter> mem;
  Region region;
  Status s = [&]() -> Status {
    XPORT_RETURN_IF_ERROR(t.start_hosts(
        "HELLO mode=two peers=" + std::to_string(t.n) + " size=" + std::to_string(largest) +
        " threads=" + std::to_string(t.opt.threads) + " corrupt=" + std::to_string(t.opt.corrupt) +
        " handle=" + bench::hex(listener->handle())));
    t.costs_before();
    const uint64_t t0 = now_ns();
    Status accept_error;
    // Takes every connection ready (each try_accept makes a progress pass of its own): one a
    // tick let the backlog (XPORT_LISTEN_BACKLOG) fill when hundreds connect at once, and the
    // listener refused the rest.
    auto accept = [&] {
      for (;;) {
        auto c = listener->try_accept();
        if (!c.ok() && accept_error.ok()) accept_error = c.status().with_context("accept");
        if (!c.ok() || !*c) return;
        comms.push_back(std::move(c).value());
      }
    };
    XPORT_RETURN_IF_ERROR(t.hosts->send_all("CONNECT"));
    XPORT_ASSIGN_OR_RETURN(auto lines, t.hosts->expect_all("OPENED", t.phase_with_grace(), accept));
    (void)t.opened(lines);
    // Connectors complete without waiting for accept(): take the rest.
    const Deadline dl = t.phase();
    while (comms.size() < t.rec.opened && !dl.expired()) accept();
    t.rec.open_s = static_cast<double>(now_ns() - t0) / 1e9;
    t.note(accept_error);
    if (comms.size() != t.rec.opened) {
      t.note("accept: " + std::to_string(comms.size()) + " comms accepted of " +
                 std::to_string(t.rec.opened) + " connected",
             "timeout");
    }
    t.costs_after();
    t.rec.progress_idle = t.idle(t.opt.idle_passes);
    if (comms.empty()) return Status();

    const size_t slots = std::max<size_t>(1, std::min(comms.size(), kReceiveBytes / largest));
    mem.reset(
        static_cast<uint8_t*>(std::aligned_alloc(4096, (slots * largest + 4095) / 4096 * 4096)));
    if (!mem) return Status(Code::resource, "out of memory for the receive buffers");
    XPORT_ASSIGN_OR_RETURN(region, t.dev->register_memory(mem.get(), slots * largest));
    Receiver rx(t, comms);
    for (size_t size : t.opt.sizes) {
      SendFigures f;
      f.size = size;
      const uint64_t start = now_ns(), verified = t.rec.signals_verified;
      for (int r = 1; r <= rounds_of(t.opt); ++r) {
        const Deadline round_dl = t.phase_with_grace();
        XPORT_RETURN_IF_ERROR(
            t.hosts->send_all("SEND " + std::to_string(size) + " " + std::to_string(r)));
        rx.round(mem.get(), region, slots * largest, size, static_cast<uint64_t>(r), round_dl);
        XPORT_ASSIGN_OR_RETURN(
            auto sent, t.hosts->expect_all("SENT", round_dl, [&] { t.progress(&t.serving); }));
        for (const auto& line : sent) t.note(error_of(line), field(words(line), "code"));
        f.rounds = r;
        f.seconds = static_cast<double>(now_ns() - start) / 1e9;
        f.messages = t.rec.signals_verified - verified;
      }
      t.rec.sends.push_back(f);
    }
    const PassTimes& p = t.serving;
    t.rec.progress_serving = {p.count(), p.mean_us(), p.percentile_us(0.5), p.percentile_us(0.99),
                              p.max_us()};
    t.rec.deferred_posts = t.dev->stats().deferred_posts;
    return Status();
  }();
  t.note(s);
  if (t.hosts) t.finish();  // the initiators close their comms while ours are still open
  if (!t.ended) {
    (void)mem.release();
    for (auto& c : comms) (void)c.release();
  }
  return s;
}

}  // namespace scale
