// Out-of-band exchange of lines between xport-bench and its peer: pipes to a spawned peer (local
// mode) or one TCP connection (two-host mode), every read under a deadline. MPI mode exchanges
// through MPI instead (mpi_mode.cc).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "xport/deadline.hpp"
#include "xport/status.hpp"

namespace bench {

class LineChannel {
 public:
  LineChannel() = default;
  LineChannel(int in_fd, int out_fd) : in_(in_fd), out_(out_fd) {}
  LineChannel(LineChannel&& o) noexcept { *this = std::move(o); }
  LineChannel& operator=(LineChannel&& o) noexcept;
  ~LineChannel();

  xport::Status send(const std::string& line);
  // The next line without its newline; Code::peer_lost when the other side closed,
  // Code::timeout at the deadline. `idle`, when given, runs between short polls: a process
  // that waits here while its peer still needs its device (a window request to answer, the
  // last of a stream to take) drives progress in it.
  xport::Result<std::string> recv(xport::Deadline deadline,
                                  const std::function<void()>& idle = {});

 private:
  int in_ = -1;
  int out_ = -1;
  std::string pending_;
};

// Local mode: starts `self` with `args` (argv[0] included), its stdin/stdout on the channel.
xport::Result<pid_t> spawn_peer(const std::vector<std::string>& args, LineChannel* channel);
// Waits for the spawned peer; an error names how it ended.
xport::Status reap_peer(pid_t pid, int timeout_s);

// Two-host mode. The server waits `timeout_s` for one client; the client retries until then.
xport::Result<LineChannel> tcp_serve_one(int port, int timeout_s);
xport::Result<LineChannel> tcp_connect(const std::string& host_port, int timeout_s);

std::string hex(const std::vector<uint8_t>& bytes);
xport::Result<std::vector<uint8_t>> unhex(const std::string& text);

}  // namespace bench
