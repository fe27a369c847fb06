// Device::properties(): the figures a runtime asks of a device before using it (NCCL's
// getProperties), from the rails, the knobs in effect and sysfs; nothing invented.
#include <climits>
#include <cstdlib>

#include "fabric/provider.hpp"
#include "gpu/driver.hpp"
#include "proto/engine.hpp"
#include "xport/context.hpp"

namespace xport {
namespace {

// The sysfs path of the PCI function behind a rail: its netdev or RDMA device, else the PCI
// address libfabric reports for the domain; "" for loopback, shm and virtual interfaces.
std::string pci_path_of(const std::string& rail) {
  for (const char* dir : {"/sys/class/net/", "/sys/class/infiniband/"}) {
    const std::string link = std::string(dir) + rail + "/device";
    if (char* real = realpath(link.c_str(), nullptr)) {
      std::string out(real);
      free(real);
      if (out.find("/pci") != std::string::npos) return out;
    }
  }
  for (const auto& a : fabric::nic_attributes()) {
    if (a.domain != rail || a.pci.empty()) continue;
    const std::string link = "/sys/bus/pci/devices/" + a.pci;
    if (char* real = realpath(link.c_str(), nullptr)) {
      std::string out(real);
      free(real);
      return out;
    }
  }
  return "";
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

}  // namespace

DeviceProperties Device::properties() const {
  DeviceProperties p;
  for (const RailInfo& r : rail_info_) {
    p.name += (p.name.empty() ? "" : "+") + r.name;
    p.link_bits_per_s += r.link_bits_per_s;
  }
  p.rails = static_cast<uint32_t>(rail_info_.size());
  if (!rail_info_.empty()) p.pci_path = pci_path_of(rail_info_[0].name);
  p.guid = fnv1a(p.pci_path.empty() ? p.name : p.pci_path);
  p.provider = engine_->caps().provider;
  const proto::EngineConfig& c = engine_->config();
  p.max_comms = static_cast<uint32_t>(c.max_comms);
  p.max_requests = c.max_requests;
  p.max_grouped_recvs = static_cast<uint32_t>(std::min<size_t>(kMaxGroupedRecvs, c.max_requests));
  p.max_message_bytes = proto::kLengthUnknown - 1ull;
  p.max_tag = UINT32_MAX;
  p.eager_max = c.eager_max;
  // (staged through host shadows: gpu/staging/placement.hpp)
  p.device_memory = gpu::driver().available();
  return p;
}

}  // namespace xport
