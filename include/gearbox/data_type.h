// gearbox/data_type.h: element types of tensors and weights.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gearbox/export.h"

namespace gearbox {

/// Element types. The numeric values are stored in engine files: append, never renumber.
enum class DataType : uint8_t {
  kF32 = 0,
  kBF16 = 1,
  kF16 = 2,
  kI32 = 3,
  kI64 = 4,
  kBool = 5,  ///< 1 byte, 0 or 1: masks and comparison results
};

/// Bytes per element; 0 for a value outside the enum.
GEARBOX_API size_t data_type_size(DataType type) noexcept;
/// "f32", "bf16", "f16", "i32", "i64", "bool"; "?" for a value outside the enum.
GEARBOX_API const char* data_type_name(DataType type) noexcept;
/// True for a value inside the enum (e.g. one read from a file).
GEARBOX_API bool data_type_valid(uint8_t value) noexcept;

}  // namespace gearbox
