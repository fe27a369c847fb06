// xport-test-peer: the other process of the integration tests. Speaks lines on stdout
// (HANDLE <hex>, KEY <hex>, OK ..., FAIL ...) and reads commands on stdin.
#include <sys/select.h>
#include <array>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "harness.hpp"
#include "xport/xport.hpp"

namespace {

using namespace xport;

int fail(const std::string& why) {
  std::cout << "FAIL " << why << std::endl;
  // Also in the test's log: a parent that fails first on its own side never reads the line.
  std::cerr << "test peer: FAIL " << why << std::endl;
  return 1;
}

// Waits for the parent's next line while driving progress: with a manual-progress provider a
// completed send means its source is free, not that the data left, so a sender that stopped
// calling libxport could strand its last messages.
std::string next_line(Device& dev) {
  return test::next_stdin_line([&] { (void)dev.progress(); }, "");
}

Deadline soon() { return Deadline::after(std::chrono::seconds(20)); }

int recv_stream(Device& dev, uint32_t seed, size_t count, size_t max) {
  auto listener = dev.listen();
  if (!listener.ok()) return fail(listener.status().to_string());
  std::cout << "HANDLE " << test::to_hex((*listener)->handle()) << std::endl;
  auto comm = (*listener)->accept(soon());
  if (!comm.ok()) return fail("accept: " + comm.status().to_string());
  const auto sizes = test::message_sizes(seed, count, max);
  constexpr size_t kDepth = 16;
  std::vector<std::vector<uint8_t>> bufs(kDepth, std::vector<uint8_t>(max + 1));
  std::vector<Region> regs;
  for (auto& b : bufs) {
    auto r = dev.register_memory(b.data(), b.size());
    if (!r.ok()) return fail(r.status().to_string());
    regs.push_back(*r);
  }
  std::vector<Request> reqs(kDepth);
  size_t posted = 0, done = 0;
  uint64_t bytes = 0;
  while (done < count) {
    while (posted < count && posted - done < kDepth) {
      auto r = (*comm)->irecv(bufs[posted % kDepth].data(), max + 1, regs[posted % kDepth]);
      if (!r.ok()) return fail("irecv " + std::to_string(posted) + ": " + r.status().to_string());
      reqs[posted % kDepth] = *r;
      ++posted;
    }
    auto got = (*comm)->wait(reqs[done % kDepth], soon());
    if (!got.ok()) return fail("receive " + std::to_string(done) + ": " + got.status().to_string());
    if (*got != sizes[done]) {
      return fail("message " + std::to_string(done) + " has " + std::to_string(*got) +
                  " bytes, expected " + std::to_string(sizes[done]) + " (out of order?)");
    }
    long long bad = test::first_mismatch(bufs[done % kDepth].data(), *got, done);
    if (bad >= 0) {
      return fail("message " + std::to_string(done) + " differs at byte " + std::to_string(bad));
    }
    bytes += *got;
    ++done;
  }
  std::cout << "OK " << done << " " << bytes << std::endl;
  std::string line;
  line = next_line(dev);  // stay until the parent is done with us
  return 0;
}

int send_stream(Device& dev, uint32_t seed, size_t count, size_t max) {
  std::string line;
  if (!std::getline(std::cin, line) || line.rfind("HANDLE ", 0) != 0) return fail("no handle");
  auto comm = dev.connect(test::from_hex(line.substr(7)), soon());
  if (!comm.ok()) return fail("connect: " + comm.status().to_string());
  const auto sizes = test::message_sizes(seed, count, max);
  constexpr size_t kDepth = 16;
  std::vector<std::vector<uint8_t>> bufs(kDepth, std::vector<uint8_t>(max + 1));
  std::vector<Region> regs;
  for (auto& b : bufs) regs.push_back(*dev.register_memory(b.data(), b.size()));
  std::vector<Request> reqs(kDepth);
  size_t posted = 0, done = 0;
  while (done < count) {
    while (posted < count && posted - done < kDepth) {
      test::fill(bufs[posted % kDepth].data(), sizes[posted], posted);
      auto r = (*comm)->isend(bufs[posted % kDepth].data(), sizes[posted], regs[posted % kDepth]);
      if (!r.ok()) return fail("isend " + std::to_string(posted) + ": " + r.status().to_string());
      reqs[posted % kDepth] = *r;
      ++posted;
    }
    auto got = (*comm)->wait(reqs[done % kDepth], soon());
    if (!got.ok()) return fail("send " + std::to_string(done) + ": " + got.status().to_string());
    ++done;
  }
  std::cout << "OK " << done << std::endl;
  line = next_line(dev);
  return 0;
}

// Exposes a buffer holding pattern 1000, waits for a 1-byte message, then expects pattern 2000.
int target(Device& dev, size_t size) {
  auto listener = dev.listen();
  if (!listener.ok()) return fail(listener.status().to_string());
  std::vector<uint8_t> buf(size), flag(8);
  test::fill(buf.data(), size, 1000);
  auto reg = dev.register_memory(buf.data(), size);
  auto freg = dev.register_memory(flag.data(), flag.size());
  if (!reg.ok() || !freg.ok()) return fail("register");
  std::cout << "HANDLE " << test::to_hex((*listener)->handle()) << std::endl;
  std::cout << "KEY " << test::to_hex(reg->export_key()) << std::endl;
  auto comm = (*listener)->accept(soon());
  if (!comm.ok()) return fail("accept: " + comm.status().to_string());
  auto req = (*comm)->irecv(flag.data(), flag.size(), *freg);
  if (!req.ok()) return fail(req.status().to_string());
  // The flag, unless the test is done with this peer first (it never sends the flag when its
  // test is about something else): stdin's end. A minute: a test may keep this target busy for
  // a while first (StrictWindow drains 256 puts whose posts each leave up to 2 s late).
  Result<Completion> got = Completion{};
  for (Deadline d = Deadline::after(std::chrono::seconds(60)); !d.expired();) {
    got = (*comm)->test(*req);
    if (!got.ok() || got->done) break;
    if (test::stdin_ended()) return 0;
  }
  if (got.ok() && !got->done) got = Status(Code::timeout, "no flag within 60 s");
  if (!got.ok()) return fail("flag: " + got.status().to_string());
  // The puts completed locally before the flag was sent; delivery is checked with a deadline.
  Deadline d = Deadline::after(std::chrono::seconds(10));
  long long bad = 0;
  while ((bad = test::first_mismatch(buf.data(), size, 2000)) >= 0 && !d.expired()) {
    (void)dev.progress();
  }
  if (bad >= 0) return fail("target buffer differs at byte " + std::to_string(bad));
  std::cout << "OK target" << std::endl;
  std::string line;
  line = next_line(dev);
  return 0;
}

// Accepts, keeps a receive posted and progresses until stdin closes, it parks or it is killed.
int linger(Device& dev) {
  auto listener = dev.listen();
  if (!listener.ok()) return fail(listener.status().to_string());
  std::cout << "HANDLE " << test::to_hex((*listener)->handle()) << std::endl;
  auto comm = (*listener)->accept(soon());
  if (!comm.ok()) return fail("accept: " + comm.status().to_string());
  std::vector<uint8_t> buf(1 << 20);
  auto reg = dev.register_memory(buf.data(), buf.size());
  auto req = (*comm)->irecv(buf.data(), buf.size(), *reg);
  std::cout << "READY" << std::endl;
  // Until stdin ends (or "park" comes: harness.cc), the receive is tested while it is
  // pending, and the device progressed once it is not.
  bool pending = true;
  (void)test::next_stdin_line(
      [&] {
        if (pending) {
          auto c = (*comm)->test(*req);
          pending = c.ok() && !c->done;
        } else {
          (void)dev.progress();
        }
      },
      "");
  return 0;
}

// The other end of the churn test (churn_test.cc): accepts communicators for ever; each one's
// first message says which it is, how many messages follow and after how many of them this side
// closes early (provoking late data). Every message received is checked against its pattern:
// data routed to the wrong communicator or request fails the check. At "DONE" on stdin it
// prints its totals and resource use ("STATS ...").
int churn(Device& dev) {
  auto listener = dev.listen();
  if (!listener.ok()) return fail(listener.status().to_string());
  std::cout << "HANDLE " << test::to_hex((*listener)->handle()) << std::endl;
  std::vector<uint8_t> buf(1 << 20);
  auto reg = dev.register_memory(buf.data(), buf.size());
  if (!reg.ok()) return fail("register");
  uint64_t comms = 0, received = 0, closed_early = 0;
  std::string line;
  for (;;) {
    auto comm = (*listener)->accept(Deadline::after(std::chrono::milliseconds(200)));
    if (!comm.ok()) {
      if (comm.status().code() != Code::timeout) return fail("accept: " + comm.status().to_string());
      // Nothing to accept: the test may be done.
      fd_set in;
      FD_ZERO(&in);
      FD_SET(0, &in);
      timeval tv{0, 0};
      if (select(1, &in, nullptr, nullptr, &tv) > 0) {
        std::getline(std::cin, line);
        break;
      }
      continue;
    }
    ++comms;
    uint64_t head[3] = {};
    auto r = (*comm)->irecv(buf.data(), sizeof(head), *reg);
    if (!r.ok()) return fail("irecv head: " + r.status().to_string());
    auto got = (*comm)->wait(*r, soon());
    if (!got.ok() || *got != sizeof(head)) {
      return fail("head of communicator " + std::to_string(comms) + ": " +
                  (got.ok() ? "wrong size" : got.status().to_string()));
    }
    std::memcpy(head, buf.data(), sizeof(head));
    const uint64_t id = head[0], count = head[1], close_at = head[2];
    const auto sizes = test::message_sizes(static_cast<uint32_t>(id), count, 300 * 1024);
    for (uint64_t k = 0; k < count; ++k) {
      if (k == close_at) {
        ++closed_early;
        break;  // closes with the sender's later messages still coming
      }
      auto rr = (*comm)->irecv(buf.data(), buf.size(), *reg);
      if (!rr.ok()) return fail("irecv: " + rr.status().to_string());
      auto g = (*comm)->wait(*rr, soon());
      if (!g.ok()) {
        return fail("communicator " + std::to_string(id) + " message " + std::to_string(k) + ": " +
                    g.status().to_string());
      }
      if (*g != sizes[k] || test::first_mismatch(buf.data(), *g, id * 1000 + k) != -1) {
        return fail("communicator " + std::to_string(id) + " message " + std::to_string(k) +
                    " is not its own: misrouted or corrupted");
      }
      ++received;
    }
  }
  // Let the last closes and late arrivals settle before counting.
  for (auto d = Deadline::after(std::chrono::seconds(3)); !d.expired();) (void)dev.progress();
  const Stats st = dev.stats();
  std::cout << "STATS comms " << comms << " received " << received << " closed_early "
            << closed_early << " misses " << st.routing_misses << " late " << st.late_arrivals
            << " comms_open " << st.comms_open << std::endl;
  line = next_line(dev);
  return 0;
}


// The receiving end of the pool test (pool_test.cc): accepts COMMS communicators, learns each
// one's ordinal from its first message, then takes COUNT messages on every one of them with
// receives posted in order per communicator (up to 4 outstanding) and the communicators visited
// in random order, so receives of all of them interleave. Each message must be its own: its
// size and its pattern (communicator ordinal, index) are checked, so a message routed to
// another communicator or request, or out of order, fails. Prints "STATS ..." (pool counters)
// and "OK n".
int pool_recv(Device& dev, size_t comms, size_t count, uint32_t seed, size_t max) {
  const size_t base_fds = test::open_fds();
  const size_t base_rss = test::resident_kib();
  auto listener = dev.listen();
  if (!listener.ok()) return fail(listener.status().to_string());
  std::cout << "HANDLE " << test::to_hex((*listener)->handle()) << std::endl;
  constexpr size_t kDepth = 4;
  const size_t stride = max + 1;
  std::vector<uint8_t> mem(comms * kDepth * stride);
  auto reg = dev.register_memory(mem.data(), mem.size());
  if (!reg.ok()) return fail("register: " + reg.status().to_string());
  std::vector<std::unique_ptr<RecvComm>> by_ordinal(comms);
  for (size_t i = 0; i < comms; ++i) {
    auto comm = (*listener)->accept(Deadline::after(std::chrono::seconds(60)));
    if (!comm.ok()) return fail("accept " + std::to_string(i) + ": " + comm.status().to_string());
    uint64_t ordinal = 0;
    auto r = (*comm)->irecv(mem.data(), sizeof(ordinal), *reg);
    if (!r.ok()) return fail("irecv head: " + r.status().to_string());
    auto got = (*comm)->wait(*r, soon());
    if (!got.ok() || *got != sizeof(ordinal)) {
      return fail("head of communicator " + std::to_string(i) + ": " +
                  (got.ok() ? "wrong size" : got.status().to_string()));
    }
    std::memcpy(&ordinal, mem.data(), sizeof(ordinal));
    if (ordinal >= comms || by_ordinal[ordinal]) {
      return fail("communicator " + std::to_string(i) + " names ordinal " +
                  std::to_string(ordinal) + " (taken or out of range)");
    }
    by_ordinal[ordinal] = std::move(comm).value();
  }
  std::vector<std::vector<size_t>> sizes(comms);
  for (size_t o = 0; o < comms; ++o) sizes[o] = test::message_sizes(seed + o, count, max);
  std::vector<size_t> posted(comms), done(comms);
  std::vector<std::array<Request, kDepth>> reqs(comms);
  std::mt19937 rng(seed);
  size_t total = 0;
  const auto until = Deadline::after(std::chrono::seconds(120));
  while (total < comms * count) {
    if (until.expired()) {
      return fail("only " + std::to_string(total) + " of " + std::to_string(comms * count) +
                  " messages arrived within 120 s");
    }
    const size_t o = rng() % comms;
    RecvComm& c = *by_ordinal[o];
    while (posted[o] < count && posted[o] - done[o] < kDepth) {
      uint8_t* b = mem.data() + (o * kDepth + posted[o] % kDepth) * stride;
      auto r = c.irecv(b, stride, *reg);
      if (!r.ok()) return fail("irecv: " + r.status().to_string());
      reqs[o][posted[o] % kDepth] = *r;
      ++posted[o];
    }
    if (done[o] == posted[o]) continue;
    auto t = c.test(reqs[o][done[o] % kDepth]);
    if (!t.ok()) {
      return fail("communicator " + std::to_string(o) + " message " + std::to_string(done[o]) +
                  ": " + t.status().to_string());
    }
    if (!t->done) continue;
    const size_t k = done[o];
    const uint8_t* b = mem.data() + (o * kDepth + k % kDepth) * stride;
    if (t->bytes != sizes[o][k] || test::first_mismatch(b, t->bytes, o * 100000 + k) != -1) {
      return fail("communicator " + std::to_string(o) + " message " + std::to_string(k) +
                  " is not its own (" + std::to_string(t->bytes) + " bytes, expected " +
                  std::to_string(sizes[o][k]) + "): misrouted, reordered or corrupted");
    }
    ++done[o];
    ++total;
  }
  const Stats all = dev.stats();
  const PoolStats& st = all.pool;
  std::cout << "STATS channels " << st.channels << " primaries " << st.primaries
            << " secondaries " << st.secondaries << " attached " << st.comms_attached
            << " misses " << st.routing_misses << " fds " << test::open_fds() << " base_fds "
            << base_fds << " buffer_bytes " << st.registered_bytes << " endpoints "
            << all.endpoints.size() << " rss_kib " << test::resident_kib() << " base_rss_kib "
            << base_rss << std::endl;
  std::cout << "OK " << total << std::endl;
  std::string line = next_line(dev);
  by_ordinal.clear();
  return 0;
}

// The other end of the pool churn test (pool_test.cc): accepts communicators as they come and
// serves them all at once, one receive outstanding on each; each one's first message names it
// and how many messages follow, each message is checked against its pattern, and the
// communicator is closed after its last. Prints "STATS done D received R misses M late L" once
// COMMS communicators were served, then at "channels" the pool's channels once they are gone
// (or after 10 s).
int pool_churn(Device& dev, size_t comms) {
  auto listener = dev.listen();
  if (!listener.ok()) return fail(listener.status().to_string());
  std::cout << "HANDLE " << test::to_hex((*listener)->handle()) << std::endl;
  constexpr size_t kSlots = 64;
  constexpr size_t kStride = (64 << 10) + 1;
  std::vector<uint8_t> mem(kSlots * kStride);
  auto reg = dev.register_memory(mem.data(), mem.size());
  if (!reg.ok()) return fail("register: " + reg.status().to_string());
  struct Live {
    std::unique_ptr<RecvComm> comm;
    size_t slot = 0;
    bool named = false;
    uint64_t id = 0;
    std::vector<size_t> sizes;
    size_t got = 0;
    Request req;
  };
  std::vector<Live> live;
  std::vector<size_t> free_slots;
  for (size_t i = 0; i < kSlots; ++i) free_slots.push_back(i);
  size_t done = 0, received = 0;
  const auto until = Deadline::after(std::chrono::seconds(240));
  auto post = [&](Live& l) {
    auto r = l.comm->irecv(mem.data() + l.slot * kStride, kStride, *reg);
    if (r.ok()) l.req = *r;
    return r.status();
  };
  while (done < comms) {
    if (until.expired()) return fail("served " + std::to_string(done) + " communicators in 240 s");
    if (!free_slots.empty()) {
      auto c = (*listener)->try_accept();
      if (!c.ok()) return fail("accept: " + c.status().to_string());
      if (*c) {
        Live l;
        l.comm = std::move(*c);
        l.slot = free_slots.back();
        free_slots.pop_back();
        if (Status st = post(l); !st.ok()) return fail("irecv head: " + st.to_string());
        live.push_back(std::move(l));
      }
    }
    (void)dev.progress();
    for (size_t i = 0; i < live.size();) {
      Live& l = live[i];
      auto t = l.comm->test(l.req);
      if (!t.ok()) {
        return fail("communicator " + std::to_string(l.id) + " message " + std::to_string(l.got) +
                    ": " + t.status().to_string());
      }
      if (!t->done) {
        ++i;
        continue;
      }
      const uint8_t* b = mem.data() + l.slot * kStride;
      if (!l.named) {
        uint64_t head[2] = {};
        if (t->bytes != sizeof(head)) return fail("a head of " + std::to_string(t->bytes) + " bytes");
        std::memcpy(head, b, sizeof(head));
        l.named = true;
        l.id = head[0];
        l.sizes = test::message_sizes(static_cast<uint32_t>(l.id), head[1], 64 << 10);
      } else {
        const size_t k = l.got;
        if (t->bytes != l.sizes[k] || test::first_mismatch(b, t->bytes, l.id * 1000 + k) != -1) {
          return fail("communicator " + std::to_string(l.id) + " message " + std::to_string(k) +
                      " is not its own: misrouted, reordered or corrupted");
        }
        ++l.got;
        ++received;
      }
      if (l.got == l.sizes.size()) {
        free_slots.push_back(l.slot);
        live.erase(live.begin() + static_cast<long>(i));  // closes it
        ++done;
        continue;
      }
      if (Status st = post(l); !st.ok()) return fail("irecv: " + st.to_string());
      ++i;
    }
  }
  const Stats st = dev.stats();
  std::cout << "STATS done " << done << " received " << received << " misses "
            << st.routing_misses << " late " << st.late_arrivals << std::endl;
  std::string line = next_line(dev);
  if (line == "channels") {
    const auto gone = Deadline::after(std::chrono::seconds(10));
    while (dev.stats().pool.channels != 0 && !gone.expired()) (void)dev.progress();
    std::cout << "CHANNELS " << dev.stats().pool.channels << std::endl;
    line = next_line(dev);
  }
  return 0;
}
}  // namespace

namespace xport::test {
// One-sided roles (one_sided_peer.cc): its exit code, or -1 for a role it does not know.
int one_sided_peer(Device& dev, const std::vector<std::string>& args);
}  // namespace xport::test

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: xport-test-peer recv-stream SEED COUNT MAX | send-stream SEED COUNT MAX"
                 " | target SIZE | linger | churn | pool-recv COMMS COUNT SEED MAX | pool-churn COMMS | window-target SIZE | atomic-hammer THREADS N\n";
    return 2;
  }
  ContextOptions opts;
  opts.peers_on_host = true;
  auto ctx = Context::open(opts);
  if (!ctx.ok()) return fail(ctx.status().to_string());
  auto dev = (*ctx)->open_device();
  if (!dev.ok()) return fail(dev.status().to_string());
  const std::string role = argv[1];
  if ((role == "recv-stream" || role == "send-stream") && argc == 5) {
    const uint32_t seed = static_cast<uint32_t>(std::stoul(argv[2]));
    const size_t count = std::stoul(argv[3]), max = std::stoul(argv[4]);
    return role == "recv-stream" ? recv_stream(**dev, seed, count, max)
                                 : send_stream(**dev, seed, count, max);
  }
  if (role == "pool-churn" && argc == 3) return pool_churn(**dev, std::stoul(argv[2]));
  if (role == "pool-recv" && argc == 6) {
    return pool_recv(**dev, std::stoul(argv[2]), std::stoul(argv[3]),
                     static_cast<uint32_t>(std::stoul(argv[4])), std::stoul(argv[5]));
  }
  if (role == "target" && argc == 3) return target(**dev, std::stoul(argv[2]));
  if (role == "linger") return linger(**dev);
  if (role == "churn") return churn(**dev);
  if (int rc = test::one_sided_peer(**dev, std::vector<std::string>(argv + 1, argv + argc));
      rc >= 0) {
    return rc;
  }
  std::cerr << "xport-test-peer: bad arguments\n";
  return 2;
}
