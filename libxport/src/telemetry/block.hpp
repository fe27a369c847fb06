// Building one counter block: bounded labels (fixed slots, sanitised values, truncated to
// kLabelValueMax) and counters. Fills a BlockRecord in place; allocates nothing.
#pragma once

#include <string_view>

#include "telemetry/names.hpp"
#include "telemetry/segment_format.hpp"

namespace xport::telemetry {

// True for bytes a label value may hold as-is; others become '_'. The set keeps values
// printable and free of quotes, backslashes and separators that would need escaping anywhere.
bool label_char_allowed(char c);

// Writes a sanitised copy of `value` into `slot`; returns false when it had to change it
// (a disallowed byte or truncation), which is not an error.
bool set_label(LabelSlot& slot, LabelKey key, std::string_view value);

class BlockBuilder {
 public:
  explicit BlockBuilder(BlockKind kind);

  // Adds a label; an empty value or a full block (kBlockLabels) is skipped, a repeated key
  // replaces the earlier value. Returns false when the label was not stored as given.
  bool label(LabelKey key, std::string_view value);
  // Adds a counter; returns false when the block is full (kBlockCounters).
  bool counter(CounterId id, uint64_t value);

  const BlockRecord& record() const { return rec_; }

 private:
  BlockRecord rec_;
};

}  // namespace xport::telemetry
