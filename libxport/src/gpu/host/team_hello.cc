// Team hellos and the connections that wait for theirs (team_hello.hpp).
#include "gpu/host/team_hello.hpp"

#include <cstring>

#include "core/format.hpp"

namespace xport::gpu {
namespace {

constexpr uint32_t kMagic = 0x4d455458;  // "XTEM"
constexpr uint16_t kVersion = 1;

template <typename T>
void put(uint8_t*& p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) *p++ = static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i));
}

template <typename T>
T get(const uint8_t*& p) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(*p++) << (8 * i);
  return static_cast<T>(v);
}

uint64_t mix(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

void encode_team_hello(const TeamHello& h, uint8_t* out) {
  put<uint32_t>(out, kMagic);
  put<uint16_t>(out, kVersion);
  put<uint16_t>(out, 0);
  put<uint32_t>(out, h.rank);
  put<uint32_t>(out, h.size);
  put<uint64_t>(out, h.nonce);
}

bool decode_team_hello(std::span<const uint8_t> bytes, TeamHello* out) {
  if (bytes.size() != kTeamHelloBytes) return false;
  const uint8_t* p = bytes.data();
  if (get<uint32_t>(p) != kMagic || get<uint16_t>(p) != kVersion || get<uint16_t>(p) != 0) {
    return false;
  }
  out->rank = get<uint32_t>(p);
  out->size = get<uint32_t>(p);
  out->nonce = get<uint64_t>(p);
  return true;
}

uint64_t team_digest(std::span<const ConnectionHandle> handles) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto eat = [&](uint8_t b) { h = (h ^ b) * 0x100000001b3ull; };
  for (const ConnectionHandle& c : handles) {
    for (size_t i = 0; i < 8; ++i) eat(static_cast<uint8_t>(c.size() >> (8 * i)));
    for (uint8_t b : c) eat(b);
  }
  return h;
}

uint64_t team_nonce(uint64_t digest, uint64_t ordinal) {
  const uint64_t n = mix(digest ^ mix(ordinal + 0x9e3779b97f4a7c15ull));
  return n != 0 ? n : 1;
}

Result<std::unique_ptr<TeamArrival>> TeamArrival::start(Device& device,
                                                        std::unique_ptr<RecvComm> c,
                                                        const Listener* listener) {
  auto a = std::make_unique<TeamArrival>();
  XPORT_ASSIGN_OR_RETURN(a->reg, device.register_memory(a->buf.data(), a->buf.size()));
  a->comm = std::move(c);
  a->listener = listener;
  auto r = a->comm->irecv(a->buf.data(), a->buf.size(), a->reg, kTagTeamHello);
  if (!r.ok()) {
    // (The connection failed already: a stranger gone, or a connector that gave up.)
    a->heard = true;
    a->failure = r.status().to_string();
    return a;
  }
  a->req = *r;
  return a;
}

void TeamArrival::listen_once() {
  if (heard) return;
  auto t = comm->test(req);
  if (t.ok() && !t->done) return;
  heard = true;
  if (!t.ok()) {
    failure = t.status().to_string();
    return;
  }
  valid = decode_team_hello(std::span<const uint8_t>(buf.data(), t->bytes), &hello);
  if (!valid) failure = core::str("a first message of ", t->bytes, " bytes that is no team hello");
}

}  // namespace xport::gpu
