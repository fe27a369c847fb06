// Provider selection and progress/threading negotiation over fi_getinfo.
#pragma once

#include <string>

#include "fabric/fid.hpp"
#include "xport/provider.hpp"
#include "xport/status.hpp"

namespace xport::fabric {

struct ProviderRequest {
  std::string provider;        // exact libfabric provider name; empty: choose
  std::string domain;          // exact domain name; empty: choose
  bool peers_on_host = false;  // every peer is a process of this host
  bool want_auto_progress = true;
  // With want_auto_progress: auto only where the chosen provider's own default data progress
  // is auto (fi_getinfo without a progress hint); where it is manual, its auto progress is a
  // thread of its own (rxm, tcp) that contends with libxport's progress: manual instead.
  bool progress_native = false;
  // Ask for FI_ATOMIC too (one-sided windows' native atomics), where the provider offers it;
  // a provider without it is still chosen, and windows emulate their atomics.
  bool want_atomics = false;
  // Ask for FI_HMEM + FI_MR_HMEM too (the provider registers GPU memory), where the provider
  // offers it; a provider without it is still chosen, and GPU memory is staged through host
  // memory. require_hmem: only providers with FI_HMEM (an error naming the provider otherwise).
  bool want_hmem = false;
  bool require_hmem = false;
};

struct SelectedProvider {
  InfoPtr info;  // the fi_info to open (progress and threading as negotiated)
  ProviderReport report;
  // Every domain (NIC) of the chosen provider with the same endpoint type and progress mode:
  // the rails a multi-rail device may open.
  std::vector<InfoPtr> domains;
};

// Picks a provider and domain: the request's names when given (an unknown name is an error
// that lists what exists), else the best candidate (hardware first, then tcp;ofi_rxm; shm first
// when all peers are on this host). Asks FI_PROGRESS_AUTO + FI_THREAD_COMPLETION, falling back to
// FI_PROGRESS_MANUAL + FI_THREAD_SAFE.
Result<SelectedProvider> select_provider(const ProviderRequest& request);

// Fills a capability report from an fi_info (and the provider's unrestricted caps).
Capabilities describe(const fi_info* info);

// Every provider name libfabric lists on this host, whatever its capabilities.
std::vector<std::string> list_providers();

// The PCI NICs libfabric reports (fi_info->nic bus attributes), one per provider and domain.
struct NicAttribute {
  std::string provider;
  std::string domain;
  std::string pci;  // "0000:4f:00.0"
};
std::vector<NicAttribute> nic_attributes();

}  // namespace xport::fabric
