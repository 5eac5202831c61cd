#include "format/mapped_file.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace gearbox::format {

Result<MappedFile> MappedFile::open(const std::string& path, InputKind kind) {
  Result<InputFile> file = InputFile::open(path, kind);
  if (!file.ok()) return file.status();
  const auto size = static_cast<size_t>(file->size());
  if (size == 0) return MappedFile(nullptr, 0);
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, file->fd(), 0);
  if (p == MAP_FAILED) return device_error("cannot map " + path + ": " + std::strerror(errno));
  return MappedFile(static_cast<const uint8_t*>(p), size);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace gearbox::format
