// libFuzzer target: the uint16 token-shard loader (nanoGPT train.bin/val.bin)
// and the batch sampler over whatever it returns.
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "normlab/train/data.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = "/tmp/normlab_fuzz_shard_" + std::to_string(getpid()) + ".bin";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  const std::int64_t vocab = size > 0 ? 1 + data[0] * 16 : 1;  // vary the vocabulary with the input
  try {
    const auto tokens = normlab::data::read_token_bin(path, vocab);
    normlab::data::BatchSampler sampler(tokens, 2, 3, 7, "fuzz");
    std::int64_t idx[6], tgt[6];
    sampler.next(idx, tgt);
    for (std::int64_t t : idx)
      if (t < 0 || t >= vocab) __builtin_trap();  // the loader promised ids < vocab
  } catch (const normlab::Error&) {
  }
  return 0;
}
