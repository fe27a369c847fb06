// Status codes and their text.
#include "xport/status.hpp"

namespace xport {

std::string_view to_string(Code code) {
  switch (code) {
    case Code::ok: return "ok";
    case Code::invalid_argument: return "invalid argument";
    case Code::not_found: return "not found";
    case Code::unsupported: return "unsupported";
    case Code::timeout: return "timeout";
    case Code::again: return "try again";
    case Code::fabric: return "fabric error";
    case Code::peer_lost: return "peer lost";
    case Code::truncated: return "truncated";
    case Code::closed: return "closed";
    case Code::protocol: return "protocol error";
    case Code::resource: return "out of resources";
    case Code::internal: return "internal error";
  }
  return "unknown code";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  std::string s(xport::to_string(code_));
  if (message_) {
    s += ": ";
    s += *message_;
  }
  return s;
}

Status Status::with_context(std::string_view where) const& {
  Status copy = *this;
  return std::move(copy).with_context(where);
}

Status Status::with_context(std::string_view where) && {
  if (ok()) return std::move(*this);
  std::string m(where);
  m += ": ";
  m += message();
  message_ = std::make_unique<std::string>(std::move(m));
  return std::move(*this);
}

}  // namespace xport
