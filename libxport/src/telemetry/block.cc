// Counter blocks with bounded, sanitised labels.
#include "telemetry/block.hpp"

#include <cstring>

namespace xport::telemetry {

bool label_char_allowed(char c) {
  if (c >= 'a' && c <= 'z') return true;
  if (c >= 'A' && c <= 'Z') return true;
  if (c >= '0' && c <= '9') return true;
  switch (c) {
    case ' ':
    case '_':
    case '-':
    case '.':
    case ':':
    case ';':
    case '/':
    case '+':
    case '@':
    case '=':
    case ',':
    case '#':
      return true;
    default:
      return false;
  }
}

bool set_label(LabelSlot& slot, LabelKey key, std::string_view value) {
  std::memset(&slot, 0, sizeof(slot));
  slot.key = static_cast<uint8_t>(key);
  bool exact = value.size() <= kLabelValueMax;
  size_t n = exact ? value.size() : kLabelValueMax;
  for (size_t i = 0; i < n; ++i) {
    char c = value[i];
    if (!label_char_allowed(c)) {
      c = '_';
      exact = false;
    }
    slot.value[i] = c;
  }
  slot.length = static_cast<uint8_t>(n);
  return exact;
}

BlockBuilder::BlockBuilder(BlockKind kind) {
  std::memset(&rec_, 0, sizeof(rec_));
  rec_.kind = static_cast<uint16_t>(kind);
}

bool BlockBuilder::label(LabelKey key, std::string_view value) {
  if (value.empty() || !label_key_valid(static_cast<uint8_t>(key))) return false;
  for (int i = 0; i < rec_.label_count; ++i) {
    if (rec_.labels[i].key == static_cast<uint8_t>(key))
      return set_label(rec_.labels[i], key, value);
  }
  if (rec_.label_count >= kBlockLabels) return false;
  return set_label(rec_.labels[rec_.label_count++], key, value);
}

bool BlockBuilder::counter(CounterId id, uint64_t value) {
  if (rec_.counter_count >= kBlockCounters) return false;
  CounterSlot& s = rec_.counters[rec_.counter_count++];
  s.id = static_cast<uint16_t>(id);
  s.value = value;
  return true;
}

}  // namespace xport::telemetry
