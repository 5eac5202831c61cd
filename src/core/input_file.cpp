#include "core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

namespace gearbox {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// The device and inode of every file opened as input.
struct OpenedInputs {
  std::mutex mutex;
  std::vector<std::pair<dev_t, ino_t>> files;
};

OpenedInputs& opened_inputs() {
  static OpenedInputs inputs;
  return inputs;
}

void remember(const struct stat& st) {
  OpenedInputs& inputs = opened_inputs();
  const std::lock_guard lock(inputs.mutex);
  const std::pair<dev_t, ino_t> id{st.st_dev, st.st_ino};
  if (std::find(inputs.files.begin(), inputs.files.end(), id) == inputs.files.end()) inputs.files.push_back(id);
}

std::string size_text(uint64_t bytes) {
  if (bytes >= kMiB && bytes % kMiB == 0) return std::to_string(bytes / kMiB) + " MiB";
  return std::to_string(bytes) + " bytes";
}

Status too_large(const std::string& path, InputKind kind, uint64_t bytes, bool at_least) {
  return out_of_range(path + " is " + (at_least ? "more than " : "") + std::to_string(bytes) + " bytes; a " +
                      input_kind_name(kind) + " file is at most " + size_text(max_input_bytes(kind)));
}

}  // namespace

namespace {

struct KindInfo {
  InputKind kind;
  const char* name;
  uint64_t max_bytes;
};

// Engines and safetensors files are mapped, never copied: bounded by what a file system
// holds, not by memory. tokenizer.model is stored whole as an engine metadata value, which
// holds at most 16 MiB (docs/FORMAT.md); tokenizer.json is minified before it is stored.
constexpr KindInfo kKinds[] = {
    {InputKind::kEngine, "engine", uint64_t{1} << 40},
    {InputKind::kTacticCache, "tactic cache", 64 * kMiB},
    {InputKind::kSafetensors, "safetensors", uint64_t{1} << 40},
    {InputKind::kSafetensorsIndex, "safetensors index", 64 * kMiB},
    {InputKind::kHfConfig, "config.json", 16 * kMiB},
    {InputKind::kTokenizerModel, "tokenizer.model", 16 * kMiB},
    {InputKind::kTokenizerJson, "tokenizer.json", 64 * kMiB},
    {InputKind::kNetwork, "network description", 64 * kMiB},
};

const KindInfo& info(InputKind kind) noexcept {
  for (const KindInfo& k : kKinds) {
    if (k.kind == kind) return k;
  }
  return kKinds[0];
}

}  // namespace

uint64_t max_input_bytes(InputKind kind) noexcept { return info(kind).max_bytes; }

const char* input_kind_name(InputKind kind) noexcept { return info(kind).name; }

Result<InputFile> InputFile::open(const std::string& path, InputKind kind) {
  // O_NONBLOCK: opening a FIFO for reading returns at once instead of waiting for a
  // writer; fstat then refuses it. It has no effect on a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return not_found("no such file: " + path);
    return failed_precondition("cannot open " + path + ": " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return failed_precondition("cannot stat " + path + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return failed_precondition(path + " is " + file_type_name(st.st_mode) + ", not a regular " + input_kind_name(kind) +
                               " file");
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size > max_input_bytes(kind)) {
    ::close(fd);
    return too_large(path, kind, size, /*at_least=*/false);
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  remember(st);
  return InputFile(fd, size, path, kind);
}

InputFile::InputFile(InputFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), size_(other.size_), path_(std::move(other.path_)), kind_(other.kind_) {}

InputFile& InputFile::operator=(InputFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
    path_ = std::move(other.path_);
    kind_ = other.kind_;
  }
  return *this;
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

Result<std::string> InputFile::read_all() {
  // Reads to the end of the file, not to the size fstat reported: files such as those in
  // /proc report 0. One byte past the bound tells a file that is too large.
  const uint64_t bound = max_input_bytes(kind_);
  std::string out;
  out.resize(static_cast<size_t>(std::min<uint64_t>(size_, bound) + 1));
  size_t filled = 0;
  for (;;) {
    if (filled == out.size()) {
      if (filled > bound) return too_large(path_, kind_, bound, /*at_least=*/true);
      out.resize(std::min<size_t>(out.size() * 2, static_cast<size_t>(bound) + 1));
    }
    const ssize_t n = ::read(fd_, out.data() + filled, out.size() - filled);
    if (n < 0) {
      if (errno == EINTR) continue;
      return device_error("cannot read " + path_ + ": " + std::strerror(errno));
    }
    if (n == 0) break;
    filled += static_cast<size_t>(n);
  }
  out.resize(filled);
  return out;
}

Result<std::string> read_input_file(const std::string& path, InputKind kind) {
  Result<InputFile> file = InputFile::open(path, kind);
  if (!file.ok()) return file.status();
  return file->read_all();
}

const char* file_type_name(mode_t mode) noexcept {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

bool opened_as_input(dev_t device, ino_t inode) {
  OpenedInputs& inputs = opened_inputs();
  const std::lock_guard lock(inputs.mutex);
  return std::find(inputs.files.begin(), inputs.files.end(), std::pair{device, inode}) != inputs.files.end();
}

}  // namespace gearbox
