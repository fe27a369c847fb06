// Internal logging entry points; the public hook is in xport/log.hpp.
#pragma once

#include <string_view>

#include "core/format.hpp"
#include "xport/log.hpp"

namespace xport::core {

bool log_enabled(LogLevel level);
void log_write(LogLevel level, std::string_view message);

}  // namespace xport::core

#define XPORT_LOG(level, ...)                                                       \
  do {                                                                              \
    if (::xport::core::log_enabled(::xport::LogLevel::level))                       \
      ::xport::core::log_write(::xport::LogLevel::level, ::xport::core::str(__VA_ARGS__)); \
  } while (0)
