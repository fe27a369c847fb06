// Typed access to the knob table (knob_table.inc). Values are parsed once; reads are lock-free.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "xport/knobs.hpp"

namespace xport::core {

// auto_integer: "auto" (read as -1: the code picks) or a non-negative integer.
enum class KnobType { boolean, integer, size, string, duration_ms, auto_integer };

enum class KnobId : int {
#define XPORT_KNOB(id, type, name, def, desc) id,
#include "core/knob_table.inc"
#undef XPORT_KNOB
  count
};

int64_t knob_int(KnobId id);  // integer, size, duration_ms, auto_integer (-1: auto)
bool knob_bool(KnobId id);
const std::string& knob_string(KnobId id);
bool knob_from_environment(KnobId id);
const char* knob_name(KnobId id);

// Re-reads the environment. Not thread-safe: for tests and tools that set knobs before use.
void reload_knobs();

}  // namespace xport::core
