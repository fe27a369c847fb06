// Knobs: parsing, sources, validation errors, and docs/knobs.md completeness.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/knob.hpp"
#include "xport/deadline.hpp"
#include "xport/knobs.hpp"
#include "xport/xport.hpp"

namespace xport {
namespace {

class KnobEnv : public ::testing::Test {
 protected:
  void TearDown() override {
    unsetenv("XPORT_EAGER_MAX");
    unsetenv("XPORT_TIMEOUT_MS");
    unsetenv("XPORT_PROVIDER");
    unsetenv("XPORT_SPIN_GATHER_NS");
    for (const char* name : kRanged) unsetenv(name);
    core::reload_knobs();
  }
  // The knobs the range tests set.
  static constexpr const char* kRanged[] = {
      "XPORT_RX_BUFFERS", "XPORT_MAX_REQUESTS", "XPORT_POOL_GROUPS", "XPORT_STRIPE_ALIGN",
      "XPORT_KEEPALIVE_MS", "XPORT_WINDOW_CREDITS", "XPORT_LOG_LEVEL", "XPORT_PEER_TIMEOUT_MS",
      "XPORT_PROGRESS", "XPORT_WAIT", "XPORT_ATOMICS", "XPORT_GPU_MEMORY",
      "XPORT_CONTROL_ENDPOINT"};
};

TEST_F(KnobEnv, DefaultsParseAndHaveDescriptions) {
  core::reload_knobs();
  for (const KnobInfo& k : knob_list()) {
    EXPECT_EQ(k.source, "default") << k.name;
    EXPECT_EQ(k.value, k.default_value) << k.name;
    EXPECT_FALSE(k.description.empty()) << k.name;
    EXPECT_EQ(k.name.rfind("XPORT_", 0), 0u) << k.name;
  }
  EXPECT_TRUE(validate_knobs().ok());
}

TEST_F(KnobEnv, SizesDurationsAndSources) {
  setenv("XPORT_EAGER_MAX", "16K", 1);
  setenv("XPORT_TIMEOUT_MS", "2s", 1);
  setenv("XPORT_PROVIDER", "shm", 1);
  core::reload_knobs();
  EXPECT_EQ(core::knob_int(core::KnobId::eager_max), 16384);
  EXPECT_EQ(core::knob_int(core::KnobId::timeout_ms), 2000);
  EXPECT_EQ(core::knob_string(core::KnobId::provider), "shm");
  EXPECT_TRUE(core::knob_from_environment(core::KnobId::provider));
  EXPECT_FALSE(core::knob_from_environment(core::KnobId::cq_batch));
  bool found = false;
  for (const KnobInfo& k : knob_list()) {
    if (k.name == "XPORT_EAGER_MAX") {
      found = true;
      EXPECT_EQ(k.source, "environment");
      EXPECT_EQ(k.value, "16K");
    }
  }
  EXPECT_TRUE(found);
  Deadline d = Deadline::from_knob();
  EXPECT_GT(d.remaining().count(), 1'000'000'000);
  EXPECT_LE(d.remaining().count(), 2'000'000'000);
}

TEST_F(KnobEnv, BadValuesAreNamedAndFallBackToDefault) {
  setenv("XPORT_EAGER_MAX", "12X", 1);
  core::reload_knobs();
  Status s = validate_knobs();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::invalid_argument);
  EXPECT_NE(s.message().find("XPORT_EAGER_MAX='12X'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("suffix"), std::string::npos) << s.message();
  EXPECT_EQ(core::knob_int(core::KnobId::eager_max), 8192);
  setenv("XPORT_EAGER_MAX", "-5", 1);
  core::reload_knobs();
  EXPECT_NE(validate_knobs().message().find("negative"), std::string::npos);
}

// An "int or auto" knob: auto (its default) reads as -1, a number as itself; anything else is
// refused with the variable named.
TEST_F(KnobEnv, AutoOrNumberKnobsTakeAutoOrANonNegativeNumber) {
  core::reload_knobs();
  EXPECT_EQ(core::knob_int(core::KnobId::spin_gather_ns), -1);
  setenv("XPORT_SPIN_GATHER_NS", "250", 1);
  core::reload_knobs();
  EXPECT_TRUE(validate_knobs().ok());
  EXPECT_EQ(core::knob_int(core::KnobId::spin_gather_ns), 250);
  EXPECT_TRUE(core::knob_from_environment(core::KnobId::spin_gather_ns));
  setenv("XPORT_SPIN_GATHER_NS", "auto", 1);
  core::reload_knobs();
  EXPECT_EQ(core::knob_int(core::KnobId::spin_gather_ns), -1);
  setenv("XPORT_SPIN_GATHER_NS", "soon", 1);
  core::reload_knobs();
  Status s = validate_knobs();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("XPORT_SPIN_GATHER_NS='soon'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("expected auto or a number"), std::string::npos) << s.message();
  EXPECT_EQ(core::knob_int(core::KnobId::spin_gather_ns), -1);
  setenv("XPORT_SPIN_GATHER_NS", "-3", 1);
  core::reload_knobs();
  EXPECT_NE(validate_knobs().message().find("negative"), std::string::npos);
  for (const KnobInfo& k : knob_list()) {
    if (k.name == "XPORT_SPIN_GATHER_NS") {
      EXPECT_EQ(k.type, "int or auto");
    }
  }
}

// A value past the knob's documented range is refused, naming the range (it was clamped to
// 100000 without a word).
TEST_F(KnobEnv, SpinGatherAboveItsRangeIsRefused) {
  setenv("XPORT_SPIN_GATHER_NS", "100000", 1);
  core::reload_knobs();
  EXPECT_TRUE(validate_knobs().ok()) << validate_knobs().message();
  EXPECT_EQ(core::knob_int(core::KnobId::spin_gather_ns), 100000);
  setenv("XPORT_SPIN_GATHER_NS", "100001", 1);
  core::reload_knobs();
  Status s = validate_knobs();
  ASSERT_FALSE(s.ok()) << "100001 ns is past XPORT_SPIN_GATHER_NS's 0..100000";
  EXPECT_NE(s.message().find("XPORT_SPIN_GATHER_NS='100001'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("at most 100000"), std::string::npos) << s.message();
  EXPECT_EQ(core::knob_int(core::KnobId::spin_gather_ns), -1) << "a refused value keeps the default";
}

// Every numeric knob with a working range refuses a value outside it, naming the knob and the
// bound (these were held to the range without a word: XPORT_RX_BUFFERS=8 ran with 16); the
// bound itself is taken, and a refused value leaves the knob at its default.
TEST_F(KnobEnv, ValuesOutsideTheirRangeAreRefused) {
  struct Case {
    const char* name;
    const char* bad;
    const char* why;
    const char* edge;  // the nearest value allowed
  };
  const Case cases[] = {
      {"XPORT_RX_BUFFERS", "15", "at least 16", "16"},
      {"XPORT_MAX_REQUESTS", "4097", "at most 4096", "4096"},
      {"XPORT_MAX_REQUESTS", "0", "at least 1", "1"},
      {"XPORT_POOL_GROUPS", "1025", "at most 1024", "1024"},
      {"XPORT_STRIPE_ALIGN", "3000", "a power of two", "2048"},
      {"XPORT_KEEPALIVE_MS", "0", "at least 1 ms", "1"},
      {"XPORT_KEEPALIVE_MS", "2min", "unknown duration suffix", "2s"},
  };
  for (const Case& c : cases) {
    setenv(c.name, c.bad, 1);
    core::reload_knobs();
    Status s = validate_knobs();
    ASSERT_FALSE(s.ok()) << c.name << "=" << c.bad << " was taken";
    EXPECT_NE(s.message().find(std::string(c.name) + "='" + c.bad + "'"), std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find(c.why), std::string::npos) << s.message();
    for (const KnobInfo& k : knob_list()) {
      if (k.name != c.name) continue;
      EXPECT_EQ(k.value, k.default_value) << c.name << ": a refused value keeps the default";
      EXPECT_NE(k.error.find(c.why), std::string::npos) << k.error;
    }
    setenv(c.name, c.edge, 1);
    core::reload_knobs();
    EXPECT_TRUE(validate_knobs().ok()) << c.name << "=" << c.edge << ": "
                                       << validate_knobs().message();
    unsetenv(c.name);
  }
}

// A knob refuses what it cannot honour, by name, at Context::open: an unknown log level (the
// logger took `loud` silently and logged at warn) and a zero timeout (every wait on the default
// deadline timed out at once) were taken.
TEST_F(KnobEnv, ContextOpenRefusesAnUnknownLogLevelAndAZeroTimeout) {
  const std::pair<const char*, const char*> cases[] = {
      {"XPORT_LOG_LEVEL=loud", "XPORT_LOG_LEVEL='loud': expected error, warn, info, debug or trace"},
      {"XPORT_TIMEOUT_MS=0", "XPORT_TIMEOUT_MS='0': at least 1 ms is allowed"},
      {"XPORT_PEER_TIMEOUT_MS=0", "XPORT_PEER_TIMEOUT_MS='0': at least 1 ms is allowed"}};
  for (const auto& [assignment, why] : cases) {
    const std::string a(assignment);
    const std::string name = a.substr(0, a.find('=')), value = a.substr(a.find('=') + 1);
    setenv(name.c_str(), value.c_str(), 1);
    core::reload_knobs();
    auto ctx = Context::open(ContextOptions{});
    ASSERT_FALSE(ctx.ok()) << assignment << " was taken";
    EXPECT_EQ(ctx.status().code(), Code::invalid_argument) << ctx.status().to_string();
    EXPECT_NE(ctx.status().message().find(why), std::string::npos) << ctx.status().to_string();
    for (const KnobInfo& k : knob_list()) {
      if (k.name == name) {
        EXPECT_EQ(k.value, k.default_value) << "a refused value keeps the default";
      }
    }
    unsetenv(name.c_str());
  }
  setenv("XPORT_TIMEOUT_MS", "1", 1);
  core::reload_knobs();
  EXPECT_TRUE(validate_knobs().ok()) << "1 ms is the least timeout: " << validate_knobs().message();
}

// Every knob that takes words takes each of them and refuses any other, naming the words.
TEST_F(KnobEnv, WordKnobsTakeTheirWordsOnly) {
  const std::pair<const char*, std::vector<const char*>> knobs[] = {
      {"XPORT_PROGRESS", {"native", "auto", "manual"}},
      {"XPORT_LOG_LEVEL", {"error", "warn", "info", "debug", "trace"}},
      {"XPORT_ATOMICS", {"auto", "native", "emulated"}},
      {"XPORT_GPU_MEMORY", {"auto", "hmem", "staged"}},
      {"XPORT_CONTROL_ENDPOINT", {"auto", "shared", "separate"}},
      {"XPORT_WAIT", {"spin", "block"}}};
  for (const auto& [name, words] : knobs) {
    for (const char* w : words) {
      setenv(name, w, 1);
      core::reload_knobs();
      EXPECT_TRUE(validate_knobs().ok()) << name << "=" << w << ": " << validate_knobs().message();
    }
    setenv(name, "Block", 1);  // words are exact: no case folding
    core::reload_knobs();
    Status s = validate_knobs();
    ASSERT_FALSE(s.ok()) << name << "=Block was taken";
    EXPECT_NE(s.message().find(std::string(name) + "='Block': expected " + words[0]),
              std::string::npos)
        << s.message();
    unsetenv(name);
  }
}

// The knobs documented as clamped keep that contract: a value outside the range is taken (and
// held to it where the knob is read), not refused.
TEST_F(KnobEnv, KnobsDocumentedAsClampedStillTakeValuesOutsideTheRange) {
  setenv("XPORT_WINDOW_CREDITS", "4", 1);
  core::reload_knobs();
  EXPECT_TRUE(validate_knobs().ok()) << validate_knobs().message();
  EXPECT_EQ(core::knob_int(core::KnobId::window_credits), 4);
}

// Every knob's default, given in the environment, is taken: no default lies outside its range.
TEST_F(KnobEnv, EveryDefaultIsWithinItsRange) {
  core::reload_knobs();
  const std::vector<KnobInfo> knobs = knob_list();
  for (const KnobInfo& k : knobs) {
    const char* before = std::getenv(k.name.c_str());
    const std::string saved = before != nullptr ? before : "";
    setenv(k.name.c_str(), k.default_value.c_str(), 1);
    core::reload_knobs();
    Status s = validate_knobs();
    EXPECT_TRUE(s.ok()) << k.name << "='" << k.default_value << "': " << s.message();
    if (before != nullptr) {
      setenv(k.name.c_str(), saved.c_str(), 1);
    } else {
      unsetenv(k.name.c_str());
    }
  }
}

// knob_list() names every rejected value (xport-probe reports them all, not only the first).
TEST_F(KnobEnv, KnobListCarriesEachRejectedValue) {
  setenv("XPORT_EAGER_MAX", "12X", 1);
  setenv("XPORT_TIMEOUT_MS", "soon", 1);
  core::reload_knobs();
  int rejected = 0;
  for (const KnobInfo& k : knob_list()) {
    if (k.name == "XPORT_EAGER_MAX") {
      EXPECT_EQ(k.error.rfind("'12X': ", 0), 0u) << k.error;
      EXPECT_EQ(k.value, k.default_value);
      EXPECT_EQ(k.source, "default");
    } else if (k.name == "XPORT_TIMEOUT_MS") {
      EXPECT_NE(k.error.find("'soon'"), std::string::npos) << k.error;
    } else {
      EXPECT_EQ(k.error, "") << k.name;
    }
    rejected += !k.error.empty();
  }
  EXPECT_EQ(rejected, 2);
}

TEST(KnobDocs, EveryKnobIsInDocsKnobsMd) {
  const char* root = std::getenv("XPORT_SOURCE_ROOT");
  ASSERT_NE(root, nullptr) << "XPORT_SOURCE_ROOT must point at the source tree";
  std::ifstream in(std::string(root) + "/docs/knobs.md");
  ASSERT_TRUE(in.good()) << "docs/knobs.md is missing";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  for (const KnobInfo& k : knob_list()) {
    EXPECT_NE(doc.find("`" + k.name + "`"), std::string::npos)
        << k.name << " is not documented in docs/knobs.md";
    EXPECT_NE(doc.find("`" + k.name + "` | " + k.type + " | `" + k.default_value + "`"),
              std::string::npos)
        << k.name << ": docs/knobs.md row must read `NAME` | type | `default`";
  }
  // The range column comes from the limits the library enforces (scripts/gen-knobs-md.py).
  EXPECT_NE(doc.find("| `XPORT_LOG_LEVEL` | string | `warn` | `error`, `warn`, `info`, `debug`, "
                     "`trace` |"),
            std::string::npos)
      << "docs/knobs.md: XPORT_LOG_LEVEL's words (run scripts/gen-knobs-md.py)";
  EXPECT_NE(doc.find("| `XPORT_TIMEOUT_MS` | duration_ms | `30000` | at least 1 ms |"),
            std::string::npos)
      << "docs/knobs.md: XPORT_TIMEOUT_MS's range (run scripts/gen-knobs-md.py)";
  EXPECT_NE(doc.find("| `XPORT_MAX_REQUESTS` | int | `64` | 1..4096 |"), std::string::npos)
      << "docs/knobs.md: XPORT_MAX_REQUESTS's range (run scripts/gen-knobs-md.py)";
}

}  // namespace
}  // namespace xport
