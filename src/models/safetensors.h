// Reads Hugging Face safetensors checkpoints: one `model.safetensors`, or shards listed by
// `model.safetensors.index.json`. Every file is memory-mapped and its header validated up
// front; tensor bytes are views into the mappings, so nothing is copied.
//
//   Result<models::SafetensorsCheckpoint> ckpt = models::SafetensorsCheckpoint::open(dir);
//   if (!ckpt.ok()) return ckpt.status();
//   Result<const models::SafetensorsTensor*> t = ckpt->get("model.norm.weight");
//
// A file is 8 bytes of little-endian header length N, N bytes of JSON
// (`{"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {..}}`), then the data section that the offsets index.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "format/mapped_file.h"
#include "gearbox/data_type.h"
#include "gearbox/dims.h"
#include "gearbox/status.h"

namespace gearbox::models {

/// One tensor of a checkpoint: its header entry and a view of its bytes (little-endian,
/// row-major, possibly unaligned: read it with memcpy).
struct SafetensorsTensor {
  std::string name;
  /// The element type; meaningful only when `supported`.
  DataType dtype = DataType::kF32;
  Dims dims;
  /// `end - begin` bytes of the data section; lives as long as the checkpoint.
  std::span<const uint8_t> bytes;
  /// The dtype as written in the header ("BF16", "F64", ...).
  std::string dtype_name;
  /// True for F32, BF16 and F16, the dtypes gearbox reads.
  bool supported = false;
  /// The file holding the tensor (no directory), for messages.
  std::string file;
};

/// A validated, memory-mapped safetensors checkpoint. Movable, not copyable; the mappings
/// (and so every `SafetensorsTensor::bytes`) live as long as the object. Const methods are
/// safe to call from several threads.
class SafetensorsCheckpoint {
 public:
  /// Opens `path`: a directory holding `model.safetensors` (preferred when both exist, as
  /// transformers does) or `model.safetensors.index.json` and its shards, or a path to one
  /// safetensors file.
  ///
  /// Header checks, each with its own message naming the file and tensor: the 8-byte
  /// length (present, <= file size - 8, <= 100 MiB); the JSON (valid, an object, no
  /// duplicate names); each entry (an object with a string `dtype`, `shape` of <= 8
  /// non-negative integers, `data_offsets` [begin, end] with begin <= end inside the data
  /// section and end - begin == volume * element size); `__metadata__` string -> string;
  /// no two tensors overlapping. Dtypes other than F32/BF16/F16 are accepted here and
  /// reported by get() when that tensor is asked for.
  ///
  /// Errors: kNotFound (no such path, no checkpoint in the directory, a shard the index
  /// names is missing); kDataLoss (a damaged header or index, a tensor the index maps to a
  /// shard that lacks it, a tensor in two shards); kFailedPrecondition / kDeviceError from
  /// opening or mapping a file.
  static Result<SafetensorsCheckpoint> open(const std::string& path);

  SafetensorsCheckpoint(SafetensorsCheckpoint&&) noexcept = default;
  SafetensorsCheckpoint& operator=(SafetensorsCheckpoint&&) noexcept = default;
  SafetensorsCheckpoint(const SafetensorsCheckpoint&) = delete;
  SafetensorsCheckpoint& operator=(const SafetensorsCheckpoint&) = delete;
  ~SafetensorsCheckpoint() = default;

  /// The tensor `name`, whatever its dtype; nullptr when there is none.
  const SafetensorsTensor* find(std::string_view name) const;

  /// The tensor `name`, ready to read. Errors: kNotFound ("checkpoint has no tensor
  /// 'x'"); kUnimplemented (a safetensors dtype gearbox does not read, e.g. F64);
  /// kDataLoss (a dtype string safetensors does not define).
  Result<const SafetensorsTensor*> get(std::string_view name) const;

  /// Every tensor name, sorted.
  std::vector<std::string> names() const;

  /// The number of tensors.
  size_t size() const noexcept { return tensors_.size(); }

 private:
  SafetensorsCheckpoint() = default;

  std::vector<format::MappedFile> files_;
  std::map<std::string, SafetensorsTensor, std::less<>> tensors_;
};

}  // namespace gearbox::models

namespace gearbox::internal {

/// The largest header safetensors allows (and gearbox reads): 100 MiB.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

/// Validates one safetensors file held in `file` and returns its tensors (views into
/// `file`, in name order). `file_name` prefixes every message. Errors: kDataLoss.
/// Exposed for the fuzzer and the tests.
Result<std::vector<models::SafetensorsTensor>> parse_safetensors(std::span<const uint8_t> file,
                                                                 const std::string& file_name);

/// Parses `model.safetensors.index.json` text into its `weight_map` (tensor -> shard
/// file name). Shard names must be plain file names (no '/', not "." or ".."). Errors:
/// kDataLoss naming `file_name`.
Result<std::map<std::string, std::string>> parse_safetensors_index(std::string_view text, const std::string& file_name);

}  // namespace gearbox::internal
