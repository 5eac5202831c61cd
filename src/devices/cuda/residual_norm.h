// The residual step around a Gemma sublayer on rows staged in shared memory, for kernels
// that compute it in their own prologue instead of leaving it to a norm_add_norm launch
// (a GEMV with a norm input):
//   sum = residual + rms_norm(x, w_post)      x = rms_norm(sum, w_next)
// or, for a pre-norm family (no w_post), sum = residual + x.
// with norm_add_norm's order of operations per element (kernels/residual_norm.cu), so that the
// engine's numbers do not depend on which kernel ran it.
#pragma once

#include <cuda_runtime.h>

#include "devices/cuda/device_math.h"

namespace gearbox::cuda {

__device__ __forceinline__ float4 get4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ void put4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
__device__ __forceinline__ float squares4(float4 v) { return v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w; }

/// x * inv * (w + offset) per element of four, w the weights at w4.
template <typename W>
__device__ __forceinline__ float4 scale4(float4 x, float inv, const W* w4, float offset) {
  return make_float4(x.x * inv * (to_f32(w4[0]) + offset), x.y * inv * (to_f32(w4[1]) + offset),
                     x.z * inv * (to_f32(w4[2]) + offset), x.w * inv * (to_f32(w4[3]) + offset));
}

/// The residual step once its rows are staged: x_s [dim] holds the sublayer output and r_s
/// [dim] the residual (shared memory, 16-byte aligned, dim % 4 == 0), and `squares` is this
/// thread's sum of x_s^2 over its float4s. Thread tid of `threads` takes the float4s tid,
/// tid + threads, ... throughout (each element by one thread, so no barrier is needed
/// between the passes); block_sum(v) returns the sum of v over those threads to each of them.
/// Leaves x_s = rms_norm(sum, w_next), or the sum where w_next is null, and stores the sum to
/// sum_out (global memory) when it is not null; r_s is left as it was. Without kPost, sum =
/// residual + x (no post-norm; w_post and `squares` are not used).
template <bool kPost, typename W, typename BlockSum>
__device__ __forceinline__ void residual_norm_staged(float* x_s, const float* r_s, const W* w_post, const W* w_next,
                                                     float* sum_out, int dim, float eps, float offset, int tid,
                                                     int threads, float squares, BlockSum&& block_sum) {
  const int n4 = dim / 4;
  float inv1 = 1.0f;
  if constexpr (kPost) inv1 = inverse_rms(block_sum(squares), dim, eps);
  float squares2 = 0.0f;
  for (int c = tid; c < n4; c += threads) {
    float4 normed = get4(x_s + 4 * c);
    if constexpr (kPost) normed = scale4(normed, inv1, w_post + 4 * c, offset);
    const float4 r = get4(r_s + 4 * c);
    // never contracted with the product
    const float4 sum = make_float4(__fadd_rn(r.x, normed.x), __fadd_rn(r.y, normed.y), __fadd_rn(r.z, normed.z),
                                   __fadd_rn(r.w, normed.w));
    put4(x_s + 4 * c, sum);
    if (sum_out != nullptr) put4(sum_out + 4 * c, sum);
    squares2 += squares4(sum);
  }
  if (w_next == nullptr) return;
  const float inv2 = inverse_rms(block_sum(squares2), dim, eps);
  for (int c = tid; c < n4; c += threads) put4(x_s + 4 * c, scale4(get4(x_s + 4 * c), inv2, w_next + 4 * c, offset));
}

}  // namespace gearbox::cuda
