// The status page's tables: one section per process (its throughput chart, endpoints, rails,
// CQs, devices, channel pool, GPU staging and proxy), and the helpers both page files share.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "node_scan.hpp"
#include "rate_history.hpp"
#include "telemetry/names.hpp"

namespace xport::exporter::page {

std::string esc(const std::string& s);          // HTML text and attribute values
std::string human(double v, const char* unit);  // 1.23 MB/s; SI prefixes
std::string label(const telemetry::BlockSnapshot& b, telemetry::LabelKey k);
uint64_t value(const telemetry::BlockSnapshot& b, telemetry::CounterId id);
// A chart the page's script draws (figure.chart, its data in data-chart); `unit` is appended to
// every value.
void chart(std::ostream& os, const std::string& title, const RateChart& c, const char* unit);

// Rates are against `prev` (the same process in an earlier scan), nullptr when there is none.
void process_section(std::ostream& os, const ProcessView& p, const ProcessView* prev,
                     const RateHistory& rates);

}  // namespace xport::exporter::page
