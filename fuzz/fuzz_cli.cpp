// libFuzzer target: the train-<variant> command-line parser. The input is split
// at NUL bytes into argv; parsing must end in options, --help, or exit code 2.
#include <cstdint>
#include <string>
#include <vector>

#include "normlab/app/driver.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args = {"train-fuzz"};
  std::string cur;
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  if (!cur.empty()) args.push_back(cur);
  if (args.size() > 64) return 0;
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  normlab::TrainCommand cmd;
  const auto rc = normlab::parse_train_command(int(argv.size()), argv.data(), "fuzz", "fuzzing", cmd);
  if (rc && *rc != 0 && *rc != 2) __builtin_trap();
  return 0;
}
