// Two-sided communicators in the NCCL net model: a Listener yields an opaque connection handle
// the runtime ships out of band; connect() gives a SendComm, accept() a RecvComm; isend/irecv
// match in posting order; test() reports completion with the received size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "xport/deadline.hpp"
#include "xport/region.hpp"
#include "xport/status.hpp"

namespace xport {

namespace proto {
class Engine;
}
namespace api {
struct Access;
}

using ConnectionHandle = std::vector<uint8_t>;

// Names one outstanding operation of a communicator (its sequence number).
struct Request {
  uint64_t seq = 0;
};

struct Completion {
  bool done = false;
  size_t bytes = 0;  // bytes sent or received, when done
};

class RecvComm;

class Listener {
 public:
  ~Listener();
  const ConnectionHandle& handle() const { return handle_; }
  // The next connection the transport has accepted, or Code::timeout at the deadline.
  Result<std::unique_ptr<RecvComm>> accept(Deadline deadline);

 private:
  friend struct api::Access;
  std::shared_ptr<proto::Engine> engine_;
  uint64_t token_ = 0;
  ConnectionHandle handle_;
};

class SendComm {
 public:
  ~SendComm();  // closes: the peer's pending receives fail with Code::closed
  // Starts sending [buf, buf+len), which must lie inside `region`. Code::again when
  // XPORT_MAX_REQUESTS sends are outstanding.
  Result<Request> isend(const void* buf, size_t len, const Region& region);
  // done=true once the buffer may be reused; an error fails exactly this request.
  Result<Completion> test(Request request);
  Result<size_t> wait(Request request, Deadline deadline);
  uint16_t id() const { return id_; }

 private:
  friend struct api::Access;
  std::shared_ptr<proto::Engine> engine_;
  uint16_t id_ = 0;
  uint8_t gen_ = 0;
};

class RecvComm {
 public:
  ~RecvComm();
  // Posts a receive of at most `len` bytes into [buf, buf+len) inside `region`.
  Result<Request> irecv(void* buf, size_t len, const Region& region);
  // done=true once the data is in place; bytes = the size the sender sent.
  Result<Completion> test(Request request);
  Result<size_t> wait(Request request, Deadline deadline);
  // After a receive into device memory completed: makes the data visible to the device by an
  // RDMA read of the buffer into the endpoint's flush buffer (host memory needs no flush but
  // takes the same path). One flush at a time per device.
  Status flush(const void* buf, size_t len, const Region& region, Deadline deadline);
  uint16_t id() const { return id_; }

 private:
  friend struct api::Access;
  std::shared_ptr<proto::Engine> engine_;
  uint16_t id_ = 0;
  uint8_t gen_ = 0;
};

}  // namespace xport
