// xport-test-peer: the other process of the integration tests. Speaks lines on stdout
// (HANDLE <hex>, KEY <hex>, OK ..., FAIL ...) and reads commands on stdin.
#include <sys/select.h>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "harness.hpp"
#include "xport/xport.hpp"

namespace {

using namespace xport;

int fail(const std::string& why) {
  std::cout << "FAIL " << why << std::endl;
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
  auto got = (*comm)->wait(*req, soon());
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

// Accepts, keeps a receive posted and progresses until stdin closes or it is killed.
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
  for (;;) {
    auto c = (*comm)->test(*req);
    if (!c.ok() || c->done) break;
  }
  std::string line;
  line = next_line(dev);
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

}  // namespace

namespace xport::test {
// One-sided roles (one_sided_peer.cc): its exit code, or -1 for a role it does not know.
int one_sided_peer(Device& dev, const std::vector<std::string>& args);
}  // namespace xport::test

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: xport-test-peer recv-stream SEED COUNT MAX | send-stream SEED COUNT MAX"
                 " | target SIZE | linger | churn | window-target SIZE | atomic-hammer THREADS N\n";
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
