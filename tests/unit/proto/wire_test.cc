// Wire formats: round trips, and every decoder's refusal of truncated, corrupted, future and
// hostile input with a message that says what was wrong.
#include <gtest/gtest.h>

#include "core/format.hpp"
#include "proto/one_sided/wire.hpp"
#include "proto/wire.hpp"

namespace xport::proto {
namespace {

Handle sample_handle() {
  Handle h;
  h.endpoint_type = 0;
  h.listener_token = 0x1122334455667788ull;
  h.device_token = 0x99aabbccddeeff00ull;
  h.provider_hash = provider_hash("tcp;ofi_rxm");
  h.address = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  return h;
}

std::vector<uint8_t> sample_handle_bytes() { return encode_handle(sample_handle()).value(); }

TEST(Crc32, KnownVector) {
  const char* s = "123456789";
  EXPECT_EQ(crc32(reinterpret_cast<const uint8_t*>(s), 9), 0xCBF43926u);
}

TEST(Handle, RoundTripFitsNcclsHandle) {
  auto bytes = sample_handle_bytes();
  EXPECT_EQ(bytes.size(), sizeof(HandleHeader) + 16 + 4);
  auto h = decode_handle(bytes);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_EQ(h->listener_token, 0x1122334455667788ull);
  EXPECT_EQ(h->device_token, 0x99aabbccddeeff00ull);
  EXPECT_EQ(h->provider_hash, provider_hash("tcp;ofi_rxm"));
  EXPECT_EQ(h->address[15], 16);
  // The largest address that fits makes a handle of exactly NCCL's 128 bytes; one more byte is
  // refused when encoding, with the reason.
  Handle big = sample_handle();
  big.address.assign(kMaxHandleAddressBytes, 7);
  auto max = encode_handle(big);
  ASSERT_TRUE(max.ok()) << max.status().to_string();
  EXPECT_EQ(max->size(), kMaxHandleBytes);
  EXPECT_TRUE(decode_handle(*max).ok());
  big.address.push_back(7);
  auto over = encode_handle(big);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("does not fit"), std::string::npos);
}

TEST(Handle, EveryTruncationIsRefused) {
  auto bytes = sample_handle_bytes();
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto h = decode_handle(std::span<const uint8_t>(bytes.data(), n));
    ASSERT_FALSE(h.ok()) << "accepted a handle cut to " << n << " bytes";
    EXPECT_EQ(h.status().code(), Code::protocol);
  }
  auto h = decode_handle(std::span<const uint8_t>(bytes.data(), 30));
  EXPECT_NE(h.status().message().find("truncated"), std::string::npos) << h.status().message();
}

TEST(Handle, EverySingleBitFlipIsRefused) {
  const auto bytes = sample_handle_bytes();
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      auto c = bytes;
      c[i] ^= static_cast<uint8_t>(1u << bit);
      EXPECT_FALSE(decode_handle(c).ok()) << "byte " << i << " bit " << bit;
    }
  }
}

TEST(Handle, FutureVersionAndTrailingBytesAreNamed) {
  auto bytes = sample_handle_bytes();
  auto future = bytes;
  future[4] = static_cast<uint8_t>(kWireVersion + 1);
  auto h = decode_handle(future);
  EXPECT_NE(h.status().message().find(core::str("version ", kWireVersion + 1, " is not supported")),
            std::string::npos)
      << h.status().message();
  auto longer = bytes;
  longer.push_back(1);
  h = decode_handle(longer);
  EXPECT_NE(h.status().message().find("trailing"), std::string::npos) << h.status().message();
  auto wrong = bytes;
  wrong[0] = 'Z';
  EXPECT_NE(decode_handle(wrong).status().message().find("magic"), std::string::npos);
}

// NCCL hands the plugin its whole 128-byte handle buffer: zeros after the handle are padding.
TEST(Handle, ZeroPaddingUpToNcclsSizeIsAccepted) {
  const auto bytes = sample_handle_bytes();
  auto padded = bytes;
  padded.resize(kMaxHandleBytes, 0);
  auto h = decode_handle(padded);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_EQ(h->listener_token, 0x1122334455667788ull);
  // Beyond 128 bytes, or with anything but zeros after the checksum, it is not a handle.
  auto over = padded;
  over.push_back(0);
  EXPECT_FALSE(decode_handle(over).ok());
  for (size_t i = bytes.size(); i < padded.size(); ++i) {
    auto dirty = padded;
    dirty[i] = 0x80;
    auto d = decode_handle(dirty);
    ASSERT_FALSE(d.ok()) << "accepted a non-zero byte at " << i;
    EXPECT_NE(d.status().message().find("zero padding"), std::string::npos);
  }
}

TEST(Message, HeaderValidation) {
  MsgHeader h{};
  h.type = static_cast<uint8_t>(MsgType::abort);
  h.version = kWireVersion;
  uint8_t buf[sizeof(MsgHeader) + 8];
  std::memcpy(buf, &h, sizeof(h));
  EXPECT_TRUE(decode_header(buf, sizeof(MsgHeader)).ok());
  EXPECT_FALSE(decode_header(buf, sizeof(MsgHeader) - 1).ok());
  EXPECT_NE(decode_header(buf, sizeof(buf)).status().message().find("unexpected bytes"),
            std::string::npos);
  for (MsgType t : {MsgType::rts, MsgType::credit, MsgType::conn_reject, MsgType::conn_cancel,
                    MsgType::ping, MsgType::pong, MsgType::rail_state}) {  // header-only control messages
    h.type = static_cast<uint8_t>(t);
    std::memcpy(buf, &h, sizeof(h));
    EXPECT_TRUE(decode_header(buf, sizeof(MsgHeader)).ok()) << int(h.type);
    EXPECT_FALSE(decode_header(buf, sizeof(buf)).ok()) << int(h.type) << " with a body";
  }
  h.type = 99;
  std::memcpy(buf, &h, sizeof(h));
  EXPECT_NE(decode_header(buf, sizeof(MsgHeader)).status().message().find("unknown message type"),
            std::string::npos);
  h.type = static_cast<uint8_t>(MsgType::eager);
  h.length = 8;
  std::memcpy(buf, &h, sizeof(h));
  EXPECT_TRUE(decode_header(buf, sizeof(buf)).ok());
  h.length = 9;  // announces more than it carries
  std::memcpy(buf, &h, sizeof(h));
  EXPECT_FALSE(decode_header(buf, sizeof(buf)).ok());
  h.reserved0 = 1;  // reserved fields must be zero
  std::memcpy(buf, &h, sizeof(h));
  EXPECT_NE(decode_header(buf, sizeof(buf)).status().message().find("reserved"),
            std::string::npos);
  h.reserved0 = 0;
  h.version = 7;
  std::memcpy(buf, &h, sizeof(h));
  EXPECT_NE(decode_header(buf, sizeof(buf)).status().message().find("version 7"),
            std::string::npos);
}

// A window signal's flags: strong, ack-now and past-signals (after_data: only with strong);
// anything else is refused, naming the flags.
TEST(Message, WindowSignalFlags) {
  MsgHeader h{};
  h.type = static_cast<uint8_t>(MsgType::win_signal);
  h.version = kWireVersion;
  auto with = [&](unsigned flags) {
    h.slot = static_cast<uint16_t>(flags << 8);
    return check_window_message(h, sizeof(uint64_t));
  };
  EXPECT_TRUE(with(0).ok());
  EXPECT_TRUE(with(kWinStrong).ok());
  EXPECT_TRUE(with(kWinStrong | kWinAckNow).ok());
  EXPECT_TRUE(with(kWinStrong | kWinPastSignals).ok());
  EXPECT_TRUE(with(kWinStrong | kWinAckNow | kWinPastSignals).ok());
  Status s = with(kWinPastSignals);
  EXPECT_EQ(s.code(), Code::protocol);
  EXPECT_NE(s.message().find("flags 0x4"), std::string::npos) << s.to_string();
  EXPECT_FALSE(with(8).ok());
}

ConnRequest sample_request(int rails) {
  ConnRequest r;
  r.body.nonce = 77;
  r.body.device_token = 88;
  r.body.listener_token = 99;
  r.body.max_requests = 8;
  r.body.stripe_threshold = 1 << 18;
  r.body.stripe_min = 1 << 16;
  r.body.stripe_align = 4096;
  r.body.eager_max = 8192;
  for (int i = 0; i < rails; ++i) {
    RailAddresses a;
    a.data = std::vector<uint8_t>(16, static_cast<uint8_t>(i));
    a.control = std::vector<uint8_t>(16, static_cast<uint8_t>(100 + i));
    r.rails.push_back(a);
  }
  return r;
}

TEST(Message, ConnRequestRoundTripAndValidation) {
  auto bytes = encode_conn_request(sample_request(4));
  auto r = decode_conn_request(bytes.data(), bytes.size());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->rails.size(), 4u);
  EXPECT_EQ(r->rails[3].control[0], 103);
  EXPECT_EQ(r->body.stripe_min, 1u << 16);
  EXPECT_EQ(r->body.nonce, 77u);
  EXPECT_EQ(r->body.device_token, 88u);
  EXPECT_EQ(r->body.listener_token, 99u);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(decode_conn_request(bytes.data(), n).ok()) << n;
  }
  auto bad = sample_request(1);
  bad.body.stripe_align = 3000;  // not a power of two
  auto b = encode_conn_request(bad);
  EXPECT_NE(decode_conn_request(b.data(), b.size()).status().message().find("power of two"),
            std::string::npos);
  bad = sample_request(1);
  bad.body.max_requests = 0;
  b = encode_conn_request(bad);
  EXPECT_FALSE(decode_conn_request(b.data(), b.size()).ok());
  auto reserved = encode_conn_request(sample_request(1));
  reserved[offsetof(ConnBody, reserved)] = 0xff;
  EXPECT_NE(decode_conn_request(reserved.data(), reserved.size()).status().message().find("reserved"),
            std::string::npos);
  // Connected endpoints send no addresses: the connection is the path.
  auto none = encode_conn_request(sample_request(0));
  EXPECT_TRUE(decode_conn_request(none.data(), none.size()).ok());
}

// XPORT_POOL_GROUPS=0 on RDM: each rail's addresses end with the communicator's own data
// endpoint, flagged in the body; an unknown flag, or the flag without rails or without the
// addresses it announces, is refused.
TEST(Message, ConnRequestAndAckCarryOwnDataEndpoints) {
  ConnRequest req = sample_request(2);
  for (int i = 0; i < 2; ++i) req.rails[i].own = std::vector<uint8_t>(16, uint8_t(200 + i));
  auto bytes = encode_conn_request(req);
  EXPECT_EQ(bytes.size(), sizeof(ConnBody) + 2 * 3 * 16);
  auto r = decode_conn_request(bytes.data(), bytes.size());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->body.flags, kOwnDataEndpoints);
  EXPECT_EQ(r->rails[0].own, std::vector<uint8_t>(16, 200));
  EXPECT_EQ(r->rails[1].own, std::vector<uint8_t>(16, 201));
  EXPECT_EQ(r->rails[1].control, std::vector<uint8_t>(16, 101));
  // Without the last rail's own address the flag would lie: none is sent.
  ConnRequest partial = req;
  partial.rails[1].own.clear();
  auto p = encode_conn_request(partial);
  auto rp = decode_conn_request(p.data(), p.size());
  ASSERT_TRUE(rp.ok());
  EXPECT_EQ(rp->body.flags, 0);
  EXPECT_TRUE(rp->rails[0].own.empty());
  // The flag without its addresses, an unknown flag, the flag without rails.
  auto lying = encode_conn_request(sample_request(2));
  lying[offsetof(ConnBody, flags)] = kOwnDataEndpoints;
  EXPECT_FALSE(decode_conn_request(lying.data(), lying.size()).ok());
  auto unknown = encode_conn_request(sample_request(2));
  unknown[offsetof(ConnBody, flags)] = 0x80;
  EXPECT_NE(decode_conn_request(unknown.data(), unknown.size()).status().message().find("flags"),
            std::string::npos);
  auto no_rails = encode_conn_request(sample_request(0));
  no_rails[offsetof(ConnBody, flags)] = kOwnDataEndpoints;
  EXPECT_FALSE(decode_conn_request(no_rails.data(), no_rails.size()).ok());
  // The answer carries the listener's the same way.
  ConnAck ack;
  ack.body.nonce = 5;
  ack.body.depth = 8;
  ack.rails = req.rails;
  auto ab = encode_conn_ack(ack);
  auto a = decode_conn_ack(ab.data(), ab.size());
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->rails[1].own, std::vector<uint8_t>(16, 201));
  for (size_t n = 0; n < ab.size(); ++n) EXPECT_FALSE(decode_conn_ack(ab.data(), n).ok()) << n;
}

TEST(Message, ConnAckRoundTripAndValidation) {
  ConnAck a;
  a.body.nonce = 5;
  a.body.device_token = 6;
  a.body.eager_max = 4096;
  a.body.depth = 64;
  a.rails = sample_request(2).rails;
  auto bytes = encode_conn_ack(a);
  auto d = decode_conn_ack(bytes.data(), bytes.size());
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->body.nonce, 5u);
  EXPECT_EQ(d->body.depth, 64);
  ASSERT_EQ(d->rails.size(), 2u);
  EXPECT_EQ(d->rails[1].data[0], 1);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(decode_conn_ack(bytes.data(), n).ok()) << n;
  }
  a.body.depth = 0;
  auto z = encode_conn_ack(a);
  EXPECT_FALSE(decode_conn_ack(z.data(), z.size()).ok()) << "a depth of 0";
  a.body.depth = kMaxSlots + 1;
  z = encode_conn_ack(a);
  EXPECT_FALSE(decode_conn_ack(z.data(), z.size()).ok()) << "a depth beyond 12 bits of slot";
}

TEST(Message, CtsCarriesOneKeyPerRail) {
  MsgHeader h{};
  h.type = static_cast<uint8_t>(MsgType::cts);
  h.version = kWireVersion;
  uint8_t buf[sizeof(MsgHeader) + 8 * (kMaxRails + 1)];
  std::memcpy(buf, &h, sizeof(h));
  EXPECT_TRUE(decode_header(buf, sizeof(MsgHeader) + 8).ok());
  EXPECT_TRUE(decode_header(buf, sizeof(MsgHeader) + 8 * kMaxRails).ok());
  EXPECT_FALSE(decode_header(buf, sizeof(MsgHeader)).ok());
  EXPECT_FALSE(decode_header(buf, sizeof(MsgHeader) + 12).ok());
  EXPECT_FALSE(decode_header(buf, sizeof(buf)).ok());
}

TEST(CqData, WideRoutesWithGenerationAndCarriesLength) {
  const uint64_t d = encode_cq_data({0xBEEF, 0x0123, 0x9, 1 << 20}, 8);
  EXPECT_EQ(d & 0xffffu, 0xBEEFu) << "comm id in the low 16 bits";
  const CqData c = decode_cq_data(d, 8);
  EXPECT_EQ(c.comm, 0xBEEF);
  EXPECT_EQ(c.slot, 0x0123);
  EXPECT_EQ(c.field, 0x9) << "the receiver comm's generation";
  EXPECT_EQ(c.high, 1u << 20);
  // Slots are 12 bits, the field 4: neither spills into the other.
  const CqData m = decode_cq_data(encode_cq_data({1, kMaxSlots - 1, 0xf, 0}, 8), 8);
  EXPECT_EQ(m.slot, kMaxSlots - 1);
  EXPECT_EQ(m.field, 0xf);
}

TEST(CqData, NarrowCarriesTheStripeCountAndNothingAbove32Bits) {
  const uint64_t d = encode_cq_data({7, 4095, kMaxNarrowStripes - 1, 0xffffffffu}, 4);
  EXPECT_EQ(d >> 32, 0u) << "4-byte CQ data: nothing above the low word";
  const CqData c = decode_cq_data(d, 4);
  EXPECT_EQ(c.comm, 7);
  EXPECT_EQ(c.slot, 4095);
  EXPECT_EQ(c.field + 1u, kMaxNarrowStripes);
  EXPECT_EQ(c.high, 0u);
}

// A window write names its target stream in the CQ data: with 4-byte data 10 bits of stream
// index (1,023 streams at a target) beside 6 sequence bits, nothing above the low word and the
// low 16 bits 0 (not a rendezvous write); with 8-byte data 12 bits and a generation.
TEST(CqData, WindowWritesNameATargetOfAThousandStreams) {
  EXPECT_EQ(window_stream_limit(4), 1024);
  EXPECT_EQ(window_stream_limit(8), 4096);
  EXPECT_EQ(window_seq_bits(4, 0), 6u);
  for (uint16_t stream : {1, 127, 128, 511, 1023}) {
    for (uint64_t seq : {uint64_t{0}, uint64_t{63}, uint64_t{64}, uint64_t{1} << 40}) {
      const uint64_t d = encode_window_write(stream, 0, seq, 4, kNarrowSeqBits);
      EXPECT_EQ(d >> 32, 0u);
      EXPECT_EQ(d & 0xffff, 0u);
      const WindowWrite w = decode_window_write(d, 4, kNarrowSeqBits);
      EXPECT_EQ(w.stream, stream);
      EXPECT_EQ(w.seq_low, seq & 63);
      EXPECT_EQ(widen_window_seq(w.seq_low, seq >= 10 ? seq - 10 : 0, 6), seq);
    }
  }
  const WindowWrite w = decode_window_write(encode_window_write(4095, 9, 0x12345678, 8, 32), 8, 32);
  EXPECT_EQ(w.stream, 4095);
  EXPECT_EQ(w.gen, 9);
  EXPECT_EQ(w.seq_low, 0x12345678u);
}

TEST(CqData, HeaderlessEagerRoutesAndRecoversTheSequenceAndTag) {
  const uint64_t seqv = 0x1234567890ull;
  const CqData c =
      decode_cq_data(encode_cq_data({0x0102, 7, 3, eager_high(seqv, 0xbeef)}, 8), 8);
  EXPECT_EQ(c.comm, 0x0102);
  EXPECT_EQ(c.slot, 7);
  EXPECT_EQ(eager_seq_low(c.high), 0x7890u) << "the high word carries the sequence's low 16 bits";
  EXPECT_EQ(eager_tag(c.high), 0xbeefu) << "and the tag";
  // The receiver recovers the full sequence from its own position, on both sides of it and
  // across 2^16 and 2^32 boundaries, over its whole window (+-depth, depth <= 4096).
  for (uint64_t near : {uint64_t{0}, uint64_t{5}, (uint64_t{1} << 16) - 3, uint64_t{1} << 16,
                        (uint64_t{1} << 32) - 3, uint64_t{1} << 32, (uint64_t{7} << 32) + 2,
                        ~uint64_t{0} - 10000}) {
    for (int64_t delta = -int64_t{kMaxSlots}; delta <= int64_t{kMaxSlots}; ++delta) {
      if (delta < 0 && near < static_cast<uint64_t>(-delta)) continue;
      const uint64_t seq = near + static_cast<uint64_t>(delta);
      ASSERT_EQ(widen_seq(eager_seq_low(eager_high(seq, 9)), near, kEagerSeqBits), seq)
          << "near " << near << " delta " << delta;
    }
  }
  // The 32-bit form (write lengths share the high word) still widens too.
  EXPECT_EQ(widen_seq(static_cast<uint32_t>(seqv), seqv - 3), seqv);
}

TEST(RemoteKey, RoundTripAndValidation) {
  RemoteKey k;
  k.virt_addr = true;
  k.base = 0x7f0000001000;
  k.length = 4096;
  k.device_token = 42;
  k.keys = {7};
  auto bytes = encode_key(k);
  auto d = decode_key(bytes);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->base, k.base);
  EXPECT_EQ(d->keys[0], 7u);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(decode_key(std::span<const uint8_t>(bytes.data(), n)).ok()) << n;
  }
  auto c = bytes;
  c[20] ^= 1;
  EXPECT_NE(decode_key(c).status().message().find("corrupted"), std::string::npos);
  // The flags of GPU memory: staged through a shadow, or registered with the provider (device);
  // never both.
  for (int f = 0; f < 4; ++f) {
    RemoteKey g = k;
    g.staged = (f & 1) != 0;
    g.device = (f & 2) != 0;
    auto gd = decode_key(encode_key(g));
    if (g.staged && g.device) {
      EXPECT_FALSE(gd.ok()) << "staged and device at once";
      continue;
    }
    ASSERT_TRUE(gd.ok()) << gd.status().to_string();
    EXPECT_EQ(gd->staged, g.staged);
    EXPECT_EQ(gd->device, g.device);
  }
  k.length = 0;
  EXPECT_NE(decode_key(encode_key(k)).status().message().find("invalid range"), std::string::npos);
  k.length = 16;
  k.base = ~0ull - 4;  // wraps around
  EXPECT_FALSE(decode_key(encode_key(k)).ok());
}

}  // namespace
}  // namespace xport::proto
