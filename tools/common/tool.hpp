// What every xport-* tool shares at its edges: the --version answer and the one line (or JSON
// object) a failure before the main work prints. Header-only: each tool is one thin main.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <string_view>

#include "core/json.hpp"  // header-only: the one JSON writer (tools/meson.build says why)
#include "xport/provider.hpp"
#include "xport/xport.hpp"

namespace xport::tool {

// "xport-bench 0.1.0 (git v0.1.0-12-gabcdef0; libfabric 1.17 loaded, built with 1.17.0)"
inline std::string version_text(std::string_view tool) {
  const FabricInfo fi = fabric_info();
  std::string s(tool);
  s += ' ';
  s += version();
  s += " (git ";
  s += build_id();
  s += "; libfabric " + fi.runtime_version + " loaded, built with " + fi.build_version + ")";
  return s;
}

// --version prints version_text and exits 0 (CLI11's own flag; parse errors stay exit 2).
inline void add_version(CLI::App& app, std::string_view tool) {
  app.set_version_flag("--version", version_text(tool), "print the version and exit");
}

// A failure before the tool's main work: one line on stderr ("tool: what"), and with --json
// also {"tool": ..., "version": ..., "error": ...} on stdout. Returns the exit code, 1.
inline int early_failure(std::string_view tool, bool json, std::string_view what) {
  std::fprintf(stderr, "%.*s: %.*s\n", static_cast<int>(tool.size()), tool.data(),
               static_cast<int>(what.size()), what.data());
  if (json) {
    std::string out;
    xport::core::JsonWriter(out)
        .begin_object()
        .field("tool", tool)
        .field("version", version())
        .field("error", what)
        .end_object();
    std::printf("%s\n", out.c_str());
    std::fflush(stdout);
  }
  return 1;
}

}  // namespace xport::tool
