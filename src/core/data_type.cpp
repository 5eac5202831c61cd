#include "gearbox/data_type.h"

namespace gearbox {

size_t data_type_size(DataType type) noexcept {
  switch (type) {
    case DataType::kF32: return 4;
    case DataType::kBF16:
    case DataType::kF16: return 2;
    case DataType::kI32: return 4;
    case DataType::kI64: return 8;
    case DataType::kBool: return 1;
  }
  return 0;
}

const char* data_type_name(DataType type) noexcept {
  switch (type) {
    case DataType::kF32: return "f32";
    case DataType::kBF16: return "bf16";
    case DataType::kF16: return "f16";
    case DataType::kI32: return "i32";
    case DataType::kI64: return "i64";
    case DataType::kBool: return "bool";
  }
  return "?";
}

bool data_type_valid(uint8_t value) noexcept { return value <= static_cast<uint8_t>(DataType::kBool); }

}  // namespace gearbox
