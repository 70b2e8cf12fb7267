// libFuzzer target: loading a checkpoint (parameters + optimizer state) into
// a small nGPT and a small GPT. Bad input must be a normlab::Error.
#include <cstdint>
#include <vector>

#include "normlab/train/checkpoint.hpp"

namespace {
normlab::ModelConfig config() {
  normlab::ModelConfig c;
  c.vocab_size = 16;
  c.n_embd = 8;
  c.n_head = 2;
  c.n_layer = 1;
  return c;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static normlab::NGPT<float> ngpt(config(), 1, 4);
  static normlab::GPT<float> gpt(config(), 1, 4);
  static normlab::AdamW<float> opt_n(ngpt.params(), {}), opt_g(gpt.params(), {});
  try {
    const auto f = normlab::io::SafetensorsFile::from_bytes(std::vector<std::uint8_t>(data, data + size), "fuzz");
    try {
      normlab::load_checkpoint(f, ngpt, &opt_n);
    } catch (const normlab::Error&) {
    }
    normlab::load_checkpoint(f, gpt, &opt_g);
  } catch (const normlab::Error&) {  // metadata is parsed without std::stoll: nothing else may escape
  }
  return 0;
}
