// The publisher thread and the process-wide instance.
#include "telemetry/publisher.hpp"

#include <unistd.h>
#include <chrono>
#include <cstdlib>

#include "core/knob.hpp"
#include "core/log.hpp"
#include "telemetry/block.hpp"
#include "telemetry/names.hpp"
#include "telemetry/process.hpp"

namespace xport::telemetry {

Publisher::Publisher(Options options) : options_(std::move(options)), owner_pid_(::getpid()) {}

Publisher::~Publisher() { shutdown(); }

uint64_t Publisher::add(Source source) {
  std::lock_guard<std::mutex> l(mu_);
  if (stop_ || failed_) return 0;
  if (!writer_) {
    auto w = SegmentWriter::create(options_.dir, options_.labels, options_.interval_ms);
    if (!w.ok()) {
      failed_ = true;
      XPORT_LOG(warn, "telemetry off for this process: ", w.status().to_string());
      return 0;
    }
    writer_ = std::move(w).value();
    XPORT_LOG(debug, "telemetry: publishing to ", writer_->path());
  }
  uint64_t id = next_id_++;
  sources_.emplace(id, std::move(source));
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  wake_ = true;  // a short-lived process shows up at once, not after one interval
  cv_.notify_one();
  return id;
}

void Publisher::remove(uint64_t id) {
  std::lock_guard<std::mutex> l(mu_);
  sources_.erase(id);
}

void Publisher::publish_now() {
  std::lock_guard<std::mutex> l(mu_);
  if (writer_) publish_locked();
}

void Publisher::shutdown() {
  // A forked child has neither the thread nor the right to remove its parent's segment.
  if (::getpid() != owner_pid_) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> l(mu_);
  sources_.clear();
  if (writer_) writer_->unlink_file();
}

std::string Publisher::segment_path() const {
  std::lock_guard<std::mutex> l(mu_);
  return writer_ ? writer_->path() : std::string();
}

void Publisher::run() {
  std::unique_lock<std::mutex> l(mu_);
  const auto interval = std::chrono::milliseconds(options_.interval_ms);
  while (!stop_) {
    publish_locked();
    cv_.wait_for(l, interval, [&] { return stop_ || wake_; });
    wake_ = false;
  }
}

void Publisher::publish_locked() {
  scratch_.clear();
  // The process block first: it survives a full table.
  BlockBuilder process(BlockKind::process);
  process.counter(CounterId::process_devices, sources_.size());
  process.counter(CounterId::telemetry_snapshots, ++snapshots_);
  process.counter(CounterId::telemetry_blocks_dropped, blocks_dropped_);
  scratch_.push_back(process.record());
  for (auto& [id, source] : sources_) source(scratch_);
  blocks_dropped_ += writer_->publish(scratch_);
}

namespace {

Publisher* g_publisher = nullptr;

void stop_process_publisher() {
  if (g_publisher != nullptr) g_publisher->shutdown();
}

Publisher* make_process_publisher() {
  if (!core::knob_bool(core::KnobId::telemetry)) return nullptr;
  Publisher::Options o;
  o.dir = core::knob_string(core::KnobId::telemetry_dir);
  int64_t ms = core::knob_int(core::KnobId::telemetry_interval_ms);
  o.interval_ms = static_cast<uint32_t>(ms < 10 ? 10 : (ms > 60000 ? 60000 : ms));
  o.labels.program = program_name();
  o.labels.job = core::knob_string(core::KnobId::job);
  if (o.labels.job.empty()) o.labels.job = o.labels.program;
  o.labels.rank = core::knob_string(core::KnobId::rank);
  // Leaked on purpose: Devices destroyed by static destructors after exit() still unregister.
  g_publisher = new Publisher(std::move(o));
  std::atexit(stop_process_publisher);
  return g_publisher;
}

}  // namespace

Publisher* process_publisher() {
  static Publisher* p = make_process_publisher();
  return p;
}

}  // namespace xport::telemetry
