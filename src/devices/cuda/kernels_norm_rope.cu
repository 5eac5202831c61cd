// CUDA RMSNorm and RoPE: row-local ops, memory-bound, one pass over each row.
//
//   rms_norm  x, y [rows, dim] f32, w [dim] W      y = x * inv_rms(x) * (w + offset)
//   rope      x, y [T, heads * head_dim] f32       rotate-half by angle(pos, i)
//
// Both keep the CPU kernels' order of operations (devices/cpu/kernels_elementwise.cpp) so
// results differ from them only by the summation order of the RMS reduction.

#include <math_constants.h>

#include <cmath>
#include <cstdint>

#include "devices/cuda/device_math.h"
#include "devices/cuda/kernels.h"
#include "devices/cuda/launch.h"

namespace gearbox::cuda {
namespace {

/// Four consecutive weights as floats; p must be aligned to 4 * sizeof(W).
__device__ __forceinline__ float4 load4_f32(const float* p) { return *reinterpret_cast<const float4*>(p); }
template <typename W>
__device__ __forceinline__ float4 load4_f32(const W* p) {  // W: bf16 or f16
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  const float2 a = unpack2(u.x, W{});
  const float2 b = unpack2(u.y, W{});
  return make_float4(a.x, a.y, b.x, b.y);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// ---- RMSNorm ----------------------------------------------------------------------------------

constexpr int kNormWarpRowsPerBlock = 4;  // warp-per-row kernel: 128 threads, 4 rows
constexpr int kNormBlockThreads = 256;    // block-per-row kernel
constexpr int64_t kNormWarpMaxDim = 512;  // up to here a warp per row (16 floats per lane)

/// Sum of squares of xr[0, dim) by the `lanes` threads numbered `lane` (partial, not reduced).
template <bool kVec>
__device__ __forceinline__ float partial_sum_squares(const float* xr, int dim, int lane, int lanes) {
  float sum = 0.0f;
  if constexpr (kVec) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    for (int i = lane; i < dim / 4; i += lanes) {
      const float4 v = x4[i];
      sum += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
  } else {
    for (int i = lane; i < dim; i += lanes) sum += xr[i] * xr[i];
  }
  return sum;
}

/// yr = xr * inv_rms * (w + offset) by the `lanes` threads numbered `lane`. Each element is
/// read and written by the same thread, so yr may be xr.
template <typename W, bool kVec>
__device__ __forceinline__ void scale_row(const float* xr, const W* w, float* yr, int dim, float inv_rms, float offset,
                                          int lane, int lanes) {
  if constexpr (kVec) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    float4* y4 = reinterpret_cast<float4*>(yr);
    for (int i = lane; i < dim / 4; i += lanes) {
      const float4 v = x4[i];
      const float4 g = load4_f32(w + 4 * i);
      y4[i] = make_float4(v.x * inv_rms * (g.x + offset), v.y * inv_rms * (g.y + offset),
                          v.z * inv_rms * (g.z + offset), v.w * inv_rms * (g.w + offset));
    }
  } else {
    for (int i = lane; i < dim; i += lanes) yr[i] = xr[i] * inv_rms * (to_f32(w[i]) + offset);
  }
}

/// grid: ceil(rows / 4) blocks of 128 threads; warp w of block b normalizes row 4b + w.
template <typename W, bool kVec>
__global__ void __launch_bounds__(32 * kNormWarpRowsPerBlock)
    rms_norm_warp_kernel(const float* x, const W* w, float* y, int64_t rows, int dim, float eps, float offset) {
  allow_next_kernel();
  wait_for_prior_kernels();
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kNormWarpRowsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;  // the whole warp leaves: no block-wide barrier follows
  const int lane = static_cast<int>(threadIdx.x % 32);
  const float* xr = x + row * dim;
  const float inv_rms = inverse_rms(warp_sum(partial_sum_squares<kVec>(xr, dim, lane, 32)), dim, eps);
  scale_row<W, kVec>(xr, w, y + row * dim, dim, inv_rms, offset, lane, 32);
}

/// grid: rows blocks of 256 threads; block b normalizes row b.
template <typename W, bool kVec>
__global__ void __launch_bounds__(kNormBlockThreads)
    rms_norm_block_kernel(const float* x, const W* w, float* y, int dim, float eps, float offset) {
  __shared__ float warp_sums[kNormBlockThreads / 32];
  __shared__ float inv_rms_shared;
  allow_next_kernel();
  wait_for_prior_kernels();
  const int tid = static_cast<int>(threadIdx.x);
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * dim;
  const float partial = warp_sum(partial_sum_squares<kVec>(xr, dim, tid, kNormBlockThreads));
  if (tid % 32 == 0) warp_sums[tid / 32] = partial;
  __syncthreads();  // every read of x in the sum precedes every write of y (x may be y)
  if (tid < 32) {
    float s = tid < kNormBlockThreads / 32 ? warp_sums[tid] : 0.0f;
    s = warp_sum(s);
    if (tid == 0) inv_rms_shared = inverse_rms(s, dim, eps);
  }
  __syncthreads();
  scale_row<W, kVec>(xr, w, y + static_cast<int64_t>(blockIdx.x) * dim, dim, inv_rms_shared, offset, tid,
                     kNormBlockThreads);
}

template <typename W, bool kVec>
void launch_rms_norm(const float* x, const W* w, float* y, int64_t rows, int dim, float eps, float offset,
                     cudaStream_t stream) {
  if (dim <= kNormWarpMaxDim) {
    const auto blocks = static_cast<unsigned>((rows + kNormWarpRowsPerBlock - 1) / kNormWarpRowsPerBlock);
    launch_kernel(rms_norm_warp_kernel<W, kVec>, blocks, 32 * kNormWarpRowsPerBlock, 0, stream, x, w, y, rows, dim, eps,
                  offset);
  } else {
    launch_kernel(rms_norm_block_kernel<W, kVec>, static_cast<unsigned>(rows), kNormBlockThreads, 0, stream, x, w, y,
                  dim, eps, offset);
  }
}

// ---- RoPE -------------------------------------------------------------------------------------

constexpr int kRopeThreads = 128;

/// One thread per (token t, frequency i < half), looping over the heads. inv_freq
/// [head_dim / 2], or null to compute each from theta.
/// grid: ceil(T * half / 128) blocks of 128 threads.
__global__ void __launch_bounds__(kRopeThreads)
    rope_kernel(const float* x, const void* positions, bool pos_i64, float* y, int64_t T, int heads, int head_dim,
                float theta, const float* inv_freq, float position_scale, int* error_flag) {
  allow_next_kernel();
  wait_for_prior_kernels();
  const int half = head_dim / 2;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kRopeThreads + threadIdx.x;
  if (idx >= T * half) return;
  const int64_t t = idx / half;
  const int i = static_cast<int>(idx % half);
  const int64_t width = static_cast<int64_t>(heads) * head_dim;
  const float* xt = x + t * width;
  float* yt = y + t * width;
  const int64_t pos = index_at(positions, pos_i64, t);
  if (pos < 0) {
    if (i == 0 && error_flag != nullptr) atomicExch(error_flag, 1);
    for (int h = 0; h < heads; ++h) {
      yt[h * head_dim + i] = CUDART_NAN_F;
      yt[h * head_dim + i + half] = CUDART_NAN_F;
    }
    return;
  }
  float c = 0.0f;
  float s = 0.0f;
  if (inv_freq != nullptr) {
    rope_angle_cos_sin(pos, position_scale, inv_freq[i], &c, &s);
  } else {
    rope_cos_sin(pos, i, head_dim, theta, position_scale, &c, &s);
  }
  for (int h = 0; h < heads; ++h) {
    // Both inputs are read before either output is written, so y may be x.
    const float a = xt[h * head_dim + i];
    const float b = xt[h * head_dim + i + half];
    rope_rotate(a, b, c, s, &yt[h * head_dim + i], &yt[h * head_dim + i + half]);
  }
}

}  // namespace

// ---- exported entries ---------------------------------------------------------------------------

template <typename W>
cudaError_t rms_norm(const float* x, const W* w, float* y, int64_t rows, int64_t dim, float eps, float offset,
                     cudaStream_t stream) {
  if (rows < 0 || dim <= 0 || dim > INT32_MAX || rows > INT32_MAX) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  const int d = static_cast<int>(dim);
  const bool vec =
      dim % 4 == 0 && aligned16(x) && aligned16(y) && reinterpret_cast<uintptr_t>(w) % (4 * sizeof(W)) == 0;
  if (vec) {
    launch_rms_norm<W, true>(x, w, y, rows, d, eps, offset, stream);
  } else {
    launch_rms_norm<W, false>(x, w, y, rows, d, eps, offset, stream);
  }
  return cudaGetLastError();
}

namespace {

cudaError_t launch_rope(const float* x, const void* positions, bool pos_i64, float* y, int64_t T, int64_t heads,
                        int64_t head_dim, float theta, const float* inv_freq, float position_scale, int* error_flag,
                        cudaStream_t stream) {
  if (T < 0 || heads <= 0 || head_dim <= 0 || head_dim % 2 != 0 || heads > INT32_MAX || head_dim > INT32_MAX) {
    return cudaErrorInvalidValue;
  }
  const int64_t work = T * (head_dim / 2);
  if (work == 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>((work + kRopeThreads - 1) / kRopeThreads);
  launch_kernel(rope_kernel, blocks, kRopeThreads, 0, stream, x, positions, pos_i64, y, T, static_cast<int>(heads),
                static_cast<int>(head_dim), theta, inv_freq, position_scale, error_flag);
  return cudaGetLastError();
}

}  // namespace

cudaError_t rope(const float* x, const void* positions, bool pos_i64, float* y, int64_t T, int64_t heads,
                 int64_t head_dim, float theta, float position_scale, int* error_flag, cudaStream_t stream) {
  return launch_rope(x, positions, pos_i64, y, T, heads, head_dim, theta, nullptr, position_scale, error_flag, stream);
}

cudaError_t rope_with_freqs(const float* x, const void* positions, bool pos_i64, float* y, int64_t T, int64_t heads,
                            int64_t head_dim, const float* inv_freq, float position_scale, int* error_flag,
                            cudaStream_t stream) {
  if (inv_freq == nullptr) return cudaErrorInvalidValue;
  return launch_rope(x, positions, pos_i64, y, T, heads, head_dim, 0.0f, inv_freq, position_scale, error_flag, stream);
}

template cudaError_t rms_norm<float>(const float*, const float*, float*, int64_t, int64_t, float, float, cudaStream_t);
template cudaError_t rms_norm<__nv_bfloat16>(const float*, const __nv_bfloat16*, float*, int64_t, int64_t, float, float,
                                             cudaStream_t);
template cudaError_t rms_norm<__half>(const float*, const __half*, float*, int64_t, int64_t, float, float,
                                      cudaStream_t);

}  // namespace gearbox::cuda
