#pragma once
// A fresh folder under the system's temp dir (its name: the prefix, this
// process's id and a random number), removed with everything in it when the
// object ends, so that no test leaves anything behind.
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>
#include <system_error>

namespace normlab::test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix) {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() /
           (prefix + std::to_string(::getpid()) + "_" + std::to_string(rd()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace normlab::test
