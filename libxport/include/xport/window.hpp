// One-sided operations to the peer of a communicator: put and get between a local Region and
// an imported RemoteRegion, completed locally; quiet() waits for everything issued.
#pragma once

#include <cstddef>
#include <memory>

#include "xport/comm.hpp"
#include "xport/region.hpp"

namespace xport {

class Window {
 public:
  // A window over the channel of an open communicator (either side).
  static Result<std::unique_ptr<Window>> open(const SendComm& comm);
  static Result<std::unique_ptr<Window>> open(const RecvComm& comm);
  ~Window();

  // Writes local[local_offset, +len) to remote[remote_offset, +len). Local completion:
  // the source may be reused once quiet() returns.
  Status put(const Region& local, size_t local_offset, const RemoteRegion& remote,
             size_t remote_offset, size_t len);
  // Reads remote[remote_offset, +len) into local[local_offset, +len); visible after quiet().
  Status get(const Region& local, size_t local_offset, const RemoteRegion& remote,
             size_t remote_offset, size_t len);
  // Drives progress until every put and get issued so far has completed locally. Returns
  // immediately when nothing was issued since the last quiet; the first error since then, if any.
  Status quiet(Deadline deadline);

  uint64_t issued() const;
  uint64_t completed() const;

 private:
  friend struct api::Access;
  std::shared_ptr<proto::Engine> engine_;
  uint32_t id_ = 0;
};

}  // namespace xport
