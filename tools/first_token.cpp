#include "first_token.h"

#include <fcntl.h>
#include <poll.h>
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
#include <string_view>
#include <system_error>
#include <vector>

#include "core/elapsed.h"

namespace gearbox::cli {
namespace {

std::string errno_text(int e) { return std::error_code(e, std::generic_category()).message(); }

// The last `most` bytes of the child's stderr.
std::string tail_of(const std::vector<ChildLine>& lines, size_t most) {
  std::string text;
  for (auto it = lines.rbegin(); it != lines.rend() && text.size() < most; ++it) text = it->text + "\n" + text;
  return text.size() > most ? text.substr(text.size() - most) : text;
}

// The environment for the child: this process's, with `env`'s entries in place of those of
// the same name.
std::vector<std::string> child_environment(const std::vector<std::string>& env) {
  std::vector<std::string> out(env);
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    const bool replaced = std::any_of(env.begin(), env.end(), [&](const std::string& mine) {
      return mine.size() > name.size() && mine.compare(0, name.size(), name) == 0 && mine[name.size()] == '=';
    });
    if (!replaced) out.emplace_back(entry);
  }
  return out;
}

}  // namespace

Result<std::string> own_executable() {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return internal_error("cannot find this executable (/proc/self/exe): " + error.message());
  return self.string();
}

Result<ChildTiming> time_child(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  if (argv.empty()) return internal_error("time_child: no program to run");
  int out[2];
  int err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return internal_error("cannot make a pipe: " + errno_text(errno));
  if (pipe2(err, O_CLOEXEC) != 0) {
    const std::string why = errno_text(errno);
    close(out[0]);
    close(out[1]);
    return internal_error("cannot make a pipe: " + why);
  }
  // dup2 onto 1 and 2 clears close-on-exec there; the originals close at the exec.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const std::vector<std::string> environment = child_environment(env);
  std::vector<char*> envp;
  envp.reserve(environment.size() + 1);
  for (const std::string& e : environment) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t pid = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const int spawned = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  close(err[1]);
  if (spawned != 0) {
    close(out[0]);
    close(err[0]);
    return internal_error("cannot start " + argv[0] + ": " + errno_text(spawned));
  }
  // Both pipes read as their data arrives (a child blocked on a full stderr would never
  // print its token); each stderr line is stamped when its newline arrives. Data that one
  // wake-up finds on both pipes gets one stamp, so a line the child wrote to stderr before
  // its token is never stamped after it.
  ChildTiming timing;
  bool line = false;
  std::string partial;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  char buffer[4096];
  while (fds[0].fd >= 0 || fds[1].fd >= 0) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    const double now = internal::ms_since(t0);
    for (int f = 0; f < 2; ++f) {
      if (fds[f].fd < 0 || fds[f].revents == 0) continue;
      const ssize_t n = read(fds[f].fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        close(fds[f].fd);
        fds[f].fd = -1;
        continue;
      }
      if (f == 0) {
        if (!line && std::memchr(buffer, '\n', static_cast<size_t>(n)) != nullptr) {
          timing.first_line_ms = now;
          line = true;
        }
        continue;
      }
      partial.append(buffer, static_cast<size_t>(n));
      for (size_t end = partial.find('\n'); end != std::string::npos; end = partial.find('\n')) {
        timing.messages.push_back({now, partial.substr(0, end)});
        partial.erase(0, end + 1);
      }
    }
  }
  if (!partial.empty()) timing.messages.push_back({internal::ms_since(t0), partial});
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  timing.exit_ms = internal::ms_since(t0);
  const bool exited = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!exited || !line) {
    const std::string how = !WIFEXITED(status) ? "was killed by signal " + std::to_string(WTERMSIG(status))
                            : !exited          ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                               : "exited without printing a line";
    return internal_error(argv[0] + " " + (argv.size() > 1 ? argv[1] : "") + " " + how + ": " +
                          tail_of(timing.messages, 2000));
  }
  return timing;
}

}  // namespace gearbox::cli
