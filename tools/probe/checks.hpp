// The checks of xport-probe. Each returns an Outcome: its checklist line and what it found for
// later checks (a Context, the topology), held by shared_ptr so that a check abandoned at its
// deadline keeps its own references and never races the checks that follow.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "report.hpp"
#include "xport/xport.hpp"

namespace probe {

struct Outcome {
  Check check;
  std::shared_ptr<xport::Context> ctx;
  std::shared_ptr<const xport::topology::Topology> topo;
  std::shared_ptr<const xport::topology::Plan> plan;
  std::vector<KnobRow> knobs;
};

Outcome check_libfabric();
// `telemetry_set_by_probe`: the probe turned XPORT_TELEMETRY off for its own devices because
// the environment did not set it; the knob is then reported as the job would see it.
Outcome check_knobs(bool telemetry_set_by_probe);
Outcome check_topology();
Outcome check_provider(const std::string& provider,
                       std::shared_ptr<const xport::topology::Topology> topo);
Outcome check_capabilities(std::shared_ptr<xport::Context> ctx,
                           std::shared_ptr<const xport::topology::Topology> topo);
Outcome check_progress(std::shared_ptr<xport::Context> ctx);
Outcome check_link(const std::string& rail);
// `devices` devices of `rails_per_device` rails each (one per GPU of the plan, at least one).
Outcome check_memlock(size_t devices, size_t rails_per_device, const std::string& provider);
Outcome check_host_registration(std::shared_ptr<xport::Context> ctx, std::vector<std::string> rails,
                                xport::Deadline deadline);
Outcome check_gpu_registration(std::shared_ptr<const xport::topology::Topology> topo,
                               std::shared_ptr<xport::Context> ctx);
// Two devices on `rail`, connected both ways: a message larger than XPORT_EAGER_MAX (rendezvous:
// an RDMA write with remote CQ data), every byte verified, then small round trips for latency.
Outcome check_loopback(std::shared_ptr<xport::Context> ctx, const std::string& rail,
                       size_t eager_max, xport::Deadline deadline);

// Sizes as knobs write them ("8192", "64K", "1M"); nullopt when malformed.
std::optional<size_t> parse_size(const std::string& text);
// The value knob_list() reports for `name`, "" when unknown.
std::string knob_value(const std::string& name);

}  // namespace probe
