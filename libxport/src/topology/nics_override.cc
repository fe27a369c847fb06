// XPORT_NICS: "mlx5_0,mlx5_1" (every GPU uses these NICs, in this order) or
// "0000:53:00.0=mlx5_0+mlx5_1;0000:64:00.0=mlx5_2" (named GPUs; the rest stay automatic).
// A NIC is named by rail name, alias or PCI address; every error names the token at fault.
#include <algorithm>
#include <string>

#include "core/format.hpp"
#include "topology/plan.hpp"

namespace xport::topology {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t at = s.find(sep, start);
    out.push_back(trim(s.substr(start, at == std::string_view::npos ? s.npos : at - start)));
    if (at == std::string_view::npos) return out;
    start = at + 1;
  }
}

std::string known_nics(const Topology& topo) {
  if (topo.nics.empty()) return "this node has no NIC";
  std::string s = "NICs: ";
  for (size_t i = 0; i < topo.nics.size(); ++i) {
    if (i > 0) s += ", ";
    if (i == 16) return s + "...";
    s += topo.nics[i].name;
  }
  return s;
}

std::string known_gpus(const Topology& topo) {
  if (topo.gpus.empty()) return "this node has no GPU";
  std::string s = "GPUs: ";
  for (size_t i = 0; i < topo.gpus.size(); ++i) {
    if (i > 0) s += ", ";
    if (i == 16) return s + "...";
    s += topo.gpus[i].pci.to_string();
  }
  return s;
}

Result<size_t> find_nic(const Topology& topo, std::string_view token, std::string_view origin) {
  if (token.empty())
    return core::error(Code::invalid_argument, origin, ": empty NIC name (stray ',', '+' or '=')");
  for (size_t i = 0; i < topo.nics.size(); ++i)
    if (topo.nics[i].name == token) return i;
  for (size_t i = 0; i < topo.nics.size(); ++i)
    for (const std::string& a : topo.nics[i].aliases)
      if (a == token) return i;
  if (auto pci = PciAddress::parse(token); pci.ok()) {
    for (size_t i = 0; i < topo.nics.size(); ++i)
      if (topo.nics[i].pci == *pci) return i;
  }
  return core::error(Code::invalid_argument, origin, ": unknown NIC '", token, "' (",
                     known_nics(topo), ")");
}

Result<std::vector<size_t>> nic_list(const Topology& topo, std::string_view list, char sep,
                                     std::string_view origin) {
  std::vector<size_t> out;
  for (std::string_view token : split(list, sep)) {
    XPORT_ASSIGN_OR_RETURN(size_t n, find_nic(topo, token, origin));
    if (std::find(out.begin(), out.end(), n) != out.end())
      return core::error(Code::invalid_argument, origin, ": NIC '", token, "' listed twice");
    out.push_back(n);
  }
  return out;
}

}  // namespace

Result<NicsOverride> parse_nics_override(const Topology& topo, std::string_view text,
                                         std::string_view origin) {
  NicsOverride over;
  text = trim(text);
  if (text.empty()) return over;
  if (text.size() > 65536)
    return core::error(Code::invalid_argument, origin, ": longer than 65536 characters");
  if (text.find('=') == std::string_view::npos && text.find(';') == std::string_view::npos) {
    if (text.find('+') != std::string_view::npos)
      return core::error(Code::invalid_argument, origin, ": '", text,
                         "': '+' separates NICs only in the per-GPU form GPU=NIC+NIC; "
                         "use ',' for a list every GPU uses");
    XPORT_ASSIGN_OR_RETURN(over.all, nic_list(topo, text, ',', origin));
    over.global = true;
    return over;
  }
  std::vector<std::string_view> entries = split(text, ';');
  if (entries.size() > 1 && entries.back().empty()) entries.pop_back();  // tolerate a final ';'
  for (std::string_view entry : entries) {
    size_t eq = entry.find('=');
    if (entry.empty())
      return core::error(Code::invalid_argument, origin, ": empty entry (stray ';')");
    if (eq == std::string_view::npos)
      return core::error(Code::invalid_argument, origin, ": '", entry,
                         "' has no '=' (per-GPU form: GPU_PCI=NIC+NIC;GPU_PCI=NIC)");
    std::string_view gpu_token = trim(entry.substr(0, eq));
    std::string_view nics = trim(entry.substr(eq + 1));
    auto pci = PciAddress::parse(gpu_token);
    if (!pci.ok())
      return core::error(Code::invalid_argument, origin, ": GPU '", gpu_token,
                         "' is not a PCI address: ", pci.status().message());
    size_t gpu = topo.gpus.size();
    for (size_t i = 0; i < topo.gpus.size(); ++i)
      if (topo.gpus[i].pci == *pci) gpu = i;
    if (gpu == topo.gpus.size())
      return core::error(Code::invalid_argument, origin, ": unknown GPU '", gpu_token, "' (",
                         known_gpus(topo), ")");
    for (const auto& [g, list] : over.per_gpu)
      if (g == gpu)
        return core::error(Code::invalid_argument, origin, ": GPU '", gpu_token,
                           "' is given twice");
    if (nics.find(',') != std::string_view::npos)
      return core::error(Code::invalid_argument, origin, ": '", entry,
                         "': separate a GPU's NICs with '+', not ','");
    XPORT_ASSIGN_OR_RETURN(std::vector<size_t> list, nic_list(topo, nics, '+', origin));
    over.per_gpu.emplace_back(gpu, std::move(list));
  }
  return over;
}

}  // namespace xport::topology
