#pragma once
// Running another program without a shell: arguments go to execv as they are,
// so a path with a quote, a space or a '$' in it is just a path (std::system
// with hand-quoted strings broke on the first quote). POSIX only.
#include <sys/types.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "normlab/core/error.hpp"

namespace normlab {

inline bool is_executable_file(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

// First executable `name` on PATH, or empty.
inline std::filesystem::path find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (!path) return {};
  const std::string dirs = path;
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = dirs.substr(start, end - start);
    const std::filesystem::path cand = std::filesystem::path(dir.empty() ? "." : dir) / name;
    if (is_executable_file(cand)) return cand;
    start = end + 1;
  }
  return {};
}

// Starts exe with args, in `cwd` when given, with stdout and stderr appended to
// `log` when given (else inherited), and each {from, to} of `fds` open in the
// child as descriptor `to` (e.g. a pipe's end as 3). Returns the child's pid;
// wait_program() collects it.
inline pid_t start_program(const std::filesystem::path& exe, const std::vector<std::string>& args,
                           const std::filesystem::path& cwd = {}, const std::filesystem::path& log = {},
                           const std::vector<std::pair<int, int>>& fds = {}) {
  std::vector<std::string> all{exe.string()};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<int> moved(fds.size(), -1);  // filled in the child; allocated here (no malloc after fork)
  std::fflush(stdout);
  std::fflush(stderr);
  std::cout.flush();
  std::cerr.flush();
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {  // only async-signal-safe calls from here on
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) ::_exit(127);
    if (!log.empty()) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd < 0) ::_exit(127);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
    }
    // Every source out of the way first, so one target cannot overwrite a later
    // source; dup2 onto the target clears close-on-exec.
    for (std::size_t i = 0; i < fds.size(); ++i)
      if ((moved[i] = ::fcntl(fds[i].first, F_DUPFD_CLOEXEC, 64)) < 0) ::_exit(127);
    for (std::size_t i = 0; i < fds.size(); ++i)
      if (::dup2(moved[i], fds[i].second) < 0) ::_exit(127);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

// Waits for a child of start_program(): its exit status, 128 + the signal
// number when it was killed, 127 when it could not be started.
inline int wait_program(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw Error(std::string("waitpid failed: ") + std::strerror(errno));
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// Runs exe with args and waits for it (start_program's arguments): the exit status.
inline int run_program(const std::filesystem::path& exe, const std::vector<std::string>& args,
                       const std::filesystem::path& cwd = {}, const std::filesystem::path& log = {}) {
  return wait_program(start_program(exe, args, cwd, log));
}

}  // namespace normlab
