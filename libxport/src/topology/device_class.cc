// Device classification by PCI class, vendor and the OS devices found on it. A display adapter
// of a BMC (VGA, e.g. ASPEED, Matrox, the ATI ES1000) is not a GPU; an Ethernet NIC is a NIC
// only when it is RDMA-capable or libfabric says it uses it.
#include "topology/device_class.hpp"

#include <cstdio>

namespace xport::topology {
namespace {

uint8_t base_class(uint32_t c) { return static_cast<uint8_t>(c >> 16); }
uint16_t class_and_subclass(uint32_t c) { return static_cast<uint16_t>(c >> 8); }

bool is_efa(const DeviceFacts& f) {
  // EFA device ids efa0..efa3 (p4d, p5, trn1, p5e); ENA (ec20) is plain Ethernet.
  return f.vendor == kVendorAmazon && (f.device & 0xfff0) == 0xefa0;
}

}  // namespace

bool is_gpu(const DeviceFacts& f) {
  if (f.listed_gpu) return true;
  uint16_t cs = class_and_subclass(f.pci_class);
  if (cs == 0x0302) return true;  // 3D controller: datacenter NVIDIA, NCCL static files
  if (f.vendor == kVendorNvidia) return cs == 0x0300 || cs == 0x0380;  // workstation boards
  if (f.vendor == kVendorAmd) {
    if (cs == 0x0380 || base_class(f.pci_class) == 0x12) return true;  // MI200 / MI300
    // AMD VGA is a Radeon or a server's ES1000 BMC adapter: only a ROCm device makes it a GPU.
    return cs == 0x0300 && f.gpu_runtime;
  }
  return false;
}

std::string nic_kind(const DeviceFacts& f) {
  uint16_t cs = class_and_subclass(f.pci_class);
  if (cs == 0x0207 || cs == 0x0c06) return "infiniband";
  if (is_efa(f)) return "efa";
  if (f.cxi || (f.vendor == kVendorCray && base_class(f.pci_class) == 0x02)) return "cxi";
  if (f.openfabrics) return "rdma";  // RoCE or iWARP on an Ethernet-class function
  if (f.listed_nic || f.provider_nic) return "ethernet";
  // NCCL static files name NICs only by class: the importer sets listed_nic for 0x0200xx.
  return "";
}

std::string vendor_name(uint16_t vendor) {
  switch (vendor) {
    case kVendorNvidia:
      return "nvidia";
    case kVendorAmd:
      return "amd";
    case kVendorAmazon:
      return "amazon";
    case kVendorCray:
      return "hpe";
    case kVendorMellanox:
      return "mellanox";
    case 0x8086:
      return "intel";
    case 0x14e4:
      return "broadcom";
    case 0:
      return "";
    default:
      break;
  }
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04x", static_cast<unsigned>(vendor));
  return buf;
}

}  // namespace xport::topology
