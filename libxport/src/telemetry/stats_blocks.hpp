// The one place that turns a Device's counter snapshot (xport::Stats) into segment blocks.
// When Stats grows, extend append_stats_blocks() and names.hpp.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "telemetry/segment_format.hpp"
#include "xport/stats.hpp"

namespace xport::telemetry {

// Labels that identify a device and its NIC; fixed when the device opens.
struct DeviceLabels {
  std::string device;    // the device's ordinal in the process ("0", "1"...)
  std::string provider;  // "tcp;ofi_rxm"
  std::string fabric;    // "127.0.0.1/32"
  std::string domain;    // the domain the Context chose (the rail when Stats names none)
  std::string gpu;       // PCI address of the GPU the device serves; empty: the host
  std::map<std::string, std::string> nic_pci;  // domain -> PCI address, where libfabric knows it
};

// Appends: one device block, one pool block (Stats::pool), one rail block per rail, one endpoint
// block per (rail, endpoint name) — connection endpoints of a rail share a name and are summed,
// so the label set stays bounded whatever the number of peers — one block per CQ, and the info
// blocks: one xport_nic_info and one xport_rail_plan_info per rail (Stats::rails, then any other
// rail an endpoint names), xport_gpu_info.
void append_stats_blocks(const Stats& stats, const DeviceLabels& labels,
                         std::vector<BlockRecord>& out);

}  // namespace xport::telemetry
