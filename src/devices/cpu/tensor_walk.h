// Index walking for the CPU's generic kernels: visit every element of an output in
// row-major order with the matching element offsets of N inputs, each input seen through
// its own strides (0 where it broadcasts).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "gearbox/dims.h"

namespace gearbox::cpu {

/// Calls f(out_index, offsets) for every element of `out` in row-major order, offsets[k]
/// being input k's element offset: sum over dims of index[d] * strides[k][d].
template <size_t N, typename F>
void walk(const Dims& out, const std::array<std::vector<int64_t>, N>& strides, F&& f) {
  const int32_t rank = out.rank();
  const int64_t total = out.volume();
  if (total <= 0) return;
  std::array<int64_t, kMaxDims> index{};
  std::array<int64_t, N> offsets{};
  for (int64_t i = 0; i < total; ++i) {
    f(i, offsets);
    for (int32_t d = rank - 1; d >= 0; --d) {
      const auto ud = static_cast<size_t>(d);
      ++index[ud];
      for (size_t k = 0; k < N; ++k) offsets[k] += strides[k][ud];
      if (index[ud] < out[d]) break;
      for (size_t k = 0; k < N; ++k) offsets[k] -= strides[k][ud] * out[d];
      index[ud] = 0;
    }
  }
}

/// Row-major strides of `dims`, in elements.
inline std::vector<int64_t> row_major_strides(const Dims& dims) {
  std::vector<int64_t> s(static_cast<size_t>(dims.rank()), 1);
  for (int32_t d = dims.rank() - 2; d >= 0; --d)
    s[static_cast<size_t>(d)] = s[static_cast<size_t>(d) + 1] * dims[d + 1];
  return s;
}

/// Product of dims[from, to).
inline int64_t extent_product(const Dims& dims, int32_t from, int32_t to) {
  int64_t p = 1;
  for (int32_t d = from; d < to; ++d) p *= dims[d];
  return p;
}

}  // namespace gearbox::cpu
