// Knobs: typed XPORT_* environment variables, each with a default, a description,
// and the source of its current value. docs/knobs.md lists every one.
#pragma once

#include <string>
#include <vector>

#include "xport/status.hpp"

namespace xport {

struct KnobInfo {
  std::string name;           // XPORT_...
  std::string type;           // bool, int, size, string, duration_ms, int or auto
  std::string default_value;  // as text
  std::string value;          // current value, as text
  std::string source;         // "default" or "environment"
  std::string description;
  // Why the environment's value was rejected ("'abc': expected a number"), "" when it parsed.
  // A rejected value leaves `value` at the default and `source` "default"; Context::open fails.
  std::string error;
};

// Every knob libxport reads, in a stable order.
std::vector<KnobInfo> knob_list();

// Checks every XPORT_* variable in the environment: an unknown name or a value that does not
// parse gives an error naming the variable and what was wrong. Context::open calls this.
Status validate_knobs();

}  // namespace xport
