// Four-float vectors for the CPU kernels. GNU vector types, not intrinsics: gcc and clang
// both vectorize loops written with them at -O2 (plain loops were fast under one
// compiler and 2-4x slower under the other; kernels_linear.cpp has the numbers), and
// they map to SSE or NEON alike.
#pragma once

#include <cstring>

namespace gearbox::cpu {

using Vec4 = float __attribute__((vector_size(16)));

/// Four floats from `p` (any alignment).
inline Vec4 load4(const float* p) {
  Vec4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// Four floats to `p` (any alignment).
inline void store4(float* p, Vec4 v) { std::memcpy(p, &v, sizeof v); }

/// The sum of the four lanes, pairwise.
inline float hsum(Vec4 v) { return (v[0] + v[2]) + (v[1] + v[3]); }

}  // namespace gearbox::cpu
