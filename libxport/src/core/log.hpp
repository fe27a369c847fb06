// Internal logging entry points; the public hook is in xport/log.hpp.
#pragma once

#include <atomic>
#include <string_view>

#include "core/format.hpp"
#include "xport/log.hpp"

namespace xport::core {

// The level in force (-1 until the first reader takes XPORT_LOG_LEVEL's, or set_log_level() sets
// one). Here rather than in log.cc so that the check inlines: XPORT_LOG sits on hot paths (every
// completion).
inline std::atomic<int> log_level_now{-1};
int read_log_level();  // the first read: XPORT_LOG_LEVEL's level, unless one was set meanwhile
inline int log_level_in_force() {
  const int now = log_level_now.load(std::memory_order_relaxed);
  return now < 0 ? read_log_level() : now;
}
inline bool log_enabled(LogLevel level) { return static_cast<int>(level) <= log_level_in_force(); }
void log_write(LogLevel level, std::string_view message);

}  // namespace xport::core

#define XPORT_LOG(level, ...)                                                       \
  do {                                                                              \
    if (::xport::core::log_enabled(::xport::LogLevel::level))                       \
      ::xport::core::log_write(::xport::LogLevel::level, ::xport::core::str(__VA_ARGS__)); \
  } while (0)
