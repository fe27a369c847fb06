// The logging sink: stderr by default, replaceable by the runtime.
#include "core/log.hpp"

#include <atomic>
#include <cstdio>
#include <mutex>

#include "core/knob.hpp"

namespace xport {
namespace {

std::mutex& sink_mutex() {
  static std::mutex m;
  return m;
}

LogSink& sink() {
  static LogSink s;
  return s;
}

int level_from_knob() {
  auto text = core::knob_string(core::KnobId::log_level);
  for (int l = 0; l <= static_cast<int>(LogLevel::trace); ++l) {
    if (text == to_string(static_cast<LogLevel>(l))) return l;
  }
  return static_cast<int>(LogLevel::warn);
}

}  // namespace

std::string_view to_string(LogLevel level) {
  switch (level) {
    case LogLevel::error: return "error";
    case LogLevel::warn: return "warn";
    case LogLevel::info: return "info";
    case LogLevel::debug: return "debug";
    case LogLevel::trace: return "trace";
  }
  return "?";
}

void set_log_sink(LogSink s) {
  std::lock_guard<std::mutex> lock(sink_mutex());
  sink() = std::move(s);
}

void set_log_level(LogLevel l) {
  core::log_level_now.store(static_cast<int>(l), std::memory_order_relaxed);
}

LogLevel log_level() { return static_cast<LogLevel>(core::log_level_in_force()); }

namespace core {

int read_log_level() {
  const int knob = level_from_knob();
  // (a level stored meanwhile, by set_log_level() or another first reader, stays: the failed
  // exchange leaves it in `now`)
  int now = -1;
  return log_level_now.compare_exchange_strong(now, knob, std::memory_order_relaxed) ? knob : now;
}

void log_write(LogLevel l, std::string_view message) {
  std::lock_guard<std::mutex> lock(sink_mutex());
  if (sink()) {
    sink()(l, message);
    return;
  }
  std::fprintf(stderr, "xport %.*s: %.*s\n", static_cast<int>(to_string(l).size()),
               to_string(l).data(), static_cast<int>(message.size()), message.data());
}

}  // namespace core
}  // namespace xport
