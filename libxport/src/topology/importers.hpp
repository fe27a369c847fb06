// The readers that turn an XML document (hwloc or NCCL) into a Topology, and the small strict
// number parsers they share.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "topology/xml_reader.hpp"
#include "xport/topology.hpp"

namespace xport::topology {

// hwloc 1.x/2.x/3.x XML (`lstopo --of xml`, or hwloc's own export of the live node).
Result<Topology> import_hwloc(const xml::Document& doc, Source source,
                              const std::vector<ProviderNic>& provider_nics = {});
// NCCL topology XML: a dump (NCCL_TOPO_DUMP_FILE) or a static NCCL_TOPO_FILE.
Result<Topology> import_nccl(const xml::Document& doc);

// Hex number of at most `max_digits` digits, optional "0x"; nullopt when malformed.
std::optional<uint32_t> parse_hex(std::string_view s, size_t max_digits);
// Non-negative decimal integer up to `max`; nullopt when malformed or larger.
std::optional<int> parse_uint(std::string_view s, int max);
// A finite non-negative decimal number up to `max` ("31.507692", "16 GT/s" reads 16); else 0.
double parse_number_prefix(std::string_view s, double max);

}  // namespace xport::topology
