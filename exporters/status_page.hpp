// The exporter's page at "/": the node's totals with rates over time (charts the page draws
// itself), the GPU-NIC plan, and every process with its devices, channel pools, rails,
// endpoints, CQs and GPU blocks, counters and current rates, readable without Grafana.
#pragma once

#include <deque>
#include <string>

#include "node_scan.hpp"
#include "rate_history.hpp"

namespace xport::exporter {

// Table rates compare `now` with the oldest scan of `history` (earlier scans, oldest first)
// that holds the same process: per block, the counter delta over the difference of the two
// snapshots' publish times. Without one, the page says rates come with the next refresh.
// Charts come from `rates`. `host`: the node's name, in the title.
std::string status_page(const ScanResult& now, const std::deque<ScanResult>& history,
                        const NodeScan& node, const RateHistory& rates, const std::string& host);

}  // namespace xport::exporter
