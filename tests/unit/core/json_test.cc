// core::JsonWriter (core/json.hpp): escaping, nesting and commas, each number format, the
// one-member-per-line layout, misuse reported by ok(), and nothing allocated beyond the output.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>

#include "core/json.hpp"

namespace xport::core {
namespace {

std::string quoted(std::string_view s) { return json_string(s); }

TEST(Json, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(quoted("plain"), "\"plain\"");
  EXPECT_EQ(quoted("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(quoted("line\nnext\ttab"), "\"line\\nnext\\ttab\"");
  EXPECT_EQ(quoted(std::string_view("\x01\x1f\r\0", 4)), "\"\\u0001\\u001f\\u000d\\u0000\"");
  EXPECT_EQ(quoted("\x7f/"), "\"\x7f/\"") << "DEL and '/' need no escape";
}

TEST(Json, KeepsValidUtf8AndReplacesInvalidBytes) {
  EXPECT_EQ(quoted("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
  EXPECT_EQ(quoted("a\xff"), "\"a\\ufffd\"") << "a byte that starts nothing";
  EXPECT_EQ(quoted("\xc0\x80"), "\"\\ufffd\\ufffd\"") << "an overlong encoding of NUL";
  EXPECT_EQ(quoted("\xe2\x82"), "\"\\ufffd\\ufffd\"") << "a sequence cut short";
  EXPECT_EQ(quoted("\xe2(x"), "\"\\ufffd(x\"") << "a lead byte without its continuation";
}

TEST(Json, WritesNestedContainersWithCommas) {
  std::string out;
  JsonWriter w(out);
  w.begin_object()
      .field("a", 1)
      .begin_array("b")
      .value(1)
      .value("two")
      .begin_object()
      .field("c", kJsonNull)
      .end_object()
      .end_array()
      .begin_object("d")
      .end_object()
      .begin_array("e")
      .end_array()
      .field("f", true)
      .field("g", false)
      .raw_field("h", "[1,2]")
      .field_or_null("i", true, JsonFixed{0.5, 1})
      .field_or_null("j", false, 7)
      .end_object();
  EXPECT_EQ(out, R"({"a":1,"b":[1,"two",{"c":null}],"d":{},"e":[],"f":true,"g":false,"h":[1,2],)"
                 R"("i":0.5,"j":null})");
  EXPECT_TRUE(w.ok());
}

TEST(Json, IntegersOfEveryWidth) {
  std::string out;
  JsonWriter w(out);
  w.begin_array()
      .value(std::numeric_limits<int64_t>::min())
      .value(std::numeric_limits<uint64_t>::max())
      .value(uint8_t{200})
      .value(-7)
      .value(size_t{0})
      .end_array();
  EXPECT_EQ(out, "[-9223372036854775808,18446744073709551615,200,-7,0]");
}

TEST(Json, NumbersKeepTheirPrintfFormats) {
  auto one = [](auto n) {
    std::string out;
    JsonWriter(out).value(n);
    return out;
  };
  EXPECT_EQ(one(JsonFixed{1.23456, 3}), "1.235");
  EXPECT_EQ(one(JsonFixed{2.5e9, 0}), "2500000000");
  EXPECT_EQ(one(JsonFixed{0.1, 4}), "0.1000");
  EXPECT_EQ(one(JsonFixed{-3.25, 1}), "-3.2") << "printf's rounding, half to even";
  EXPECT_EQ(one(JsonGeneral{1234567.0}), "1.23457e+06");
  EXPECT_EQ(one(JsonGeneral{0.5}), "0.5");
  EXPECT_EQ(one(JsonGeneral{42}), "42");
  EXPECT_EQ(one(JsonTrimmed{100.0, 3}), "100");
  EXPECT_EQ(one(JsonTrimmed{2.5, 3}), "2.5");
  EXPECT_EQ(one(JsonTrimmed{0.0004, 3}), "0");
  EXPECT_EQ(one(JsonTrimmed{12.3456, 3}), "12.346");
  // The largest double in full, not cut to a buffer.
  char want[400];
  std::snprintf(want, sizeof want, "%.17f", std::numeric_limits<double>::max());
  EXPECT_EQ(one(JsonFixed{std::numeric_limits<double>::max(), 17}), want);
  EXPECT_EQ(one(JsonFixed{-std::numeric_limits<double>::max(), 40}).size(),
            std::string(want).size() + 1)
      << "decimals past 17 are 17";
}

TEST(Json, NumbersThatAreNotFiniteAreNull) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::string out;
  JsonWriter w(out);
  w.begin_array()
      .value(JsonFixed{inf, 3})
      .value(JsonGeneral{-inf})
      .value(JsonTrimmed{nan, 3})
      .end_array();
  EXPECT_EQ(out, "[null,null,null]");
}

TEST(Json, ContainersAboveTheLineDepthPutEachMemberOnItsLine) {
  std::string out;
  JsonWriter w(out, 2);
  w.begin_object()
      .field("source", "live")
      .begin_array("gpus")
      .begin_object()
      .field("pci", "0000:10:1c.0")
      .begin_array("rails")
      .begin_object()
      .field("hops", 2)
      .end_object()
      .end_array()
      .end_object()
      .begin_object()
      .end_object()
      .end_array()
      .begin_array("nics")
      .end_array()
      .begin_array("notes")
      .value("a")
      .value("b")
      .end_array()
      .end_object();
  EXPECT_EQ(out,
            "{\n"
            "  \"source\":\"live\",\n"
            "  \"gpus\":[\n"
            "    {\"pci\":\"0000:10:1c.0\",\"rails\":[{\"hops\":2}]},\n"
            "    {}\n"
            "  ],\n"
            "  \"nics\":[],\n"
            "  \"notes\":[\n"
            "    \"a\",\n"
            "    \"b\"\n"
            "  ]\n"
            "}");
  EXPECT_TRUE(w.ok());
}

TEST(Json, MisuseClearsOk) {
  {
    std::string out;
    JsonWriter w(out);
    w.begin_array().key("k").value(1).end_array();
    EXPECT_FALSE(w.ok()) << "a key in an array";
  }
  {
    std::string out;
    JsonWriter w(out);
    w.begin_object().value(1).end_object();
    EXPECT_FALSE(w.ok()) << "an object's member without its key";
  }
  {
    std::string out;
    JsonWriter w(out);
    w.begin_object().key("k").end_object();
    EXPECT_FALSE(w.ok()) << "a key without its value";
  }
  {
    std::string out;
    JsonWriter w(out);
    w.begin_object().end_array();
    EXPECT_FALSE(w.ok()) << "an object closed as an array";
  }
  {
    std::string out;
    JsonWriter w(out);
    w.begin_array();
    EXPECT_FALSE(w.ok()) << "left open";
    w.end_array().end_array();
    EXPECT_FALSE(w.ok()) << "closed once too often";
  }
  {
    std::string out;
    JsonWriter w(out);
    w.value(1).value(2);
    EXPECT_FALSE(w.ok()) << "two values at the top";
  }
}

TEST(Json, NestsToItsLimitAndReportsDeeper) {
  std::string out;
  JsonWriter w(out);
  for (int i = 0; i < JsonWriter::kMaxDepth; ++i) w.begin_array();
  for (int i = 0; i < JsonWriter::kMaxDepth; ++i) w.end_array();
  EXPECT_TRUE(w.ok());
  EXPECT_EQ(out, std::string(32, '[') + std::string(32, ']'));

  std::string deep;
  JsonWriter d(deep);
  for (int i = 0; i <= JsonWriter::kMaxDepth; ++i) d.begin_array();
  for (int i = 0; i <= JsonWriter::kMaxDepth; ++i) d.end_array();
  EXPECT_FALSE(d.ok());
  EXPECT_EQ(deep, std::string(33, '[') + std::string(33, ']')) << "still balanced text";
}

TEST(Json, AllocatesNothingButTheOutputsGrowth) {
  std::string out;
  out.reserve(4096);
  const char* before = out.data();
  JsonWriter w(out, 1);
  w.begin_object();
  for (int i = 0; i < 20; ++i) {
    w.begin_object("member").field("n", i).field("x", JsonFixed{12345.678, 3}).end_object();
  }
  w.end_object();
  ASSERT_TRUE(w.ok());
  ASSERT_LT(out.size(), 4096u);
  EXPECT_EQ(out.data(), before) << "the reserved output was enough: no reallocation";
}

}  // namespace
}  // namespace xport::core
