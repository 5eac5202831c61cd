// CPU kernels of the generic ops that move elements without arithmetic (where, permute,
// expand, slice, concat, index_select, gather) and of cast. The movers copy elements of
// any size; cast converts between the stored types.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/check.h"
#include "core/half.h"
#include "devices/cpu/kernels.h"
#include "devices/cpu/tensor_walk.h"
#include "ir/generic_shapes.h"

namespace gearbox::cpu {
namespace {

using internal::bf16_to_f32;
using internal::f16_to_f32;
using internal::f32_to_bf16;
using internal::f32_to_f16;

// Copies one element of `size` bytes.
inline void copy_element(uint8_t* dst, const uint8_t* src, size_t size) {
  switch (size) {
    case 1: *dst = *src; return;
    case 2: std::memcpy(dst, src, 2); return;
    case 4: std::memcpy(dst, src, 4); return;
    default: std::memcpy(dst, src, size); return;
  }
}

// y[i] = x[offset_i] over a walk of y with x seen through `strides`.
void gather_walk(const In& x, const Out& y, const std::vector<int64_t>& strides) {
  const size_t size = data_type_size(y.dtype);
  const auto* px = static_cast<const uint8_t*>(x.data);
  auto* py = static_cast<uint8_t*>(y.data);
  walk(y.dims, std::array<std::vector<int64_t>, 1>{strides}, [&](int64_t i, const std::array<int64_t, 1>& o) {
    copy_element(py + static_cast<size_t>(i) * size, px + static_cast<size_t>(o[0]) * size, size);
  });
}

int64_t index_value(const In& index, int64_t i) {
  return index.dtype == DataType::kI64 ? static_cast<const int64_t*>(index.data)[i]
                                       : static_cast<const int32_t*>(index.data)[i];
}

// Every index in [-extent, extent), or the error naming the first that is not.
Status check_indices(const In& index, int64_t extent, int32_t axis, const char* op) {
  const int64_t n = index.dims.volume();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = index_value(index, i);
    if (v < -extent || v >= extent) {
      return invalid_argument(std::string(op) + ": index " + std::to_string(v) + " at position " + std::to_string(i) +
                              " is outside [" + std::to_string(-extent) + ", " + std::to_string(extent) + ") of axis " +
                              std::to_string(axis));
    }
  }
  return {};
}

// A stored element as a double (exact for f32 and i32; i64 beyond 2^53 is not needed
// where this is used: int -> int goes through int64_t) and as an int64.
double load_double(const In& x, int64_t i) {
  switch (x.dtype) {
    case DataType::kI32: return static_cast<const int32_t*>(x.data)[i];
    case DataType::kI64: return static_cast<double>(static_cast<const int64_t*>(x.data)[i]);
    case DataType::kBool: return static_cast<const uint8_t*>(x.data)[i] != 0 ? 1.0 : 0.0;
    default: return static_cast<const float*>(x.data)[i];
  }
}
bool is_int_storage(DataType t) { return t == DataType::kI32 || t == DataType::kI64 || t == DataType::kBool; }
int64_t load_int(const In& x, int64_t i) {
  switch (x.dtype) {
    case DataType::kI32: return static_cast<const int32_t*>(x.data)[i];
    case DataType::kI64: return static_cast<const int64_t*>(x.data)[i];
    default: return static_cast<const uint8_t*>(x.data)[i] != 0 ? 1 : 0;
  }
}

// Float -> integer: truncate toward zero, saturate, NaN -> 0.
template <typename T>
T float_to_int(double v) {
  if (std::isnan(v)) return 0;
  if (v <= static_cast<double>(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
  if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

}  // namespace

void where(const In& cond, const In& a, const In& b, const Out& y) {
  const int32_t rank = y.dims.rank();
  const std::array<std::vector<int64_t>, 3> strides = {
      ir::broadcast_strides(cond.dims, rank), ir::broadcast_strides(a.dims, rank), ir::broadcast_strides(b.dims, rank)};
  const size_t size = data_type_size(y.dtype);
  const auto* pc = static_cast<const uint8_t*>(cond.data);
  const auto* pa = static_cast<const uint8_t*>(a.data);
  const auto* pb = static_cast<const uint8_t*>(b.data);
  auto* py = static_cast<uint8_t*>(y.data);
  walk(y.dims, strides, [&](int64_t i, const std::array<int64_t, 3>& o) {
    const uint8_t* src = pc[o[0]] != 0 ? pa + static_cast<size_t>(o[1]) * size : pb + static_cast<size_t>(o[2]) * size;
    copy_element(py + static_cast<size_t>(i) * size, src, size);
  });
}

void permute(const In& x, const Out& y, std::span<const int64_t> perm) {
  const std::vector<int64_t> in_strides = row_major_strides(x.dims);
  std::vector<int64_t> strides;
  for (int64_t p : perm) strides.push_back(in_strides[static_cast<size_t>(p)]);
  if (perm.empty()) {  // rank 0: one element
    std::memcpy(y.data, x.data, data_type_size(y.dtype));
    return;
  }
  gather_walk(x, y, strides);
}

void expand(const In& x, const Out& y) {
  if (y.dims.rank() == 0) {
    std::memcpy(y.data, x.data, data_type_size(y.dtype));
    return;
  }
  gather_walk(x, y, ir::broadcast_strides(x.dims, y.dims.rank()));
}

void slice(const In& x, const Out& y, int32_t axis, int64_t start, int64_t step) {
  const size_t size = data_type_size(y.dtype);
  const int64_t outer = extent_product(x.dims, 0, axis);
  const int64_t inner = extent_product(x.dims, axis + 1, x.dims.rank());
  const int64_t extent = x.dims[axis], count = y.dims[axis];
  const auto* px = static_cast<const uint8_t*>(x.data);
  auto* py = static_cast<uint8_t*>(y.data);
  const auto row = static_cast<size_t>(inner) * size;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < count; ++i) {
      std::memcpy(py + static_cast<size_t>(o * count + i) * row,
                  px + static_cast<size_t>(o * extent + start + i * step) * row, row);
    }
  }
}

void concat(std::span<const In> xs, const Out& y, int32_t axis) {
  const size_t size = data_type_size(y.dtype);
  const int64_t outer = extent_product(y.dims, 0, axis);
  const int64_t inner = extent_product(y.dims, axis + 1, y.dims.rank());
  auto* py = static_cast<uint8_t*>(y.data);
  const auto out_row = static_cast<size_t>(y.dims[axis] * inner) * size;
  size_t at = 0;
  for (const In& x : xs) {
    const auto chunk = static_cast<size_t>(x.dims[axis] * inner) * size;
    const auto* px = static_cast<const uint8_t*>(x.data);
    for (int64_t o = 0; o < outer; ++o) {
      if (chunk > 0)
        std::memcpy(py + static_cast<size_t>(o) * out_row + at, px + static_cast<size_t>(o) * chunk, chunk);
    }
    at += chunk;
  }
}

void cast(const In& x, const Out& y, DataType to) {
  const int64_t n = x.dims.volume();
  const bool from_int = is_int_storage(x.dtype);
  for (int64_t i = 0; i < n; ++i) {
    switch (to) {
      case DataType::kF32:
      case DataType::kBF16:
      case DataType::kF16: {
        auto v = static_cast<float>(load_double(x, i));
        if (to == DataType::kBF16) v = bf16_to_f32(f32_to_bf16(v));
        if (to == DataType::kF16) v = f16_to_f32(f32_to_f16(v));
        static_cast<float*>(y.data)[i] = v;
        break;
      }
      case DataType::kI32:
        static_cast<int32_t*>(y.data)[i] =
            from_int ? static_cast<int32_t>(load_int(x, i)) : float_to_int<int32_t>(load_double(x, i));
        break;
      case DataType::kI64:
        static_cast<int64_t*>(y.data)[i] = from_int ? load_int(x, i) : float_to_int<int64_t>(load_double(x, i));
        break;
      case DataType::kBool:
        static_cast<uint8_t*>(y.data)[i] = (from_int ? load_int(x, i) != 0 : load_double(x, i) != 0.0) ? 1 : 0;
        break;
    }
  }
}

Status index_select(const In& x, const In& index, const Out& y, int32_t axis) {
  const int64_t extent = x.dims[axis];
  GEARBOX_RETURN_IF_ERROR(check_indices(index, extent, axis, "index_select"));
  const size_t size = data_type_size(y.dtype);
  const int64_t outer = extent_product(x.dims, 0, axis);
  const int64_t inner = extent_product(x.dims, axis + 1, x.dims.rank());
  const int64_t n = index.dims.volume();
  const auto row = static_cast<size_t>(inner) * size;
  const auto* px = static_cast<const uint8_t*>(x.data);
  auto* py = static_cast<uint8_t*>(y.data);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < n; ++j) {
      int64_t v = index_value(index, j);
      if (v < 0) v += extent;
      std::memcpy(py + static_cast<size_t>(o * n + j) * row, px + static_cast<size_t>(o * extent + v) * row, row);
    }
  }
  return {};
}

Status gather(const In& x, const In& index, const Out& y, int32_t axis) {
  const int64_t extent = x.dims[axis];
  GEARBOX_RETURN_IF_ERROR(check_indices(index, extent, axis, "gather"));
  const size_t size = data_type_size(y.dtype);
  std::vector<int64_t> strides = row_major_strides(x.dims);
  const int64_t axis_stride = strides[static_cast<size_t>(axis)];
  strides[static_cast<size_t>(axis)] = 0;  // the index supplies the position along the axis
  const auto* px = static_cast<const uint8_t*>(x.data);
  auto* py = static_cast<uint8_t*>(y.data);
  walk(y.dims, std::array<std::vector<int64_t>, 1>{strides}, [&](int64_t i, const std::array<int64_t, 1>& o) {
    int64_t v = index_value(index, i);
    if (v < 0) v += extent;
    copy_element(py + static_cast<size_t>(i) * size, px + static_cast<size_t>(o[0] + v * axis_stride) * size, size);
  });
  return {};
}

}  // namespace gearbox::cpu
