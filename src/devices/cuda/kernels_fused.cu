// Fused chains of the CUDA device, for the decode step where launches, not bytes, cost:
//
//   head_norm_rope  per-head RMSNorm then RoPE, for q and k of one layer in one launch (and
//                   v copied out of a stacked QKV output)
//   norm_add_norm   post-norm + residual add + the next pre-norm, one pass over a row
//
// Each computes what its unfused sequence computes (same order of operations per element;
// the RMS sums are reduced in a different order), so the engine's results do not depend
// on whether a chain was fused (tests/devices/cuda/kernels_test.cpp checks both against
// the CPU kernels).
#include <math_constants.h>

#include <cstdint>

#include "devices/cuda/device_math.h"
#include "devices/cuda/kernels.h"
#include "devices/cuda/launch.h"

namespace gearbox::cuda {
namespace {

// ---- head_norm_rope ----------------------------------------------------------------------------

constexpr int kHeadThreads = 128;  // one rotation pair (i, i + half) per thread, looping past 128
constexpr int kMaxParts = kHeadNormRopeMaxParts;

template <typename W>
struct Parts {
  HeadNormRope<W> p[kMaxParts];
  int64_t first_block[kMaxParts + 1];  // blocks before part i: T * heads of the earlier parts
};

/// A (part, token, head) of a head_norm_rope launch: unit i of the parts' T * heads each.
template <typename W>
struct HeadUnit {
  HeadNormRope<W> part;
  int64_t t;
  int64_t h;
};
template <typename W>
__device__ __forceinline__ HeadUnit<W> head_unit(const Parts<W>& parts, int count, int64_t unit) {
  // Three parts at most, chosen without a dynamic index (which would copy the parameters
  // to local memory).
  static_assert(kMaxParts == 3);
  const bool second = count >= 2 && unit >= parts.first_block[1];
  const bool third = count == 3 && unit >= parts.first_block[2];
  const HeadNormRope<W>& P = third ? parts.p[2] : second ? parts.p[1] : parts.p[0];
  const int64_t local = unit - (third ? parts.first_block[2] : second ? parts.first_block[1] : 0);
  return {P, local / P.heads, local % P.heads};
}

/// grid: one block of 128 threads per (part, token, head).
template <typename W>
__global__ void __launch_bounds__(kHeadThreads)
    head_norm_rope_kernel(Parts<W> parts, int count, const void* positions, bool pos_i64, int64_t T, int head_dim,
                          float eps, float offset, int* error_flag) {
  __shared__ float sums[kHeadThreads / 32];
  allow_next_kernel();
  wait_for_prior_kernels();
  const HeadUnit<W> u = head_unit(parts, count, blockIdx.x);
  const HeadNormRope<W>& P = u.part;
  const int64_t t = u.t;
  const int64_t h = u.h;
  const int tid = static_cast<int>(threadIdx.x);
  const int half = head_dim / 2;
  const int64_t x_row = P.x_row_stride > 0 ? P.x_row_stride : P.heads * head_dim;
  const float* x = P.x + t * x_row + h * head_dim;
  float* y = P.y + (t * P.heads + h) * head_dim;
  if (P.w == nullptr) {  // a copied part (uniform over the block)
    for (int i = tid; i < head_dim; i += kHeadThreads) y[i] = x[i];
    return;
  }
  const int64_t pos = index_at(positions, pos_i64, t);

  float sum = 0.0f;
  for (int i = tid; i < head_dim; i += kHeadThreads) sum += x[i] * x[i];
  // Every thread's reads of x precede the barrier inside block_sum_to_all: y may be x below.
  const float inv_rms = inverse_rms(block_sum_to_all<kHeadThreads>(sum, sums), head_dim, eps);

  if (pos < 0) {
    if (tid == 0 && h == 0 && error_flag != nullptr) atomicExch(error_flag, 1);
    for (int i = tid; i < head_dim; i += kHeadThreads) y[i] = CUDART_NAN_F;
    return;
  }
  for (int i = tid; i < half; i += kHeadThreads) {
    float cs = 0.0f;
    float sn = 0.0f;
    const float inv_freq = P.inv_freq != nullptr ? P.inv_freq[i] : rope_inv_freq(i, head_dim, P.theta);
    rope_angle_cos_sin(pos, P.position_scale, inv_freq, &cs, &sn);
    norm_rotate(x[i], x[i + half], inv_rms, to_f32(P.w[i]), to_f32(P.w[i + half]), offset, cs, sn, &y[i], &y[i + half]);
  }
}

// The warp-per-head kernel: head_dim % 8 == 0, head_dim <= 8 * 32 * kHeadQuads, rows and
// tables 16-byte aligned. A (token, head) is one warp's; lane l holds the float4s l, l + 32,
// ... of each half of the head (rotation partners in one lane), so the RMS sum is shuffles
// and every load is 16 bytes. Gemma-3's head_dim 256 is one float4 a lane and half.
constexpr int kHeadQuads = 2;
constexpr int kHeadWarps = 4;

/// grid: ceil(units / kHeadWarps) blocks of kHeadWarps warps, units = sum over parts of T *
/// heads; warp w of block b takes unit b * kHeadWarps + w. The same arithmetic per element as
/// head_norm_rope_kernel; the RMS sums add in another order.
template <typename W>
__global__ void __launch_bounds__(32 * kHeadWarps)
    head_norm_rope_warp_kernel(Parts<W> parts, int count, const void* positions, bool pos_i64, int head_dim, float eps,
                               float offset, int* error_flag) {
  allow_next_kernel();
  wait_for_prior_kernels();
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t unit = static_cast<int64_t>(blockIdx.x) * kHeadWarps + static_cast<int>(threadIdx.x) / 32;
  if (unit >= parts.first_block[count]) return;  // uniform across the warp
  const HeadUnit<W> u = head_unit(parts, count, unit);
  const HeadNormRope<W>& P = u.part;
  const int64_t t = u.t;
  const int64_t h = u.h;
  const int half = head_dim / 2;
  const int quads = half / 4;  // of each half
  const int64_t x_row = P.x_row_stride > 0 ? P.x_row_stride : P.heads * head_dim;
  const float* x = P.x + t * x_row + h * head_dim;
  float* y = P.y + (t * P.heads + h) * head_dim;
  if (P.w == nullptr) {  // a copied part
#pragma unroll
    for (int k = 0; k < 2 * kHeadQuads; ++k) {
      const int q = lane + 32 * k;
      if (q < 2 * quads) reinterpret_cast<float4*>(y)[q] = reinterpret_cast<const float4*>(x)[q];
    }
    return;
  }
  const int64_t pos = index_at(positions, pos_i64, t);
  float4 a[kHeadQuads];
  float4 b[kHeadQuads];
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kHeadQuads; ++k) {
    const int q = lane + 32 * k;
    const bool in = q < quads;
    a[k] = in ? reinterpret_cast<const float4*>(x)[q] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    b[k] = in ? reinterpret_cast<const float4*>(x + half)[q] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    sum += a[k].x * a[k].x + a[k].y * a[k].y + a[k].z * a[k].z + a[k].w * a[k].w;
    sum += b[k].x * b[k].x + b[k].y * b[k].y + b[k].z * b[k].z + b[k].w * b[k].w;
  }
  // The shuffles order every lane's reads of x before the writes below (y may be x; each
  // element is read and written by one lane).
  const float inv_rms = inverse_rms(warp_sum(sum), head_dim, eps);
  if (pos < 0) {
    if (lane == 0 && h == 0 && error_flag != nullptr) atomicExch(error_flag, 1);
    for (int i = lane; i < head_dim; i += 32) y[i] = CUDART_NAN_F;
    return;
  }
#pragma unroll
  for (int k = 0; k < kHeadQuads; ++k) {
    const int q = lane + 32 * k;
    if (q >= quads) continue;
    const float av[4] = {a[k].x, a[k].y, a[k].z, a[k].w};
    const float bv[4] = {b[k].x, b[k].y, b[k].z, b[k].w};
    float ya[4];
    float yb[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = 4 * q + e;
      float cs = 0.0f;
      float sn = 0.0f;
      const float inv_freq = P.inv_freq != nullptr ? P.inv_freq[i] : rope_inv_freq(i, head_dim, P.theta);
      rope_angle_cos_sin(pos, P.position_scale, inv_freq, &cs, &sn);
      norm_rotate(av[e], bv[e], inv_rms, to_f32(P.w[i]), to_f32(P.w[i + half]), offset, cs, sn, &ya[e], &yb[e]);
    }
    reinterpret_cast<float4*>(y)[q] = make_float4(ya[0], ya[1], ya[2], ya[3]);
    reinterpret_cast<float4*>(y + half)[q] = make_float4(yb[0], yb[1], yb[2], yb[3]);
  }
}

// ---- norm_add_norm -----------------------------------------------------------------------------

constexpr int kRowThreads = 256;  // the looping kernel, any dim
// The register-cached kernel, dim <= threads * kCachedPer: 1024 threads a row for few rows
// (decode: the latency of one row is the kernel's), 256 for many (prefill: 1024-thread
// blocks, two per SM, took 13.5 us for 512 rows of 1152 on the H200, two waves of blocks
// each waiting on 32-warp barriers).
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
template <typename W, typename Y, int kCachedThreads>
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
    g1[k] = in ? to_f32(w_post[i]) : 0.0f;
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
  // The barrier in block_sum orders every read of x and residual before any write below.
  const float inv1 = inverse_rms(block_sum<kCachedThreads>(squares, reduce1), dim, eps);
  float squares2 = 0.0f;
#pragma unroll
  for (int k = 0; k < kCachedPer; ++k) {
    const float normed = xv[k] * inv1 * (g1[k] + offset);
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
/// every phase, so an element is read and written by one thread.
template <typename W, typename Y>
__global__ void __launch_bounds__(kRowThreads)
    norm_add_norm_kernel(const float* x, const W* w_post, const float* residual, float* sum, const W* w_next, Y* y,
                         int dim, float eps, float offset) {
  __shared__ float reduce1[kRowThreads / 32 + 1];
  __shared__ float reduce2[kRowThreads / 32 + 1];
  allow_next_kernel();
  wait_for_prior_kernels();
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t base = static_cast<int64_t>(blockIdx.x) * dim;
  float squares = 0.0f;
  for (int i = tid; i < dim; i += kRowThreads) squares += x[base + i] * x[base + i];
  const float inv1 = inverse_rms(block_sum<kRowThreads>(squares, reduce1), dim, eps);
  float squares2 = 0.0f;
  for (int i = tid; i < dim; i += kRowThreads) {
    const float normed = x[base + i] * inv1 * (to_f32(w_post[i]) + offset);
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

template <typename W>
cudaError_t head_norm_rope(const HeadNormRope<W>* parts, int count, const void* positions, bool pos_i64, int64_t T,
                           int64_t head_dim, float eps, float offset, int* error_flag, const Launch& launch) {
  if (count < 1 || count > kMaxParts || T < 0 || head_dim <= 0 || head_dim % 2 != 0 || head_dim > 1024) {
    return cudaErrorInvalidValue;
  }
  Parts<W> args{};
  args.first_block[0] = 0;
  for (int i = 0; i < count; ++i) {
    if (parts[i].heads <= 0 || (parts[i].x_row_stride != 0 && parts[i].x_row_stride < parts[i].heads * head_dim)) {
      return cudaErrorInvalidValue;
    }
    args.p[i] = parts[i];
    args.first_block[i + 1] = args.first_block[i] + T * parts[i].heads;
  }
  const int64_t blocks = args.first_block[count];
  if (blocks == 0) return cudaSuccess;
  if (blocks > INT32_MAX) return cudaErrorInvalidValue;
  // The warp form for calls of several tokens (faster there; no faster at one token, which
  // takes the block form), where the rows and tables allow its 16-byte loads.
  bool warp = T > 1 && head_dim % 8 == 0 && head_dim <= 8 * 32 * kHeadQuads;
  for (int i = 0; i < count && warp; ++i) {
    const HeadNormRope<W>& p = parts[i];
    const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
    warp = aligned(p.x) && aligned(p.y) && p.x_row_stride % 4 == 0 && (p.inv_freq == nullptr || aligned(p.inv_freq));
  }
  if (warp) {
    launch_kernel(head_norm_rope_warp_kernel<W>, static_cast<unsigned>((blocks + kHeadWarps - 1) / kHeadWarps),
                  32 * kHeadWarps, 0, launch, args, count, positions, pos_i64, static_cast<int>(head_dim), eps, offset,
                  error_flag);
    return cudaGetLastError();
  }
  launch_kernel(head_norm_rope_kernel<W>, static_cast<unsigned>(blocks), kHeadThreads, 0, launch, args, count,
                positions, pos_i64, T, static_cast<int>(head_dim), eps, offset, error_flag);
  return cudaGetLastError();
}

namespace {

template <typename W, typename Y>
cudaError_t launch_norm_add_norm(const float* x, const W* w_post, const float* residual, float* sum, const W* w_next,
                                 Y* y, int64_t rows, int64_t dim, float eps, float offset, const Launch& launch) {
  if (rows < 0 || dim <= 0 || dim > INT32_MAX || rows > INT32_MAX) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  const auto grid = static_cast<unsigned>(rows);
  const int d = static_cast<int>(dim);
  if (rows <= kFewRows && dim <= static_cast<int64_t>(kCachedThreadsFewRows) * kCachedPer) {
    launch_kernel(norm_add_norm_cached_kernel<W, Y, kCachedThreadsFewRows>, grid, kCachedThreadsFewRows, 0, launch, x,
                  w_post, residual, sum, w_next, y, d, eps, offset);
  } else if (dim <= static_cast<int64_t>(kCachedThreadsManyRows) * kCachedPer) {
    launch_kernel(norm_add_norm_cached_kernel<W, Y, kCachedThreadsManyRows>, grid, kCachedThreadsManyRows, 0, launch, x,
                  w_post, residual, sum, w_next, y, d, eps, offset);
  } else {
    launch_kernel(norm_add_norm_kernel<W, Y>, grid, kRowThreads, 0, launch, x, w_post, residual, sum, w_next, y, d, eps,
                  offset);
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

#define GEARBOX_FUSED(W)                                                                                          \
  template cudaError_t head_norm_rope<W>(const HeadNormRope<W>*, int, const void*, bool, int64_t, int64_t, float, \
                                         float, int*, const Launch&);                                             \
  template cudaError_t norm_add_norm<W>(const float*, const W*, const float*, float*, const W*, float*, int64_t,  \
                                        int64_t, float, float, const Launch&);                                    \
  template cudaError_t norm_add_norm_to<W>(const float*, const W*, const float*, float*, const W*, W*, int64_t,   \
                                           int64_t, float, float, const Launch&);
GEARBOX_FUSED(float)
GEARBOX_FUSED(__nv_bfloat16)
GEARBOX_FUSED(__half)
#undef GEARBOX_FUSED

}  // namespace gearbox::cuda
