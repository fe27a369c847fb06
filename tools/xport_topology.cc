// xport-topology: which NICs serve which GPU, for operators. A thin main over xport::topology:
// the live node or --input FILE (hwloc or NCCL XML), as tables, --json or --dot.
// Exit codes: 0 success (an empty plan included), 1 error, 2 bad usage.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <iostream>
#include <optional>
#include <string>

#include "common/cli.hpp"
#include "common/tool.hpp"
#include "xport/context.hpp"
#include "xport/topology.hpp"

namespace {

int run(int argc, char** argv) {
  CLI::App app{
      "xport-topology: GPUs, NICs, their PCIe distances and the NIC plan (rails per GPU).\n"
      "Without --input it reads the live node (hwloc + sysfs)."};
  std::string input;
  std::string format_name = "auto";
  std::optional<std::string> nics;
  bool json = false;
  bool dot = false;
  xport::tool::plain_help(app, 26);
  app.add_option("--input,-i", input,
                 "hwloc XML (lstopo --of xml) or NCCL topology XML file (default: the live node)")
      ->type_name("FILE");
  app.add_option("--format", format_name, "input format: auto (default), hwloc, nccl")
      ->type_name("FORMAT")
      ->check(xport::tool::one_of({"auto", "hwloc", "nccl"}));
  app.add_option("--nics", nics,
                 "NIC override, XPORT_NICS syntax (mlx5_0,mlx5_1 or GPU_PCI=NIC+NIC;...); "
                 "default: the XPORT_NICS environment variable")
      ->type_name("OVERRIDE");
  app.add_flag("--json", json, "print JSON (shape in docs/tools.md)");
  app.add_flag("--dot", dot, "print a Graphviz graph of the PCI tree and the plan (not with --json)");
  xport::tool::add_version(app, "xport-topology");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return xport::tool::usage_exit(app, e, "xport-topology");  // help: 0; else one line, 2
  }
  if (json && dot) {
    std::fprintf(stderr, "xport-topology: --json and --dot exclude each other\n");
    return 2;
  }

  using namespace xport::topology;
  xport::Result<Topology> topo = xport::Status(xport::Code::internal, "unset");
  if (input.empty()) {
    topo = discover(xport::provider_nics());
  } else {
    Format f = format_name == "hwloc"  ? Format::hwloc_xml
               : format_name == "nccl" ? Format::nccl_xml
                                       : Format::automatic;
    topo = load_file(input, f);
  }
  if (!topo.ok()) return xport::tool::early_failure("xport-topology", json, topo.status().to_string());
  PlanOptions options;
  options.nics = nics;
  auto p = plan(*topo, options);
  if (!p.ok()) return xport::tool::early_failure("xport-topology", json, p.status().to_string());
  std::string out = json ? to_json(*topo, *p) : dot ? to_dot(*topo, *p) : to_text(*topo, *p);
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (std::fflush(stdout) != 0) return 1;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xport-topology: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "xport-topology: unexpected error\n");
  }
  return 1;
}
