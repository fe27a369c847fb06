// fi-bare-loop: the bare libfabric loops that xport-bench's send, message-rate and bandwidth
// figures are compared with (scripts/bench-bare.py, docs/benchmarks.md). Two processes (this one
// forks the target) on one provider, FI_EP_RDM, busy polling, nothing allocated in the loops:
//   pingpong   SIZE bytes there and back (fi_inject up to the provider's inject_size, else
//              fi_send), receives pre-posted and reposted at each completion; one-way latency
//              is half the round trip.
//   send-rate  WINDOW fi_sends in flight, at most one per SIZE-byte slot of 64 MiB as in
//   send-bw    xport-bench's stream (one at 64 MiB); fi_injects complete at once and are held
//              back only by the provider. The target acks when it has them all, so the clock
//              covers delivery: messages the target received per second.
//   put-rate   fi_write of SIZE into the target's registered buffer (16 slots at most 64 MiB,
//   put-bw     as xport-bench's), WINDOW in flight, polled on the CQ; fi_inject_write up to
//              inject_size, then one fi_read (read after write is ordered) ends the phase.
//              --writedata: fi_writedata, the target counts its FI_REMOTE_CQ_DATA completions
//              and acks when it has them all.
//              --slots N: the writes cycle through N SIZE-byte slots on each side instead (at
//              most 64 MiB); --batch: WINDOW writes are posted, then all their completions
//              awaited before the next WINDOW (a sliding window without it). fabtests'
//              fi_rma_bw -o write is --batch --slots 1 (every write from one buffer to one
//              address) at its default window of 64, though both of its processes write.
//   pingpong --writedata: each side fi_writedata's SIZE bytes into the other's registered
//              buffer and waits for the other's write by its CQ data (what libxport's
//              rendezvous moves a large message with), instead of sends and receives.
// --cpus A,B: the initiator runs on CPU A, the target on CPU B (sched_setaffinity; each
// process's threads too), so that rounds do not differ by where the scheduler put the two.
// --threads N (rate and bandwidth modes): N independent loops at once, each with its own fabric,
// domain, endpoint, CQs and registration and its own thread in both processes (what a runtime
// with a progress thread per NIC or per device does); the figures are the sum over the loops,
// timed from the first start to the last end. Says whether the provider's data path scales with
// threads in one process.
// --json: one object with xport-bench's keys for the same figures (lat_us_*, bw_bytes_per_s,
// msg_per_s, depth) and in_flight, the most operations this loop kept in flight (0: injects);
// the put modes add slots, batch and dst_page_offset (where in its page the target's region
// begins: 0, as xport-bench's slots and fi_rma_bw's buffers).
// A wait that sees no completion for 10 s ends the run (exit 1, naming the wait), as does a
// provider call that does not return for 10 s.
//   fi-bare-loop --mode M [--provider shm] [--size 8] [--iterations N] [--warmup W]
//                [--window 64] [--writedata] [--no-inject] [--gap-us US] [--block] [--json]
//                [--threads N] [--cpus A,B] [--work I,T] [--time-calls] [--slots N] [--batch]
// --work I,T (rate and bandwidth modes; a diagnostic): I steps of a dependent multiply-add chain
// (about 4 cycles each, no memory touched) after each write or send the initiator posts, and T
// after each write's data or receive the target reads: how the rate moves with either side's
// CPU time per message locates what bounds it (docs/benchmarks.md, ninth pass).
// --time-calls (put modes, posted writes; a diagnostic): the timed phase reads the clock around
// each post and each wait for room in the window; the JSON gives their mean ns per write
// (time_calls), as xport-bench --sliding --time-calls does for its put calls and waits.
// --gap-us US (pingpong): the initiator idles US µs (busy, unmeasured) before each ping;
// --block (pingpong): CQs get a wait object (FI_WAIT_FD) and the target waits for each ping
// asleep in poll(2) on its file descriptor. With --gap-us: what a wake-up costs the bare
// fabric (xport-bench --gap-us with XPORT_WAIT=block gives libxport's figure).
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <sys/prctl.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/raw_fabric.hpp"
#include "core/json.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// xport-bench's slot space (tools/bench/ops.hpp kSlotBytes): SIZE-byte slots up to 64 MiB.
constexpr size_t kSlotBytes = size_t{64} << 20;
constexpr size_t kPingPongReceives = 4;  // kept posted on each side
constexpr size_t kAckReceives = 2;
constexpr size_t kAckBytes = 8;   // what an ack carries does not matter
constexpr size_t kPutSlots = 16;  // put modes' slots unless --slots (xport-bench's kRateSlots)

enum class Mode { pingpong, send, put };

struct Args {
  Mode mode = Mode::pingpong;
  std::string mode_name = "pingpong";
  std::string provider = "shm";
  size_t size = 8;
  long iterations = 10000;
  long warmup = -1;  // -1: iterations / 10, at most 1000
  size_t window = 64;
  bool writedata = false;
  bool inject = true;  // --no-inject: fi_send / fi_write at every size
  bool json = false;
  uint32_t work_initiator = 0;  // --work: steps of burn() per message posted
  uint32_t work_target = 0;     // ... and per message or write's data the target reads
  bool time_calls = false;      // --time-calls (put modes, posted writes): clock posts and waits
  long gap_us = 0;     // pingpong: the initiator idles (busy) this long before each ping
  bool block = false;  // pingpong: the target sleeps in fi_cq_sread for each ping
  int threads = 1;     // rate and bandwidth modes: independent fabrics, one thread each
  int cpu_initiator = -1, cpu_target = -1;  // --cpus A,B
  size_t slots = 0;    // put modes: SIZE-byte slots the writes cycle through (0: put_slots)
  bool batch = false;  // put modes: WINDOW writes, then wait for all (fi_rma_bw's loop)
};

const char* g_role = "initiator";

// Sends and writes the provider refused with -FI_EAGAIN, each retried after a progress pass
// (receive reposts are not counted): the JSON's eagain_retries, beside xport-bench's count.
std::atomic<uint64_t> g_eagain{0};

// --threads: the initiator's loops start their clocks together (after their warm-ups).
std::atomic<int> g_unready{0};

void start_together() {
  g_unready.fetch_sub(1);
  while (g_unready.load() > 0) {
  }
}
pid_t g_peer = 0;  // the target, in the initiator

[[noreturn]] void fail() {
  if (g_peer > 0) {
    kill(g_peer, SIGKILL);
    waitpid(g_peer, nullptr, 0);
  }
  std::exit(1);
}

[[noreturn]] void die(const char* what, int ret) {
  std::fprintf(stderr, "fi-bare-loop: %s: %s: %s (%d)\n", g_role, what, fi_strerror(-ret), ret);
  fail();
}

void check(const char* what, int ret) {
  if (ret != 0) die(what, ret);
}

// A provider call that does not return for 10 s ends the run too (shm spins on a lock of the
// other process's region, which a stopped or dying peer may hold): a 1 s timer checks that the
// loops still beat. A beat is a relaxed store, no locked instruction.
std::atomic<uint32_t> g_beat{0};

void beat() { g_beat.store(g_beat.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }

void on_alarm(int) {
  static uint32_t seen = 0;
  static int still = 0;
  const uint32_t now = g_beat.load(std::memory_order_relaxed);
  if (now != seen) {
    seen = now;
    still = 0;
    return;
  }
  if (++still < 10) return;
  static const char head[] = "fi-bare-loop: ";
  static const char tail[] = ": stuck inside libfabric for 10 s\n";
  (void)!write(STDERR_FILENO, head, sizeof(head) - 1);
  (void)!write(STDERR_FILENO, g_role, std::strlen(g_role));
  (void)!write(STDERR_FILENO, tail, sizeof(tail) - 1);
  if (g_peer > 0) kill(g_peer, SIGKILL);
  _exit(1);
}

void start_watchdog() {
  struct sigaction sa {};
  sa.sa_handler = on_alarm;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, nullptr);
  const itimerval every_second{{1, 0}, {1, 0}};
  setitimer(ITIMER_REAL, &every_second, nullptr);
}

// Bounds a wait: the clock is read only after 1024 fruitless polls, so short waits cost none.
struct Stall {
  uint32_t spins = 0;
  Clock::time_point deadline;
  void reset() { spins = 0; }
  void tick(const char* what) {
    if (++spins % 1024 != 0) return;
    const auto now = Clock::now();
    if (spins == 1024) {
      deadline = now + std::chrono::seconds(10);
    } else if (now > deadline) {
      std::fprintf(stderr, "fi-bare-loop: %s: no completion within 10 s while %s\n", g_role, what);
      fail();
    }
  }
};

struct FreeBytes {
  void operator()(uint8_t* p) const { std::free(p); }
};

// One side's libfabric objects (tools/common/raw_fabric.hpp), closed in reverse: the MR, then
// the buffer is freed, the endpoint, AV, CQs, domain and fabric.
struct Fabric {
  raw_fabric::Domain d;
  raw_fabric::Fid<fid_cq> txcq, rxcq;
  raw_fabric::Fid<fid_av> av;
  raw_fabric::Fid<fid_ep> ep;
  std::unique_ptr<uint8_t, FreeBytes> bytes;  // [tx | rx], one registration
  raw_fabric::Fid<fid_mr> mr;
  uint8_t* buf = nullptr;  // bytes.get()
  size_t tx_bytes = 0;
  void* desc = nullptr;
  fi_addr_t peer = FI_ADDR_UNSPEC;
  size_t inject_size = 0;
};

void check(raw_fabric::Outcome o) { check(o.call, o.ret); }

Fabric open_fabric(const char* provider, bool wait_object) {
  raw_fabric::Hints h;
  h.provider = provider;
  raw_fabric::Info list;
  check(raw_fabric::get_info(raw_fabric::make_hints(h).get(), &list));
  Fabric f;
  check(raw_fabric::open_domain(std::move(list), &f.d));
  f.inject_size = f.d.info->tx_attr->inject_size;
  raw_fabric::CqOptions cq;
  cq.size = 1024;
  // --block: CQs with a file descriptor to sleep on, as libxport's XPORT_WAIT=block asks for.
  cq.wait = wait_object ? FI_WAIT_FD : FI_WAIT_NONE;
  fid_domain* domain = f.d.domain.get();
  check("fi_cq_open tx", raw_fabric::open_cq(domain, cq, &f.txcq).ret);
  check("fi_cq_open rx", raw_fabric::open_cq(domain, cq, &f.rxcq).ret);
  check(raw_fabric::open_av(domain, &f.av));
  check(raw_fabric::open_endpoint(domain, f.d.info.get(), f.txcq.get(), f.rxcq.get(), f.av.get(),
                                  &f.ep));
  return f;
}

// One registered buffer per side: `tx` bytes to send or write from, `rx` bytes to receive into
// or be written to, each part starting on a page (as xport-bench's slots and fi_rma_bw's
// buffers do: a write into the region behind an 8-byte ack area was misaligned, every copy one
// page longer). Pages touched before the clock starts.
void register_buffer(Fabric& f, size_t tx, size_t rx) {
  const size_t page = 4096;
  tx = (tx + page - 1) / page * page;
  const size_t len = (tx + rx + page - 1) / page * page;
  f.bytes.reset(static_cast<uint8_t*>(std::aligned_alloc(page, len)));
  f.buf = f.bytes.get();
  if (f.buf == nullptr) die("aligned_alloc", -FI_ENOMEM);
  std::memset(f.buf, 0x5a, len);
  f.tx_bytes = tx;
  check(raw_fabric::register_memory(f.d.domain.get(), *f.d.info, f.ep.get(), f.buf, len,
                                    raw_fabric::kAllAccess, 0, &f.mr));
  f.desc = fi_mr_desc(f.mr.get());
}

// What each side tells the other before the first message.
struct Hello {
  raw_fabric::Address addr;
  uint64_t rx;  // its receive/write region: address (FI_MR_VIRT_ADDR) or offset
  uint64_t key;
};

void write_all(int fd, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    ssize_t w = write(fd, b, n);
    if (w <= 0) die("pipe write", -FI_EIO);
    b += w;
    n -= static_cast<size_t>(w);
  }
}

void read_all(int fd, void* p, size_t n) {
  auto* b = static_cast<uint8_t*>(p);
  while (n > 0) {
    ssize_t r = read(fd, b, n);
    if (r <= 0) die("pipe read (the other side exited)", -FI_EIO);
    b += r;
    n -= static_cast<size_t>(r);
  }
}

Hello exchange(Fabric& f, int out, int in) {
  Hello mine{};
  check(raw_fabric::get_address(f.ep.get(), &mine.addr));
  const bool virt = f.d.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR;
  mine.rx = virt ? reinterpret_cast<uint64_t>(f.buf + f.tx_bytes) : f.tx_bytes;
  mine.key = fi_mr_key(f.mr.get());
  write_all(out, &mine, sizeof(mine));
  Hello theirs{};
  read_all(in, &theirs, sizeof(theirs));
  start_watchdog();
  check(raw_fabric::insert_address(f.av.get(), theirs.addr.bytes, &f.peer));
  return theirs;
}

// --work: a dependent multiply-add chain of `steps` steps, its result kept so that it is not
// optimised away. No memory is touched: only this CPU's time.
uint64_t g_burn_sink = 0;
void burn(uint32_t steps) {
  uint64_t x = g_burn_sink | 1;
  for (uint32_t i = 0; i < steps; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    asm volatile("" : "+r"(x));
  }
  g_burn_sink = x;
}

// The two CQs of one side. Receive completions repost their receive at once; RMA-with-data
// completions at the target are counted apart (they consume no posted receive here).
struct Queues {
  Fabric* f = nullptr;
  size_t rx_size = 0;       // bytes per receive
  size_t rx_slots = 1;      // receive k lands in slot k % rx_slots
  size_t reposts = 0;       // receives posted so far (the next one's slot)
  size_t repost_due = 0;    // completed receives not yet reposted (the provider said again)
  uint64_t received = 0;    // receive completions
  uint64_t rma_data = 0;    // FI_REMOTE_CQ_DATA completions of writes
  uint64_t tx_pending = 0;  // sends, writes and reads posted and not completed
  uint32_t work = 0;        // --work: burn() steps per receive or write's data read
  fi_context rx_ctx{};
  fi_context tx_ctx{};
  fi_cq_data_entry e[64];

  uint8_t* rx_slot(size_t k) const { return f->buf + f->tx_bytes + (k % rx_slots) * rx_size; }

  int post_recv() {
    const int ret = static_cast<int>(
        fi_recv(f->ep.get(), rx_slot(reposts), rx_size, f->desc, FI_ADDR_UNSPEC, &rx_ctx));
    if (ret == 0) ++reposts;
    return ret;
  }

  void post_receives(size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const int ret = post_recv();
      if (ret == -FI_EAGAIN) {
        repost_due += n - i;  // progress posts the rest
        return;
      }
      check("fi_recv", ret);
    }
  }

  [[noreturn]] void cq_error(fid_cq* cq, const char* which) {
    fi_cq_err_entry err{};
    fi_cq_readerr(cq, &err, 0);
    std::fprintf(stderr, "fi-bare-loop: %s: %s completion error: %s (%s)\n", g_role, which,
                 fi_strerror(err.err),
                 fi_cq_strerror(cq, err.prov_errno, err.err_data, nullptr, 0));
    fail();
  }

  // One pass over both queues; returns how many completions it saw.
  size_t progress() {
    beat();
    size_t seen = 0;
    for (; repost_due > 0; --repost_due) {
      const int ret = post_recv();
      if (ret == -FI_EAGAIN) break;
      check("fi_recv", ret);
    }
    ssize_t n = fi_cq_read(f->rxcq.get(), e, 64);
    seen += handle_rx(n);
    if (tx_pending == 0) return seen;
    n = fi_cq_read(f->txcq.get(), e, 64);
    if (n > 0) {
      tx_pending -= static_cast<uint64_t>(n);
      seen += static_cast<size_t>(n);
    } else if (n == -FI_EAVAIL) {
      cq_error(f->txcq.get(), "transmit");
    } else if (n != -FI_EAGAIN) {
      die("fi_cq_read tx", static_cast<int>(n));
    }
    return seen;
  }

  // What fi_cq_read or fi_cq_sread of the receive CQ returned (n entries in e, or an error).
  size_t handle_rx(ssize_t n) {
    size_t seen = 0;
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        if (e[i].flags & FI_RECV) {
          ++received;
          burn(work);
          const int ret = repost_due > 0 ? -FI_EAGAIN : post_recv();
          if (ret == -FI_EAGAIN) {
            ++repost_due;
          } else {
            check("fi_recv", ret);
          }
        } else if (e[i].flags & FI_REMOTE_CQ_DATA) {
          ++rma_data;
          burn(work);
        }
      }
      seen += static_cast<size_t>(n);
    } else if (n == -FI_EAVAIL) {
      cq_error(f->rxcq.get(), "receive");
    } else if (n != -FI_EAGAIN && n != -FI_ETIMEDOUT) {
      die("fi_cq_read rx", static_cast<int>(n));
    }
    return seen;
  }

  // --block: as wait(), but asleep on the receive CQ's file descriptor (fi_trywait, then
  // poll(2), 100 ms at a time) whenever a pass found nothing: what libxport's blocking wait
  // does (fi_cq_sread, tried first, cost ~50 µs more per wake-up on tcp;ofi_rxm).
  void wait_blocking(const uint64_t* count, uint64_t target, const char* what) {
    int fd = -1;
    check("fi_control FI_GETWAIT", fi_control(&f->rxcq->fid, FI_GETWAIT, &fd));
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (*count < target) {
      if (progress() > 0) continue;  // reposts, transmit completions, what came meanwhile
      fid_t cq = &f->rxcq->fid;
      if (fi_trywait(f->d.fabric.get(), &cq, 1) != 0) continue;  // entries to read first
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 100) == 0 && Clock::now() > deadline) {
        std::fprintf(stderr, "fi-bare-loop: %s: no completion within 10 s while %s\n", g_role,
                     what);
        fail();
      }
    }
  }

  // Posts with `post` until the provider takes it, driving progress while it says again.
  template <typename F>
  void post(const char* what, F&& op) {
    Stall stall;
    for (;;) {
      const int ret = static_cast<int>(op());
      beat();
      if (ret == 0) return;
      if (ret != -FI_EAGAIN) die(what, ret);
      g_eagain.fetch_add(1, std::memory_order_relaxed);
      if (progress() > 0) stall.reset();
      stall.tick(what);
    }
  }

  // Polls until `*count` reaches `target`.
  void wait(const uint64_t* count, uint64_t target, const char* what) {
    Stall stall;
    while (*count < target) {
      if (progress() > 0) {
        stall.reset();
      } else {
        stall.tick(what);
      }
    }
  }

  void wait_tx_below(uint64_t limit, const char* what) {
    Stall stall;
    while (tx_pending >= limit) {
      if (progress() > 0) {
        stall.reset();
      } else {
        stall.tick(what);
      }
    }
  }

  // One write of `len` bytes from `buf` into the peer's region at `dst` with CQ data `data`
  // (pingpong --writedata): fi_inject_writedata where it fits, else fi_writedata.
  void write(const void* buf, size_t len, uint64_t data, uint64_t dst, uint64_t key,
             bool inject) {
    if (inject) {
      post("fi_inject_writedata",
           [&] { return fi_inject_writedata(f->ep.get(), buf, len, data, f->peer, dst, key); });
      return;
    }
    post("fi_writedata", [&] {
      return fi_writedata(f->ep.get(), buf, len, f->desc, data, f->peer, dst, key, &tx_ctx);
    });
    ++tx_pending;
  }

  // One send of `len` bytes from `buf`: fi_inject where it fits (no completion), else fi_send.
  void send(const void* buf, size_t len, bool inject) {
    if (inject) {
      post("fi_inject", [&] { return fi_inject(f->ep.get(), buf, len, f->peer); });
      return;
    }
    post("fi_send", [&] { return fi_send(f->ep.get(), buf, len, f->desc, f->peer, &tx_ctx); });
    ++tx_pending;
  }
};

bool done_said(int fd) {
  char c;
  return read(fd, &c, 1) != -1 || errno != EAGAIN;  // a byte, or the initiator's end
}

// The target's last part: progress (a provider with manual progress may still owe the
// initiator data) until the initiator says it is done.
void serve_until_done(Queues& q, int from_initiator) {
  fcntl(from_initiator, F_SETFL, O_NONBLOCK);
  for (uint32_t spin = 0;; ++spin) {
    q.progress();
    if (spin % 256 == 0 && done_said(from_initiator)) return;
  }
}

uint64_t warmup_of(const Args& a) {
  return a.warmup >= 0 ? static_cast<uint64_t>(a.warmup)
                       : static_cast<uint64_t>(std::min(1000L, a.iterations / 10));
}

size_t slots_of(const Args& a, size_t bound) {
  return std::clamp<size_t>(kSlotBytes / a.size, 1, bound);
}

// The slots the put modes' writes cycle through: --slots, or kPutSlots whatever the window (as
// xport-bench's puts: tools/bench/ops.hpp kRateSlots), so that a deeper window moves more writes
// at once over the same memory, not over more of it.
size_t put_slots(const Args& a) { return a.slots > 0 ? a.slots : slots_of(a, kPutSlots); }

// Sends in flight in send-rate: WINDOW, at most one per slot as xport-bench's stream.
size_t send_window(const Args& a) { return slots_of(a, a.window); }

// Receives the send-rate target keeps posted.
size_t send_receives(const Args& a, const Fabric& f) {
  return std::clamp<size_t>(2 * a.window, 2, f.d.info->rx_attr->size);
}

// ---- target ----

// The target's side of a rate or bandwidth loop: its buffer, the exchange, its receives.
void target_prepare(const Args& a, Fabric& f, Queues& q, int to_initiator, int from_initiator) {
  if (a.mode == Mode::send) {
    const size_t receives = send_receives(a, f);
    q.rx_size = a.size;
    q.rx_slots = slots_of(a, receives);
    register_buffer(f, kAckBytes, q.rx_slots * a.size);
    exchange(f, to_initiator, from_initiator);
    q.post_receives(receives);
  } else {
    register_buffer(f, kAckBytes, put_slots(a) * a.size);
    exchange(f, to_initiator, from_initiator);
  }
}

// ... and its loop: receives (or writes' data) counted, the ends of warm-up and run acked.
void target_loop(const Args& a, Queues& q) {
  const uint64_t warmup = warmup_of(a);
  const uint64_t total = warmup + static_cast<uint64_t>(a.iterations);
  const Fabric& f = *q.f;
  if (a.mode == Mode::send) {
    if (warmup > 0) {
      q.wait(&q.received, warmup, "receiving the warm-up sends");
      q.send(f.buf, kAckBytes, kAckBytes <= f.inject_size);
    }
    q.wait(&q.received, total, "receiving the sends");
    q.send(f.buf, kAckBytes, kAckBytes <= f.inject_size);
  } else if (a.writedata) {  // the writes' CQ data is counted here, acked as sends are
    if (warmup > 0) {
      q.wait(&q.rma_data, warmup, "counting the warm-up writes' data");
      q.send(f.buf, kAckBytes, kAckBytes <= f.inject_size);
    }
    q.wait(&q.rma_data, total, "counting the writes' data");
    q.send(f.buf, kAckBytes, kAckBytes <= f.inject_size);
  }
}

// --threads: one loop per thread, each progressing its own fabric until the initiator is done.
int target_threads(const Args& a, int to_initiator, int from_initiator) {
  std::vector<Fabric> fs;
  std::vector<Queues> qs(static_cast<size_t>(a.threads));
  for (int i = 0; i < a.threads; ++i) {
    fs.push_back(open_fabric(a.provider.c_str(), false));
  }
  for (size_t i = 0; i < fs.size(); ++i) {
    qs[i].f = &fs[i];
    qs[i].work = a.work_target;
    target_prepare(a, fs[i], qs[i], to_initiator, from_initiator);
  }
  std::atomic<bool> done{false};
  std::vector<std::thread> ts;
  for (auto& q : qs) {
    ts.emplace_back([&a, &q, &done] {
      target_loop(a, q);
      while (!done.load(std::memory_order_relaxed)) q.progress();
    });
  }
  char c;
  (void)!read(from_initiator, &c, 1);  // a byte, or the initiator's end
  done = true;
  for (auto& t : ts) t.join();
  return 0;
}

int target(const Args& a, int to_initiator, int from_initiator) {
  g_role = "target";
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (a.threads > 1) return target_threads(a, to_initiator, from_initiator);
  Fabric f = open_fabric(a.provider.c_str(), a.block);
  Queues q;
  q.f = &f;
  q.work = a.work_target;
  const uint64_t warmup = warmup_of(a);
  const uint64_t total = warmup + static_cast<uint64_t>(a.iterations);
  const bool inject = a.inject && a.size <= f.inject_size;
  if (a.mode == Mode::pingpong) {
    register_buffer(f, a.size, a.size);
    q.rx_size = a.size;
    const Hello peer = exchange(f, to_initiator, from_initiator);
    q.post_receives(std::min(kPingPongReceives, f.d.info->rx_attr->size));
    const uint64_t* seen = a.writedata ? &q.rma_data : &q.received;  // pings, or their writes
    for (uint64_t i = 0; i < total; ++i) {
      if (a.block) {
        q.wait_blocking(seen, i + 1, "waiting for a ping (fi_cq_sread)");
      } else {
        q.wait(seen, i + 1, a.writedata ? "waiting for a ping's write" : "waiting for a ping");
      }
      q.wait_tx_below(64, "sending pongs");
      if (a.writedata) {
        q.write(f.buf, a.size, i, peer.rx, peer.key, inject);
      } else {
        q.send(f.buf, a.size, inject);
      }
    }
  } else {
    target_prepare(a, f, q, to_initiator, from_initiator);
    target_loop(a, q);
  }
  serve_until_done(q, from_initiator);
  return 0;
}

// ---- initiator ----

struct Result {
  std::vector<double> lat_us;  // one-way, per round trip (pingpong)
  double seconds = 0;
  double messages = 0;
  // The most operations in flight: the window (sends: at most one per slot); 0 for injects,
  // which complete at once and are held back only by the provider.
  size_t in_flight = 1;
  bool inject = false;
  Clock::time_point t0, t1;  // the timed phase (--threads: summed over loops by their span)
  double call_ns = -1, wait_ns = -1;  // --time-calls: mean ns per timed write, posting / waiting
  uint64_t dst_page_offset = 0;       // put modes: where in its page the target's region begins
};

// --writedata: each side writes the SIZE bytes into the other's region (fi_writedata, the
// primitive libxport's rendezvous moves a large message with) and waits for the other's write
// by its CQ data, instead of sends into pre-posted receives.
Result pingpong(const Args& a, Fabric& f, Queues& q, const Hello& peer) {
  Result r;
  r.inject = a.inject && a.size <= f.inject_size;
  const uint64_t warmup = warmup_of(a);
  const uint64_t total = warmup + static_cast<uint64_t>(a.iterations);
  r.lat_us.reserve(static_cast<size_t>(a.iterations));
  q.post_receives(std::min(kPingPongReceives, f.d.info->rx_attr->size));
  // One clock read per round trip: each one's end is the next one's start.
  auto t0 = Clock::now();
  auto start = t0;
  for (uint64_t i = 0; i < total; ++i) {
    q.wait_tx_below(64, "sending pings");
    if (a.gap_us > 0) {
      // --gap-us: idle (busy, driving progress, unmeasured) so a blocking target is asleep
      // when the ping comes; the round trip is timed from the end of the gap.
      const auto until = Clock::now() + std::chrono::microseconds(a.gap_us);
      while (Clock::now() < until) q.progress();
      t0 = Clock::now();
      if (i == warmup) start = t0;
    }
    if (a.writedata) {
      q.write(f.buf, a.size, i, peer.rx, peer.key, r.inject);
      q.wait(&q.rma_data, i + 1, "waiting for a pong's write");
    } else {
      q.send(f.buf, a.size, r.inject);
      q.wait(&q.received, i + 1, "waiting for a pong");
    }
    const auto t1 = Clock::now();
    if (i == warmup && a.gap_us == 0) start = t0;
    if (i >= warmup)
      r.lat_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 2);
    t0 = t1;
  }
  r.seconds = std::chrono::duration<double>(t0 - start).count();
  r.messages = 2.0 * static_cast<double>(a.iterations);  // both directions, as xport-bench
  return r;
}

Result send_rate(const Args& a, Fabric& f, Queues& q) {
  Result r;
  r.inject = a.inject && a.size <= f.inject_size;
  r.in_flight = r.inject ? 0 : send_window(a);
  const uint64_t warmup = warmup_of(a);
  const size_t slots = slots_of(a, a.window);
  q.post_receives(kAckReceives);
  uint64_t sent = 0;
  auto phase = [&](uint64_t count, uint64_t acks, const char* what) {
    for (const uint64_t end = sent + count; sent < end; ++sent) {
      if (!r.inject) q.wait_tx_below(send_window(a), "keeping the window of sends");
      q.send(f.buf + (sent % slots) * a.size, a.size, r.inject);
      burn(a.work_initiator);
    }
    q.wait(&q.received, acks, what);
  };
  if (warmup > 0) phase(warmup, 1, "waiting for the warm-up ack");
  if (a.threads > 1) start_together();
  const auto t0 = Clock::now();
  phase(static_cast<uint64_t>(a.iterations), warmup > 0 ? 2 : 1, "waiting for the final ack");
  r.t0 = t0;
  r.t1 = Clock::now();
  r.seconds = std::chrono::duration<double>(r.t1 - t0).count();
  r.messages = static_cast<double>(a.iterations);
  q.wait_tx_below(1, "finishing the sends");
  return r;
}

Result put_rate(const Args& a, Fabric& f, Queues& q, const Hello& target) {
  Result r;
  r.inject = a.inject && a.size <= f.inject_size;
  r.in_flight = r.inject ? 0 : a.window;
  const uint64_t warmup = warmup_of(a);
  const size_t slots = put_slots(a);
  r.dst_page_offset = target.rx % 4096;  // (an address or an offset into a page-aligned buffer)
  if (a.writedata) q.post_receives(kAckReceives);
  uint64_t issued = 0;
  uint64_t acks = 0;
  bool timing = false;                   // --time-calls, in the timed phase
  Clock::duration in_calls{}, in_waits{};
  auto phase = [&](uint64_t count, const char* what) {
    for (const uint64_t end = issued + count; issued < end; ++issued) {
      const size_t off = (issued % slots) * a.size;
      uint8_t* src = f.buf + off;
      const uint64_t dst = target.rx + off;
      if (r.inject) {
        if (a.writedata) {
          q.post("fi_inject_writedata", [&] {
            return fi_inject_writedata(f.ep.get(), src, a.size, issued, f.peer, dst, target.key);
          });
        } else {
          q.post("fi_inject_write",
                 [&] { return fi_inject_write(f.ep.get(), src, a.size, f.peer, dst, target.key); });
        }
        burn(a.work_initiator);
        continue;
      }
      const auto w0 = timing ? Clock::now() : Clock::time_point{};
      // --batch: a full window is waited for to the last write (fi_rma_bw's ft_get_tx_comp).
      q.wait_tx_below(a.batch && q.tx_pending >= a.window ? 1 : a.window,
                      "keeping the window of writes");
      const auto c0 = timing ? Clock::now() : Clock::time_point{};
      if (a.writedata) {
        q.post("fi_writedata", [&] {
          return fi_writedata(f.ep.get(), src, a.size, f.desc, issued, f.peer, dst, target.key,
                              &q.tx_ctx);
        });
      } else {
        q.post("fi_write", [&] {
          return fi_write(f.ep.get(), src, a.size, f.desc, f.peer, dst, target.key, &q.tx_ctx);
        });
      }
      if (timing) {
        const auto c1 = Clock::now();
        in_waits += c0 - w0;
        in_calls += c1 - c0;
      }
      ++q.tx_pending;
      burn(a.work_initiator);
    }
    if (a.writedata) {  // the target saw every write's data
      q.wait(&q.received, ++acks, what);
    } else if (r.inject) {  // injected writes have no completion: a read ordered after them
      q.post("fi_read", [&] {
        return fi_read(f.ep.get(), f.buf, sizeof(uint64_t), f.desc, f.peer, target.rx, target.key,
                       &q.tx_ctx);
      });
      ++q.tx_pending;
    }
    q.wait_tx_below(1, what);
  };
  if (warmup > 0) phase(warmup, "finishing the warm-up writes");
  if (a.threads > 1) start_together();
  timing = a.time_calls && !r.inject;
  const auto t0 = Clock::now();
  phase(static_cast<uint64_t>(a.iterations), "finishing the writes");
  r.t0 = t0;
  r.t1 = Clock::now();
  r.seconds = std::chrono::duration<double>(r.t1 - t0).count();
  r.messages = static_cast<double>(a.iterations);
  if (timing) {
    r.call_ns = static_cast<double>(std::chrono::nanoseconds(in_calls).count()) / r.messages;
    r.wait_ns = static_cast<double>(std::chrono::nanoseconds(in_waits).count()) / r.messages;
  }
  return r;
}

double percentile(const std::vector<double>& sorted, double p) {  // as xport-bench's report
  if (sorted.empty()) return 0;
  const size_t i = static_cast<size_t>(p * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(i, sorted.size() - 1)];
}

void report(const Args& a, const Fabric& f, Result& r) {
  const char* op = a.writedata                                          ? "writedata"
                   : a.mode == Mode::pingpong || a.mode == Mode::send ? "send"
                                                                      : "put";
  const double bw = r.seconds > 0 ? r.messages * static_cast<double>(a.size) / r.seconds : 0;
  const double rate = r.seconds > 0 ? r.messages / r.seconds : 0;
  std::sort(r.lat_us.begin(), r.lat_us.end());
  double sum = 0;
  for (double v : r.lat_us) sum += v;
  const double mean = r.lat_us.empty() ? 0 : sum / static_cast<double>(r.lat_us.size());
  const double p50 = percentile(r.lat_us, 0.5), p99 = percentile(r.lat_us, 0.99);
  const double max = r.lat_us.empty() ? 0 : r.lat_us.back();
  const char* prov = f.d.info->fabric_attr->prov_name;
  if (a.json) {
    using xport::core::JsonFixed;
    std::string out;
    xport::core::JsonWriter w(out);
    w.begin_object()
        .field("tool", "fi-bare-loop")
        .field("loop", a.mode_name)
        .field("op", op)
        .field("size", a.size)
        .field("provider", prov)
        .field("inject", r.inject);
    if (a.mode == Mode::pingpong) {
      w.field("lat_us_p50", JsonFixed{p50, 3})
          .field("lat_us_p99", JsonFixed{p99, 3})
          .field("lat_us_max", JsonFixed{max, 3})
          .field("lat_us_mean", JsonFixed{mean, 3});
    }
    w.field("bw_bytes_per_s", JsonFixed{bw, 0})
        .field("msg_per_s", JsonFixed{rate, 0})
        .field("iterations", a.iterations)
        .field("warmup", warmup_of(a))
        .field("depth", a.mode == Mode::pingpong ? size_t{1} : a.window)
        .field("in_flight", r.in_flight)
        .field("threads", a.threads)
        .field("eagain_retries", g_eagain.load());
    if (a.mode == Mode::put) {
      w.field("slots", put_slots(a))
          .field("batch", a.batch)
          .field("dst_page_offset", r.dst_page_offset);
    }
    if (r.call_ns >= 0) {
      w.begin_object("time_calls")
          .field("call_ns", JsonFixed{r.call_ns, 1})
          .field("wait_ns", JsonFixed{r.wait_ns, 1})
          .end_object();
    }
    w.end_object();
    std::printf("%s\n", out.c_str());
  } else if (a.mode == Mode::pingpong) {
    std::printf(
        "provider %s  %s %s %zu B  iterations %ld  one-way p50_us %.2f  p99_us %.2f  "
        "mean_us %.2f\n",
        prov, a.mode_name.c_str(),
        a.writedata ? (r.inject ? "fi_inject_writedata" : "fi_writedata")
                    : (r.inject ? "fi_inject" : "fi_send"),
        a.size, a.iterations, p50, p99, mean);
  } else {
    std::printf(
        "provider %s  %s %s%s %zu B  threads %d  in flight %zu%s  iterations %ld  msg_per_s %.0f  "
        "GB/s %.3f\n",
        prov, a.mode_name.c_str(), r.inject ? "inject " : "", op, a.size, a.threads, r.in_flight,
        a.mode != Mode::put ? ""
        : a.batch           ? (" (batches), slots " + std::to_string(put_slots(a))).c_str()
                            : (", slots " + std::to_string(put_slots(a))).c_str(),
        a.iterations, rate, bw / 1e9);
  }
  std::fflush(stdout);
}

// The initiator's side of a rate or bandwidth loop: its buffer (SIZE-byte slots to send or write
// from, and the acks' receives), the exchange; the target's region for put_rate.
Hello initiator_prepare(const Args& a, Fabric& f, Queues& q, int to_target, int from_target) {
  register_buffer(f, (a.mode == Mode::put ? put_slots(a) : slots_of(a, a.window)) * a.size,
                  kAckBytes * kAckReceives);
  q.rx_size = kAckBytes;
  q.rx_slots = kAckReceives;
  return exchange(f, to_target, from_target);
}

Result rate_loop(const Args& a, Fabric& f, Queues& q, const Hello& target) {
  return a.mode == Mode::send ? send_rate(a, f, q) : put_rate(a, f, q, target);
}

// --threads: N loops, each on its own fabric and thread; one Result summing them.
Result initiator_threads(const Args& a, std::vector<Fabric>& fs, int to_target, int from_target) {
  std::vector<Queues> qs(fs.size());
  std::vector<Hello> targets;
  for (size_t i = 0; i < fs.size(); ++i) {
    qs[i].f = &fs[i];
    targets.push_back(initiator_prepare(a, fs[i], qs[i], to_target, from_target));
  }
  std::vector<Result> rs(fs.size());
  g_unready = static_cast<int>(fs.size());
  std::vector<std::thread> ts;
  for (size_t i = 0; i < fs.size(); ++i) {
    ts.emplace_back([&, i] { rs[i] = rate_loop(a, fs[i], qs[i], targets[i]); });
  }
  for (auto& t : ts) t.join();
  Result sum = rs[0];
  for (size_t i = 1; i < rs.size(); ++i) {
    sum.t0 = std::min(sum.t0, rs[i].t0);
    sum.t1 = std::max(sum.t1, rs[i].t1);
    sum.messages += rs[i].messages;
    sum.in_flight += rs[i].in_flight;
  }
  sum.seconds = std::chrono::duration<double>(sum.t1 - sum.t0).count();
  return sum;
}

int initiator(const Args& a, int to_target, int from_target) {
  std::vector<Fabric> fs;  // one, or --threads of them
  Result r;
  if (a.threads > 1) {
    for (int i = 0; i < a.threads; ++i) fs.push_back(open_fabric(a.provider.c_str(), false));
    r = initiator_threads(a, fs, to_target, from_target);
  } else {
    fs.push_back(open_fabric(a.provider.c_str(), a.block));
    Fabric& f = fs[0];
    Queues q;
    q.f = &f;
    if (a.mode == Mode::pingpong) {
      register_buffer(f, a.size, a.size);
      q.rx_size = a.size;
      const Hello peer = exchange(f, to_target, from_target);
      r = pingpong(a, f, q, peer);
    } else {
      const Hello target = initiator_prepare(a, f, q, to_target, from_target);
      r = rate_loop(a, f, q, target);
    }
  }
  write_all(to_target, "x", 1);
  int status = 0;
  waitpid(g_peer, &status, 0);
  g_peer = 0;
  report(a, fs[0], r);
  fs.clear();  // every fabric closed before the verdict, as before
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "fi-bare-loop: the target failed\n");
    return 1;
  }
  return 0;
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "fi-bare-loop: %s\nusage: fi-bare-loop --mode pingpong|send-rate|send-bw|"
               "put-rate|put-bw [--provider shm] [--size 8|4K|1M] [--iterations 10000] "
               "[--warmup N] [--window 64] [--writedata] [--no-inject] [--gap-us US] [--block] "
               "[--json] [--threads N] [--cpus A,B] [--work I,T] [--time-calls] [--slots N] "
               "[--batch]\n",
               why);
  std::exit(2);
}

size_t parse_size(const char* s) {
  char* end = nullptr;
  unsigned long long v = std::strtoull(s, &end, 10);
  const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(*end)));
  const int shift = u == 'K' ? 10 : u == 'M' ? 20 : u == 'G' ? 30 : 0;
  if (end == s || v == 0 || (shift == 0 && *end != '\0') || (shift > 0 && end[1] != '\0')) {
    usage("--size wants a positive size (8, 4K, 1M)");
  }
  return static_cast<size_t>(v << shift);
}

// "X,Y", each a number in 0..most (--cpus, --work).
bool parse_pair(const char* v, long most, long* x, long* y) {
  char* end = nullptr;
  *x = std::strtol(v, &end, 10);
  if (end == v || *end != ',') return false;
  const char* w = end + 1;
  *y = std::strtol(w, &end, 10);
  return end != w && *end == '\0' && *x >= 0 && *y >= 0 && *x <= most && *y <= most;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage((k + " wants a value").c_str());
      return argv[++i];
    };
    if (k == "--mode") {
      a.mode_name = value();
      if (a.mode_name == "pingpong") {
        a.mode = Mode::pingpong;
      } else if (a.mode_name == "send-rate" || a.mode_name == "send-bw") {
        a.mode = Mode::send;
      } else if (a.mode_name == "put-rate" || a.mode_name == "put-bw") {
        a.mode = Mode::put;
      } else {
        usage("unknown --mode");
      }
    } else if (k == "--provider") {
      a.provider = value();
    } else if (k == "--size") {
      a.size = parse_size(value());
    } else if (k == "--iterations") {
      a.iterations = std::atol(value());
      if (a.iterations < 1) usage("--iterations wants at least 1");
    } else if (k == "--warmup") {
      a.warmup = std::atol(value());
      if (a.warmup < 0) usage("--warmup wants 0 or more");
    } else if (k == "--window") {
      const long w = std::atol(value());
      if (w < 1 || w > 4096) usage("--window wants 1..4096");
      a.window = static_cast<size_t>(w);
    } else if (k == "--writedata") {
      a.writedata = true;
    } else if (k == "--no-inject") {
      a.inject = false;
    } else if (k == "--gap-us") {
      a.gap_us = std::atol(value());
      if (a.gap_us < 0 || a.gap_us > 1000000) usage("--gap-us wants 0..1000000");
    } else if (k == "--block") {
      a.block = true;
    } else if (k == "--json") {
      a.json = true;
    } else if (k == "--cpus") {
      long x = 0, y = 0;
      if (!parse_pair(value(), CPU_SETSIZE - 1, &x, &y)) {
        usage("--cpus wants A,B (the initiator's CPU, the target's)");
      }
      a.cpu_initiator = static_cast<int>(x);
      a.cpu_target = static_cast<int>(y);
    } else if (k == "--work") {
      long x = 0, y = 0;
      if (!parse_pair(value(), 1000000, &x, &y)) {
        usage("--work wants I,T, each 0..1000000 (burn steps per message: initiator, target)");
      }
      a.work_initiator = static_cast<uint32_t>(x);
      a.work_target = static_cast<uint32_t>(y);
    } else if (k == "--time-calls") {
      a.time_calls = true;
    } else if (k == "--slots") {
      const long n = std::atol(value());
      if (n < 1 || n > 4096) usage("--slots wants 1..4096");
      a.slots = static_cast<size_t>(n);
    } else if (k == "--batch") {
      a.batch = true;
    } else if (k == "--threads") {
      a.threads = std::atoi(value());
      if (a.threads < 1 || a.threads > 64) usage("--threads wants 1..64");
    } else {
      usage(("unknown option " + k).c_str());
    }
  }
  if (a.writedata && a.mode == Mode::send) {
    usage("--writedata goes with pingpong, put-rate and put-bw");
  }
  if ((a.gap_us > 0 || a.block) && a.mode != Mode::pingpong) {
    usage("--gap-us and --block go with --mode pingpong");
  }
  if ((a.work_initiator > 0 || a.work_target > 0) && a.mode == Mode::pingpong) {
    usage("--work goes with the rate and bandwidth modes");
  }
  if (a.time_calls && (a.mode != Mode::put || a.threads > 1)) {
    usage("--time-calls goes with put-rate and put-bw, one thread");
  }
  if (a.threads > 1 && a.mode == Mode::pingpong) usage("--threads goes with the rate and bandwidth modes");
  if ((a.slots > 0 || a.batch) && a.mode != Mode::put) {
    usage("--slots and --batch go with put-rate and put-bw");
  }
  if (a.slots > 0 && a.slots > std::max<size_t>(1, kSlotBytes / a.size)) {
    usage("--slots: at most 64 MiB of SIZE-byte slots");
  }
  return a;
}

}  // namespace

// --cpus: this process (the calling thread, and the threads it starts later) on one CPU.
void pin_to(int cpu, const char* who) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    std::fprintf(stderr, "fi-bare-loop (%s): --cpus: CPU %d: %s\n", who, cpu,
                 std::strerror(errno));
    std::exit(2);
  }
}

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.cpu_initiator >= 0) {  // both CPUs usable here, before the target is forked
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) die("sched_getaffinity", -FI_EIO);
    for (int cpu : {a.cpu_initiator, a.cpu_target}) {
      if (!CPU_ISSET(cpu, &allowed)) {
        usage(("--cpus: CPU " + std::to_string(cpu) + " is not one this process may run on")
                  .c_str());
      }
    }
  }
  int up[2], down[2];
  if (pipe(up) != 0 || pipe(down) != 0) die("pipe", -FI_EIO);
  const pid_t pid = fork();
  if (pid < 0) die("fork", -FI_EIO);
  if (pid == 0) {
    close(up[0]);
    close(down[1]);
    pin_to(a.cpu_target, "target");
    return target(a, up[1], down[0]);
  }
  pin_to(a.cpu_initiator, "initiator");
  g_peer = pid;
  close(up[1]);
  close(down[0]);
  return initiator(a, down[1], up[0]);
}
