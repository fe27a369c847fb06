// Provider selection: candidates from fi_getinfo, ranked hardware first, loopback-aware,
// with progress/threading negotiation (auto + completion, else manual + safe).
#include "fabric/provider.hpp"

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "core/log.hpp"
#include "fabric/error.hpp"

namespace xport::fabric {
namespace {

constexpr uint32_t kApiVersion = FI_VERSION(1, 17);
constexpr uint64_t kRequiredCaps = FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_RECV | FI_SEND |
                                   FI_REMOTE_READ | FI_REMOTE_WRITE;
// MR modes libxport knows how to honour (FI_MR_RAW keys come later). FI_MR_HMEM (a descriptor
// with every buffer of device memory) is offered only with FI_HMEM: libxport passes every
// buffer's descriptor anyway, as FI_MR_LOCAL asks.
constexpr int kMrModeSupported =
    FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;

// Lower is better. Hardware providers first, then tcp;ofi_rxm, then the rest.
int rank_of(const std::string& prov, bool peers_on_host) {
  static const char* kOrder[] = {"efa",  "cxi",  "verbs;ofi_rxm", "verbs", "psm3",
                                 "opx",  "psm2", "tcp;ofi_rxm",   "tcp",   "sockets"};
  if (peers_on_host && prov == "shm") return -1;
  for (size_t i = 0; i < sizeof(kOrder) / sizeof(kOrder[0]); ++i) {
    if (prov == kOrder[i]) return static_cast<int>(i);
  }
  return 100;  // unknown providers, and shm when peers are remote (it cannot reach them)
}

bool is_loopback_domain(const fi_info* i) {
  const char* d = i->domain_attr->name;
  return d != nullptr && std::strcmp(d, "lo") == 0;
}

bool is_ipv4_fabric(const fi_info* i) {
  const char* f = i->fabric_attr->name;
  return f != nullptr && std::strchr(f, '.') != nullptr;
}

InfoPtr make_hints(fi_ep_type ep_type, bool progress_auto, bool atomics = false,
                   bool hmem = false) {
  InfoPtr h(fi_allocinfo());
  h->caps = kRequiredCaps | (atomics ? FI_ATOMIC : 0) | (hmem ? FI_HMEM : 0);
  h->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
  h->ep_attr->type = ep_type;
  h->domain_attr->mr_mode = kMrModeSupported | (hmem ? FI_MR_HMEM : 0);
  h->domain_attr->data_progress = progress_auto ? FI_PROGRESS_AUTO : FI_PROGRESS_MANUAL;
  h->domain_attr->control_progress = progress_auto ? FI_PROGRESS_AUTO : FI_PROGRESS_MANUAL;
  h->domain_attr->threading = progress_auto ? FI_THREAD_COMPLETION : FI_THREAD_SAFE;
  return h;
}

struct Candidate {
  const fi_info* info;
  bool progress_auto;
  int rank;
  bool atomics;  // FI_ATOMIC asked for and granted
  bool hmem;     // FI_HMEM asked for and granted
};

std::string prov_of(const fi_info* i) {
  return i->fabric_attr->prov_name != nullptr ? i->fabric_attr->prov_name : "";
}
std::string domain_of(const fi_info* i) {
  return i->domain_attr->name != nullptr ? i->domain_attr->name : "";
}

const char* progress_name(fi_progress p) {
  switch (p) {
    case FI_PROGRESS_AUTO: return "auto";
    case FI_PROGRESS_MANUAL: return "manual";
    default: return "unspecified";
  }
}

const char* threading_name(fi_threading t) {
  switch (t) {
    case FI_THREAD_SAFE: return "FI_THREAD_SAFE";
    case FI_THREAD_FID: return "FI_THREAD_FID";
    case FI_THREAD_DOMAIN: return "FI_THREAD_DOMAIN";
    case FI_THREAD_COMPLETION: return "FI_THREAD_COMPLETION";
    case FI_THREAD_ENDPOINT: return "FI_THREAD_ENDPOINT";
    default: return "FI_THREAD_UNSPEC";
  }
}

}  // namespace

std::vector<std::string> list_providers() {
  fi_info* list = nullptr;
  std::vector<std::string> out;
  if (fi_getinfo(kApiVersion, nullptr, nullptr, 0, nullptr, &list) != 0) return out;
  std::set<std::string> seen;
  for (fi_info* i = list; i != nullptr; i = i->next) {
    std::string p = prov_of(i);
    if (seen.insert(p).second) out.push_back(p);
  }
  fi_freeinfo(list);
  return out;
}

std::vector<NicAttribute> nic_attributes() {
  std::vector<NicAttribute> out;
  fi_info* list = nullptr;
  if (fi_getinfo(kApiVersion, nullptr, nullptr, 0, nullptr, &list) != 0) return out;
  std::set<std::string> seen;
  for (fi_info* i = list; i != nullptr; i = i->next) {
    const fid_nic* nic = i->nic;
    if (nic == nullptr || nic->bus_attr == nullptr || nic->bus_attr->bus_type != FI_BUS_PCI) {
      continue;
    }
    const fi_pci_attr& pci = nic->bus_attr->attr.pci;
    char addr[32];
    std::snprintf(addr, sizeof(addr), "%04x:%02x:%02x.%x", pci.domain_id, pci.bus_id,
                  pci.device_id, pci.function_id);
    NicAttribute a{prov_of(i), domain_of(i), addr};
    if (seen.insert(a.provider + "/" + a.domain + "/" + a.pci).second) out.push_back(a);
  }
  fi_freeinfo(list);
  return out;
}

Capabilities describe(const fi_info* info) {
  Capabilities c;
  c.provider = prov_of(info);
  c.fabric = info->fabric_attr->name != nullptr ? info->fabric_attr->name : "";
  c.domain = domain_of(info);
  c.endpoint_type = info->ep_attr->type == FI_EP_MSG ? "msg" : "rdm";
  c.api_version = info->fabric_attr->prov_version;
  c.rma = (info->caps & FI_RMA) != 0;
  c.remote_cq_data_size = info->domain_attr->cq_data_size;
  const int mr = info->domain_attr->mr_mode;
  struct {
    int bit;
    const char* name;
  } const bits[] = {{FI_MR_LOCAL, "FI_MR_LOCAL"},         {FI_MR_RAW, "FI_MR_RAW"},
                    {FI_MR_VIRT_ADDR, "FI_MR_VIRT_ADDR"}, {FI_MR_ALLOCATED, "FI_MR_ALLOCATED"},
                    {FI_MR_PROV_KEY, "FI_MR_PROV_KEY"},   {FI_MR_MMU_NOTIFY, "FI_MR_MMU_NOTIFY"},
                    {FI_MR_RMA_EVENT, "FI_MR_RMA_EVENT"}, {FI_MR_ENDPOINT, "FI_MR_ENDPOINT"},
                    {FI_MR_HMEM, "FI_MR_HMEM"},           {FI_MR_COLLECTIVE, "FI_MR_COLLECTIVE"}};
  for (const auto& b : bits) {
    if (mr & b.bit) c.mr_mode.push_back(b.name);
  }
  c.data_progress = progress_name(info->domain_attr->data_progress);
  c.control_progress = progress_name(info->domain_attr->control_progress);
  c.threading = threading_name(info->domain_attr->threading);
  c.inject_size = info->tx_attr->inject_size;
  c.max_msg_size = info->ep_attr->max_msg_size;
  c.iov_limit = info->tx_attr->iov_limit;
  c.rma_iov_limit = info->tx_attr->rma_iov_limit;

  // What the provider offers beyond what we asked for (atomics, FI_HMEM, FI_FENCE).
  InfoPtr hints(fi_allocinfo());
  hints->ep_attr->type = info->ep_attr->type;
  hints->fabric_attr->prov_name = strdup(c.provider.c_str());
  hints->domain_attr->mr_mode = ~0 & ~(FI_MR_BASIC | FI_MR_SCALABLE);
  fi_info* all = nullptr;
  if (fi_getinfo(kApiVersion, nullptr, nullptr, 0, hints.get(), &all) == 0) {
    for (fi_info* i = all; i != nullptr; i = i->next) {
      if (prov_of(i) != c.provider || domain_of(i) != c.domain) continue;
      c.atomics = c.atomics || (i->caps & FI_ATOMIC) != 0;
      c.hmem = c.hmem || (i->caps & FI_HMEM) != 0;
      c.fence = c.fence || (i->caps & FI_FENCE) != 0;
    }
    fi_freeinfo(all);
  }
  return c;
}

namespace {

// The data progress `prov` on `domain` (`type` endpoints) has when nothing is asked of it.
fi_progress default_progress(const std::string& prov, const std::string& domain, fi_ep_type type) {
  InfoPtr h(fi_allocinfo());
  h->caps = kRequiredCaps;
  h->ep_attr->type = type;
  h->domain_attr->mr_mode = kMrModeSupported;
  h->fabric_attr->prov_name = strdup(prov.c_str());
  if (!domain.empty()) h->domain_attr->name = strdup(domain.c_str());
  fi_info* list = nullptr;
  if (fi_getinfo(kApiVersion, nullptr, nullptr, 0, h.get(), &list) != 0) {
    return FI_PROGRESS_UNSPEC;
  }
  fi_progress p = FI_PROGRESS_UNSPEC;
  for (fi_info* i = list; i != nullptr; i = i->next) {
    if (prov_of(i) == prov && (domain.empty() || domain_of(i) == domain)) {
      p = i->domain_attr->data_progress;
      break;
    }
  }
  fi_freeinfo(list);
  return p;
}

}  // namespace

Result<SelectedProvider> select_provider(const ProviderRequest& req) {
  if (req.want_auto_progress && req.progress_native) {
    // The provider and domain as manual progress would pick them; auto only where that is the
    // provider's own progress.
    ProviderRequest manual = req;
    manual.progress_native = false;
    manual.want_auto_progress = false;
    Result<SelectedProvider> m = select_provider(manual);
    ProviderRequest automatic = req;
    automatic.progress_native = false;
    if (!m.ok()) return select_provider(automatic);  // a provider with auto progress only
    const fi_info* i = m->info.get();
    if (default_progress(prov_of(i), domain_of(i), i->ep_attr->type) == FI_PROGRESS_AUTO) {
      return select_provider(automatic);
    }
    m->report.progress_native_manual = true;
    const std::string at = "; progress manual";
    const size_t pos = m->report.reason.find(at);
    if (pos != std::string::npos) {
      m->report.reason.insert(pos + at.size(),
                              " (the provider's own: its auto progress would be a thread of "
                              "its own, contending with libxport's; XPORT_PROGRESS=auto asks "
                              "for it)");
    }
    return m;
  }
  // Gather candidates for both endpoint types and both progress modes.
  std::vector<InfoPtr> lists;
  std::vector<Candidate> cands;
  for (bool progress_auto : {true, false}) {
    if (progress_auto && !req.want_auto_progress) continue;
    for (fi_ep_type type : {FI_EP_RDM, FI_EP_MSG}) {
      // With atomics (FI_HMEM) wanted, the same query with FI_ATOMIC (FI_HMEM) first: where it
      // is granted, that entry ranks just ahead of the one without. FI_HMEM is required, not
      // preferred, under req.require_hmem.
      for (int variant = 0; variant < 4; ++variant) {
        const bool atomics = (variant & 2) == 0;
        const bool hmem = (variant & 1) == 0;
        if (atomics && !req.want_atomics) continue;
        if (hmem && !req.want_hmem && !req.require_hmem) continue;
        if (!hmem && req.require_hmem) continue;
        InfoPtr hints = make_hints(type, progress_auto, atomics, hmem);
        if (!req.provider.empty()) hints->fabric_attr->prov_name = strdup(req.provider.c_str());
        fi_info* list = nullptr;
        int ret = fi_getinfo(kApiVersion, nullptr, nullptr, 0, hints.get(), &list);
        if (ret == -FI_ENODATA) continue;
        if (ret != 0) return fi_status(ret, "fi_getinfo");
        lists.emplace_back(list);
        for (fi_info* i = list; i != nullptr; i = i->next) {
          std::string prov = prov_of(i);
          if (!req.provider.empty() && prov != req.provider) continue;
          if (prov == "ofi_rxd" || prov.find("ofi_mrail") != std::string::npos) continue;
          if (i->domain_attr->cq_data_size < 4) continue;  // we route by 32+ bits of CQ data
          if (!req.domain.empty() && domain_of(i) != req.domain) continue;
          const bool got_hmem = hmem && (i->caps & FI_HMEM) != 0;
          if (req.require_hmem && !got_hmem) continue;
          int rank = ((rank_of(prov, req.peers_on_host) * 4 + (type == FI_EP_MSG ? 2 : 0) +
                       (progress_auto ? 0 : 1)) * 2 + (atomics ? 0 : 1)) * 2 + (hmem ? 0 : 1);
          cands.push_back(
              {i, progress_auto, rank, atomics && (i->caps & FI_ATOMIC) != 0, got_hmem});
        }
      }
    }
  }
  if (cands.empty() && req.require_hmem) {
    // Name what would have been chosen without the requirement.
    ProviderRequest plain = req;
    plain.require_hmem = false;
    plain.want_hmem = false;
    auto without = select_provider(plain);
    const std::string what =
        without.ok() ? core::str(without->report.caps.provider, " on ", without->report.caps.domain)
                     : std::string(req.provider.empty() ? "no provider" : req.provider);
    return core::error(Code::unsupported, "XPORT_GPU_MEMORY=hmem: ", what,
                       " does not offer FI_HMEM (registration of GPU memory by the provider); "
                       "XPORT_GPU_MEMORY=auto or staged registers GPU memory through host "
                       "staging instead");
  }
  if (cands.empty()) {
    std::string names;
    for (const auto& p : list_providers()) names += (names.empty() ? "" : ", ") + p;
    if (!req.provider.empty()) {
      return core::error(Code::not_found, "provider '", req.provider, "'",
                         req.domain.empty() ? "" : core::str(" with domain '", req.domain, "'"),
                         " is not available with RMA and remote CQ data (libfabric lists: ",
                         names, ")");
    }
    return core::error(Code::not_found,
                       "no libfabric provider offers messages, RMA and remote CQ data",
                       req.domain.empty() ? "" : core::str(" on domain '", req.domain, "'"),
                       " (libfabric lists: ", names, ")");
  }
  std::stable_sort(cands.begin(), cands.end(),
                   [](const Candidate& a, const Candidate& b) { return a.rank < b.rank; });
  const std::string best_prov = prov_of(cands.front().info);
  const bool best_auto = cands.front().progress_auto;
  const fi_ep_type best_type = cands.front().info->ep_attr->type;
  const bool best_atomics = cands.front().atomics;
  const bool best_hmem = cands.front().hmem;

  // Among the best provider's domains: loopback when all peers are local, else a real NIC.
  const fi_info* chosen = nullptr;
  std::string domain_reason;
  std::vector<const fi_info*> same;
  for (const Candidate& c : cands) {
    if (prov_of(c.info) == best_prov && c.progress_auto == best_auto &&
        c.info->ep_attr->type == best_type && c.atomics == best_atomics && c.hmem == best_hmem)
      same.push_back(c.info);
  }
  if (!req.domain.empty()) {
    chosen = same.front();
    domain_reason = core::str("domain '", req.domain, "' as requested");
  } else if (req.peers_on_host) {
    for (const fi_info* i : same) {
      if (is_loopback_domain(i) && is_ipv4_fabric(i)) {
        chosen = i;
        break;
      }
    }
    if (chosen != nullptr) domain_reason = "loopback interface because all peers are on this host";
  } else {
    for (const fi_info* i : same) {
      if (!is_loopback_domain(i) && is_ipv4_fabric(i)) {
        chosen = i;
        break;
      }
    }
    if (chosen != nullptr) domain_reason = "first non-loopback domain";
  }
  if (chosen == nullptr) {
    chosen = same.front();
    domain_reason = "the provider's first domain";
  }

  SelectedProvider out;
  out.info = dup_info(chosen);
  {
    // One entry per domain, preferring its IPv4 fabric (tcp lists lo and each NIC once per
    // address family; link-local IPv6 comes first on fresh veth interfaces).
    std::vector<std::string> order;
    std::map<std::string, const fi_info*> best;
    InfoPtr all_hints = make_hints(best_type, best_auto, best_atomics, best_hmem);
    all_hints->fabric_attr->prov_name = strdup(best_prov.c_str());
    fi_info* list = nullptr;
    if (fi_getinfo(kApiVersion, nullptr, nullptr, 0, all_hints.get(), &list) == 0) {
      for (fi_info* i = list; i != nullptr; i = i->next) {
        if (prov_of(i) != best_prov) continue;
        auto it = best.find(domain_of(i));
        if (it == best.end()) {
          order.push_back(domain_of(i));
          best[domain_of(i)] = i;
        } else if (!is_ipv4_fabric(it->second) && is_ipv4_fabric(i)) {
          it->second = i;
        }
      }
      for (const auto& d : order) out.domains.push_back(dup_info(best[d]));
      fi_freeinfo(list);
    }
    if (out.domains.empty()) out.domains.push_back(dup_info(chosen));
  }
  out.report.caps = describe(chosen);
  out.report.caps.atomics_enabled = best_atomics;
  out.report.caps.hmem_enabled = best_hmem;
  std::set<std::string> seen;
  for (const Candidate& c : cands) {
    if (seen.insert(prov_of(c.info)).second) out.report.candidates.push_back(prov_of(c.info));
  }
  std::string why;
  if (!req.provider.empty()) {
    why = core::str("provider '", req.provider, "' as requested (XPORT_PROVIDER or option)");
  } else if (req.peers_on_host && best_prov == "shm") {
    why = "shm because all peers are on this host";
  } else if (rank_of(best_prov, false) < rank_of("tcp;ofi_rxm", false)) {
    why = core::str("hardware provider ", best_prov, " is the best available");
  } else {
    why = core::str(best_prov, " is the best available provider");
  }
  out.report.progress_fallback = req.want_auto_progress && !best_auto;
  out.report.reason = core::str(
      why, "; ", domain_reason, "; progress ", out.report.caps.data_progress,
      out.report.progress_fallback ? " (auto not offered, fell back to manual + FI_THREAD_SAFE)"
                                   : "",
      "; ", best_type == FI_EP_MSG ? "connected (FI_EP_MSG) endpoints" : "reliable datagram endpoints");
  XPORT_LOG(info, "selected ", out.report.caps.provider, " on ", out.report.caps.domain, ": ",
            out.report.reason);
  return out;
}

}  // namespace xport::fabric

namespace xport {

std::string to_string(const Capabilities& c) {
  std::string mr;
  for (const auto& m : c.mr_mode) mr += (mr.empty() ? "" : "|") + m;
  return core::str("provider ", c.provider, " fabric ", c.fabric, " domain ", c.domain, " (",
                   c.endpoint_type, ")\n  rma ", c.rma, " atomics ", c.atomics, " (enabled ",
                   c.atomics_enabled, ") hmem ", c.hmem, " (enabled ", c.hmem_enabled, ")",
                   " fence ", c.fence, " remote_cq_data ", c.remote_cq_data_size,
                   "B\n  mr_mode ", mr.empty() ? "none" : mr, "\n  progress data ",
                   c.data_progress, " control ", c.control_progress, " threading ", c.threading,
                   "\n  inject ", c.inject_size, "B max_msg ", c.max_msg_size, "B iov ",
                   c.iov_limit, " rma_iov ", c.rma_iov_limit);
}

FabricInfo fabric_info() {
  FabricInfo out;
  const uint32_t v = fi_version();
  out.runtime_version = core::str(FI_MAJOR(v), ".", FI_MINOR(v));
  out.build_version =
      core::str(FI_MAJOR_VERSION, ".", FI_MINOR_VERSION, ".", FI_REVISION_VERSION);
  out.api_version = core::str(FI_MAJOR(fabric::kApiVersion), ".", FI_MINOR(fabric::kApiVersion));
  out.providers = fabric::list_providers();
  return out;
}

}  // namespace xport
