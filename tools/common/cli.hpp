// Command-line conventions every xport-* tool shares (CLI11): an input error is one readable line
// and exit 2; numbers and words are checked with their range or words named, in words, and the
// help shows placeholders (SECONDS, N) and defaults, never the parser's notation.
#pragma once

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace xport::tool {

namespace detail {
inline std::string number_text(double v) {
  char b[32];
  std::snprintf(b, sizeof b, v == std::floor(v) && std::fabs(v) < 1e15 ? "%.0f" : "%g", v);
  return b;
}
}  // namespace detail

// A number from `min` to `max` (`integer`: whole numbers only). The error says what was given
// and what is allowed ("'abc' is not a number: seconds from 1 to 600").
inline CLI::Validator number_in(double min, double max, std::string_view unit = "",
                                bool integer = false) {
  std::string what =
      unit.empty() ? std::string(integer ? "a whole number" : "a number") : std::string(unit);
  what += " from " + detail::number_text(min) + " to " + detail::number_text(max);
  return CLI::Validator(
      [what, min, max, integer](std::string& text) -> std::string {
        const char* s = text.c_str();
        char* end = nullptr;
        const double v = std::strtod(s, &end);
        if (text.empty() || end == s || *end != '\0' || !std::isfinite(v)) {
          return "'" + text + "' is not a number: " + what;
        }
        if (integer && v != std::floor(v)) return "'" + text + "' is not a whole number: " + what;
        if (v < min || v > max) return "'" + text + "' is out of range: " + what;
        return "";
      },
      "", "number_in");
}

// A number above 0, of `unit` ("GB/s").
inline CLI::Validator positive(std::string_view unit) {
  const std::string what = "a number above 0 (" + std::string(unit) + ")";
  return CLI::Validator(
      [what](std::string& text) -> std::string {
        const char* s = text.c_str();
        char* end = nullptr;
        const double v = std::strtod(s, &end);
        if (text.empty() || end == s || *end != '\0' || !std::isfinite(v)) {
          return "'" + text + "' is not a number: " + what;
        }
        return v > 0 ? "" : "'" + text + "' is out of range: " + what;
      },
      "", "positive");
}

// One of `words`. The error names them ("'gpu': expected host or cuda").
inline CLI::Validator one_of(std::vector<std::string> words) {
  std::string list;
  for (size_t i = 0; i < words.size(); ++i) {
    list += i == 0 ? "" : i + 1 == words.size() ? " or " : ", ";
    list += words[i];
  }
  return CLI::Validator(
      [words, list](std::string& text) -> std::string {
        for (const auto& w : words) {
          if (w == text) return "";
        }
        return "'" + text + "': expected " + list;
      },
      "", "one_of");
}

// The help's layout: wide enough for the placeholders, descriptions beside them.
inline void plain_help(CLI::App& app, size_t column = 30) {
  app.get_formatter()->column_width(column);
  app.get_formatter()->label("REQUIRED", "");
}

// What a tool does with CLI11's ParseError: --help and --version print and exit 0; anything
// else is one line on stderr, "tool: what was wrong", and exit 2.
inline int usage_exit(CLI::App& app, const CLI::ParseError& e, std::string_view tool) {
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
  std::string msg = e.what();
  const std::string name = e.get_name();
  // (ExtrasError carries the app's name as its error name: matched by its text.)
  if (msg.rfind("The following argument", 0) == 0) {
    const size_t colon = msg.find(": ");
    std::string args, rest = colon == std::string::npos ? msg : msg.substr(colon + 2);
    for (size_t end = rest.size(); end > 0;) {  // CLI11 lists them last first
      const size_t sp = rest.rfind(' ', end - 1);
      const size_t from = sp == std::string::npos ? 0 : sp + 1;
      args += (args.empty() ? "" : " ") + rest.substr(from, end - from);
      end = sp == std::string::npos ? 0 : sp;
    }
    msg = "unknown option or argument: " + args;
  } else if (name == "ArgumentMismatch") {
    const size_t colon = msg.find(':');
    const size_t to = msg.find(" arguments to ");
    std::string opt = colon != std::string::npos && msg.rfind("--", 0) == 0 ? msg.substr(0, colon)
                      : to != std::string::npos ? msg.substr(to + 14, msg.find(',', to) - to - 14)
                                                : "";
    msg = opt.empty() ? msg : opt + " needs a value";
  }
  std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(tool.size()), tool.data(), msg.c_str());
  return 2;
}

}  // namespace xport::tool
