// Two-sided communicators in the NCCL net model: a Listener yields an opaque connection handle
// the runtime ships out of band; connect() gives a SendComm, accept() a RecvComm (or, without
// blocking, start_connect()/PendingConnect::poll() and try_accept()); isend/irecv match in
// posting order, a receive may group several buffers matched by tag; test() reports completion
// with the received size of every buffer.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
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
namespace gpu {
class StagedArrivals;
}

using ConnectionHandle = std::vector<uint8_t>;

// The most buffers one grouped receive takes (NCCL's maxRecvs).
inline constexpr size_t kMaxGroupedRecvs = 8;

// Names one outstanding operation of a communicator: a message (its sequence number; a grouped
// receive is named by its first) or a flush.
struct Request {
  enum class Kind : uint8_t { message, flush };
  uint64_t seq = 0;
  Kind kind = Kind::message;
};

struct Completion {
  bool done = false;
  size_t bytes = 0;    // bytes sent or received, when done (a grouped receive: all buffers)
  uint32_t count = 0;  // buffers of the request, when done (1 but for grouped receives)
  // Bytes received into each buffer of a (grouped) receive, in the order they were posted.
  std::array<size_t, kMaxGroupedRecvs> sizes{};
};

// How test() learns of completion: after a progress pass of its own (the default), or only
// from the progress other threads make (observe: for a thread that leaves progress to another,
// e.g. one calling Device::progress(); it never waits for the device: while another thread
// holds it, the request reads as not done yet).
enum class TestMode : uint8_t { progress, observe };

// How isend/irecv hand their work to the provider. now (the default): the call waits for the
// device if another thread holds it and posts what it can, a rendezvous message's data writes
// included once the receiver's clear-to-send is in (on tcp the provider copies the data into
// the socket in that call). handoff: for a runtime whose own threads drive progress (e.g. one
// per device calling Device::progress()): the call never waits for the device (while another
// thread holds it: Code::again, nothing started, call again) and leaves the data writes to the
// next progress pass, so the thread that drives the device moves the bytes. A thread looping on
// progress holds the device nearly always, so such calls are mostly refused (docs/semantics.md,
// "Posting", says what the NCCL plugin does instead).
enum class PostMode : uint8_t { now, handoff };

// One buffer of a grouped receive: at most `len` bytes into [buf, buf+len) inside `region`, for
// the message sent with `tag`.
struct RecvBuffer {
  void* buf = nullptr;
  size_t len = 0;
  const Region* region = nullptr;
  uint32_t tag = 0;
};

class RecvComm;
class SendComm;

class Listener {
 public:
  ~Listener();
  const ConnectionHandle& handle() const { return handle_; }
  // The next connection the transport has accepted, or Code::timeout at the deadline.
  Result<std::unique_ptr<RecvComm>> accept(Deadline deadline);
  // Never blocks: the next connection the transport has accepted, after a progress pass when
  // none was waiting; nullptr when none has arrived yet (connectors complete without waiting for
  // it: docs/semantics.md). A pass admits up to a CQ batch of requests (XPORT_CQ_BATCH), past
  // the backlog (XPORT_LISTEN_BACKLOG) they are refused: take all that are ready.
  Result<std::unique_ptr<RecvComm>> try_accept();

 private:
  friend struct api::Access;
  std::shared_ptr<proto::Engine> engine_;
  uint64_t token_ = 0;
  ConnectionHandle handle_;
};

// A connection in progress (Device::start_connect). Destroying it before poll() handed out the
// SendComm gives the connection up: the listener drops its side.
class PendingConnect {
 public:
  ~PendingConnect();
  // Never blocks: one progress pass, then the SendComm once the listener has answered, nullptr
  // while it has not, or the error that ended the attempt (refused, unreachable, the deadline
  // given to start_connect passed). After a SendComm or an error, poll() is invalid_argument.
  Result<std::unique_ptr<SendComm>> poll();

 private:
  friend struct api::Access;
  std::shared_ptr<proto::Engine> engine_;
  uint16_t id_ = 0;
  uint8_t gen_ = 0;
  Deadline deadline_ = Deadline::never();
  bool finished_ = false;
};

class SendComm {
 public:
  ~SendComm();  // closes: the peer's pending receives fail with Code::closed
  // Starts sending [buf, buf+len), which must lie inside `region`, with `tag` (a grouped
  // receive places it by tag). Code::again when XPORT_MAX_REQUESTS sends are outstanding.
  Result<Request> isend(const void* buf, size_t len, const Region& region, uint32_t tag = 0,
                        PostMode mode = PostMode::now);
  // done=true once the buffer may be reused; an error fails exactly this request.
  Result<Completion> test(Request request, TestMode mode = TestMode::progress);
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
  // Posts a receive of at most `len` bytes into [buf, buf+len) inside `region`, for the next
  // message; its tag must be `tag`.
  Result<Request> irecv(void* buf, size_t len, const Region& region, uint32_t tag = 0,
                        PostMode mode = PostMode::now);
  // A grouped receive of 1..kMaxGroupedRecvs buffers: it takes the sender's next n messages (in
  // its posting order), and the k-th of them with tag t lands in the k-th buffer with tag t
  // (docs/semantics.md, "Tags and grouped receives"). One request; done when every buffer is.
  Result<Request> irecv(std::span<const RecvBuffer> buffers, PostMode mode = PostMode::now);
  // done=true once the data is in place (a flush: once its reads completed); bytes = the size
  // the sender sent, sizes[i] per buffer of a grouped receive. A message whose tag matches no
  // buffer fails the request (invalid_argument), and so does one larger than its buffer.
  Result<Completion> test(Request request, TestMode mode = TestMode::progress);
  Result<size_t> wait(Request request, Deadline deadline);
  // After a receive into device memory completed: makes the data visible to the device by an
  // RDMA read of the buffer into the endpoint's flush buffer, on every rail of the communicator
  // (host memory needs no flush but takes the same path). Flushes are independent.
  Status flush(const void* buf, size_t len, const Region& region, Deadline deadline);
  // The same without waiting: a Request (Kind::flush) that test() reports done once every
  // rail's read has completed. Connected endpoints and len 0 need none: done at once.
  Result<Request> iflush(const void* buf, size_t len, const Region& region);
  uint16_t id() const { return id_; }

 private:
  friend struct api::Access;
  std::shared_ptr<proto::Engine> engine_;
  uint16_t id_ = 0;
  uint8_t gen_ = 0;
  std::shared_ptr<gpu::StagedArrivals> staged_;  // receives into staged GPU memory
};

}  // namespace xport
