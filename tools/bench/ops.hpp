// The measured operations of xport-bench: a Session is the connection to one peer (N two-sided
// comms each way, a window over each, registered buffers); each op is one initiator function
// and, where the target takes part, one target function. Control messages travel on comm 0.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "options.hpp"
#include "xport/xport.hpp"

namespace bench {

// One measured point, as both sides run it.
struct Plan {
  Op op = Op::send;
  size_t size = 0;
  int warmup = 0;
  int iterations = 0;
  int depth = 1;  // operations outstanding (send) or per quiet (put, get)
  int slots = 1;  // distinct buffer areas of `size` bytes, so checked transfers never overlap
                  // (unchecked puts and gets: kRateSlots or --slots)
  bool check = false;
  bool sliding = false;  // put/get rate phase: `depth` in flight, each new op waits for the
                        // oldest to be locally complete; one quiet ends the phase
  bool time_calls = false;  // sliding: clock each call and each wait (Measured::call_ns)
  int64_t corrupt = -1;  // tests of --check: the data source flips a byte in this iteration
  int gap_us = 0;        // send ping-pong: the initiator idles this long before each ping
  // put-signal: round trips (put_signal, the peer's wait_signal and reply put_signal, a
  // wait_signal here) instead of put_signal + quiet. --initiator device: kernels issue the
  // operations through a GpuProxy (put; put-signal round trips on both sides).
  bool round_trip = false;
  bool device = false;
  int scope = 0;  // gpu::Scope of a device put: thread, warp, block
};

// Operations in flight never span more than this many bytes of buffer: depth is lowered for
// large sizes (64 MiB: one slot).
inline constexpr size_t kSlotBytes = size_t{64} << 20;
// Unchecked puts and gets cycle through this many slots (at most kSlotBytes of them) whatever the
// depth, unless --slots says otherwise: a deeper window then moves more operations at once over
// the same memory, not over more of it (one slot per operation made --depth 64 at 1 MiB copy
// between 128 MiB of buffers where --depth 16 used 32, out of cache and slower on shm, with
// libxport's own work per put the same). fi-bare-loop's put modes use as many (kPutSlots).
inline constexpr size_t kRateSlots = 16;
Plan make_plan(const Options& opt, size_t size);
size_t buffer_bytes(const std::vector<Plan>& plans);

struct Measured {
  std::vector<double> lat_us;  // one sample per measured latency iteration
  double seconds = 0;          // of the bandwidth / message-rate phase (its timed parts)
  double wall_seconds = 0;     // the same phase from start to end, verification included
  std::chrono::steady_clock::time_point phase_start, phase_end;  // of that phase
  double bytes = 0;
  double messages = 0;
  // --time-calls: mean ns per timed operation inside the put/get call and inside the wait for
  // the oldest operation (-1: not measured).
  double call_ns = -1, wait_ns = -1;
};

// Where a Session's data buffer lives (--memory, --gpu).
struct Memory {
  bool cuda = false;  // cudaMalloc'd on `gpu`, registered (staged) as such
  int gpu = 0;
};

class Session {
 public:
  // Registers a buffer of `bytes` (and a page of signal words after it: word_offset()) and
  // listens; join() connects `comms` communicators each way.
  static xport::Result<std::unique_ptr<Session>> open(xport::Device& dev, size_t bytes,
                                                      std::chrono::seconds timeout, int comms = 1,
                                                      Memory memory = {});
  ~Session();
  // What the peer needs to join: "<connection handle hex> <region key hex>".
  std::string hello() const;
  // The initiator connects first, then accepts; the target the other way round. The k-th
  // connect pairs with the peer's k-th accept: both are taken one after the other.
  xport::Status join(const std::string& peer_hello, bool initiator);
  // Closes the comms and windows now (a failed point: the peer's pending receive fails at once).
  void close_comms();

  xport::Deadline deadline() const { return xport::Deadline::after(timeout); }
  // Message or operation `i` of a point goes over comm i % comms (control: comm 0).
  size_t comm_of(uint64_t i) const { return static_cast<size_t>(i % tx.size()); }
  // The round trips' signal word: the page after the buffer's `len` bytes, on both sides.
  size_t word_offset() const { return (len + 4095) / 4096 * 4096; }

  // Host access to the data buffer for --check: buf itself in host memory; for GPU memory a
  // host copy (writable: to fill, then written() copies it to the GPU; readable: copied from
  // the GPU first).
  xport::Result<uint8_t*> writable(size_t off, size_t n);
  xport::Status written(size_t off, size_t n);
  xport::Result<const uint8_t*> readable(size_t off, size_t n);

  xport::Device& dev;
  uint8_t* buf = nullptr;  // host or GPU memory (memory.cuda)
  size_t len = 0;
  Memory memory;
  std::vector<uint8_t> mirror;  // GPU memory: the host copy behind writable/readable
  // --initiator device: the proxy over win[0] (region 0: data, remote 0: the peer's data),
  // opened by the first device point; and the round trips' signals this side has had so far
  // (counted from the word's value when the session joined).
  std::unique_ptr<xport::GpuProxy> proxy;
  uint64_t signals_seen = 0;
  xport::Region data;
  uint8_t* ctl = nullptr;  // [0, 128): receive, [128, 256): send
  xport::Region ctl_region;
  std::unique_ptr<xport::Listener> listener;
  std::vector<std::unique_ptr<xport::SendComm>> tx;  // [comms], after join()
  std::vector<std::unique_ptr<xport::RecvComm>> rx;
  std::vector<std::unique_ptr<xport::Window>> win;  // win[k] over tx[k]
  xport::RemoteRegion remote;
  std::chrono::seconds timeout;
  int comms = 1;

 private:
  Session(xport::Device& d, std::chrono::seconds t, int n) : dev(d), timeout(t), comms(n) {}
};

// Whether this libxport can run `op`; `why` says what is missing when it cannot.
bool op_available(Op op, std::string* why);

// Shared by the operations of ops.cc, round_trip.cc and device_ops.cc.
struct Mismatch;
// The ping-pong's receive area (and put-signal's word) follows the slots, page-aligned.
size_t pong_offset(const Plan& p);
// Latency iterations of one-sided ops: enough for p99, bounded so message-rate runs stay short.
inline constexpr int kOneSidedLatencyIterations = 1000;
// --check: slots [0, count) get the ping pattern of iterations first.. (corrupted where asked).
xport::Status stage_pings(Session& s, const Plan& p, uint64_t first, int count);
// --check: the target verifies its slots [0, count) against the pings of iterations first..
xport::Status verify_at_target(Session& s, const Plan& p, uint64_t first, int count);
// round_trip.cc: host-initiated put_signal round trips; device_ops.cc: --initiator device.
xport::Result<Measured> round_trip_initiate(Session& s, const Plan& p);
xport::Status round_trip_serve(Session& s, const Plan& p, Mismatch* bad);
xport::Result<Measured> device_put_initiate(Session& s, const Plan& p);
xport::Result<Measured> device_round_trip_initiate(Session& s, const Plan& p);
xport::Status device_round_trip_serve(Session& s, const Plan& p, Mismatch* bad);
// --memory cuda and --initiator device on this host: "" or why not (no CUDA build, no GPU).
std::string gpu_unavailable(int gpu);

// Initiator: runs one point with the target; a failed --check names size, iteration, offset.
xport::Result<Measured> run_point(Session& s, const Plan& plan);
xport::Status say_bye(Session& s);
// Target: serves one point (or notes the initiator's goodbye in *bye).
xport::Status serve_point(Session& s, bool* bye);

}  // namespace bench
