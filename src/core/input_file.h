// The one way gearbox opens a file it reads: regular files only, checked on the opened
// descriptor before any byte is read (a FIFO, device or directory is refused, never read
// or waited on), and at most a bound per kind of file. Every error names the path.
//
//   Result<std::string> text = read_input_file(dir + "/config.json", InputKind::kHfConfig);
//   if (!text.ok()) return text.status();
//
// Every file opened here is remembered (device and inode), so an output can be refused
// when it is the same file as an input (see core/output_file.h).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>

#include "gearbox/status.h"

namespace gearbox {

/// The kinds of file gearbox reads; each has its own size bound (max_input_bytes).
enum class InputKind {
  kEngine,            ///< an engine file (mapped)
  kTacticCache,       ///< FILE.DEVICE.tactics
  kSafetensors,       ///< a safetensors file or shard (mapped)
  kSafetensorsIndex,  ///< model.safetensors.index.json
  kHfConfig,          ///< config.json, generation_config.json
  kTokenizerModel,    ///< tokenizer.model (SentencePiece)
  kTokenizerJson,     ///< tokenizer.json
  kNetwork,           ///< a network description (JSON)
};

/// The largest file of `kind` gearbox opens, in bytes.
uint64_t max_input_bytes(InputKind kind) noexcept;
/// What a file of `kind` is called in messages ("engine", "tokenizer.json"). Never null.
const char* input_kind_name(InputKind kind) noexcept;

/// An opened input file: a regular file within its kind's bound. Move-only; closes the
/// descriptor when destroyed.
class InputFile {
 public:
  /// Opens `path` without blocking (a FIFO is refused, never waited on). Errors:
  /// kNotFound (no such file), kFailedPrecondition (not a regular file: directory, FIFO,
  /// device, socket; or unreadable), kOutOfRange (larger than max_input_bytes(kind)).
  static Result<InputFile> open(const std::string& path, InputKind kind);
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&& other) noexcept;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  /// The open descriptor (owned by this object).
  int fd() const noexcept { return fd_; }
  /// The size fstat reported when the file was opened.
  uint64_t size() const noexcept { return size_; }
  const std::string& path() const noexcept { return path_; }
  /// Reads the whole file (a file that grows past its kind's bound while it is read is
  /// refused). Errors: kDeviceError (read failed), kOutOfRange.
  Result<std::string> read_all();

 private:
  InputFile(int fd, uint64_t size, std::string path, InputKind kind)
      : fd_(fd), size_(size), path_(std::move(path)), kind_(kind) {}
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string path_;
  InputKind kind_ = InputKind::kEngine;
};

/// Opens and reads `path` whole (InputFile::open, then read_all).
Result<std::string> read_input_file(const std::string& path, InputKind kind);

/// True when a file with this device and inode was opened by InputFile::open in this
/// process: an output must not replace it.
bool opened_as_input(dev_t device, ino_t inode);

/// What a file of this st_mode is called in a refusal ("a directory", "a FIFO (named
/// pipe)", ...); "not a regular file" for any other kind. Never null.
const char* file_type_name(mode_t mode) noexcept;

}  // namespace gearbox
