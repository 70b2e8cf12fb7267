// libFuzzer target: the uint16 token-shard loader (nanoGPT train.bin/val.bin)
// and the batch sampler over whatever it returns.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "normlab/train/data.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // The input is both train.bin and val.bin of a shard directory.
  // One folder per process, removed when the fuzzer exits.
  struct Folder {
    std::string path =
        (std::filesystem::temp_directory_path() / ("normlab_fuzz_shard_" + std::to_string(getpid()))).string();
    Folder() { std::filesystem::create_directories(path); }
    ~Folder() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Folder folder;
  const std::string& dir = folder.path;
  for (const char* name : {"/train.bin", "/val.bin"}) {
    std::ofstream out(dir + name, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  const std::int64_t vocab = size > 0 ? 1 + data[0] * 16 : 1;  // vary the vocabulary with the input
  try {
    const normlab::data::TokenData td = normlab::data::load_bin_dir(dir, vocab);
    normlab::data::BatchSampler sampler(td.train, 2, 3, 7, "fuzz");
    std::int64_t idx[6], tgt[6];
    sampler.next(idx, tgt);
    for (std::int64_t t : idx)
      if (t < 0 || t >= vocab) __builtin_trap();  // the loader promised ids < vocab
  } catch (const normlab::Error&) {
  }
  return 0;
}
