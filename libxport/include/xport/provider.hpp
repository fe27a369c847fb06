// What libxport chose to run on, and why: the provider, its capabilities, progress and threading.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace xport {

struct Capabilities {
  std::string provider;       // "tcp;ofi_rxm", "shm", ...
  std::string fabric;         // "127.0.0.1/32"
  std::string domain;         // "lo", "mlx5_0"
  std::string endpoint_type;  // "rdm" or "msg" (connected)
  uint32_t api_version = 0;   // FI_VERSION of the provider
  bool rma = false;
  bool atomics = false;           // FI_ATOMIC offered by the provider
  bool atomics_enabled = false;   // ... and asked for on the endpoints (XPORT_ATOMICS allows it)
  bool hmem = false;              // FI_HMEM offered (device memory registration)
  bool hmem_enabled = false;      // ... and asked for (XPORT_GPU_MEMORY allows it): GPU memory
                                  // is registered with the provider (FI_HMEM_CUDA), not staged
  bool fence = false;             // FI_FENCE offered
  size_t remote_cq_data_size = 0; // bytes of immediate data on writes
  std::vector<std::string> mr_mode;  // FI_MR_* bits the provider requires of us
  std::string data_progress;         // "auto" or "manual" (obtained)
  std::string control_progress;
  std::string threading;             // "FI_THREAD_COMPLETION", "FI_THREAD_SAFE", ...
  size_t inject_size = 0;
  size_t max_msg_size = 0;
  size_t iov_limit = 0;
  size_t rma_iov_limit = 0;
};

struct ProviderReport {
  Capabilities caps;
  std::string reason;                   // why this provider and domain were chosen
  std::vector<std::string> candidates;  // providers that would have worked, best first
  bool progress_fallback = false;       // asked for auto progress, got manual
  // XPORT_PROGRESS=native chose manual progress: the provider's own (its auto progress would be
  // a thread of its own, contending with libxport's).
  bool progress_native_manual = false;
};

// A human-readable multi-line rendering (used by the tools).
std::string to_string(const Capabilities& caps);

// libfabric as this process sees it, before any provider is chosen (xport-probe, bug reports).
struct FabricInfo {
  std::string runtime_version;  // the loaded library's fi_version(): "1.17" (major.minor)
  std::string build_version;    // the headers libxport was compiled with: "1.17.0"
  std::string api_version;      // the FI_VERSION libxport asks fi_getinfo for: "1.17"
  std::vector<std::string> providers;  // every provider fi_getinfo lists, whatever its caps
};
FabricInfo fabric_info();

}  // namespace xport
