// Entry points: a Context chooses the provider; a Device is the group of NICs (rails) that
// serves one GPU or the host — one rail until multi-rail lands.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "xport/comm.hpp"
#include "xport/provider.hpp"
#include "xport/region.hpp"
#include "xport/stats.hpp"
#include "xport/status.hpp"
#include "xport/topology.hpp"
#include "xport/window.hpp"

namespace xport {

struct ContextOptions {
  std::string provider;        // empty: XPORT_PROVIDER, else the best available
  std::string domain;          // empty: XPORT_DOMAIN, else chosen with the provider
  bool peers_on_host = false;  // all peers are processes of this host (shm becomes first choice)
  bool thread_safe = true;     // false: the caller promises one thread at a time (no locks)
};

class Device;

// One rail of a device as the node describes it.
struct RailInfo {
  std::string name;              // libfabric domain (NIC or interface)
  uint64_t link_bits_per_s = 0;  // link rate: fi_info->nic->link_attr, else sysfs; 0 = unknown
  std::string link_source;       // "libfabric", "sysfs", or "" when unknown
};

struct DeviceOptions {
  // The rails of the device, by libfabric domain (NIC or interface) name, in rail order: the
  // peer's rail i pairs with this rail i. Empty: XPORT_RAILS, else the one domain the Context
  // chose. Multi-rail needs an RDM provider.
  std::vector<std::string> rails;
};

// The PCI NICs libfabric reports on this host (its fi_info->nic bus attributes), for
// topology::discover(): they tie a provider's domain to a PCI function and let Ethernet NICs
// that libfabric drives count as NICs.
std::vector<topology::ProviderNic> provider_nics();

// Bytes one Device with `rails` rails registers for itself under the knobs in effect (bounce
// buffers of its data and, where separate (XPORT_CONTROL_ENDPOINT), control endpoints, flush
// buffers, native atomic slots), in whole pages, on `provider` (empty: as on one with a separate
// control endpoint, the most). Providers that pin memory (verbs, efa, cxi...) lock this much
// under RLIMIT_MEMLOCK; the caller's Regions come on top, and where GPU memory is staged the
// staging pool of its sources (16 MiB from the first staged Region of a GPU, growing with the
// operations in flight up to XPORT_GPU_STAGING_POOL: docs/semantics.md, "GPU memory"). RDM
// providers; connected ones (tcp) register rx + tx buffers per connection instead.
size_t device_registered_bytes(size_t rails = 1, std::string_view provider = {});

class Context {
 public:
  static Result<std::unique_ptr<Context>> open(const ContextOptions& options = {});
  ~Context();

  const ProviderReport& provider() const;
  Result<std::unique_ptr<Device>> open_device(const DeviceOptions& options = {});
  // Domain names the chosen provider offers (candidates for DeviceOptions::rails).
  std::vector<std::string> domains() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// What a runtime asks of a device before it uses it (NCCL's getProperties: docs/semantics.md,
// "Device properties"). Figures the node does not report are 0 or empty, never invented.
struct DeviceProperties {
  std::string name;             // the rails' names joined with '+' ("lo", "mlx5_0+mlx5_1")
  std::string pci_path;         // /sys/devices/... of the first rail's PCI function, "" if none
  uint64_t guid = 0;            // stable per rail set on this host (FNV-1a of pci_path or name)
  uint64_t link_bits_per_s = 0; // sum of the rails' link rates (RailInfo); 0 when unknown
  uint32_t rails = 0;
  std::string provider;         // "tcp;ofi_rxm", "shm", ...
  bool host_memory = true;      // Regions of host memory
  bool device_memory = false;   // Regions of GPU memory (CUDA driver and a GPU present; staged
                                // through host shadows: Region::staged())
  bool registration_is_global = true;  // a Region serves every communicator of the device
  bool needs_flush = false;     // receives need flush() before a device reads them (host: no)
  uint32_t max_comms = 0;       // communicators the device holds at once (XPORT_MAX_COMMS)
  uint32_t max_requests = 0;    // outstanding requests per communicator (XPORT_MAX_REQUESTS)
  uint32_t max_grouped_recvs = 0;  // buffers of one grouped receive (kMaxGroupedRecvs)
  uint64_t max_message_bytes = 0;  // largest message (4 GiB - 1: the CQ data carries 32 bits)
  uint32_t max_tag = 0;            // tags are 0..max_tag
  size_t eager_max = 0;            // messages up to this go eagerly (XPORT_EAGER_MAX)
};

class PendingConnect;

class Device {
 public:
  ~Device();

  const Capabilities& capabilities() const;
  // Rail (domain) names, in rail order.
  std::vector<std::string> rails() const;
  // The rails with their discovered link rate, in rail order (xport-bench reports bandwidth as
  // a fraction of their sum).
  const std::vector<RailInfo>& rail_info() const { return rail_info_; }

  // Registers [buf, buf+len) on every rail: host memory as it is; GPU memory (CUDA, found by
  // its pointer) through a registered host shadow (Region::staged(), docs/semantics.md "GPU
  // memory"); managed memory and ranges past their GPU allocation are refused.
  Result<Region> register_memory(void* buf, size_t len);
  // Validates a peer's exported key (version, checksum, range) and makes it usable here.
  Result<RemoteRegion> import_key(std::span<const uint8_t> bytes);

  Result<std::unique_ptr<Listener>> listen();
  // Connects to a listener's handle, waiting for its answer until the deadline.
  Result<std::unique_ptr<SendComm>> connect(const ConnectionHandle& handle, Deadline deadline);
  // Starts connecting and returns at once: PendingConnect::poll() gives the SendComm once the
  // listener has answered (its process must progress, accept() is not needed), or Code::timeout
  // once `deadline` has passed. The handle may be followed by zero padding (a runtime's
  // fixed-size handle buffer); anything else after it is refused.
  Result<std::unique_ptr<PendingConnect>> start_connect(std::span<const uint8_t> handle,
                                                        Deadline deadline = Deadline::from_knob());

  DeviceProperties properties() const;

  // One progress pass: bounded batches from every CQ and event queue. Blocking calls drive
  // progress themselves; call this when polling test() from a loop that does nothing else.
  Status progress();
  // The same pass, and how many completions it read (0: nothing of this device's arrived or
  // finished): a thread that drives a device may poll less often while passes find nothing.
  Result<size_t> progress_counted();

  Stats stats() const;

 private:
  friend class Context;
  friend struct api::Access;
  std::vector<RailInfo> rail_info_;
  std::shared_ptr<proto::Engine> engine_;
  // The device's telemetry registration (api/telemetry_hook.hpp). Declared after engine_ so
  // it is dropped first: the publisher never reads an engine that is being destroyed.
  std::shared_ptr<void> telemetry_;
};

}  // namespace xport
