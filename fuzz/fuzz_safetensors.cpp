// libFuzzer target: the safetensors reader on arbitrary bytes. Any input must
// either parse (and then every tensor must read back in every supported type)
// or throw normlab::Error — never crash, overflow or read out of bounds.
#include <cstdint>
#include <vector>

#include "normlab/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto f = normlab::io::SafetensorsFile::from_bytes(std::vector<std::uint8_t>(data, data + size), "fuzz");
    for (const std::string& name : f.names()) {
      try {
        (void)f.read<double>(name);
        (void)f.read<float>(name);
      } catch (const normlab::Error&) {
        // conversions that would lose data are refused, by design
      }
    }
  } catch (const normlab::Error&) {
  }
  return 0;
}
