// libFuzzer target: the byte tokenizer round trip and the Brown-corpus tag stripper.
#include <cstdint>
#include <string_view>

#include "normlab/train/data.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto tokens = normlab::data::encode_bytes(text);
  if (normlab::data::decode_bytes(tokens) != text) __builtin_trap();  // must round-trip exactly
  const std::string plain = normlab::data::brown_plain_text(text);
  (void)normlab::data::encode_bytes(plain);
  return 0;
}
