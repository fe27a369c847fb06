// A rail's link state and rate as sysfs shows them now (xport-probe): RDMA ports first, then the
// network interface; nothing here opens a device or talks to a provider.
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "topology/importers.hpp"
#include "topology/live.hpp"

namespace xport::topology {
namespace {

namespace fs = std::filesystem;

std::string first_line(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  if (line.size() > 256) line.resize(256);
  return line;
}

// Port directories in numeric order ("1", "2", ... "10").
std::vector<std::pair<int, fs::path>> ports_of(const fs::path& ibdev) {
  std::vector<std::pair<int, fs::path>> out;
  std::error_code ec;
  for (fs::directory_iterator it(ibdev / "ports", ec), end; !ec && it != end; it.increment(ec)) {
    if (auto n = parse_uint(it->path().filename().string(), 255)) out.emplace_back(*n, it->path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

bool RailLink::up() const {
  if (kind == "rdma") return state == "ACTIVE";
  return state == "up" || state == "unknown";
}

RailLink rail_link_in(const std::string& sysfs_root, std::string_view rail) {
  RailLink link;
  link.name = std::string(rail);
  if (rail.empty() || rail.find('/') != std::string_view::npos || rail == "." || rail == "..") {
    return link;  // not a sysfs name: never read outside the class directories
  }
  // EFA's libfabric domains are "<device>-rdm" and "<device>-dgrm".
  std::string device(rail);
  const fs::path ib_class = fs::path(sysfs_root) / "class" / "infiniband";
  for (const char* suffix : {"-rdm", "-dgrm"}) {
    const std::string s(suffix);
    if (device.size() > s.size() && device.ends_with(s) && !fs::exists(ib_class / device)) {
      device.resize(device.size() - s.size());
    }
  }
  if (fs::exists(ib_class / device)) {
    link.kind = "rdma";
    link.device = device;
    for (const auto& [number, dir] : ports_of(ib_class / device)) {
      NicPort p;
      p.number = number;
      std::string state = first_line(dir / "state");  // "4: ACTIVE"
      size_t colon = state.find(':');
      p.state = colon == std::string::npos ? state : state.substr(colon + 1);
      while (!p.state.empty() && p.state.front() == ' ') p.state.erase(0, 1);
      p.rate_gbps = parse_number_prefix(first_line(dir / "rate"), 1e6);  // "100 Gb/sec (4X EDR)"
      link.ports.push_back(p);
    }
    // The rail's state is its best port's: an ACTIVE one if any (the provider uses that one).
    for (const NicPort& p : link.ports) {
      if (link.state.empty() || (p.state == "ACTIVE" && link.state != "ACTIVE")) {
        link.state = p.state;
        link.rate_gbps = p.rate_gbps;
      }
    }
    return link;
  }
  // HPE Slingshot (cxi): the libfabric domain is the cxi device ("cxi0"), whose link is the
  // Ethernet interface of the same PCI function ("hsn0"), listed under its device's net/.
  std::string netdev(rail);
  const fs::path cxi = fs::path(sysfs_root) / "class" / "cxi" / std::string(rail);
  if (fs::exists(cxi)) {
    std::error_code ec;
    for (fs::directory_iterator it(cxi / "device" / "net", ec), end; !ec && it != end;
         it.increment(ec)) {
      netdev = it->path().filename().string();
      break;
    }
  }
  const fs::path net = fs::path(sysfs_root) / "class" / "net" / netdev;
  if (fs::exists(net)) {
    link.kind = "netdev";
    link.device = netdev;
    link.state = first_line(net / "operstate");
    // Mb/s; "-1" or a read error (EINVAL on loopback and down links) means unknown.
    std::string speed = first_line(net / "speed");
    if (auto mbps = parse_uint(speed, 1 << 30); mbps && *mbps > 0) link.rate_gbps = *mbps / 1000.0;
  }
  return link;
}

RailLink rail_link(std::string_view rail) { return rail_link_in("/sys", rail); }

}  // namespace xport::topology
