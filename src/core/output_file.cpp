#include "core/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>

#include "core/check.h"
#include "core/input_file.h"

namespace gearbox {
namespace {

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string parent_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// An existing destination gearbox may replace: a regular file that is no input. Sets
// `mode` to its permission bits (or leaves it when there is no file). `exists` says
// whether there is one.
Status check_destination(const std::string& path, std::string_view what, bool refuse_inputs, mode_t& mode,
                         bool& exists) {
  struct stat st {};
  exists = false;
  if (::lstat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return {};
    return failed_precondition("cannot write the " + std::string(what) + " " + quoted(path) + ": " +
                               std::strerror(err));
  }
  if (S_ISLNK(st.st_mode)) {
    return failed_precondition("the " + std::string(what) + " " + quoted(path) +
                               " is a symbolic link; gearbox does not replace one (give the path it points to)");
  }
  if (!S_ISREG(st.st_mode)) {
    return failed_precondition("the " + std::string(what) + " " + quoted(path) + " is " + file_type_name(st.st_mode) +
                               ", not a file gearbox may replace");
  }
  if (refuse_inputs && opened_as_input(st.st_dev, st.st_ino)) {
    return invalid_argument("the " + std::string(what) + " " + quoted(path) +
                            " is a file this command reads; write it somewhere else");
  }
  exists = true;
  mode = st.st_mode & 07777;
  return {};
}

Status check_directory(const std::string& path, std::string_view what) {
  const std::string dir = parent_of(path);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) {
      return not_found("cannot write the " + std::string(what) + " " + quoted(path) + ": the directory " + quoted(dir) +
                       " does not exist");
    }
    return failed_precondition("cannot write the " + std::string(what) + " " + quoted(path) + ": " + quoted(dir) +
                               ": " + std::strerror(err));
  }
  if (!S_ISDIR(st.st_mode)) {
    return failed_precondition("cannot write the " + std::string(what) + " " + quoted(path) + ": " + quoted(dir) +
                               " is not a directory");
  }
  return {};
}

// Temporaries a signal handler removes: fixed slots of fixed size, so the handler reads
// them without allocating or locking (unlink and raise are async-signal-safe).
constexpr size_t kSlots = 8;
constexpr size_t kPathBytes = 4096;
struct Slot {
  std::atomic<bool> used{false};
  std::array<char, kPathBytes> path{};
};
std::array<Slot, kSlots> g_slots;

std::mutex g_handlers_mutex;
int g_handler_users = 0;
struct sigaction g_old_int {};
struct sigaction g_old_term {};

extern "C" void remove_temporaries_and_reraise(int sig) {
  for (Slot& s : g_slots) {
    if (s.used.load(std::memory_order_acquire)) ::unlink(s.path.data());
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);
}

// Registers `tmp` for removal on SIGINT/SIGTERM while it lives; installs the handler for
// the first registration and restores the previous handlers after the last.
class TemporaryGuard {
 public:
  explicit TemporaryGuard(const std::string& tmp) {
    if (tmp.size() >= kPathBytes) return;
    {
      const std::lock_guard lock(g_handlers_mutex);
      if (g_handler_users++ == 0) {
        struct sigaction sa {};
        sa.sa_handler = remove_temporaries_and_reraise;
        sigemptyset(&sa.sa_mask);
        ::sigaction(SIGINT, &sa, &g_old_int);
        ::sigaction(SIGTERM, &sa, &g_old_term);
      }
      handler_ = true;
    }
    for (size_t i = 0; i < kSlots; ++i) {
      // A slot is claimed by whoever flips `used`: its path is written before the flag is
      // published to the handler, so claim with a separate flag first.
      bool expected = false;
      if (claimed_[i].compare_exchange_strong(expected, true)) {
        std::memcpy(g_slots[i].path.data(), tmp.c_str(), tmp.size() + 1);
        g_slots[i].used.store(true, std::memory_order_release);
        slot_ = static_cast<int>(i);
        return;
      }
    }
  }
  TemporaryGuard(const TemporaryGuard&) = delete;
  TemporaryGuard& operator=(const TemporaryGuard&) = delete;
  ~TemporaryGuard() {
    if (slot_ >= 0) {
      g_slots[static_cast<size_t>(slot_)].used.store(false, std::memory_order_release);
      claimed_[static_cast<size_t>(slot_)].store(false);
    }
    if (handler_) {
      const std::lock_guard lock(g_handlers_mutex);
      if (--g_handler_users == 0) {
        ::sigaction(SIGINT, &g_old_int, nullptr);
        ::sigaction(SIGTERM, &g_old_term, nullptr);
      }
    }
  }

 private:
  static std::array<std::atomic<bool>, kSlots> claimed_;
  int slot_ = -1;
  bool handler_ = false;
};
std::array<std::atomic<bool>, kSlots> TemporaryGuard::claimed_{};

bool write_all(int fd, std::span<const uint8_t> bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes = bytes.subspan(static_cast<size_t>(n));
  }
  return true;
}

std::string temporary_name(const std::string& path) {
  // Unique per process and call, so concurrent writers of one path never share one.
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

}  // namespace

Status check_output_path(const std::string& path, const std::vector<std::string>& inputs, std::string_view what) {
  if (path.empty()) return invalid_argument("the " + std::string(what) + " path is empty");
  mode_t mode = 0;
  bool exists = false;
  GEARBOX_RETURN_IF_ERROR(check_destination(path, what, /*refuse_inputs=*/true, mode, exists));
  if (exists) {
    struct stat out {};
    if (::stat(path.c_str(), &out) == 0) {
      for (const std::string& input : inputs) {
        struct stat in {};
        if (input.empty() || ::stat(input.c_str(), &in) != 0) continue;
        if (in.st_dev == out.st_dev && in.st_ino == out.st_ino) {
          return invalid_argument("the " + std::string(what) + " " + quoted(path) + " is the input " + quoted(input) +
                                  "; write it somewhere else");
        }
      }
    }
  }
  GEARBOX_RETURN_IF_ERROR(check_directory(path, what));
  // The directory takes a new file only if one can be made there (permissions, a read-only
  // or synthetic file system such as /proc): try, before the work rather than after it.
  const std::string probe = temporary_name(path);
  const TemporaryGuard guard(probe);
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    return failed_precondition("cannot write the " + std::string(what) + " " + quoted(path) +
                               ": cannot create a file in " + quoted(parent_of(path)) + ": " + std::strerror(err));
  }
  ::close(fd);
  ::unlink(probe.c_str());
  return {};
}

Status write_output_file(const std::string& path, std::span<const uint8_t> bytes, std::string_view what) {
  if (path.empty()) return invalid_argument("the " + std::string(what) + " path is empty");
  mode_t mode = 0666;
  bool exists = false;
  GEARBOX_RETURN_IF_ERROR(check_destination(path, what, /*refuse_inputs=*/false, mode, exists));
  GEARBOX_RETURN_IF_ERROR(check_directory(path, what));
  const std::string tmp = temporary_name(path);
  const TemporaryGuard guard(tmp);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int err = errno;
    return device_error("cannot write the " + std::string(what) + " " + quoted(path) + ": cannot create " +
                        quoted(tmp) + ": " + std::strerror(err));
  }
  // A new file gets 0666 less the umask (open applied it); a replaced one keeps its mode.
  bool ok = write_all(fd, bytes);
  int err = ok ? 0 : errno;
  if (ok && exists && ::fchmod(fd, mode) != 0) {
    ok = false;
    err = errno;
  }
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    return device_error("cannot write the " + std::string(what) + " " + quoted(path) + " (through " + quoted(tmp) +
                        "): " + std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    return device_error("cannot rename " + quoted(tmp) + " to " + quoted(path) + ": " + std::strerror(err));
  }
  return {};
}

Status write_output_file(const std::string& path, std::string_view text, std::string_view what) {
  return write_output_file(path, std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()), what);
}

}  // namespace gearbox
