// Knob parsing and the public knob listing.
#include "core/knob.hpp"

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/format.hpp"
#include "core/log.hpp"

extern char** environ;

namespace xport::core {
namespace {

struct KnobDef {
  const char* name;
  KnobType type;
  const char* default_text;
  const char* description;
};

constexpr KnobDef kDefs[] = {
#define XPORT_KNOB(id, type, name, def, desc) {name, KnobType::type, def, desc},
#include "core/knob_table.inc"
#undef XPORT_KNOB
};
constexpr int kCount = static_cast<int>(KnobId::count);
static_assert(sizeof(kDefs) / sizeof(kDefs[0]) == kCount);

// The range of each numeric knob that has one (docs/knobs.md states it): a value outside it is
// refused like one that does not parse, naming the bound, and the knob keeps its default, so
// readers (EngineConfig::from_knobs) take the value as it is. (These were clamped without a
// word.) Two bounds are proto/wire.hpp's kMaxSlots and kMaxRails (engine.cc asserts them). Knobs whose
// descriptions have always said they are clamped (XPORT_WINDOW_CREDITS,
// XPORT_TELEMETRY_INTERVAL_MS) keep that contract and are not here. `auto` (-1) of an
// auto_integer knob is not a number and is not checked.
struct KnobRange {
  KnobId id;
  int64_t min;
  int64_t max;
  bool power_of_two = false;
};
constexpr int64_t kNoMax = INT64_MAX;
constexpr KnobRange kRanges[] = {
    {KnobId::max_requests, 1, 4096},  // request slots fit 12 bits (proto/wire.hpp kMaxSlots)
    {KnobId::rx_buffers, 16, kNoMax},
    {KnobId::tx_buffers, 16, kNoMax},
    {KnobId::cq_batch, 1, kNoMax},
    {KnobId::cq_entries, 64, kNoMax},
    {KnobId::keepalive_ms, 1, kNoMax},
    {KnobId::max_comms, 1, 65535},
    {KnobId::pool_groups, 0, 1024},
    {KnobId::pool_channels, 1, 1024},
    {KnobId::pool_depth_multiplier, 1, 64},
    {KnobId::listen_backlog, 1, kNoMax},
    {KnobId::stripe_align, 1, int64_t{1} << 30, true},
    {KnobId::stripe_rails, 0, 32},  // proto/wire.hpp kMaxRails
    {KnobId::progress_batch, 1, kNoMax},
    {KnobId::test_seq_bits, 0, 32},
    {KnobId::spin_gather_ns, 0, 100000},
    {KnobId::gpu_staging_pool, int64_t{64} << 10, kNoMax},
};

// What is wrong with `n` for knob `i`, or an empty string.
std::string out_of_range(int i, KnobType type, int64_t n) {
  if (type == KnobType::auto_integer && n == -1) return {};
  for (const KnobRange& r : kRanges) {
    if (static_cast<int>(r.id) != i) continue;
    const char* unit = type == KnobType::duration_ms ? " ms" : "";
    if (n < r.min) return str("at least ", r.min, unit, " is allowed");
    if (n > r.max) return str("at most ", r.max, unit, " is allowed");
    if (r.power_of_two && (n & (n - 1)) != 0) return "a power of two is required";
  }
  return {};
}

struct KnobValue {
  int64_t number = 0;
  std::string text;
  bool from_env = false;
  std::string error;  // non-empty when the environment held a value that did not parse
};

struct KnobState {
  KnobValue values[kCount];
};

const char* type_name(KnobType t) {
  switch (t) {
    case KnobType::boolean: return "bool";
    case KnobType::integer: return "int";
    case KnobType::size: return "size";
    case KnobType::string: return "string";
    case KnobType::duration_ms: return "duration_ms";
    case KnobType::auto_integer: return "int or auto";
  }
  return "?";
}

// Parses `text` as `type`; returns an empty string on success, else what was wrong.
std::string parse(KnobType type, const std::string& text, int64_t* out) {
  if (type == KnobType::string) return {};
  if (type == KnobType::boolean) {
    std::string l;
    for (char c : text) l += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (l == "1" || l == "true" || l == "yes" || l == "on") {
      *out = 1;
      return {};
    }
    if (l == "0" || l == "false" || l == "no" || l == "off") {
      *out = 0;
      return {};
    }
    return "expected a boolean (1/0, true/false, yes/no, on/off)";
  }
  if (text.empty()) return "empty value";
  if (type == KnobType::auto_integer && text == "auto") {
    *out = -1;
    return {};
  }
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || errno == ERANGE) {
    return type == KnobType::auto_integer ? "expected auto or a number" : "expected a number";
  }
  std::string suffix(end);
  int64_t mult = 1;
  if (type == KnobType::size) {
    if (suffix == "" || suffix == "B") mult = 1;
    else if (suffix == "K" || suffix == "k" || suffix == "KiB") mult = int64_t{1} << 10;
    else if (suffix == "M" || suffix == "MiB") mult = int64_t{1} << 20;
    else if (suffix == "G" || suffix == "GiB") mult = int64_t{1} << 30;
    else return "unknown size suffix '" + suffix + "' (use K, M or G)";
  } else if (type == KnobType::duration_ms) {
    if (suffix == "" || suffix == "ms") mult = 1;
    else if (suffix == "s") mult = 1000;
    else return "unknown duration suffix '" + suffix + "' (use ms or s)";
  } else if (!suffix.empty()) {
    return "trailing characters '" + suffix + "' after the number";
  }
  if (v < 0) return "negative values are not allowed";
  if (v > INT64_MAX / mult) return "value too large";
  *out = v * mult;
  return {};
}

void load(KnobState& s) {
  for (int i = 0; i < kCount; ++i) {
    const KnobDef& d = kDefs[i];
    KnobValue& v = s.values[i];
    v = KnobValue{};
    int64_t n = 0;
    std::string err = parse(d.type, d.default_text, &n);
    (void)err;  // defaults are checked by the knob unit test
    v.number = n;
    v.text = d.default_text;
    const char* env = std::getenv(d.name);
    if (env == nullptr) continue;
    std::string text(env);
    std::string problem = parse(d.type, text, &n);
    if (problem.empty()) problem = out_of_range(i, d.type, n);
    if (!problem.empty()) {
      v.error = problem;
      continue;
    }
    v.number = n;
    v.text = text;
    v.from_env = true;
  }
}

std::atomic<KnobState*> g_state{nullptr};
std::mutex g_load_mutex;

const KnobState& state() {
  KnobState* s = g_state.load(std::memory_order_acquire);
  if (s != nullptr) return *s;
  std::lock_guard<std::mutex> lock(g_load_mutex);
  s = g_state.load(std::memory_order_relaxed);
  if (s == nullptr) {
    s = new KnobState();  // lives for the process: readers hold references without locks
    load(*s);
    g_state.store(s, std::memory_order_release);
  }
  return *s;
}

}  // namespace

int64_t knob_int(KnobId id) { return state().values[static_cast<int>(id)].number; }
bool knob_bool(KnobId id) { return knob_int(id) != 0; }
const std::string& knob_string(KnobId id) { return state().values[static_cast<int>(id)].text; }
bool knob_from_environment(KnobId id) { return state().values[static_cast<int>(id)].from_env; }
const char* knob_name(KnobId id) { return kDefs[static_cast<int>(id)].name; }

void reload_knobs() {
  std::lock_guard<std::mutex> lock(g_load_mutex);
  KnobState* s = g_state.load(std::memory_order_relaxed);
  if (s == nullptr) {
    s = new KnobState();
    load(*s);
    g_state.store(s, std::memory_order_release);
  } else {
    load(*s);
  }
}

}  // namespace xport::core

namespace xport {

std::vector<KnobInfo> knob_list() {
  using namespace core;
  const KnobState& s = state();
  std::vector<KnobInfo> out;
  for (int i = 0; i < kCount; ++i) {
    const KnobDef& d = kDefs[i];
    std::string error;
    if (!s.values[i].error.empty()) {
      const char* raw = std::getenv(d.name);
      error = str("'", raw != nullptr ? raw : "", "': ", s.values[i].error);
    }
    out.push_back(KnobInfo{d.name, type_name(d.type), d.default_text, s.values[i].text,
                           s.values[i].from_env ? "environment" : "default", d.description,
                           std::move(error)});
  }
  return out;
}

Status validate_knobs() {
  using namespace core;
  const KnobState& s = state();
  for (int i = 0; i < kCount; ++i) {
    if (!s.values[i].error.empty()) {
      return error(Code::invalid_argument, kDefs[i].name, "='", std::getenv(kDefs[i].name),
                   "': ", s.values[i].error);
    }
  }
  static std::once_flag warned;
  std::call_once(warned, [] {
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
      if (std::strncmp(*e, "XPORT_", 6) != 0) continue;
      std::string name(*e, std::strcspn(*e, "="));
      bool known = false;
      for (const KnobDef& d : kDefs) known = known || name == d.name;
      if (!known) XPORT_LOG(warn, "unknown knob ", name, " in the environment is ignored");
    }
  });
  return Status::success();
}

}  // namespace xport
