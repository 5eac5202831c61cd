// CUDA combine of split-KV partials (split_merge.cuh).

#include <math_constants.h>

#include <cstdint>

#include "devices/cuda/device_math.h"
#include "devices/cuda/kernels/attention_common.cuh"
#include "devices/cuda/kernels/split_merge.cuh"
#include "devices/cuda/launch.h"

namespace gearbox::cuda::detail {
namespace {

// ---- decode: combine the splits ---------------------------------------------------------------------

constexpr int kCombineThreads = 256;
static_assert(kMaxSplits <= kCombineThreads, "the combine kernel gives each thread one split");

/// Block-wide reduction of one value per thread (sum or max); every thread gets the result.
template <bool kMax>
__device__ __forceinline__ float block_reduce(float v, float* scratch /* [kCombineThreads / 32] */) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float o = __shfl_xor_sync(0xffffffffu, v, offset);
    v = kMax ? fmaxf(v, o) : v + o;
  }
  const int tid = static_cast<int>(threadIdx.x);
  if (tid % 32 == 0) scratch[tid / 32] = v;
  __syncthreads();
  float r = scratch[0];
  for (int w = 1; w < kCombineThreads / 32; ++w) r = kMax ? fmaxf(r, scratch[w]) : r + scratch[w];
  __syncthreads();  // scratch is reused by the next reduction
  return r;
}

/// Row th's (= t * heads + h) partials of `splits` splits: acc [splits][head_dim], then,
/// after every row's acc, m [splits] and l [splits] (the split kernels' layout).
struct SplitPartials {
  const float* acc;
  const float* m;
  const float* l;
};
__device__ __forceinline__ SplitPartials split_partials(const AttentionArgs& a, const float* partials, int64_t th,
                                                        int splits) {
  const int64_t rows = a.T * a.heads;
  const float* m = partials + rows * splits * a.head_dim + th * splits;
  return {partials + th * splits * a.head_dim, m, m + rows * splits};
}

/// out[t, h, :] = sum_s w_s acc_s / sum_s w_s l_s with w_s = exp2(m_s - max_s m_s); empty
/// splits (m = -inf, l = 0) weigh 0. Threads first take one split each for the weights;
/// then warp w sums splits w, w + 8, ... (8 in flight per lane) over the lane's head_dim
/// slice, and the 8 warps' sums are added in shared memory. grid: (heads, T) blocks of 256.
template <bool kVec4>
__global__ void __launch_bounds__(kCombineThreads)
    attention_decode_combine_kernel(const AttentionArgs a, const float* partials, int splits) {
  allow_next_kernel();
  wait_for_prior_kernels();
  constexpr int kWarps = kCombineThreads / 32;
  __shared__ float weight_s[kMaxSplits];
  __shared__ float reduce_s[kWarps];
  __shared__ float sum_s[kWarps][kMaxD];
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 32;
  const int warp = tid / 32;
  const int h = static_cast<int>(blockIdx.x);
  const int64_t t = blockIdx.y;
  const int D = a.head_dim;
  const int64_t th = t * a.heads + h;
  float* o = a.out + th * D;
  const int64_t p = index_at(a.positions, a.pos_i64, t);
  if (!position_valid(p, a.max_ctx)) {  // uniform over the block: no barrier is skipped by some
    for (int d = tid; d < D; d += kCombineThreads) o[d] = keyless_output(a.slots, p);
    return;
  }
  const auto [acc, m, l] = split_partials(a, partials, th, splits);

  // splits <= kMaxSplits == kCombineThreads: one split per thread.
  const float ms = tid < splits ? m[tid] : -CUDART_INF_F;
  const float ls = tid < splits ? l[tid] : 0.0f;
  const float m_max = block_reduce<true>(ms, reduce_s);
  const float w = ms == -CUDART_INF_F ? 0.0f : exp2f(ms - m_max);
  if (tid < splits) weight_s[tid] = w;
  const float inv_sum = 1.0f / block_reduce<false>(w * ls, reduce_s);  // its barriers publish weight_s

  float sum[kDecodeSlots] = {};
#pragma unroll 8
  for (int s = warp; s < splits; s += kWarps) {
    float v[kDecodeSlots];
    load_slice<kVec4>(acc + static_cast<int64_t>(s) * D, D, lane, v, true);
    const float ws = weight_s[s];
#pragma unroll
    for (int i = 0; i < kDecodeSlots; ++i) sum[i] += ws * v[i];
  }
#pragma unroll
  for (int i = 0; i < kDecodeSlots; ++i) {
    const int d = slice_dim<kVec4>(lane, i);
    if (d < D) sum_s[warp][d] = sum[i];
  }
  __syncthreads();
  for (int d = tid; d < D; d += kCombineThreads) {
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < kWarps; ++i) total += sum_s[i][d];
    o[d] = total * inv_sum;
  }
}

/// Prefill's combine: the same result as attention_decode_combine_kernel for each of the
/// T * heads rows, a warp per row and no barriers. Prefill has many rows and few splits
/// (<= 32: lane s takes split s's max and sum), where the block-per-row kernel spends most of
/// its time in its four barriers. grid: ceil(T * heads / 8) blocks of 256.
template <bool kVec4>
__global__ void __launch_bounds__(kCombineThreads)
    attention_rows_combine_kernel(const AttentionArgs a, const float* partials, int splits) {
  allow_next_kernel();
  wait_for_prior_kernels();
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t th = static_cast<int64_t>(blockIdx.x) * (kCombineThreads / 32) + static_cast<int>(threadIdx.x) / 32;
  if (th >= a.T * a.heads) return;  // whole warps leave
  const int D = a.head_dim;
  float* o = a.out + th * D;
  if (const int64_t p = index_at(a.positions, a.pos_i64, th / a.heads); !position_valid(p, a.max_ctx)) {
    for (int d = lane; d < D; d += 32) o[d] = keyless_output(a.slots, p);
    return;
  }
  const auto [acc, m, l] = split_partials(a, partials, th, splits);
  const float ms = lane < splits ? m[lane] : -CUDART_INF_F;
  const float ls = lane < splits ? l[lane] : 0.0f;
  float m_max = ms;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) m_max = fmaxf(m_max, __shfl_xor_sync(0xffffffffu, m_max, offset));
  const float w = ms == -CUDART_INF_F ? 0.0f : exp2f(ms - m_max);
  const float inv_sum = 1.0f / warp_sum(w * ls);
  float sum[kDecodeSlots] = {};
  for (int s = 0; s < splits; ++s) {
    float v[kDecodeSlots];
    load_slice<kVec4>(acc + static_cast<int64_t>(s) * D, D, lane, v, true);
    const float ws = __shfl_sync(0xffffffffu, w, s);
#pragma unroll
    for (int i = 0; i < kDecodeSlots; ++i) sum[i] += ws * v[i];
  }
#pragma unroll
  for (int i = 0; i < kDecodeSlots; ++i) {
    const int d = slice_dim<kVec4>(lane, i);
    if (d < D) o[d] = sum[i] * inv_sum;
  }
}

}  // namespace

/// The combine kernel over `splits` partials of each of a's T * heads rows: decode's second
/// kernel (more splits than a cluster takes) and the split prefill's.
void launch_combine(const AttentionArgs& a, const float* partials, int splits, bool vec4, const Launch& launch) {
  const dim3 grid(static_cast<unsigned>(a.heads), static_cast<unsigned>(a.T));
  if (vec4 && aligned16(partials)) {
    launch_kernel(attention_decode_combine_kernel<true>, grid, kCombineThreads, 0, launch, a, partials, splits);
  } else {
    launch_kernel(attention_decode_combine_kernel<false>, grid, kCombineThreads, 0, launch, a, partials, splits);
  }
}

/// Prefill's combine of `splits` partials per row: a warp per row where the splits fit in
/// a warp, else the decode kernel.
void launch_combine_rows(const AttentionArgs& a, const float* partials, int splits, bool vec4, const Launch& launch) {
  if (splits > 32) {
    launch_combine(a, partials, splits, vec4, launch);
    return;
  }
  constexpr int64_t kRowsPerBlock = kCombineThreads / 32;
  const auto grid = static_cast<unsigned>((a.T * a.heads + kRowsPerBlock - 1) / kRowsPerBlock);
  if (vec4 && aligned16(partials)) {
    launch_kernel(attention_rows_combine_kernel<true>, grid, kCombineThreads, 0, launch, a, partials, splits);
  } else {
    launch_kernel(attention_rows_combine_kernel<false>, grid, kCombineThreads, 0, launch, a, partials, splits);
  }
}

}  // namespace gearbox::cuda::detail
