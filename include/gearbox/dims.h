// gearbox/dims.h: the extents of a tensor, as a small value type.
//
//   gearbox::Dims tokens{1, 128};   // rank 2: batch 1, sequence 128
//   assert(tokens.rank() == 2 && tokens[1] == 128);
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "gearbox/export.h"

namespace gearbox {

/// The largest rank a tensor can have.
inline constexpr int32_t kMaxDims = 8;

/// Extents of a tensor: rank 0..kMaxDims, each an int64. A plain value: cheap to copy,
/// no allocation. Extents are not validated here (a profile bound or an input may be
/// checked for negative extents where that matters).
class GEARBOX_API Dims {
 public:
  /// Rank 0 (a scalar).
  Dims() = default;
  /// The given extents. More than kMaxDims extents is a programming error and aborts.
  Dims(std::initializer_list<int64_t> extents);
  /// The given extents. More than kMaxDims extents is a programming error and aborts.
  explicit Dims(std::span<const int64_t> extents);

  /// The number of extents, 0..kMaxDims.
  int32_t rank() const noexcept { return rank_; }
  /// Extent `i`; `i` outside [0, rank()) is a programming error and aborts.
  int64_t operator[](int32_t i) const;
  /// All extents, `rank()` of them.
  std::span<const int64_t> extents() const noexcept { return {extents_.data(), static_cast<size_t>(rank_)}; }
  /// Product of the extents (1 for rank 0). Saturates at INT64_MAX; a negative extent
  /// gives a negative or zero result.
  int64_t volume() const noexcept;
  /// "[1, 128]".
  std::string to_string() const;

  /// Equal ranks and equal extents.
  bool operator==(const Dims& other) const noexcept;

 private:
  std::array<int64_t, kMaxDims> extents_{};
  int32_t rank_ = 0;
};

}  // namespace gearbox
