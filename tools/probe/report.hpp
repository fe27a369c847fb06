// xport-probe's checklist: one Check per item (PASS / WARN / FAIL / SKIP, a one-line reason,
// machine-readable details) and its two renderings, the table and the JSON of docs/tools.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace probe {

enum class Verdict { pass, warn, fail, skip };
std::string_view to_string(Verdict v);  // "PASS", "WARN", "FAIL", "SKIP"

std::string json_string(std::string_view s);  // quoted and escaped
std::string json_array(const std::vector<std::string>& raw_items);
std::string json_strings(const std::vector<std::string>& items);

// An ordered JSON object built field by field (values are rendered as they are added).
class JsonObject {
 public:
  JsonObject& str(std::string_view key, std::string_view value);
  JsonObject& num(std::string_view key, double value);
  JsonObject& integer(std::string_view key, int64_t value);
  JsonObject& boolean(std::string_view key, bool value);
  JsonObject& raw(std::string_view key, std::string json);  // a nested object or array
  std::string render() const;
  bool empty() const { return fields_.empty(); }

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

struct Check {
  std::string name;  // stable identifier: "libfabric", "knobs", "loopback", ...
  std::string rail;  // the rail of per-rail checks ("link", "loopback"); "" for node checks
  Verdict status = Verdict::skip;
  std::string reason;  // one line
  JsonObject details;
  double seconds = 0;
};

struct KnobRow {
  std::string name, value, source, error;
};

struct Report {
  std::string version;
  std::string host;
  double budget_s = 0;
  double elapsed_s = 0;
  std::vector<Check> checks;
  std::vector<KnobRow> knobs;  // every knob in effect (the JSON always, the table with --knobs)
  bool show_knobs = false;     // --knobs: the table lists every knob under the checks
  int exit_status() const;     // 1 when any check FAILs, else 0
};

std::string to_json(const Report& r);
// For a terminal: every line at most kTableWidth characters, a long reason wrapped under its
// REASON column.
inline constexpr size_t kTableWidth = 100;
std::string to_table(const Report& r);

// "8.1 MiB", "64 KiB", "512 B"
std::string human_bytes(uint64_t bytes);

}  // namespace probe
