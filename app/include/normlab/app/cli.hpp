#pragma once
// Validators for the tools' command lines (CLI11): every numeric flag is checked
// at parse time with a sentence a person reads at a glance ("--d: must be a
// positive integer, got 0"), non-finite reals are refused, and nothing prints a
// 309-digit bound or a raw exception name. The tools exit 2 on any of these.
#include <CLI/CLI.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <system_error>

namespace normlab::cli {

namespace detail {
inline std::string shown(const std::string& s) { return s.size() > 20 ? s.substr(0, 20) + "..." : s; }
inline std::string num(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", x);
  return b;
}
inline bool parse_int(const std::string& s, std::int64_t& x) {
  const char* b = s.data();
  if (!s.empty() && s[0] == '+') ++b;
  const auto r = std::from_chars(b, s.data() + s.size(), x);
  return !s.empty() && r.ec == std::errc() && r.ptr == s.data() + s.size();
}
inline bool parse_real(const std::string& s, double& x) {
  const char* b = s.data();
  if (!s.empty() && s[0] == '+') ++b;
  const auto r = std::from_chars(b, s.data() + s.size(), x);
  return !s.empty() && r.ec == std::errc() && r.ptr == s.data() + s.size();
}
}  // namespace detail

// An integer in [lo, hi]; the message says "positive" / "non-negative" when that is the rule.
inline CLI::Validator integer(std::int64_t lo, std::int64_t hi = std::numeric_limits<std::int64_t>::max()) {
  std::string rule;
  if (hi == std::numeric_limits<std::int64_t>::max())
    rule = lo == 1 ? "a positive integer" : lo == 0 ? "a non-negative integer" : "an integer >= " + std::to_string(lo);
  else
    rule = "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, rule](std::string& s) -> std::string {
        std::int64_t x = 0;
        if (!detail::parse_int(s, x) || x < lo || x > hi) return "must be " + rule + ", got " + detail::shown(s);
        return {};
      },
      rule.substr(rule.find(' ') + 1));
}
inline CLI::Validator positive_integer() { return integer(1); }
inline CLI::Validator non_negative_integer() { return integer(0); }

// A finite real with x > lo (open) or x >= lo (closed), and x <= hi.
inline CLI::Validator real(double lo, bool lo_open, double hi = std::numeric_limits<double>::infinity()) {
  std::string rule = lo == 0 ? (lo_open ? "a positive finite number" : "a non-negative finite number")
                             : std::string("a finite number ") + (lo_open ? "> " : ">= ") + detail::num(lo);
  if (std::isfinite(hi)) rule += " at most " + detail::num(hi);
  return CLI::Validator(
      [lo, lo_open, hi, rule](std::string& s) -> std::string {
        double x = 0;
        if (!detail::parse_real(s, x) || !std::isfinite(x) || (lo_open ? !(x > lo) : !(x >= lo)) || x > hi)
          return "must be " + rule + ", got " + detail::shown(s);
        return {};
      },
      rule.substr(rule.find(' ') + 1));
}
inline CLI::Validator positive_real() { return real(0, true); }
inline CLI::Validator non_negative_real() { return real(0, false); }

// A byte count: a number with an optional K, M, G or T suffix (powers of 1024), e.g. 512M, 8G.
inline bool parse_bytes(const std::string& s, double& bytes) {
  if (s.empty()) return false;
  double mult = 1;
  std::string num = s;
  switch (s.back()) {
    case 'K': case 'k': mult = 1024.0; break;
    case 'M': case 'm': mult = 1024.0 * 1024; break;
    case 'G': case 'g': mult = 1024.0 * 1024 * 1024; break;
    case 'T': case 't': mult = 1024.0 * 1024 * 1024 * 1024; break;
    default: break;
  }
  if (mult > 1) num.pop_back();
  double x = 0;
  if (!detail::parse_real(num, x) || !std::isfinite(x) || !(x > 0)) return false;
  bytes = x * mult;
  return true;
}
inline CLI::Validator byte_size() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        double b = 0;
        if (!parse_bytes(s, b)) return "must be a positive size such as 512M or 8G, got " + detail::shown(s);
        return {};
      },
      "SIZE");
}

// Parses a command line the way every normlab tool does: nullopt to go on; else
// the exit code to return now, 0 after --help, 2 for any bad flag (CLI11 prints
// the message).
inline std::optional<int> parse(CLI::App& app, int argc, const char* const* argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // 0 for the help requests
    return rc == 0 ? 0 : 2;
  }
  return std::nullopt;
}

}  // namespace normlab::cli
