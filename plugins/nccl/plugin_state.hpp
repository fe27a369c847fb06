// The NCCL plugin's process-wide state, built only from libxport's public API: one libxport
// Context and the NCCL devices (each a libxport Device), opened by the first init() and closed
// with the last finalize(); NCCL's logger; and the objects the plugin hands NCCL (comms,
// registrations, requests), each with a magic word so that a stale or foreign pointer is
// reported instead of used.
#pragma once

#include <atomic>
#include <cstdarg>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "abi/net_v11.h"
#include "lane.hpp"
#include "xport/xport.hpp"

namespace xport::nccl {

// One NCCL device: its lanes (lane 0 opened first; getProperties describes it) and the strings
// getProperties hands out (interned: NCCL may keep the pointers after the last finalize closed
// the device).
struct NetDevice {
  int index = 0;
  std::vector<std::unique_ptr<Lane>> lanes;
  std::atomic<uint32_t> next_lane{0};
  DeviceProperties props;
  char* name = nullptr;
  char* pci_path = nullptr;  // NULL when the rails have no PCI function (lo, shm)
  Lane* pick_lane() { return lanes[next_lane.fetch_add(1) % lanes.size()].get(); }
};

struct MemHandle {
  static constexpr uint64_t kMagic = 0x524d54524f505821ull;  // "!XPORTMR"
  uint64_t magic = kMagic;
  NetDevice* dev = nullptr;
  Lane* lane = nullptr;
  Region region;
};

enum class ReqKind : uint8_t { send, recv, flush };

struct Request;

// What a communicator needs in common: its device and lane, and a pool of requests (NCCL has
// at most NCCL_NET_MAX_REQUESTS per comm outstanding; a grouped receive is one).
struct CommBase {
  uint64_t magic = 0;
  NetDevice* dev = nullptr;
  Lane* lane = nullptr;
  std::mutex mu;  // guards the request pool (NCCL tests from its progress thread, closes from another)
  std::vector<std::unique_ptr<Request>> pool;
  std::vector<Request*> free;
  Request* take(ReqKind kind);
  void give(Request* r);
};

struct Request {
  static constexpr uint64_t kMagic = 0x5145525452505821ull;  // "!XPRTREQ"
  uint64_t magic = kMagic;
  bool busy = false;
  ReqKind kind = ReqKind::send;
  CommBase* comm = nullptr;
  xport::Request req;
  int count = 1;
  // On a driven lane (Lane::driven()): the post NCCL asked for, made by the lane's thread, and
  // its outcome, published for test().
  Request* next = nullptr;                  // the lane's inbox and lists
  void* data[kMaxGroupedRecvs] = {};        // (a send's source: libxport's isend takes it const)
  size_t lens[kMaxGroupedRecvs] = {};
  uint32_t tags[kMaxGroupedRecvs] = {};
  Region regions[kMaxGroupedRecvs];         // released once posted (libxport holds its own)
  std::atomic<bool> published{false};       // error and completion below are final
  Status error;                             // the post's or the request's failure, if any
  Completion completion;
};

struct SendComm : CommBase {
  static constexpr uint64_t kMagic = 0x444e455354525058ull;  // "XPRTSEND"
  std::unique_ptr<xport::SendComm> comm;
};

struct RecvComm : CommBase {
  static constexpr uint64_t kMagic = 0x5643455254525058ull;  // "XPRTRECV"
  std::unique_ptr<xport::RecvComm> comm;
};

struct ListenComm {
  static constexpr uint64_t kMagic = 0x4e53494c54525058ull;  // "XPRTLISN"
  uint64_t magic = kMagic;
  NetDevice* dev = nullptr;
  Lane* lane = nullptr;
  std::unique_ptr<Listener> listener;
};

// A pointer NCCL hands back, as the plugin object T it claims to be: null unless it carries T's
// magic word (stale or foreign pointers are reported, not used).
template <typename T>
T* checked(void* p) {
  auto* t = static_cast<T*>(p);
  return t != nullptr && t->magic == T::kMagic ? t : nullptr;
}

// A connect NCCL is polling (net connect): NCCL's handle carries its id, never a pointer, and
// the id is looked up here. `check` is a hash of the libxport handle it was started with, so
// that a record copied onto another handle is refused.
struct PendingNetConnect {
  std::unique_ptr<PendingConnect> pending;
  NetDevice* dev = nullptr;
  Lane* lane = nullptr;
  uint64_t check = 0;
};

// init()'s per-NCCL-communicator context.
struct NetContext {
  static constexpr uint64_t kMagic = 0x5854435854525058ull;  // "XPRTCTXT"
  uint64_t magic = kMagic;
  uint64_t comm_id = 0;
  int traffic_class = NCCL_NET_TRAFFIC_CLASS_UNDEF;
};

class PluginState {
 public:
  static PluginState& get();

  // The first call opens libxport and the devices; every call takes a reference.
  ncclResult_t acquire(ncclDebugLogger_t logger);
  void release();
  bool ready() const { return refs_.load() > 0; }

  int device_count() const { return static_cast<int>(devices_.size()); }
  NetDevice* device(int i) { return i >= 0 && i < device_count() ? devices_[i].get() : nullptr; }

  // A copy of `s` that lives as long as the process (one per distinct string).
  char* intern(const std::string& s);

  // Registrations NCCL holds: a pointer is used only while it is in this set.
  void add(MemHandle* m);
  bool remove(MemHandle* m);
  bool live(const MemHandle* m);

  // Connects in progress, by a random 64-bit id (never 0). take_connect removes the record for
  // the caller to poll and put back (NCCL polls one handle from one thread at a time); it is
  // null for an id the plugin does not know (forged, finished, or from before a finalize).
  uint64_t add_connect(std::unique_ptr<PendingNetConnect> c);
  std::unique_ptr<PendingNetConnect> take_connect(uint64_t id);
  void put_connect(uint64_t id, std::unique_ptr<PendingNetConnect> c);

  // Messages through NCCL's logger (stderr before init gave one).
  void log(ncclDebugLogLevel level, const char* file, int line, const char* fmt, ...)
      __attribute__((format(printf, 5, 6)));
  // A failed libxport call as an NCCL error, logged (WARN) with what was being done.
  ncclResult_t fail(const Status& s, const char* what, bool input_error = false);
  ncclResult_t fail(ncclResult_t code, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

  // XPORT_NCCL_SPEED_MBPS (docs/knobs.md): the speed getProperties reports, 0 = the link rate.
  int speed_mbps_default() const { return speed_default_; }
  // XPORT_NCCL_MAX_RECVS: the maxRecvs getProperties reports (1..8).
  int max_recvs() const { return max_recvs_; }
  // Libxport devices per NCCL device (1..16): XPORT_NCCL_LANES, or the auto choice for 0.
  int lanes() const { return lanes_; }
  // XPORT_NCCL_GIN_LANES (1..16, 0: auto): lanes per GIN comm; XPORT_NCCL_GIN_SPLIT_BYTES: the
  // size from which a GIN put is split over them.
  int gin_lanes() const { return gin_lanes_; }
  // XPORT_NCCL_LANE_SPIN_US: how long a lane's thread polls after its last work.
  int lane_spin_us() const { return lane_spin_us_; }
  size_t gin_split_bytes() const { return gin_split_bytes_; }

 private:
  std::mutex mu_;
  std::atomic<int> refs_{0};
  std::atomic<ncclDebugLogger_t> logger_{nullptr};
  std::unique_ptr<Context> ctx_;
  std::vector<std::unique_ptr<NetDevice>> devices_;
  std::mutex handles_mu_;
  std::unordered_set<const MemHandle*> handles_;
  std::mutex connects_mu_;
  std::unordered_map<uint64_t, std::unique_ptr<PendingNetConnect>> connects_;
  uint64_t connect_salt_ = 0;  // guarded by connects_mu_; ids are a counter mixed with it
  uint64_t connect_count_ = 0;
  std::deque<std::string> interned_;  // guarded by mu_
  int speed_default_ = 0;
  int max_recvs_ = 1;
  int lanes_ = 1;
  int gin_lanes_ = 0;
  int lane_spin_us_ = 1000;
  size_t gin_split_bytes_ = 4 << 20;
};

}  // namespace xport::nccl

#define XNCCL_WARN(...) \
  ::xport::nccl::PluginState::get().log(NCCL_LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define XNCCL_INFO(...) \
  ::xport::nccl::PluginState::get().log(NCCL_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
