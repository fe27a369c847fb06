// The host API every GPU-initiated backend shares (docs/semantics.md, "GPU backends"): a team of
// ranks connected all-to-all, symmetric regions whose keys every rank holds, progress. What
// differs per backend (the host proxy today, a direct GPU-to-NIC backend later) is only its
// contexts, its properties and its last error: GpuBackend. NCCL's GIN plugin is built on the
// same two (its init/devices/listen/connect/regMrSym/deregMrSym/closeColl/progress/finalize map
// onto GpuHost, its createContext/getProperties onto GpuBackend).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "xport/comm.hpp"
#include "xport/context.hpp"
#include "xport/gpu_proxy.hpp"
#include "xport/gpu_ring.hpp"
#include "xport/region.hpp"
#include "xport/status.hpp"
#include "xport/window.hpp"

namespace xport {

// Ranks 0..size-1 connected all-to-all on one Device: a window to every rank, this one's own
// included (a loopback connection: kernels put to their own rank as to any other).
class GpuTeam {
 public:
  ~GpuTeam();
  GpuTeam(const GpuTeam&) = delete;
  GpuTeam& operator=(const GpuTeam&) = delete;
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(windows_.size()); }
  Device& device() const { return *device_; }
  // The window to `peer` (this rank's own included); nullptr for a rank outside the team.
  Window* window(int peer) const;

 private:
  friend class GpuHost;
  GpuTeam() = default;
  Device* device_ = nullptr;
  int rank_ = 0;
  std::vector<std::unique_ptr<SendComm>> send_;  // [peer]
  std::vector<std::unique_ptr<RecvComm>> recv_;  // [peer]
  std::vector<std::unique_ptr<Window>> windows_;  // [peer]
  Region scratch_;                                // for the team's own exchanges
  std::vector<uint8_t> scratch_bytes_;
};

// One registration per rank of the same buffer role, every rank holding every other's key.
struct SymmetricRegion {
  Region local;
  std::vector<RemoteRegion> remote;  // [peer]; this rank's own entry is its key too
};

// What a GpuHost's device indexes are: one per libfabric domain of the provider (each a Device
// of that domain's rails), or one Device over every rail the Context plans (as
// Context::open_device() with defaults, the NCCL net plugin's device 0).
enum class GpuHostDevices : uint8_t { per_domain, one };

// A GpuHost's lanes: how many Devices each device index has, each with endpoints of its own
// (lane k of device i is index i + k * devices()). A backend spreads one transfer over its
// lanes' teams and drives each lane from a thread of its own, so that a provider that moves the
// bytes with the CPU (shm, tcp) moves a large transfer on several CPUs (the NCCL plugin's GIN
// lanes, docs/nccl.md).
struct GpuHostLanes {
  int count = 1;  // 1..16
};

class GpuHost {
 public:
  // initialise: a Context; its devices (see GpuHostDevices) are opened on first use.
  static Result<std::unique_ptr<GpuHost>> init(const ContextOptions& options = {},
                                               GpuHostDevices devices = GpuHostDevices::per_domain,
                                               GpuHostLanes lanes = {});
  ~GpuHost();  // finalise (teams and regions first: they hold the devices)
  // Device indexes a caller names: [0, devices()) (lane 0 of each); every index below
  // devices() * lanes() is valid in the calls below.
  int devices() const;
  int lanes() const;
  Result<Device*> device(int index);
  // This rank's connection handle on device `index`; the caller gathers every rank's.
  Result<ConnectionHandle> listen(int index);
  // A listener of the caller's own on device `index`, for connect(): teams formed at the same
  // time (NCCL's GIN contexts, several communicators) each accept on their own.
  Result<std::unique_ptr<Listener>> open_listener(int index);
  // Collective: with every rank's handle in rank order, connects to and accepts from every rank
  // (this one included, through a loopback connection) and opens the windows. All ranks must
  // call it; none returns before every peer it needs has answered, or the deadline
  // (Code::timeout, naming the ranks missing). Accepts on `listener` (whose handle is
  // handles[rank]), or on listen(index)'s when it is null. Every connection opens with a hello
  // naming the team (a nonce from the handles and how many teams this host began with them
  // before as this rank: ranks form teams with the same handles in the same order) and the
  // rank: accepted connections of another team forming on listen(index)'s listener are kept
  // for it, strangers are closed (docs/semantics.md, "GPU backends"). A connection a listener
  // refused for a full backlog (XPORT_LISTEN_BACKLOG) is asked again until the deadline, so a
  // team may have more ranks than the backlog (RDM providers). Thread-safe: teams may
  // form from several threads at once, and several ranks of one team may form it from one host
  // (a thread per rank, as NCCL's one process driving several GPUs), each accepting on a
  // listener of its own (open_listener: ranks sharing listen(index)'s would share a handle).
  Result<std::unique_ptr<GpuTeam>> connect(int index, std::span<const ConnectionHandle> handles,
                                           int rank, Deadline deadline,
                                           Listener* listener = nullptr);
  // Collective: registers [buf, +len) (host or GPU memory) and exchanges keys with every rank.
  Result<SymmetricRegion> register_symmetric(GpuTeam& team, void* buf, size_t len,
                                             Deadline deadline);
  // Local: the region's registration goes when the last copy of it does.
  static void deregister(SymmetricRegion& region);
  // Collective over the team: every rank's `mine` (at most 4096 bytes), in rank order (this
  // rank's own included). Exchanges on one team do not overlap (one caller at a time).
  static Result<std::vector<std::vector<uint8_t>>> all_gather(GpuTeam& team,
                                                              std::span<const uint8_t> mine,
                                                              Deadline deadline);
  // One progress pass on every open device.
  Status progress();

 private:
  GpuHost() = default;
  struct State;
  std::unique_ptr<State> s_;
};

enum class GpuBackendKind : uint8_t { proxy, direct };

struct GpuBackendProperties {
  GpuBackendKind kind = GpuBackendKind::proxy;
  std::string name;                  // "proxy"
  bool host_thread = true;           // a host thread executes the kernels' operations
  bool gpu_memory_staged = true;     // GPU memory reaches the NIC through host shadows
  uint32_t ring_capacity = 0;        // descriptors a context's ring holds (proxy)
  uint32_t max_signal_bytes = 8;     // signal words are 64 bits
};

// One backend context: what kernels are given (the proxy's ring) and the error that stopped it.
class GpuBackendContext {
 public:
  virtual ~GpuBackendContext() = default;  // destroy
  virtual gpu_ring::DeviceRing ring() const = 0;
  virtual Status last_error() const = 0;
};

class GpuBackend {
 public:
  // proxy: GpuProxy; direct: Code::unsupported (no direct backend is built yet).
  static Result<std::unique_ptr<GpuBackend>> open(GpuBackendKind kind);
  virtual ~GpuBackend() = default;
  virtual GpuBackendProperties properties(const GpuTeam& team) const = 0;
  // A context over the team's windows (descriptor window index = peer rank) and the given
  // symmetric regions (descriptor region indexes = their order here, local and remote alike).
  virtual Result<std::unique_ptr<GpuBackendContext>> create_context(
      GpuTeam& team, std::span<const SymmetricRegion* const> regions,
      const GpuProxyOptions& options = {}) = 0;
};

}  // namespace xport
