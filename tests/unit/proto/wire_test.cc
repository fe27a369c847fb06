// Wire formats: round trips, and every decoder's refusal of truncated, corrupted, future and
// hostile input with a message that says what was wrong.
#include <gtest/gtest.h>

#include "proto/wire.hpp"

namespace xport::proto {
namespace {

Handle sample_handle() {
  Handle h;
  h.endpoint_type = 0;
  h.listener_token = 0x1122334455667788ull;
  h.provider = "tcp;ofi_rxm";
  h.rail_addresses = {std::vector<uint8_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}};
  return h;
}

TEST(Crc32, KnownVector) {
  const char* s = "123456789";
  EXPECT_EQ(crc32(reinterpret_cast<const uint8_t*>(s), 9), 0xCBF43926u);
}

TEST(Handle, RoundTrip) {
  auto bytes = encode_handle(sample_handle());
  EXPECT_EQ(bytes.size(), sizeof(HandleHeader) + 16 + 4);
  auto h = decode_handle(bytes);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_EQ(h->listener_token, 0x1122334455667788ull);
  EXPECT_EQ(h->provider, "tcp;ofi_rxm");
  ASSERT_EQ(h->rail_addresses.size(), 1u);
  EXPECT_EQ(h->rail_addresses[0][15], 16);
}

TEST(Handle, EveryTruncationIsRefused) {
  auto bytes = encode_handle(sample_handle());
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto h = decode_handle(std::span<const uint8_t>(bytes.data(), n));
    ASSERT_FALSE(h.ok()) << "accepted a handle cut to " << n << " bytes";
    EXPECT_EQ(h.status().code(), Code::protocol);
  }
  auto h = decode_handle(std::span<const uint8_t>(bytes.data(), 30));
  EXPECT_NE(h.status().message().find("truncated"), std::string::npos) << h.status().message();
}

TEST(Handle, EverySingleBitFlipIsRefused) {
  const auto bytes = encode_handle(sample_handle());
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      auto c = bytes;
      c[i] ^= static_cast<uint8_t>(1u << bit);
      EXPECT_FALSE(decode_handle(c).ok()) << "byte " << i << " bit " << bit;
    }
  }
}

TEST(Handle, FutureVersionAndTrailingBytesAreNamed) {
  auto bytes = encode_handle(sample_handle());
  auto future = bytes;
  future[4] = 2;
  auto h = decode_handle(future);
  EXPECT_NE(h.status().message().find("version 2 is not supported"), std::string::npos)
      << h.status().message();
  auto longer = bytes;
  longer.push_back(0);
  h = decode_handle(longer);
  EXPECT_NE(h.status().message().find("trailing"), std::string::npos) << h.status().message();
  auto wrong = bytes;
  wrong[0] = 'Z';
  EXPECT_NE(decode_handle(wrong).status().message().find("magic"), std::string::npos);
}

TEST(Message, HeaderValidation) {
  MsgHeader h{};
  h.type = static_cast<uint8_t>(MsgType::cts);
  h.version = kWireVersion;
  uint8_t buf[sizeof(MsgHeader) + 8];
  std::memcpy(buf, &h, sizeof(h));
  EXPECT_TRUE(decode_header(buf, sizeof(MsgHeader)).ok());
  EXPECT_FALSE(decode_header(buf, sizeof(MsgHeader) - 1).ok());
  EXPECT_NE(decode_header(buf, sizeof(buf)).status().message().find("unexpected bytes"),
            std::string::npos);
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
  h.version = 7;
  std::memcpy(buf, &h, sizeof(h));
  EXPECT_NE(decode_header(buf, sizeof(buf)).status().message().find("version 7"),
            std::string::npos);
}

TEST(Message, ConnBodyValidation) {
  ConnBody b{};
  b.max_requests = 8;
  b.address_bytes = 16;
  EXPECT_TRUE(decode_conn_body(reinterpret_cast<uint8_t*>(&b), sizeof(b)).ok());
  EXPECT_FALSE(decode_conn_body(reinterpret_cast<uint8_t*>(&b), sizeof(b) - 1).ok());
  b.address_bytes = kMaxAddressBytes + 1;
  EXPECT_FALSE(decode_conn_body(reinterpret_cast<uint8_t*>(&b), sizeof(b)).ok());
  b.address_bytes = 16;
  b.max_requests = 0;
  EXPECT_FALSE(decode_conn_body(reinterpret_cast<uint8_t*>(&b), sizeof(b)).ok());
}

TEST(CqData, RoutesAndCarriesLength) {
  uint64_t d = encode_cq_data(0xBEEF, 0x0123, 1 << 20, 8);
  EXPECT_EQ(d & 0xffffffffu, (0x0123u << 16) | 0xBEEFu) << "(slot << 16) | comm_id";
  CqData c = decode_cq_data(d);
  EXPECT_EQ(c.comm, 0xBEEF);
  EXPECT_EQ(c.slot, 0x0123);
  EXPECT_EQ(c.length, 1u << 20);
  EXPECT_EQ(decode_cq_data(encode_cq_data(1, 2, 1ull << 33, 8)).length, kLengthUnknown);
  EXPECT_EQ(encode_cq_data(1, 2, 5, 4) >> 32, 0u) << "4-byte CQ data carries no length";
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
  k.length = 0;
  EXPECT_NE(decode_key(encode_key(k)).status().message().find("invalid range"), std::string::npos);
  k.length = 16;
  k.base = ~0ull - 4;  // wraps around
  EXPECT_FALSE(decode_key(encode_key(k)).ok());
}

}  // namespace
}  // namespace xport::proto
