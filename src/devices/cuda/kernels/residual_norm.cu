// CUDA norm_add_norm (residual_norm.cuh): the post-norm, the residual add and the next
// pre-norm around a Gemma sublayer (kPost), or the add and the next pre-norm of a pre-norm
// family, in one pass over a row, for the decode step where launches, not bytes, cost. It
// computes what its unfused sequence computes (same order of operations per element; the RMS
// sums are reduced in a different order), so the engine's results do not depend on whether
// the chain was fused (tests/devices/cuda/residual_norm_test.cpp and gemv_norm_input_test.cpp
// check both against the CPU kernels).
#include <math_constants.h>

#include <cstdint>

#include "devices/cuda/device_math.h"
#include "devices/cuda/kernels/residual_norm.cuh"
#include "devices/cuda/launch.h"

namespace gearbox::cuda {
namespace {

// ---- norm_add_norm -----------------------------------------------------------------------------

constexpr int kRowThreads = 256;  // the looping kernel, any dim
// The register-cached kernel, dim <= threads * kCachedPer: 1024 threads a row for few rows
// (decode: the latency of one row is the kernel's), 256 for many (prefill: 1024-thread
// blocks fit two to an SM, so many rows run in waves of blocks that each wait on 32-warp
// barriers).
constexpr int kCachedThreadsFewRows = 1024;
constexpr int kCachedThreadsManyRows = 256;
constexpr int64_t kFewRows = 8;
constexpr int kCachedPer = 8;

template <int kThreads>
__device__ __forceinline__ float block_sum(float v, float* shared) {
  const int tid = static_cast<int>(threadIdx.x);
  v = warp_sum(v);
  if (tid % 32 == 0) shared[tid / 32] = v;
  __syncthreads();
  if (tid < 32) {
    float s = tid < kThreads / 32 ? shared[tid] : 0.0f;
    s = warp_sum(s);
    if (tid == 0) shared[kThreads / 32] = s;
  }
  __syncthreads();
  return shared[kThreads / 32];
}

/// grid: rows blocks of kCachedThreads; thread i holds elements i, i + kCachedThreads, ...
/// (at most 8) in registers: every load is issued up front and nothing is read twice.
/// kPost: x is normalized with w_post before the add; else sum = residual + x.
template <typename W, typename Y, int kCachedThreads, bool kPost>
__global__ void __launch_bounds__(kCachedThreads)
    norm_add_norm_cached_kernel(const float* x, const W* w_post, const float* residual, float* sum, const W* w_next,
                                Y* y, int dim, float eps, float offset) {
  __shared__ float reduce1[kCachedThreads / 32 + 1];
  __shared__ float reduce2[kCachedThreads / 32 + 1];
  allow_next_kernel();
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t base = static_cast<int64_t>(blockIdx.x) * dim;
  float xv[kCachedPer], rv[kCachedPer], g1[kCachedPer], g2[kCachedPer];
  // The weights first: they are in flight while the previous kernel finishes (launch.h).
#pragma unroll
  for (int k = 0; k < kCachedPer; ++k) {
    const int i = tid + k * kCachedThreads;
    const bool in = i < dim;
    g1[k] = kPost && in ? to_f32(w_post[i]) : 0.0f;
    g2[k] = in && w_next != nullptr ? to_f32(w_next[i]) : 0.0f;
  }
  wait_for_prior_kernels();
#pragma unroll
  for (int k = 0; k < kCachedPer; ++k) {
    const int i = tid + k * kCachedThreads;
    const bool in = i < dim;
    xv[k] = in ? x[base + i] : 0.0f;
    rv[k] = in ? residual[base + i] : 0.0f;
  }
  float squares = 0.0f;
#pragma unroll
  for (int k = 0; k < kCachedPer; ++k) squares += xv[k] * xv[k];
  // The barrier in block_sum orders every read of x and residual before any write below
  // (without a post-norm, each element is read and written by one thread).
  float inv1 = 1.0f;
  if constexpr (kPost) inv1 = inverse_rms(block_sum<kCachedThreads>(squares, reduce1), dim, eps);
  float squares2 = 0.0f;
#pragma unroll
  for (int k = 0; k < kCachedPer; ++k) {
    const float normed = kPost ? xv[k] * inv1 * (g1[k] + offset) : xv[k];
    rv[k] = __fadd_rn(rv[k], normed);  // never contracted with the product: as norm then add
    squares2 += rv[k] * rv[k];
    const int i = tid + k * kCachedThreads;
    if (i < dim) sum[base + i] = rv[k];
  }
  if (w_next == nullptr) return;  // uniform across the block
  const float inv2 = inverse_rms(block_sum<kCachedThreads>(squares2, reduce2), dim, eps);
#pragma unroll
  for (int k = 0; k < kCachedPer; ++k) {
    const int i = tid + k * kCachedThreads;
    if (i < dim) convert_one(rv[k] * inv2 * (g2[k] + offset), &y[base + i]);
  }
}

/// grid: rows blocks of 256 threads, any dim. Thread i handles elements i, i + 256, ... in
/// every phase, so an element is read and written by one thread. kPost: as above.
template <typename W, typename Y, bool kPost>
__global__ void __launch_bounds__(kRowThreads)
    norm_add_norm_kernel(const float* x, const W* w_post, const float* residual, float* sum, const W* w_next, Y* y,
                         int dim, float eps, float offset) {
  __shared__ float reduce1[kRowThreads / 32 + 1];
  __shared__ float reduce2[kRowThreads / 32 + 1];
  allow_next_kernel();
  wait_for_prior_kernels();
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t base = static_cast<int64_t>(blockIdx.x) * dim;
  float inv1 = 1.0f;
  if constexpr (kPost) {
    float squares = 0.0f;
    for (int i = tid; i < dim; i += kRowThreads) squares += x[base + i] * x[base + i];
    inv1 = inverse_rms(block_sum<kRowThreads>(squares, reduce1), dim, eps);
  }
  float squares2 = 0.0f;
  for (int i = tid; i < dim; i += kRowThreads) {
    const float normed = kPost ? x[base + i] * inv1 * (to_f32(w_post[i]) + offset) : x[base + i];
    const float s = __fadd_rn(residual[base + i], normed);  // never contracted with the product
    sum[base + i] = s;
    squares2 += s * s;
  }
  if (w_next == nullptr) return;  // uniform across the block: no barrier is skipped by some threads only
  const float inv2 = inverse_rms(block_sum<kRowThreads>(squares2, reduce2), dim, eps);
  for (int i = tid; i < dim; i += kRowThreads) {
    convert_one(sum[base + i] * inv2 * (to_f32(w_next[i]) + offset), &y[base + i]);
  }
}

}  // namespace

namespace {

template <typename W, typename Y, bool kPost>
void launch_norm_add_norm_kernel(const float* x, const W* w_post, const float* residual, float* sum, const W* w_next,
                                 Y* y, int64_t rows, int64_t dim, float eps, float offset, const Launch& launch) {
  const auto grid = static_cast<unsigned>(rows);
  const int d = static_cast<int>(dim);
  if (rows <= kFewRows && dim <= static_cast<int64_t>(kCachedThreadsFewRows) * kCachedPer) {
    launch_kernel(norm_add_norm_cached_kernel<W, Y, kCachedThreadsFewRows, kPost>, grid, kCachedThreadsFewRows, 0,
                  launch, x, w_post, residual, sum, w_next, y, d, eps, offset);
  } else if (dim <= static_cast<int64_t>(kCachedThreadsManyRows) * kCachedPer) {
    launch_kernel(norm_add_norm_cached_kernel<W, Y, kCachedThreadsManyRows, kPost>, grid, kCachedThreadsManyRows, 0,
                  launch, x, w_post, residual, sum, w_next, y, d, eps, offset);
  } else {
    launch_kernel(norm_add_norm_kernel<W, Y, kPost>, grid, kRowThreads, 0, launch, x, w_post, residual, sum, w_next, y,
                  d, eps, offset);
  }
}

template <typename W, typename Y>
cudaError_t launch_norm_add_norm(const float* x, const W* w_post, const float* residual, float* sum, const W* w_next,
                                 Y* y, int64_t rows, int64_t dim, float eps, float offset, const Launch& launch) {
  if (rows < 0 || dim <= 0 || dim > INT32_MAX || rows > INT32_MAX) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (w_post != nullptr) {
    launch_norm_add_norm_kernel<W, Y, true>(x, w_post, residual, sum, w_next, y, rows, dim, eps, offset, launch);
  } else {
    launch_norm_add_norm_kernel<W, Y, false>(x, w_post, residual, sum, w_next, y, rows, dim, eps, offset, launch);
  }
  return cudaGetLastError();
}

}  // namespace

template <typename W>
cudaError_t norm_add_norm(const float* x, const W* w_post, const float* residual, float* sum, const W* w_next, float* y,
                          int64_t rows, int64_t dim, float eps, float offset, const Launch& launch) {
  return launch_norm_add_norm(x, w_post, residual, sum, w_next, y, rows, dim, eps, offset, launch);
}

template <typename W>
cudaError_t norm_add_norm_to(const float* x, const W* w_post, const float* residual, float* sum, const W* w_next, W* y,
                             int64_t rows, int64_t dim, float eps, float offset, const Launch& launch) {
  if (w_next == nullptr || y == nullptr) return cudaErrorInvalidValue;
  return launch_norm_add_norm(x, w_post, residual, sum, w_next, y, rows, dim, eps, offset, launch);
}

#define GEARBOX_INSTANTIATE_NORM_ADD_NORM(W)                                                                     \
  template cudaError_t norm_add_norm<W>(const float*, const W*, const float*, float*, const W*, float*, int64_t, \
                                        int64_t, float, float, const Launch&);                                   \
  template cudaError_t norm_add_norm_to<W>(const float*, const W*, const float*, float*, const W*, W*, int64_t,  \
                                           int64_t, float, float, const Launch&);
GEARBOX_INSTANTIATE_NORM_ADD_NORM(float)
GEARBOX_INSTANTIATE_NORM_ADD_NORM(__nv_bfloat16)
GEARBOX_INSTANTIATE_NORM_ADD_NORM(__half)
#undef GEARBOX_INSTANTIATE_NORM_ADD_NORM

}  // namespace gearbox::cuda
