// How a GpuHost team tells its connections apart (gpu_host.cc): every connection's first
// message is a hello naming the team (a nonce every rank derives from the same handles) and
// the sender's rank; an accepted connection is a TeamArrival until its hello has been read.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "xport/comm.hpp"
#include "xport/context.hpp"
#include "xport/region.hpp"

namespace xport::gpu {

inline constexpr size_t kTeamHelloBytes = 24;
inline constexpr uint32_t kTagTeamHello = 0x7e01;

struct TeamHello {
  uint64_t nonce = 0;
  uint32_t rank = 0;
  uint32_t size = 0;
};

// Little-endian: magic "XTEM", version 1, reserved 0, rank, size, nonce.
void encode_team_hello(const TeamHello& h, uint8_t* out);
// false unless `bytes` is exactly one hello of this version.
bool decode_team_hello(std::span<const uint8_t> bytes, TeamHello* out);

// The same on every rank: FNV-1a of the handles in rank order (each with its length).
uint64_t team_digest(std::span<const ConnectionHandle> handles);
// The nonce of the `ordinal`-th team a host forms with handles of this digest (never 0).
uint64_t team_nonce(uint64_t digest, uint64_t ordinal);

// A connection accepted for a team: its hello's receive, posted at once into a buffer of its
// own (registered on the device), until it has been read.
struct TeamArrival {
  std::array<uint8_t, 64> buf{};  // more than a hello: a longer message is no hello
  Region reg;
  std::unique_ptr<RecvComm> comm;  // (declared after what its receive uses: closed first)
  const Listener* listener = nullptr;
  Request req{};
  bool heard = false;    // the receive ended
  bool valid = false;    // ... with a hello
  bool claimed = false;  // a team took the connection
  TeamHello hello;
  std::string failure;   // what the receive ended with, when it was no hello

  static Result<std::unique_ptr<TeamArrival>> start(Device& device, std::unique_ptr<RecvComm> c,
                                                    const Listener* listener);
  // One look at the receive (one progress pass).
  void listen_once();
};

}  // namespace xport::gpu
