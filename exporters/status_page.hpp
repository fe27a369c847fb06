// The exporter's page at "/": every process on the node with its devices, channel pools, rails,
// CQs and other blocks, counters and current rates, readable by a person without Grafana.
#pragma once

#include <deque>
#include <string>

#include "node_scan.hpp"

namespace xport::exporter {

// Rates compare `now` with the oldest scan of `history` (earlier scans, oldest first) that holds
// the same process: per block, the counter delta over the difference of the two snapshots'
// publish times. Without one, the page says rates come with the next refresh.
std::string status_page(const ScanResult& now, const std::deque<ScanResult>& history,
                        const NodeScan& node);

}  // namespace xport::exporter
