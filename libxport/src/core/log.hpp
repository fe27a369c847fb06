// Internal logging entry points; the public hook is in xport/log.hpp.
#pragma once

#include <atomic>
#include <string_view>

#include "core/format.hpp"
#include "xport/log.hpp"

namespace xport::core {

// The level in force, once read (-1 before: the first call reads XPORT_LOG_LEVEL). A copy of
// log.cc's, kept here so that the check inlines: XPORT_LOG sits on hot paths (every completion).
inline std::atomic<int> log_level_seen{-1};
bool log_enabled_first(LogLevel level);
inline bool log_enabled(LogLevel level) {
  const int seen = log_level_seen.load(std::memory_order_relaxed);
  return seen < 0 ? log_enabled_first(level) : static_cast<int>(level) <= seen;
}
void log_write(LogLevel level, std::string_view message);

}  // namespace xport::core

#define XPORT_LOG(level, ...)                                                       \
  do {                                                                              \
    if (::xport::core::log_enabled(::xport::LogLevel::level))                       \
      ::xport::core::log_write(::xport::LogLevel::level, ::xport::core::str(__VA_ARGS__)); \
  } while (0)
