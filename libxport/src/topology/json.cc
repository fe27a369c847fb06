// xport-topology's JSON (shape documented in docs/tools.md): written by hand, escaped strictly,
// invalid UTF-8 from hostile input replaced so the output always parses.
#include <cmath>
#include <cstdio>
#include <string>

#include "xport/topology.hpp"

namespace xport::topology {
namespace {

// Length of the valid UTF-8 sequence at s[i], or 0.
size_t utf8_length(const std::string& s, size_t i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return 0;
  if (n == 2 && c < 0xc2) return 0;  // overlong
  return n;
}

void quote(std::string& out, const std::string& s) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
      ++i;
    } else if (size_t n = utf8_length(s, i); n > 0) {
      out.append(s, i, n);
      i += n;
    } else {
      out += "\\ufffd";
      ++i;
    }
  }
  out += '"';
}

void number(std::string& out, double v) {
  if (!std::isfinite(v)) v = 0;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  std::string s = buf;
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  out += s;
}

void numa(std::string& out, int n) { out += n < 0 ? std::string("null") : std::to_string(n); }

void key(std::string& out, const char* k) {
  out += '"';
  out += k;
  out += "\":";
}

}  // namespace

std::string to_json(const Topology& topo, const Plan& plan) {
  std::string out = "{\n";
  out += "  \"source\":";
  quote(out, std::string(to_string(topo.source)));
  out += ",\n  \"gpus\":[";
  for (size_t i = 0; i < topo.gpus.size(); ++i) {
    const Gpu& g = topo.gpus[i];
    out += i ? ",\n    {" : "\n    {";
    key(out, "pci");
    quote(out, g.pci.to_string());
    out += ',';
    key(out, "numa");
    numa(out, g.numa);
    out += ',';
    key(out, "vendor");
    quote(out, g.vendor);
    out += ',';
    key(out, "model");
    quote(out, g.model);
    out += ',';
    key(out, "cpus");
    quote(out, g.cpus);
    out += ',';
    key(out, "link");
    quote(out, g.link.to_string());
    out += ',';
    key(out, "rails");
    out += '[';
    const GpuRails* rails = i < plan.gpus.size() ? &plan.gpus[i] : nullptr;
    if (rails != nullptr) {
      for (size_t r = 0; r < rails->rails.size(); ++r) {
        const Rail& rail = rails->rails[r];
        if (rail.nic >= topo.nics.size()) continue;
        const Nic& n = topo.nics[rail.nic];
        out += r ? ",{" : "{";
        key(out, "nic");
        quote(out, n.name);
        out += ',';
        key(out, "pci");
        quote(out, n.pci.to_string());
        out += ',';
        key(out, "distance");
        quote(out, std::string(to_string(rail.path.distance)));
        out += ',';
        key(out, "hops");
        out += std::to_string(rail.path.hops);
        out += '}';
      }
    }
    out += "],";
    key(out, "overridden");
    out += rails != nullptr && rails->overridden ? "true" : "false";
    out += '}';
  }
  out += topo.gpus.empty() ? "],\n" : "\n  ],\n";
  out += "  \"nics\":[";
  for (size_t i = 0; i < topo.nics.size(); ++i) {
    const Nic& n = topo.nics[i];
    out += i ? ",\n    {" : "\n    {";
    key(out, "name");
    quote(out, n.name);
    out += ',';
    key(out, "pci");
    quote(out, n.pci.to_string());
    out += ',';
    key(out, "numa");
    numa(out, n.numa);
    out += ',';
    key(out, "kind");
    quote(out, n.kind);
    out += ',';
    key(out, "provider");
    quote(out, n.provider);
    out += ',';
    key(out, "model");
    quote(out, n.model);
    out += ',';
    key(out, "cpus");
    quote(out, n.cpus);
    out += ',';
    key(out, "link");
    quote(out, n.link.to_string());
    out += ',';
    key(out, "aliases");
    out += '[';
    for (size_t a = 0; a < n.aliases.size(); ++a) {
      if (a) out += ',';
      quote(out, n.aliases[a]);
    }
    out += "],";
    key(out, "ports");
    out += '[';
    for (size_t p = 0; p < n.ports.size(); ++p) {
      out += p ? ",{" : "{";
      key(out, "port");
      out += std::to_string(n.ports[p].number);
      out += ',';
      key(out, "state");
      quote(out, n.ports[p].state);
      out += ',';
      key(out, "rate_gbps");
      number(out, n.ports[p].rate_gbps);
      out += '}';
    }
    out += "]}";
  }
  out += topo.nics.empty() ? "],\n" : "\n  ],\n";
  out += "  \"explanation\":";
  quote(out, plan.explanation);
  out += ",\n  \"notes\":[";
  for (size_t i = 0; i < topo.notes.size(); ++i) {
    out += i ? ",\n    " : "\n    ";
    quote(out, topo.notes[i]);
  }
  out += topo.notes.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

}  // namespace xport::topology
