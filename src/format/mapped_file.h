// A read-only memory mapping of a whole file.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/input_file.h"
#include "gearbox/status.h"

namespace gearbox::format {

class MappedFile {
 public:
  /// Maps `path`, opened as an input of `kind` (core/input_file.h: a regular file within
  /// the kind's size bound). Errors: kNotFound (no such file), kFailedPrecondition (not a
  /// regular file, or unreadable), kOutOfRange (too large), kDeviceError (mmap failed).
  static Result<MappedFile> open(const std::string& path, InputKind kind = InputKind::kEngine);
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
