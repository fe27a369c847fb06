// --initiator device (ops.hpp): kernels (gpu_calls.cu) issue puts and put_signal round trips
// through a GpuProxy on the session's first window; the host launches them, waits for them and
// turns what they recorded (per-round nanoseconds of the GPU's global timer, the rate phase's
// length) into the same figures as the host-initiated ops.
#include <algorithm>
#include <optional>
#include <thread>

#include "gpu_calls.hpp"
#include "ops.hpp"
#include "pattern.hpp"

namespace bench {

using namespace xport;
using Clock = std::chrono::steady_clock;

namespace {

// The proxy's tables: window 0 (win[0]), region 0 (the data buffer), remote 0 (the peer's).
Status open_proxy(Session& s) {
  if (s.proxy) return Status();
  if (!s.memory.cuda) {
    return Status(Code::unsupported,
                  "--initiator device: this side's buffer is host memory (start it with "
                  "--memory cuda)");
  }
  if (const std::string why = gpu::select(s.memory.gpu); !why.empty()) {
    return Status(Code::unsupported, "--initiator device: " + why);
  }
  GpuProxyOptions o;
  o.gpu = s.memory.gpu;
  XPORT_ASSIGN_OR_RETURN(auto proxy, GpuProxy::open(s.dev, o));
  XPORT_RETURN_IF_ERROR(proxy->add_window(*s.win[0]).status());
  XPORT_RETURN_IF_ERROR(proxy->add_region(s.data).status());
  XPORT_RETURN_IF_ERROR(proxy->add_remote(s.remote).status());
  XPORT_RETURN_IF_ERROR(proxy->start());
  s.proxy = std::move(proxy);
  return Status();
}

uint64_t deadline_cycles(const Session& s) {
  return static_cast<uint64_t>(s.timeout.count()) * gpu::kCyclesPerSecond;
}

Status launched(const std::string& why) {
  return why.empty() ? Status() : Status(Code::internal, why);
}

// Until the kernel ends (each of its waits has the session's deadline, and an aborted ring ends
// them at once: only a kernel that ignores the abort word is given up on), then its result.
Result<gpu::KernelResult> finish_kernel(Session& s, int samples) {
  std::optional<Deadline> after_abort;
  int r;
  while ((r = gpu::running()) == 1) {
    if (!after_abort && s.proxy->aborted() != gpu_ring::Abort::none) after_abort = s.deadline();
    if (after_abort && after_abort->expired()) {
      return Status(Code::timeout, "the kernel did not end after its ring was aborted: " +
                                       s.proxy->last_error().to_string());
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));  // the proxy needs the cores
  }
  gpu::KernelResult k;
  XPORT_RETURN_IF_ERROR(launched(r < 0 ? "the kernel failed (cudaStreamQuery)" : ""));
  XPORT_RETURN_IF_ERROR(launched(gpu::finish(samples, &k)));
  if (k.status != 0) {
    const Status proxy = s.proxy->last_error();
    const std::string what = k.status == -2   ? "a wait passed its deadline (--timeout)"
                             : k.status == -1 ? "its ring was aborted"
                                              : "error " + std::to_string(k.status);
    return Status(k.status == -2 ? Code::timeout : Code::internal,
                  "the kernel ended early: " + what +
                      (proxy.ok() ? std::string() : "; the proxy: " + proxy.to_string()));
  }
  return k;
}

void take_samples(Measured& m, const gpu::KernelResult& k) {
  m.lat_us.reserve(k.samples_ns.size());
  for (uint64_t ns : k.samples_ns) m.lat_us.push_back(static_cast<double>(ns) / 1e3);
}

gpu::RoundTripRun round_trips_of(Session& s, const Plan& p, bool initiator) {
  gpu::RoundTripRun run;
  run.size = p.size;
  run.ping = 0;
  run.pong = pong_offset(p);
  run.word = s.word_offset();
  run.word_ptr = reinterpret_cast<const uint64_t*>(s.buf + s.word_offset());
  run.base = s.signals_seen;
  run.rounds = p.warmup + p.iterations;
  run.warmup = p.warmup;
  run.initiator = initiator;
  run.deadline_cycles = deadline_cycles(s);
  return run;
}

}  // namespace

// Puts: as one_sided_initiate's (latency: one put + quiet; rate: `depth` puts per quiet), the
// kernel issuing. --check: the slots hold the pattern of iterations 0.. for the whole run (a
// kernel does not refill them) and the target verifies them at the end.
Result<Measured> device_put_initiate(Session& s, const Plan& p) {
  XPORT_RETURN_IF_ERROR(open_proxy(s));
  XPORT_RETURN_IF_ERROR(stage_pings(s, p, 0, p.slots));
  gpu::PutRun run;
  run.size = p.size;
  run.slots = p.slots;
  run.depth = p.depth;
  run.warmup = p.warmup;
  run.latency = std::min(p.iterations, kOneSidedLatencyIterations);
  run.iterations = p.iterations;
  run.scope = static_cast<gpu::Scope>(p.scope);
  run.deadline_cycles = deadline_cycles(s);
  Measured m;
  m.phase_start = Clock::now();
  XPORT_RETURN_IF_ERROR(launched(gpu::launch_puts(s.proxy->ring(), run)));
  XPORT_ASSIGN_OR_RETURN(gpu::KernelResult k, finish_kernel(s, run.latency));
  m.phase_end = Clock::now();
  take_samples(m, k);
  m.seconds = static_cast<double>(k.phase_ns) / 1e9;
  m.wall_seconds = std::chrono::duration<double>(m.phase_end - m.phase_start).count();
  m.messages = p.iterations;
  m.bytes = m.messages * static_cast<double>(p.size);
  XPORT_RETURN_IF_ERROR(verify_at_target(s, p, 0, std::min(p.slots, p.iterations)));
  return m;
}

// Round trips as round_trip.cc's, a kernel on each side. --check: the ping holds the pattern of
// iteration 0 for the whole run; the target verifies what arrived, this side the echo.
Result<Measured> device_round_trip_initiate(Session& s, const Plan& p) {
  XPORT_RETURN_IF_ERROR(open_proxy(s));
  if (p.check) XPORT_RETURN_IF_ERROR(fill_at(s, p, 0, seed_of(p.size, 0, kPing), 0));
  const gpu::RoundTripRun run = round_trips_of(s, p, true);
  Measured m;
  m.phase_start = Clock::now();
  XPORT_RETURN_IF_ERROR(launched(gpu::launch_round_trips(s.proxy->ring(), run)));
  auto k = finish_kernel(s, p.iterations);
  s.signals_seen += static_cast<uint64_t>(run.rounds);
  if (!k.ok()) return k.status();
  m.phase_end = Clock::now();
  take_samples(m, *k);
  m.seconds = static_cast<double>(k->phase_ns) / 1e9;
  m.wall_seconds = std::chrono::duration<double>(m.phase_end - m.phase_start).count();
  m.messages = 2.0 * p.iterations;
  m.bytes = m.messages * static_cast<double>(p.size);
  if (p.check) {
    XPORT_ASSIGN_OR_RETURN(size_t off,
                           verify_at(s, pong_offset(p), p.size, seed_of(p.size, 0, kPing)));
    if (off < p.size) return check_failed(p, 0, off, "initiator");
    XPORT_RETURN_IF_ERROR(verify_at_target(s, p, 0, 1));
  }
  return m;
}

Status device_round_trip_serve(Session& s, const Plan& p, Mismatch*) {
  XPORT_RETURN_IF_ERROR(open_proxy(s));
  const gpu::RoundTripRun run = round_trips_of(s, p, false);
  XPORT_RETURN_IF_ERROR(launched(gpu::launch_round_trips(s.proxy->ring(), run)));
  auto k = finish_kernel(s, 0);
  s.signals_seen += static_cast<uint64_t>(run.rounds);
  return k.status();
}

}  // namespace bench
