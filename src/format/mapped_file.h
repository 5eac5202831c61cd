// A read-only memory mapping of a whole file.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "gearbox/status.h"

namespace gearbox::format {

class MappedFile {
 public:
  /// Maps `path`. Errors: kNotFound (no such file), kFailedPrecondition (not a regular
  /// file, or unreadable), kDeviceError (mmap failed).
  static Result<MappedFile> open(const std::string& path);
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const uint8_t> bytes() const noexcept { return {data_, size_}; }

 private:
  MappedFile(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace gearbox::format
