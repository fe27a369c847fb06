// Label bounding: sanitised values, truncation, fixed slots, bounded counters.
#include <gtest/gtest.h>

#include <string>

#include "telemetry/block.hpp"

namespace xport::telemetry {
namespace {

std::string value_of(const LabelSlot& s) { return std::string(s.value, s.length); }

TEST(Labels, KeepsAllowedCharacters) {
  LabelSlot s;
  EXPECT_TRUE(set_label(s, LabelKey::provider, "tcp;ofi_rxm"));
  EXPECT_EQ(value_of(s), "tcp;ofi_rxm");
  EXPECT_EQ(s.key, static_cast<uint8_t>(LabelKey::provider));
  EXPECT_TRUE(set_label(s, LabelKey::pci, "0000:53:00.0"));
  EXPECT_TRUE(set_label(s, LabelKey::endpoint, "rail lo connection"));
}

TEST(Labels, ReplacesQuotesBackslashesControlAndNonAscii) {
  LabelSlot s;
  EXPECT_FALSE(set_label(s, LabelKey::rail, "a\"b\\c\nd\xc3\xa9}{"));
  EXPECT_EQ(value_of(s), "a_b_c_d____");
  for (size_t i = 0; i < s.length; ++i) EXPECT_TRUE(label_char_allowed(s.value[i]));
}

TEST(Labels, TruncatesLongValues) {
  LabelSlot s;
  std::string longv(500, 'x');
  EXPECT_FALSE(set_label(s, LabelKey::rail, longv));
  EXPECT_EQ(s.length, kLabelValueMax);
  EXPECT_EQ(value_of(s), std::string(kLabelValueMax, 'x'));
}

TEST(Labels, BlockHasBoundedSlotsAndOneValuePerKey) {
  BlockBuilder b(BlockKind::endpoint);
  EXPECT_FALSE(b.label(LabelKey::rail, ""));  // empty values are left out
  EXPECT_EQ(b.record().label_count, 0);
  EXPECT_TRUE(b.label(LabelKey::rail, "lo"));
  EXPECT_TRUE(b.label(LabelKey::rail, "eth0"));  // replaces
  EXPECT_EQ(b.record().label_count, 1);
  EXPECT_EQ(value_of(b.record().labels[0]), "eth0");
  EXPECT_FALSE(b.label(static_cast<LabelKey>(0), "x"));
  EXPECT_FALSE(b.label(LabelKey::count, "x"));
  int added = 1;
  for (uint8_t k = 1; k < static_cast<uint8_t>(LabelKey::count); ++k) {
    if (k == static_cast<uint8_t>(LabelKey::rail)) continue;
    if (b.label(static_cast<LabelKey>(k), "v")) ++added;
  }
  EXPECT_EQ(added, kBlockLabels);
  EXPECT_EQ(b.record().label_count, kBlockLabels);
}

TEST(Labels, BlockCountersAreBounded) {
  BlockBuilder b(BlockKind::cq);
  for (int i = 0; i < kBlockCounters; ++i) EXPECT_TRUE(b.counter(CounterId::cq_polls, i));
  EXPECT_FALSE(b.counter(CounterId::cq_polls, 1));
  EXPECT_EQ(b.record().counter_count, kBlockCounters);
}

TEST(Names, EveryCounterHasAPrometheusName) {
  for (const auto& n : counter_names()) {
    std::string m = n.metric;
    EXPECT_EQ(m.rfind("xport_", 0), 0u) << m;
    bool total = m.size() > 6 && m.compare(m.size() - 6, 6, "_total") == 0;
    EXPECT_EQ(total, n.type == MetricType::counter) << m;
    EXPECT_EQ(find_counter(static_cast<uint16_t>(n.id)), &n);
  }
  EXPECT_EQ(find_counter(0), nullptr);
  EXPECT_EQ(find_counter(9999), nullptr);
  for (uint8_t k = 1; k < static_cast<uint8_t>(LabelKey::count); ++k) {
    EXPECT_NE(label_key_name(static_cast<LabelKey>(k)), nullptr);
  }
}

}  // namespace
}  // namespace xport::telemetry
