// Logging hook: libxport writes through one sink that a runtime can redirect.
#pragma once

#include <functional>
#include <string_view>

namespace xport {

enum class LogLevel : int { error = 0, warn = 1, info = 2, debug = 3, trace = 4 };

std::string_view to_string(LogLevel level);

using LogSink = std::function<void(LogLevel level, std::string_view message)>;

// Replaces the sink (default: one line per message on stderr, "xport <level>: ...").
// An empty function restores the default. Thread-safe; the sink may be called from any thread.
void set_log_sink(LogSink sink);

// Messages above this level are dropped before they are formatted. Default: XPORT_LOG_LEVEL.
void set_log_level(LogLevel level);
LogLevel log_level();

}  // namespace xport
