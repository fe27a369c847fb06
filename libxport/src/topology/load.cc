// Topology files: bounded reading, format detection by root element (<topology> is hwloc,
// <system> is NCCL), and the dispatch to the importers.
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/format.hpp"
#include "topology/importers.hpp"

namespace xport::topology {

std::string_view to_string(Source s) {
  switch (s) {
    case Source::live:
      return "live";
    case Source::hwloc_xml:
      return "hwloc-xml";
    case Source::nccl_xml:
      return "nccl-xml";
  }
  return "?";
}

Result<Topology> parse(std::string_view bytes, Format format) {
  xml::Limits limits;
  limits.max_bytes = kMaxInputBytes;
  auto doc = xml::parse(bytes, limits);
  if (!doc.ok()) return doc.status();
  const std::string& root = doc->root().name;
  if (format == Format::automatic) {
    if (root == "topology")
      format = Format::hwloc_xml;
    else if (root == "system")
      format = Format::nccl_xml;
    else
      return core::error(Code::invalid_argument, "unknown topology format: the root element is <",
                         root, ">; expected <topology> (hwloc XML) or <system> (NCCL XML)");
  }
  if (format == Format::hwloc_xml) return import_hwloc(*doc, Source::hwloc_xml);
  return import_nccl(*doc);
}

Result<Topology> load_file(const std::string& path, Format format) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return core::error(Code::not_found, path, ": ", std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    return core::error(Code::invalid_argument, path, ": not a regular file");
  if (static_cast<uint64_t>(st.st_size) > kMaxInputBytes)
    return core::error(Code::invalid_argument, path, ": ", st.st_size, " bytes, more than the ",
                       kMaxInputBytes >> 20, " MiB a topology file may have");
  std::ifstream in(path, std::ios::binary);
  if (!in) return core::error(Code::not_found, path, ": cannot open: ", std::strerror(errno));
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  bytes.resize(static_cast<size_t>(in.gcount()));
  if (in.bad()) return core::error(Code::invalid_argument, path, ": read error");
  auto topo = parse(bytes, format);
  if (!topo.ok()) return topo.status().with_context(path);
  return topo;
}

}  // namespace xport::topology
