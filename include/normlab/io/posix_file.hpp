#pragma once
// Whole-file reads and atomic writes (temp file, fsync, rename, fsync of the
// directory) on POSIX calls, with errors that name the path and the OS reason.
// Apart: the file system's side of safetensors I/O, nothing of the format.
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "normlab/core/error.hpp"

namespace normlab::io {

namespace detail {

inline std::string errno_string(int err) { return std::strerror(err); }

// Reads a whole regular file. Errors name the path and the OS reason.
inline std::vector<std::uint8_t> read_whole_file(const std::filesystem::path& path) {
  const std::string shown = path.string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(shown + ": cannot open file: " + errno_string(errno));
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error(shown + ": cannot stat file: " + errno_string(errno));
  if (!S_ISREG(st.st_mode)) throw Error(shown + ": not a regular file");
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(shown + ": read failed: " + errno_string(errno));
    }
    if (n == 0) break;  // file shrank while reading; validation will report truncation
    done += static_cast<std::size_t>(n);
  }
  bytes.resize(done);
  return bytes;
}

// Writes `bytes` to `path` atomically: a reader sees either the old file or
// the complete new one, never a partial write. On failure the temp file is
// removed and any previous file at `path` is untouched.
inline void write_file_atomic(const std::filesystem::path& path, std::span<const std::uint8_t> bytes) {
  namespace fs = std::filesystem;
  const std::string shown = path.string();
  fs::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());  // same directory, so rename() is atomic

  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(shown + ": cannot create temporary file '" + tmp.string() + "': " + errno_string(errno));

  // Always throws: close + remove the temp file, then report.
  auto abandon = [&](const std::string& what, int err) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw Error(shown + ": " + what + ": " + errno_string(err));
  };

  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      abandon("write failed", errno);
    }
    done += static_cast<std::size_t>(n);
  }
  // fsync before rename: otherwise a crash can leave the new name pointing
  // at an empty or partial file on some filesystems.
  if (::fsync(fd) != 0) abandon("fsync failed", errno);
  const int close_rc = ::close(fd);
  fd = -1;  // closed (even on error, per POSIX on Linux); don't close again
  if (close_rc != 0) abandon("close failed", errno);

  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    ::unlink(tmp.c_str());
    throw Error(shown + ": cannot rename temporary file into place: " + ec.message());
  }

  // fsync the directory so the rename itself survives a crash.
  fs::path dir = path.parent_path();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    throw Error(shown + ": file written, but cannot open directory to sync it: " + errno_string(errno));
  // EINVAL: the filesystem does not support syncing directories; nothing to do.
  if (::fsync(dfd) != 0 && errno != EINVAL) {
    const int err = errno;
    ::close(dfd);
    throw Error(shown + ": file written, but syncing the directory failed: " + errno_string(err));
  }
  ::close(dfd);
}

}  // namespace detail

}  // namespace normlab::io
