#pragma once
// normlab::Error: the one exception type the library throws for bad input.
// Messages always name the thing at fault (file, tensor, flag, shape) so a user
// can act on them without a debugger.
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace normlab {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "[2, 16, 67]" — used in every shape-mismatch message.
inline std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

}  // namespace normlab
