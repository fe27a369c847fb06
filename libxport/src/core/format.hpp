// Message building for errors and logs (cold paths only: it allocates).
#pragma once

#include <sstream>
#include <string>
#include <utility>

#include "xport/status.hpp"

namespace xport::core {

template <typename... Args>
std::string str(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

template <typename... Args>
Status error(Code code, Args&&... args) {
  return Status(code, str(std::forward<Args>(args)...));
}

}  // namespace xport::core
