// What a PCI device is for the plan: a GPU, an RDMA-capable NIC, or neither. One place decides,
// so the hwloc, NCCL and live inputs agree.
#pragma once

#include <cstdint>
#include <string>

namespace xport::topology {

inline constexpr uint16_t kVendorNvidia = 0x10de;
inline constexpr uint16_t kVendorAmd = 0x1002;
inline constexpr uint16_t kVendorAmazon = 0x1d0f;
inline constexpr uint16_t kVendorCray = 0x17db;  // HPE Slingshot (Cassini, CXI)
inline constexpr uint16_t kVendorMellanox = 0x15b3;

// What an input tells about one PCI device besides its ids.
struct DeviceFacts {
  uint32_t pci_class = 0;  // 24-bit class code; 16-bit inputs are shifted left by 8
  uint16_t vendor = 0;
  uint16_t device = 0;
  bool gpu_runtime = false;   // a CUDA/NVML/RSMI/OpenCL/Level Zero device sits on it
  bool openfabrics = false;   // an RDMA (OpenFabrics, rdma-core) device sits on it
  bool cxi = false;           // a Slingshot CXI device sits on it
  bool listed_gpu = false;    // NCCL XML: a <gpu> child
  bool listed_nic = false;    // NCCL XML: a <nic> child
  bool provider_nic = false;  // libfabric named it as the NIC of one of its domains
};

bool is_gpu(const DeviceFacts& f);
// "infiniband", "efa", "cxi", "rdma", "ethernet", or "" when the device is not a NIC the
// transport can use.
std::string nic_kind(const DeviceFacts& f);
// "nvidia", "amd", ... or the id as 4 hex digits.
std::string vendor_name(uint16_t vendor);

}  // namespace xport::topology
