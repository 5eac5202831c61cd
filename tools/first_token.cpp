#include "first_token.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace gearbox::cli {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string errno_text(int e) { return std::error_code(e, std::generic_category()).message(); }

// The last `most` bytes of the file behind `f`.
std::string tail_of(std::FILE* f, long most) {
  if (std::fseek(f, 0, SEEK_END) != 0) return {};
  const long size = std::ftell(f);
  if (size <= 0 || std::fseek(f, std::max(0L, size - most), SEEK_SET) != 0) return {};
  std::string text(static_cast<size_t>(std::min(size, most)), '\0');
  text.resize(std::fread(text.data(), 1, text.size(), f));
  return text;
}

}  // namespace

Result<std::string> own_executable() {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return internal_error("cannot find this executable (/proc/self/exe): " + error.message());
  return self.string();
}

Result<ChildTiming> time_child(const std::vector<std::string>& argv) {
  if (argv.empty()) return internal_error("time_child: no program to run");
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return internal_error("cannot make a pipe: " + errno_text(errno));
  std::FILE* err = std::tmpfile();
  if (err == nullptr || fcntl(fileno(err), F_SETFD, FD_CLOEXEC) != 0) {
    const std::string why = errno_text(errno);
    if (err != nullptr) std::fclose(err);
    close(out[0]);
    close(out[1]);
    return internal_error("cannot make a temporary file for a child's messages: " + why);
  }
  // dup2 onto 1 and 2 clears close-on-exec there; the originals close at the exec.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fileno(err), STDERR_FILENO);
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const int spawned = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  if (spawned != 0) {
    close(out[0]);
    std::fclose(err);
    return internal_error("cannot start " + argv[0] + ": " + errno_text(spawned));
  }
  ChildTiming timing;
  bool line = false;
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(out[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (!line && std::memchr(buffer, '\n', static_cast<size_t>(n)) != nullptr) {
      timing.first_line_ms = ms_since(t0);
      line = true;
    }
  }
  close(out[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  timing.exit_ms = ms_since(t0);
  const std::string messages = tail_of(err, 2000);
  std::fclose(err);
  const bool exited = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!exited || !line) {
    const std::string how = !WIFEXITED(status) ? "was killed by signal " + std::to_string(WTERMSIG(status))
                            : !exited          ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                               : "exited without printing a line";
    return internal_error(argv[0] + " " + (argv.size() > 1 ? argv[1] : "") + " " + how + ": " + messages);
  }
  return timing;
}

}  // namespace gearbox::cli
