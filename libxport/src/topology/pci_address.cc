// PCI addresses: strict parsing (input comes from files and environment variables) and the
// canonical lowercase form every table, JSON key and knob comparison uses.
#include <cstdio>

#include "core/format.hpp"
#include "xport/topology.hpp"

namespace xport::topology {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Reads 1..max_digits hex digits from `s` at `pos`; false when there are none or too many.
bool read_hex(std::string_view s, size_t& pos, size_t max_digits, uint64_t& out) {
  size_t start = pos;
  out = 0;
  while (pos < s.size() && hex_value(s[pos]) >= 0) {
    if (pos - start == max_digits) return false;
    out = out * 16 + static_cast<uint64_t>(hex_value(s[pos]));
    ++pos;
  }
  return pos > start;
}

Status bad(std::string_view text, std::string_view why) {
  return core::error(Code::invalid_argument, "bad PCI address '", text, "': ", why,
                     " (expected domain:bus:device.function, e.g. 0000:4f:00.0)");
}

}  // namespace

Result<PciAddress> PciAddress::parse(std::string_view text) {
  if (text.empty()) return bad(text, "empty");
  if (text.size() > 32) return bad(text.substr(0, 32), "too long");
  // Split on ':' to tell "bus:dev.fn" from "domain:bus:dev.fn".
  size_t colons = 0;
  for (char c : text) colons += c == ':';
  if (colons < 1 || colons > 2) return bad(text, "wrong number of ':'");
  size_t pos = 0;
  uint64_t domain = 0, bus = 0, dev = 0, fn = 0;
  if (colons == 2) {
    if (!read_hex(text, pos, 8, domain) || pos >= text.size() || text[pos] != ':')
      return bad(text, "domain is not 1-8 hex digits");
    ++pos;
  }
  if (!read_hex(text, pos, 2, bus) || pos >= text.size() || text[pos] != ':')
    return bad(text, "bus is not 1-2 hex digits");
  ++pos;
  if (!read_hex(text, pos, 2, dev) || pos >= text.size() || text[pos] != '.')
    return bad(text, "device is not 1-2 hex digits followed by '.'");
  ++pos;
  if (!read_hex(text, pos, 1, fn) || pos != text.size())
    return bad(text, "function is not one hex digit at the end");
  if (dev > 31) return bad(text, "device number above 0x1f");
  if (fn > 7) return bad(text, "function number above 7");
  if (domain > 0xffffffffULL) return bad(text, "domain too large");
  PciAddress a;
  a.domain = static_cast<uint32_t>(domain);
  a.bus = static_cast<uint8_t>(bus);
  a.device = static_cast<uint8_t>(dev);
  a.function = static_cast<uint8_t>(fn);
  return a;
}

std::string PciAddress::to_string() const {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%x", static_cast<unsigned>(domain),
                static_cast<unsigned>(bus), static_cast<unsigned>(device),
                static_cast<unsigned>(function));
  return buf;
}

}  // namespace xport::topology
