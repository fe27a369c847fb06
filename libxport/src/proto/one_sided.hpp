// One-sided put/get over a communicator's channels to its peer, striped over rails; completion
// tickets so that quiet() waits for exactly what was issued before it.
#pragma once

#include "proto/state.hpp"

namespace xport::proto {

class OneSided {
 public:
  explicit OneSided(Core& core) : core_(core) {}
  static constexpr uint32_t kOps = 256;  // stripes in flight per window

  Result<uint32_t> open(CommState& c);
  void close(uint32_t id);
  // Checks everything (window, local range, remote key's device and range, free contexts for
  // every stripe) before posting anything.
  Status rma(uint32_t window, fabric::OpType op, const RegionRef& local, uint8_t* lbuf,
             size_t len, const RemoteKey& remote, size_t roff);
  void on_done(fabric::OpContext* ctx, const Status& st);
  void retry();
  // The rail's CQ failed: its operations (posted or queued) will never be reported.
  void fail_rail(uint32_t rail, const Status& why);
  // quiet(): the tickets issued so far, and whether all of them have completed.
  Result<uint64_t> quiet_target(uint32_t window);
  bool completed_below(uint32_t window, uint64_t target) const;
  Status take_error(uint32_t window, uint64_t target);

 private:
  Status post(WindowState& w, uint32_t op, uint8_t* local, size_t len, uint64_t raddr,
              uint64_t key);
  void finish(WindowState& w, uint32_t op, const Status& st);
  void maybe_erase(WindowState& w);
  Core& core_;
};

}  // namespace xport::proto
