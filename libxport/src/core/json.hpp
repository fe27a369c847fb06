// The one JSON writer of libxport and its tools (topology's JSON, the tools' reports, the
// exporter's charts): members appended to the caller's string, commas and escaping done here.
// Header-only and standard-library-only, so the tools (thin mains) include it too.
#pragma once

#include <charconv>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace xport::core {

// Numbers say how they are printed: scripts and docs read these texts, so each field keeps its
// own precision. A number that is not finite is written null (JSON has no inf or nan).
struct JsonFixed {  // printf("%.*f", decimals, v)
  double v;
  int decimals;
};
struct JsonGeneral {  // printf("%.6g", v), as iostreams print a double by default
  double v;
};
struct JsonTrimmed {  // JsonFixed without trailing zeros (and without the point if none is left)
  double v;
  int decimals;
};
struct JsonNull {};
inline constexpr JsonNull kJsonNull{};

// Length of the valid UTF-8 sequence at s[i], or 0.
inline size_t json_utf8_length(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  const size_t n = c < 0x80           ? 1
                   : (c >> 5) == 0x6  ? 2
                   : (c >> 4) == 0xe  ? 3
                   : (c >> 3) == 0x1e ? 4
                                      : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return 0;
  }
  if (n == 2 && c < 0xc2) return 0;  // overlong
  return n;
}

// Appends `s` as a JSON string: quotes and backslashes escaped, \n and \t as themselves, other
// control characters as \u00XX, and bytes that are not valid UTF-8 (hostile input: XML files,
// provider texts) as \ufffd, so that the output always parses.
inline void json_quote(std::string& out, std::string_view s) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
    } else if (c == '\n') {
      out += "\\n";
      ++i;
    } else if (c == '\t') {
      out += "\\t";
      ++i;
    } else if (c < 0x20) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
      ++i;
    } else if (const size_t n = json_utf8_length(s, i); n > 0) {
      out.append(s.data() + i, n);
      i += n;
    } else {
      out += "\\ufffd";
      ++i;
    }
  }
  out += '"';
}

inline std::string json_string(std::string_view s) {
  std::string out;
  json_quote(out, s);
  return out;
}

// Writes one JSON value (usually an object) into `out`, member by member. Nothing is allocated
// but the growth of `out`: the nesting is kept in two bit sets, numbers in stack buffers.
// Containers opened at a depth below `line_depth` put each member on a line of its own, indented
// two spaces per level (an empty one stays "[]" / "{}"); deeper ones are compact.
// Misuse (a key outside an object, a value without its key, an unmatched end, nesting past
// kMaxDepth) clears ok() and is otherwise written as asked.
class JsonWriter {
 public:
  static constexpr int kMaxDepth = 32;

  explicit JsonWriter(std::string& out, int line_depth = 0) : out_(out), line_depth_(line_depth) {}

  JsonWriter& begin_object() { return open('{', false); }
  JsonWriter& begin_array() { return open('[', true); }
  JsonWriter& end_object() { return close('}', false); }
  JsonWriter& end_array() { return close(']', true); }
  JsonWriter& begin_object(std::string_view k) { return key(k).begin_object(); }
  JsonWriter& begin_array(std::string_view k) { return key(k).begin_array(); }

  JsonWriter& key(std::string_view k) {
    if (depth_ == 0 || in_array_bit() || after_key_) ok_ = false;
    after_key_ = false;
    separate();
    json_quote(out_, k);
    out_ += ':';
    after_key_ = true;
    return *this;
  }

  JsonWriter& value(std::string_view s) {
    before_value();
    json_quote(out_, s);
    return *this;
  }
  JsonWriter& value(const char* s) { return value(std::string_view(s)); }
  JsonWriter& value(const std::string& s) { return value(std::string_view(s)); }
  JsonWriter& value(bool b) { return literal(b ? "true" : "false"); }
  JsonWriter& value(JsonNull) { return literal("null"); }
  template <std::integral T>  // value(bool) above wins for a bool
  JsonWriter& value(T v) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return literal(std::string_view(buf, static_cast<size_t>(r.ptr - buf)));
  }
  JsonWriter& value(JsonFixed n) {
    if (!std::isfinite(n.v)) return literal("null");
    char buf[kFixedChars];
    return literal(std::string_view(buf, fixed(buf, n.decimals, n.v)));
  }
  JsonWriter& value(JsonTrimmed n) {
    if (!std::isfinite(n.v)) return literal("null");
    char buf[kFixedChars];
    size_t len = fixed(buf, n.decimals, n.v);
    if (std::string_view(buf, len).find('.') != std::string_view::npos) {
      while (len > 0 && buf[len - 1] == '0') --len;
      if (len > 0 && buf[len - 1] == '.') --len;
    }
    return literal(std::string_view(buf, len));
  }
  JsonWriter& value(JsonGeneral n) {
    if (!std::isfinite(n.v)) return literal("null");
    char buf[32];  // "-1.23457e+308"
    return literal(
        std::string_view(buf, length(std::snprintf(buf, sizeof buf, "%.6g", n.v), sizeof buf)));
  }
  JsonWriter& value(double) = delete;  // say how: JsonFixed, JsonGeneral or JsonTrimmed
  // Text that is already JSON (a member rendered elsewhere), written as it is.
  JsonWriter& raw(std::string_view json) { return literal(json); }

  // key(k).value(v) in one call.
  template <typename T>
  JsonWriter& field(std::string_view k, const T& v) {
    key(k);
    return value(v);
  }
  // field(k, v) when `present`, else "k":null (a figure not measured, a value unknown).
  template <typename T>
  JsonWriter& field_or_null(std::string_view k, bool present, const T& v) {
    key(k);
    return present ? value(v) : value(kJsonNull);
  }
  JsonWriter& raw_field(std::string_view k, std::string_view json) {
    key(k);
    return raw(json);
  }

  int depth() const { return depth_; }
  // Every container closed and no misuse seen.
  bool ok() const { return ok_ && depth_ == 0 && !after_key_; }

 private:
  // %.17f of the largest double: a sign, 309 digits, the point and 17 decimals.
  static constexpr size_t kFixedChars = 336;

  // snprintf's length, bounded by the buffer (the buffers hold every finite double).
  static size_t length(int n, size_t size) {
    if (n < 0) return 0;
    return static_cast<size_t>(n) < size ? static_cast<size_t>(n) : size - 1;
  }

  static size_t fixed(char (&buf)[kFixedChars], int decimals, double v) {
    decimals = decimals < 0 ? 0 : decimals > 17 ? 17 : decimals;
    return length(std::snprintf(buf, sizeof buf, "%.*f", decimals, v), sizeof buf);
  }

  bool in_array_bit() const { return depth_ > 0 && ((is_array_ >> (depth_ - 1)) & 1u) != 0; }

  // Before a member: the comma after the previous one, and the member's line when this
  // container is written one member per line.
  void separate() {
    if (depth_ == 0) {
      if (wrote_top_) ok_ = false;  // a second value at the top
      wrote_top_ = true;
      return;
    }
    const uint32_t bit = 1u << (depth_ - 1);
    if (has_members_ & bit) out_ += ',';
    has_members_ |= bit;
    if (depth_ - 1 < line_depth_) {
      out_ += '\n';
      out_.append(static_cast<size_t>(2 * depth_), ' ');
    }
  }

  void before_value() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (depth_ > 0 && !in_array_bit()) ok_ = false;  // an object's member needs its key
    separate();
  }

  JsonWriter& literal(std::string_view text) {
    before_value();
    out_ += text;
    return *this;
  }

  JsonWriter& open(char c, bool array) {
    before_value();
    out_ += c;
    if (depth_ >= kMaxDepth) {
      ok_ = false;
      ++overflow_;
      return *this;
    }
    const uint32_t bit = 1u << depth_;
    has_members_ &= ~bit;
    is_array_ = array ? (is_array_ | bit) : (is_array_ & ~bit);
    ++depth_;
    return *this;
  }

  JsonWriter& close(char c, bool array) {
    if (after_key_) {  // a key without its value
      ok_ = false;
      after_key_ = false;
    }
    if (overflow_ > 0) {
      --overflow_;
      out_ += c;
      return *this;
    }
    if (depth_ == 0 || in_array_bit() != array) {
      ok_ = false;
      if (depth_ == 0) {
        out_ += c;
        return *this;
      }
    }
    const uint32_t bit = 1u << (depth_ - 1);
    --depth_;
    if ((has_members_ & bit) && depth_ < line_depth_) {
      out_ += '\n';
      out_.append(static_cast<size_t>(2 * depth_), ' ');
    }
    out_ += c;
    return *this;
  }

  std::string& out_;
  int line_depth_ = 0;
  int depth_ = 0;
  int overflow_ = 0;          // containers opened past kMaxDepth, not tracked
  uint32_t has_members_ = 0;  // bit d: the container at depth d has a member already
  uint32_t is_array_ = 0;     // bit d: the container at depth d is an array
  bool after_key_ = false;    // a key was written, its value is next
  bool wrote_top_ = false;
  bool ok_ = true;
};

}  // namespace xport::core
