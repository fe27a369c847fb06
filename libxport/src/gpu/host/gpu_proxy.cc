// The host proxy for GPU-initiated operations (xport/gpu_proxy.hpp): one thread per proxy
// drains the ring in batches, executes each descriptor through its Window, and advances the
// ring's completion count in ring order once the operations are delivered (Window::check).
#include "xport/gpu_proxy.hpp"

#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "gpu/host/proxy_telemetry.hpp"
#include "core/format.hpp"
#include "core/log.hpp"
#include "gpu/driver.hpp"
#include "gpu/proxy_ring.hpp"
#include "xport/context.hpp"

namespace xport {

using gpu_ring::Descriptor;
using gpu_ring::Op;

struct GpuProxy::State {
  Device* device = nullptr;
  GpuProxyOptions options;
  void* ring_host = nullptr;
  void* ring_gpu = nullptr;
  void* head = nullptr;  // GPU memory
  std::unique_ptr<gpu::RingConsumer> consumer;
  std::vector<Window*> windows;
  std::vector<const Region*> regions;
  std::vector<const RemoteRegion*> remotes;
  std::thread thread;
  std::shared_ptr<void> telemetry;  // the proxy's block while it runs
  std::atomic<bool> stop{false};
  bool started = false;
  mutable std::mutex error_mu;
  Status error;
  std::atomic<uint64_t> batches{0}, descriptors{0}, completed{0}, max_occupancy{0};
  std::atomic<uint64_t> in_flight{0}, again{0}, failures{0};

  struct Pending {
    Window* window;
    Ticket ticket;
  };
  std::deque<Pending> pending;
  // Taken off the ring but refused with Code::again (the window's operations or credits are
  // all in use): retried first on the next pass, in order.
  std::deque<Descriptor> backlog;
  uint64_t done_in_order = 0;  // descriptors complete but not yet published

  void fail(gpu_ring::Abort why, Status s) {
    {
      std::lock_guard<std::mutex> g(error_mu);
      if (error.ok()) error = s;
    }
    XPORT_LOG(error, "GPU proxy: ", s.to_string(), "; ring aborted");
    failures.store(1, std::memory_order_relaxed);
    consumer->abort(why);
  }

  template <typename T>
  const T* entry(const std::vector<T*>& table, uint16_t i) const {
    return i < table.size() ? table[i] : nullptr;
  }

  // Executes one descriptor; the ticket to wait on (0: complete already).
  Result<Ticket> execute(const Descriptor& d) {
    Window* w = d.window < windows.size() ? windows[d.window] : nullptr;
    if (w == nullptr) return core::error(Code::invalid_argument, "descriptor names window ", d.window, " (", windows.size(), " added)");
    const auto op = static_cast<Op>(d.op);
    const auto sop = d.signal_op == static_cast<uint8_t>(gpu_ring::SignalOp::set) ? SignalOp::set : SignalOp::add;
    const auto order = d.weak ? SignalOrder::weak : SignalOrder::strong;
    const Region* local = entry(regions, d.local_region);
    const RemoteRegion* remote = entry(remotes, d.remote_region);
    const RemoteRegion* sig = entry(remotes, d.signal_region);
    const Region* counter = entry(regions, d.counter_region);
    auto need = [&](const void* p, const char* what, uint16_t i) -> Status {
      if (p != nullptr) return Status::success();
      return core::error(Code::invalid_argument, "descriptor (op ", int(d.op), ") names ", what, " ", i,
                         ", which is not in the proxy's table");
    };
    switch (op) {
      case Op::put:
        XPORT_RETURN_IF_ERROR(need(local, "region", d.local_region));
        XPORT_RETURN_IF_ERROR(need(remote, "remote region", d.remote_region));
        return w->put(*local, d.local_offset, *remote, d.remote_offset, d.length);
      case Op::put_signal:
        XPORT_RETURN_IF_ERROR(need(local, "region", d.local_region));
        XPORT_RETURN_IF_ERROR(need(remote, "remote region", d.remote_region));
        XPORT_RETURN_IF_ERROR(need(sig, "remote signal region", d.signal_region));
        return w->put_signal(*local, d.local_offset, *remote, d.remote_offset, d.length, *sig,
                             d.signal_offset, d.value, sop, order);
      case Op::signal:
        XPORT_RETURN_IF_ERROR(need(sig, "remote signal region", d.signal_region));
        return w->signal(*sig, d.signal_offset, d.value, sop, order);
      case Op::put_signal_counter:
        XPORT_RETURN_IF_ERROR(need(local, "region", d.local_region));
        XPORT_RETURN_IF_ERROR(need(remote, "remote region", d.remote_region));
        XPORT_RETURN_IF_ERROR(need(sig, "remote signal region", d.signal_region));
        XPORT_RETURN_IF_ERROR(need(counter, "counter region", d.counter_region));
        return w->put_signal_counter(*local, d.local_offset, *remote, d.remote_offset, d.length,
                                     *sig, d.signal_offset, d.value, *counter,
                                     uint64_t{d.counter_word} * 8, sop, order);
      case Op::signal_counter:
        XPORT_RETURN_IF_ERROR(need(sig, "remote signal region", d.signal_region));
        XPORT_RETURN_IF_ERROR(need(counter, "counter region", d.counter_region));
        return w->signal_counter(*sig, d.signal_offset, d.value, *counter,
                                 uint64_t{d.counter_word} * 8, sop, order);
      case Op::quiet:
        // Every earlier descriptor of the ring: delivered on every window.
        for (Window* each : windows) XPORT_RETURN_IF_ERROR(each->quiet(Deadline::from_knob()));
        return Ticket{0};
      case Op::none:
        break;
    }
    return core::error(Code::invalid_argument, "descriptor op ", int(d.op), " is not an operation");
  }

  // Publishes the completions at the head of `pending` that are done, in ring order.
  Status retire() {
    uint64_t n = 0;
    while (!pending.empty()) {
      Pending& p = pending.front();
      if (p.ticket != 0) {
        XPORT_ASSIGN_OR_RETURN(TransferState st, p.window->check(p.ticket));
        if (st != TransferState::done) break;
      }
      pending.pop_front();
      ++n;
    }
    if (n != 0) {
      consumer->complete(n);
      completed.fetch_add(n, std::memory_order_relaxed);
    }
    return Status::success();
  }

  void run() {
    using Clock = std::chrono::steady_clock;
    std::vector<Descriptor> batch(options.batch);
    const auto spin = std::chrono::microseconds(options.spin_us);
    const auto nap = std::chrono::microseconds(options.sleep_us);
    Clock::time_point last_busy;
    uint32_t idle = 0;
    while (!stop.load(std::memory_order_acquire)) {
      if (consumer->aborted() != gpu_ring::Abort::none) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));  // no lock held
        continue;
      }
      size_t n = 0;
      if (backlog.empty()) {
        n = consumer->poll(batch.data(), batch.size());
        backlog.insert(backlog.end(), batch.begin(), batch.begin() + static_cast<std::ptrdiff_t>(n));
      }
      while (!backlog.empty()) {
        const Descriptor& d = backlog.front();
        auto t = execute(d);
        if (!t.ok() && t.status().code() == Code::again) {  // after progress, again
          again.fetch_add(1, std::memory_order_relaxed);
          break;
        }
        if (!t.ok()) {
          fail(t.status().code() == Code::invalid_argument ? gpu_ring::Abort::bad_descriptor
                                                          : gpu_ring::Abort::failed,
               t.status());
          pending.clear();
          backlog.clear();
          break;
        }
        Window* w = d.window < windows.size() ? windows[d.window] : nullptr;
        if (*t == 0) {
          // A quiet: everything before it is delivered too.
          for (Pending& p : pending) p.ticket = 0;
        }
        pending.push_back({w, *t});
        backlog.pop_front();
      }
      if (n != 0) {
        batches.fetch_add(1, std::memory_order_relaxed);
        descriptors.fetch_add(n, std::memory_order_relaxed);
        if (n > max_occupancy.load(std::memory_order_relaxed)) max_occupancy.store(n, std::memory_order_relaxed);
      }
      (void)device->progress();
      if (Status s = retire(); !s.ok()) {
        fail(gpu_ring::Abort::failed, s);
        pending.clear();
      }
      in_flight.store(pending.size() + backlog.size(), std::memory_order_relaxed);
      // Idle: nothing taken and nothing outstanding. A peer's puts and signals for a waiting
      // kernel arrive while the proxy is idle and are applied by its progress, so it keeps
      // polling for spin_us before it naps between passes.
      if (n != 0 || !pending.empty() || !backlog.empty()) {
        idle = 0;
        continue;
      }
      if (++idle < 64) continue;
      const auto now = Clock::now();
      if (idle == 64) last_busy = now;
      if (now - last_busy >= spin) {
        std::this_thread::sleep_for(nap);  // no lock held
      } else {
        std::this_thread::yield();
      }
    }
  }
};

Result<std::unique_ptr<GpuProxy>> GpuProxy::open(Device& device, const GpuProxyOptions& options) {
  gpu::Driver& d = gpu::driver();
  if (!d.available()) {
    return core::error(Code::unsupported, "GpuProxy: no GPU: ", d.describe());
  }
  if (options.batch == 0) return core::error(Code::invalid_argument, "GpuProxy: batch 0");
  auto p = std::unique_ptr<GpuProxy>(new GpuProxy());
  p->s_ = std::make_unique<State>();
  State& s = *p->s_;
  s.device = &device;
  s.options = options;
  XPORT_ASSIGN_OR_RETURN(s.ring_host, d.alloc_mapped(gpu_ring::ring_bytes(options.capacity), &s.ring_gpu));
  XPORT_RETURN_IF_ERROR(gpu::init_ring(s.ring_host, options.capacity));
  XPORT_ASSIGN_OR_RETURN(s.head, d.alloc_gpu(sizeof(unsigned long long), options.gpu));
  {
    const unsigned long long zero = 0;
    XPORT_ASSIGN_OR_RETURN(gpu::PointerInfo info, d.classify(s.head));
    XPORT_ASSIGN_OR_RETURN(auto queue, d.open_copy_queue(info));
    XPORT_RETURN_IF_ERROR(queue->copy_to_gpu(s.head, &zero, sizeof(zero)));
    XPORT_RETURN_IF_ERROR(queue->synchronize());
  }
  XPORT_ASSIGN_OR_RETURN(auto c, gpu::RingConsumer::attach(s.ring_host));
  s.consumer = std::make_unique<gpu::RingConsumer>(c);
  return p;
}

GpuProxy::~GpuProxy() {
  if (!s_) return;
  s_->telemetry.reset();  // no snapshot reads the proxy from here on
  if (s_->consumer) s_->consumer->abort(gpu_ring::Abort::stopped);
  s_->stop.store(true, std::memory_order_release);
  if (s_->thread.joinable()) s_->thread.join();
  gpu::Driver& d = gpu::driver();
  d.free_gpu(s_->head);
  d.free_pinned(s_->ring_host);
}

namespace {
template <typename T>
Result<uint16_t> add(std::vector<T*>& table, T* item, bool started, const char* what) {
  if (started) {
    return core::error(Code::invalid_argument, "GpuProxy::add_", what, ": the proxy has started");
  }
  if (table.size() >= 0xFFFF) return core::error(Code::resource, "GpuProxy: table of ", what, "s full");
  table.push_back(item);
  return static_cast<uint16_t>(table.size() - 1);
}
}  // namespace

Result<uint16_t> GpuProxy::add_window(Window& w) { return add(s_->windows, &w, s_->started, "window"); }
Result<uint16_t> GpuProxy::add_region(const Region& r) {
  return add(s_->regions, &r, s_->started, "region");
}
Result<uint16_t> GpuProxy::add_remote(const RemoteRegion& r) {
  return add(s_->remotes, &r, s_->started, "remote");
}

Status GpuProxy::start() {
  if (s_->started) return core::error(Code::invalid_argument, "GpuProxy::start: started already");
  s_->started = true;
  s_->thread = std::thread([st = s_.get()] { st->run(); });
  s_->telemetry = gpu::attach_proxy_telemetry([this] { return stats(); }, s_->options.gpu);
  return Status::success();
}

gpu_ring::DeviceRing GpuProxy::ring() const {
  auto* h = static_cast<gpu_ring::Header*>(s_->ring_gpu);
  return {h, reinterpret_cast<gpu_ring::Descriptor*>(h + 1),
          static_cast<unsigned long long*>(s_->head), s_->options.capacity};
}

Status GpuProxy::last_error() const {
  std::lock_guard<std::mutex> g(s_->error_mu);
  return s_->error;
}

gpu_ring::Abort GpuProxy::aborted() const { return s_->consumer->aborted(); }

GpuProxyStats GpuProxy::stats() const {
  GpuProxyStats out;
  out.batches = s_->batches.load(std::memory_order_relaxed);
  out.descriptors = s_->descriptors.load(std::memory_order_relaxed);
  out.completed = s_->completed.load(std::memory_order_relaxed);
  out.max_occupancy = s_->max_occupancy.load(std::memory_order_relaxed);
  out.in_flight = s_->in_flight.load(std::memory_order_relaxed);
  out.queued = s_->consumer->queued();
  out.again = s_->again.load(std::memory_order_relaxed);
  out.aborted = s_->consumer->aborted();
  out.timeouts = out.aborted == gpu_ring::Abort::timeout ? 1 : 0;
  out.failures = s_->failures.load(std::memory_order_relaxed);
  out.capacity = s_->consumer->capacity();
  return out;
}

}  // namespace xport
