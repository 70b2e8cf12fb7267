#pragma once
// Shortest decimal text that reads back to the same double: how checkpoints,
// summaries and run headers record real numbers, so a comparison of two runs'
// settings is exact.
#include <charconv>
#include <string>

namespace normlab {

inline std::string exact_string(double x) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

}  // namespace normlab
