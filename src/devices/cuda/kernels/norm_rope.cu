// CUDA RMSNorm and RoPE: row-local ops, memory-bound, one pass over each row.
//
//   rms_norm  x, y [rows, dim] f32, w [dim] W      y = x * inv_rms(x) * (w + offset)
//   rope      x, y [T, heads * head_dim] f32       rotate-half by angle(pos, i)
//
// Both keep the CPU kernels' order of operations (devices/cpu/kernels_elementwise.cpp) so
// results differ from them only by the summation order of the RMS reduction.
//
// head_norm_rope chains the two for the per-head q / k norms of a layer (and copies v out of a
// stacked QKV output) in one launch, or rotates a layer's q and k in one launch where the
// family has no q / k norms, computing what the unfused sequence computes (same order
// of operations per element; the RMS sums are reduced in a different order), so the engine's
// results do not depend on whether the chain was fused.

#include <math_constants.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "devices/cuda/device_math.h"
#include "devices/cuda/kernels/norm_rope.cuh"
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
                     const Launch& launch) {
  if (dim <= kNormWarpMaxDim) {
    const auto blocks = static_cast<unsigned>((rows + kNormWarpRowsPerBlock - 1) / kNormWarpRowsPerBlock);
    launch_kernel(rms_norm_warp_kernel<W, kVec>, blocks, 32 * kNormWarpRowsPerBlock, 0, launch, x, w, y, rows, dim, eps,
                  offset);
  } else {
    launch_kernel(rms_norm_block_kernel<W, kVec>, static_cast<unsigned>(rows), kNormBlockThreads, 0, launch, x, w, y,
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
                float theta, const float* inv_freq, float position_scale, int* error_flag, bool padding) {
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
  if (padding && pos == -1) {  // left unrotated (each element read and written by this thread)
    for (int h = 0; h < heads; ++h) {
      yt[h * head_dim + i] = xt[h * head_dim + i];
      yt[h * head_dim + i + half] = xt[h * head_dim + i + half];
    }
    return;
  }
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

/// grid: one block of 128 threads per (part, token, head). kRotateOnly: every part only
/// rotates (HeadNormRope::rotate_only), none is copied.
template <typename W, bool kRotateOnly>
__global__ void __launch_bounds__(kHeadThreads)
    head_norm_rope_kernel(Parts<W> parts, int count, const void* positions, bool pos_i64, int64_t T, int head_dim,
                          float eps, float offset, int* error_flag, bool padding) {
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
  if (!kRotateOnly && P.w == nullptr) {  // a copied part (uniform over the block)
    for (int i = tid; i < head_dim; i += kHeadThreads) y[i] = x[i];
    return;
  }
  const int64_t pos = index_at(positions, pos_i64, t);

  float inv_rms = 1.0f;
  if constexpr (!kRotateOnly) {
    float sum = 0.0f;
    for (int i = tid; i < head_dim; i += kHeadThreads) sum += x[i] * x[i];
    // Every thread's reads of x precede the barrier inside block_sum_to_all: y may be x below.
    inv_rms = inverse_rms(block_sum_to_all<kHeadThreads>(sum, sums), head_dim, eps);
  }
  // Without a norm there is no barrier, and none is needed: a thread reads and writes only
  // the elements i and i + half of its own pairs.

  if (pos < 0) {
    if (padding && pos == -1) {  // a padding token's rows are never read
      for (int i = tid; i < head_dim; i += kHeadThreads) y[i] = 0.0f;
      return;
    }
    if (tid == 0 && h == 0 && error_flag != nullptr) atomicExch(error_flag, 1);
    for (int i = tid; i < head_dim; i += kHeadThreads) y[i] = CUDART_NAN_F;
    return;
  }
  for (int i = tid; i < half; i += kHeadThreads) {
    float cs = 0.0f;
    float sn = 0.0f;
    const float inv_freq = P.inv_freq != nullptr ? P.inv_freq[i] : rope_inv_freq(i, head_dim, P.theta);
    rope_angle_cos_sin(pos, P.position_scale, inv_freq, &cs, &sn);
    if constexpr (kRotateOnly) {
      rope_rotate(x[i], x[i + half], cs, sn, &y[i], &y[i + half]);
    } else {
      norm_rotate(x[i], x[i + half], inv_rms, to_f32(P.w[i]), to_f32(P.w[i + half]), offset, cs, sn, &y[i],
                  &y[i + half]);
    }
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
/// head_norm_rope_kernel; the RMS sums add in another order. kRotateOnly: as there.
template <typename W, bool kRotateOnly>
__global__ void __launch_bounds__(32 * kHeadWarps)
    head_norm_rope_warp_kernel(Parts<W> parts, int count, const void* positions, bool pos_i64, int head_dim, float eps,
                               float offset, int* error_flag, bool padding) {
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
  if (!kRotateOnly && P.w == nullptr) {  // a copied part
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
  // element is read and written by one lane, also where nothing is normalized).
  const float inv_rms = kRotateOnly ? 1.0f : inverse_rms(warp_sum(sum), head_dim, eps);
  if (pos < 0) {
    if (padding && pos == -1) {  // a padding token's rows are never read
      for (int i = lane; i < head_dim; i += 32) y[i] = 0.0f;
      return;
    }
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
      if constexpr (kRotateOnly) {
        rope_rotate(av[e], bv[e], cs, sn, &ya[e], &yb[e]);
      } else {
        norm_rotate(av[e], bv[e], inv_rms, to_f32(P.w[i]), to_f32(P.w[i + half]), offset, cs, sn, &ya[e], &yb[e]);
      }
    }
    reinterpret_cast<float4*>(y)[q] = make_float4(ya[0], ya[1], ya[2], ya[3]);
    reinterpret_cast<float4*>(y + half)[q] = make_float4(yb[0], yb[1], yb[2], yb[3]);
  }
}

}  // namespace

// ---- exported entries ---------------------------------------------------------------------------

template <typename W>
cudaError_t rms_norm(const float* x, const W* w, float* y, int64_t rows, int64_t dim, float eps, float offset,
                     const Launch& launch) {
  if (rows < 0 || dim <= 0 || dim > INT32_MAX || rows > INT32_MAX) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  const int d = static_cast<int>(dim);
  const bool vec =
      dim % 4 == 0 && aligned16(x) && aligned16(y) && reinterpret_cast<uintptr_t>(w) % (4 * sizeof(W)) == 0;
  if (vec) {
    launch_rms_norm<W, true>(x, w, y, rows, d, eps, offset, launch);
  } else {
    launch_rms_norm<W, false>(x, w, y, rows, d, eps, offset, launch);
  }
  return cudaGetLastError();
}

namespace {

cudaError_t launch_rope(const float* x, const void* positions, bool pos_i64, float* y, int64_t T, int64_t heads,
                        int64_t head_dim, float theta, const float* inv_freq, float position_scale, int* error_flag,
                        const Launch& launch, bool padding) {
  if (T < 0 || heads <= 0 || head_dim <= 0 || head_dim % 2 != 0 || heads > INT32_MAX || head_dim > INT32_MAX) {
    return cudaErrorInvalidValue;
  }
  const int64_t work = T * (head_dim / 2);
  if (work == 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>((work + kRopeThreads - 1) / kRopeThreads);
  launch_kernel(rope_kernel, blocks, kRopeThreads, 0, launch, x, positions, pos_i64, y, T, static_cast<int>(heads),
                static_cast<int>(head_dim), theta, inv_freq, position_scale, error_flag, padding);
  return cudaGetLastError();
}

}  // namespace

cudaError_t rope(const float* x, const void* positions, bool pos_i64, float* y, int64_t T, int64_t heads,
                 int64_t head_dim, float theta, float position_scale, int* error_flag, const Launch& launch,
                 bool padding) {
  return launch_rope(x, positions, pos_i64, y, T, heads, head_dim, theta, nullptr, position_scale, error_flag, launch,
                     padding);
}

cudaError_t rope_with_freqs(const float* x, const void* positions, bool pos_i64, float* y, int64_t T, int64_t heads,
                            int64_t head_dim, const float* inv_freq, float position_scale, int* error_flag,
                            const Launch& launch, bool padding) {
  if (inv_freq == nullptr) return cudaErrorInvalidValue;
  return launch_rope(x, positions, pos_i64, y, T, heads, head_dim, 0.0f, inv_freq, position_scale, error_flag, launch,
                     padding);
}

template <typename W>
cudaError_t head_norm_rope(const HeadNormRope<W>* parts, int count, const void* positions, bool pos_i64, int64_t T,
                           int64_t head_dim, float eps, float offset, int* error_flag, const Launch& launch,
                           bool padding) {
  if (count < 1 || count > kMaxParts || T < 0 || head_dim <= 0 || head_dim % 2 != 0 || head_dim > 1024) {
    return cudaErrorInvalidValue;
  }
  Parts<W> args{};
  args.first_block[0] = 0;
  for (int i = 0; i < count; ++i) {
    if (parts[i].heads <= 0 || (parts[i].x_row_stride != 0 && parts[i].x_row_stride < parts[i].heads * head_dim) ||
        parts[i].rotate_only != parts[0].rotate_only) {  // every part rotated only, or none
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
  const auto go = [&](auto rotate_only) {
    constexpr bool kRotateOnly = decltype(rotate_only)::value;
    if (warp) {
      launch_kernel(head_norm_rope_warp_kernel<W, kRotateOnly>,
                    static_cast<unsigned>((blocks + kHeadWarps - 1) / kHeadWarps), 32 * kHeadWarps, 0, launch, args,
                    count, positions, pos_i64, static_cast<int>(head_dim), eps, offset, error_flag, padding);
    } else {
      launch_kernel(head_norm_rope_kernel<W, kRotateOnly>, static_cast<unsigned>(blocks), kHeadThreads, 0, launch, args,
                    count, positions, pos_i64, T, static_cast<int>(head_dim), eps, offset, error_flag, padding);
    }
  };
  if (parts[0].rotate_only) {
    go(std::true_type{});
  } else {
    go(std::false_type{});
  }
  return cudaGetLastError();
}

template cudaError_t rms_norm<float>(const float*, const float*, float*, int64_t, int64_t, float, float, const Launch&);
template cudaError_t rms_norm<__nv_bfloat16>(const float*, const __nv_bfloat16*, float*, int64_t, int64_t, float, float,
                                             const Launch&);
template cudaError_t rms_norm<__half>(const float*, const __half*, float*, int64_t, int64_t, float, float,
                                      const Launch&);

#define GEARBOX_INSTANTIATE_HEAD_NORM_ROPE(W)                                                                     \
  template cudaError_t head_norm_rope<W>(const HeadNormRope<W>*, int, const void*, bool, int64_t, int64_t, float, \
                                         float, int*, const Launch&, bool);
GEARBOX_INSTANTIATE_HEAD_NORM_ROPE(float)
GEARBOX_INSTANTIATE_HEAD_NORM_ROPE(__nv_bfloat16)
GEARBOX_INSTANTIATE_HEAD_NORM_ROPE(__half)
#undef GEARBOX_INSTANTIATE_HEAD_NORM_ROPE

}  // namespace gearbox::cuda
