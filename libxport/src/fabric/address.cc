// Peer addresses from outside checked against the domain's address format (address.hpp).
#include "fabric/address.hpp"

#include <netinet/in.h>
#include <rdma/fabric.h>
#include <sys/socket.h>

#include <cstring>

#include "core/format.hpp"

namespace xport::fabric {
namespace {

Status check_in(std::span<const uint8_t> a) {
  sockaddr_in sin{};
  if (a.size() != sizeof(sin)) {
    return core::error(Code::invalid_argument, "an IPv4 peer address of ", a.size(),
                       " bytes (a sockaddr_in has ", sizeof(sin), ")");
  }
  std::memcpy(&sin, a.data(), sizeof(sin));
  if (sin.sin_family != AF_INET) {
    return core::error(Code::invalid_argument, "a peer address of family ", sin.sin_family,
                       " where this provider's domain takes IPv4 (", AF_INET, ")");
  }
  if (sin.sin_port == 0 || sin.sin_addr.s_addr == htonl(INADDR_ANY)) {
    return core::error(Code::invalid_argument, "an IPv4 peer address without ",
                       sin.sin_port == 0 ? "a port" : "a host (the wildcard 0.0.0.0)");
  }
  static constexpr uint8_t kZero[sizeof(sin.sin_zero)] = {};
  if (std::memcmp(sin.sin_zero, kZero, sizeof(kZero)) != 0) {
    return core::error(Code::invalid_argument, "an IPv4 peer address with bytes in its padding");
  }
  return Status::success();
}

Status check_in6(std::span<const uint8_t> a) {
  sockaddr_in6 sin6{};
  if (a.size() != sizeof(sin6)) {
    return core::error(Code::invalid_argument, "an IPv6 peer address of ", a.size(),
                       " bytes (a sockaddr_in6 has ", sizeof(sin6), ")");
  }
  std::memcpy(&sin6, a.data(), sizeof(sin6));
  if (sin6.sin6_family != AF_INET6) {
    return core::error(Code::invalid_argument, "a peer address of family ", sin6.sin6_family,
                       " where this provider's domain takes IPv6 (", AF_INET6, ")");
  }
  if (sin6.sin6_port == 0 || std::memcmp(&sin6.sin6_addr, &in6addr_any, sizeof(in6addr_any)) == 0) {
    return core::error(Code::invalid_argument, "an IPv6 peer address without ",
                       sin6.sin6_port == 0 ? "a port" : "a host (the wildcard ::)");
  }
  return Status::success();
}

}  // namespace

Status check_peer_address(uint32_t addr_format, std::span<const uint8_t> address) {
  switch (addr_format) {
    case FI_SOCKADDR_IN: return check_in(address);
    case FI_SOCKADDR_IN6: return check_in6(address);
    case FI_SOCKADDR: {
      sa_family_t family = 0;
      if (address.size() >= sizeof(family)) std::memcpy(&family, address.data(), sizeof(family));
      if (family == AF_INET6) return check_in6(address);
      if (family == AF_INET) return check_in(address);
      return core::error(Code::invalid_argument, "a peer address of family ", family,
                         " (", address.size(), " bytes) where this provider takes IPv4 or IPv6");
    }
    default: return Status::success();
  }
}

}  // namespace xport::fabric
