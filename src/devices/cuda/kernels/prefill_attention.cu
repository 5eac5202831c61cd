// CUDA tiled attention (prefill_attention.cuh): a block takes 16 query rows of one head and
// walks their keys in tiles of 32 staged in shared memory, online softmax in f32 (expf), the
// keys of few row blocks split across blocks and combined by split_merge.

#include <math_constants.h>

#include <algorithm>
#include <cstdint>

#include "devices/cuda/device_math.h"
#include "devices/cuda/kernels/attention_common.cuh"
#include "devices/cuda/kernels/decode_attention.cuh"
#include "devices/cuda/kernels/prefill_attention.cuh"
#include "devices/cuda/kernels/split_merge.cuh"
#include "devices/cuda/launch.h"

namespace gearbox::cuda {
using namespace detail;  // the attention families' internals (attention_common.cuh)
namespace {

// ---- prefill: tiled --------------------------------------------------------------------------------

constexpr int kPrefillRows = 16;  // query rows (tokens of one head) per block
constexpr int kPrefillKeys = 32;  // keys per tile
constexpr int kPrefillThreads = 128;
constexpr int kPrefillLanesPerRow = kPrefillThreads / kPrefillRows;        // 8, adjacent lanes of one warp
constexpr int kPrefillScoresPerLane = kPrefillKeys / kPrefillLanesPerRow;  // 4
constexpr int kPrefillDPerLane = kMaxD / kPrefillLanesPerRow;              // 32
// Blocks per SM the prefill launch aims for by splitting the keys of few row blocks (short
// prompts), at most kPrefillMaxSplits ways.
constexpr int64_t kPrefillBlocksPerSm = 4;
constexpr int64_t kPrefillMaxSplits = 8;

/// Shared memory: q [16][D + 1], k [32][D + 1] (odd strides: a lane per key reads without
/// bank conflicts), v [32][D], p [16][33].
size_t prefill_smem_bytes(int D) {
  return sizeof(float) * static_cast<size_t>(kPrefillRows * (D + 1) + kPrefillKeys * (D + 1) + kPrefillKeys * D +
                                             kPrefillRows * (kPrefillKeys + 1));
}

/// One block: 16 consecutive query rows of head h against the keys any of them sees, in
/// tiles of 32 staged in shared memory. Lanes 8r..8r+7 own row r: scores for keys
/// c = lane % 8 + 8i (i < 4), then output dims d = lane % 8 + 8i (i < 32), with the row's
/// max and sum kept in those lanes' registers (8-lane shuffles).
/// With splits > 1, block z takes the z-th of `splits` runs of tiles and writes its
/// unnormalized result as a split-KV partial (decode's layout and base-2 max), which the
/// combine kernel merges: short prompts give few row blocks, and the splits fill the GPU.
/// In a batched network (a.slots) a block's rows are of one batch row, so its keys are of one
/// slot's cache.
/// grid: (B * ceil(seq / 16), heads, splits) blocks of 128 threads (B = 1, seq = T for one
/// sequence).
template <bool kVec4>
__global__ void __launch_bounds__(kPrefillThreads)
    attention_prefill_kernel(const AttentionArgs a, float* partials, int splits) {
  extern __shared__ __align__(16) float smem[];
  const int D = a.head_dim;
  float* q_s = smem;
  float* k_s = q_s + kPrefillRows * (D + 1);
  float* v_s = k_s + kPrefillKeys * (D + 1);  // 16-byte aligned: 48 * (D + 1) floats before it
  float* p_s = v_s + kPrefillKeys * D;

  const int tid = static_cast<int>(threadIdx.x);
  const int r = tid / kPrefillLanesPerRow;
  const int cg = tid % kPrefillLanesPerRow;
  const int h = static_cast<int>(blockIdx.y);
  const int kvh = h / (a.heads / a.kv_heads);
  // The block's query rows [t0, t_end): 16 tokens of one batch row (of one slot's cache).
  const int64_t seq = a.slots.ids != nullptr ? a.slots.seq : a.T;
  const int64_t row_blocks = (seq + kPrefillRows - 1) / kPrefillRows;
  const int64_t batch_row = static_cast<int64_t>(blockIdx.x) / row_blocks;
  const int64_t t0 = batch_row * seq + static_cast<int64_t>(blockIdx.x) % row_blocks * kPrefillRows;
  const int64_t t_end = min(batch_row * seq + seq, a.T);
  const int64_t q_width = static_cast<int64_t>(a.heads) * D;
  const int64_t kv_width = static_cast<int64_t>(a.kv_heads) * D;

  // This row's keys [lo, hi) and the block's, the union over its rows.
  const int64_t t = t0 + r;
  const bool row_in = t < t_end;
  const int64_t p = row_in ? index_at(a.positions, a.pos_i64, t) : -1;
  const bool valid = row_in && position_valid(p, a.max_ctx);
  const int64_t lo = valid ? window_start(p, a.window) : 0;
  const int64_t hi = valid ? p + 1 : 0;
  int64_t keys_begin = INT64_MAX;
  int64_t keys_end = 0;
  for (int rr = 0; rr < kPrefillRows && t0 + rr < t_end; ++rr) {
    const int64_t pr = index_at(a.positions, a.pos_i64, t0 + rr);
    if (!position_valid(pr, a.max_ctx)) continue;
    keys_begin = min(keys_begin, window_start(pr, a.window));
    keys_end = max(keys_end, pr + 1);
  }
  const int split = static_cast<int>(blockIdx.z);
  split_key_range(keys_begin, keys_end, split, splits, kPrefillKeys);

  for (int e = tid; e < kPrefillRows * D; e += kPrefillThreads) {
    const int rr = e / D;
    const int d = e % D;
    q_s[rr * (D + 1) + d] = t0 + rr < t_end ? a.q[(t0 + rr) * q_width + static_cast<int64_t>(h) * D + d] : 0.0f;
  }
  float m = -CUDART_INF_F;
  float l = 0.0f;
  float acc[kPrefillDPerLane];
#pragma unroll
  for (int i = 0; i < kPrefillDPerLane; ++i) acc[i] = 0.0f;

  const int64_t row0 = slot_first_row(a.slots, t0, a.max_ctx);  // the block's slot's cache
  const float* k_head = a.k_cache + row0 * kv_width + static_cast<int64_t>(kvh) * D;
  const float* v_head = a.v_cache + row0 * kv_width + static_cast<int64_t>(kvh) * D;
  for (int64_t j0 = keys_begin; j0 < keys_end; j0 += kPrefillKeys) {
    const int nk = static_cast<int>(min(static_cast<int64_t>(kPrefillKeys), keys_end - j0));
    __syncthreads();  // the previous tile's k, v and p are no longer read (and q_s is stored)
    if constexpr (kVec4) {
      const int d4s = D / 4;
      for (int e = tid; e < nk * d4s; e += kPrefillThreads) {
        const int c = e / d4s;
        const int d4 = e % d4s;
        const float4 kv = __ldg(reinterpret_cast<const float4*>(k_head + (j0 + c) * kv_width) + d4);
        const float4 vv = __ldg(reinterpret_cast<const float4*>(v_head + (j0 + c) * kv_width) + d4);
        float* kd = k_s + c * (D + 1) + 4 * d4;
        kd[0] = kv.x;
        kd[1] = kv.y;
        kd[2] = kv.z;
        kd[3] = kv.w;
        reinterpret_cast<float4*>(v_s + c * D)[d4] = vv;
      }
    } else {
      for (int e = tid; e < nk * D; e += kPrefillThreads) {
        const int c = e / D;
        const int d = e % D;
        k_s[c * (D + 1) + d] = __ldg(k_head + (j0 + c) * kv_width + d);
        v_s[c * D + d] = __ldg(v_head + (j0 + c) * kv_width + d);
      }
    }
    __syncthreads();

    float s[kPrefillScoresPerLane];
#pragma unroll
    for (int i = 0; i < kPrefillScoresPerLane; ++i) s[i] = 0.0f;
    const float* q_row = q_s + r * (D + 1);
    for (int d = 0; d < D; ++d) {
      const float qd = q_row[d];
#pragma unroll
      for (int i = 0; i < kPrefillScoresPerLane; ++i) s[i] += qd * k_s[(cg + kPrefillLanesPerRow * i) * (D + 1) + d];
    }
    float tile_max = -CUDART_INF_F;
#pragma unroll
    for (int i = 0; i < kPrefillScoresPerLane; ++i) {
      const int64_t j = j0 + cg + kPrefillLanesPerRow * i;
      s[i] = (cg + kPrefillLanesPerRow * i < nk && j >= lo && j < hi) ? s[i] * a.scale : -CUDART_INF_F;
      tile_max = fmaxf(tile_max, s[i]);
    }
#pragma unroll
    for (int offset = kPrefillLanesPerRow / 2; offset > 0; offset >>= 1) {
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, offset));
    }
    const float m_new = fmaxf(m, tile_max);
    float alpha = 1.0f;
    float sum = 0.0f;
    float* p_row = p_s + r * (kPrefillKeys + 1);
#pragma unroll
    for (int i = 0; i < kPrefillScoresPerLane; ++i) {
      // No key of this row yet (m_new = -inf): every weight is 0 and nothing is rescaled.
      const float e = m_new == -CUDART_INF_F ? 0.0f : expf(s[i] - m_new);
      p_row[cg + kPrefillLanesPerRow * i] = e;
      sum += e;
    }
    if (m_new != -CUDART_INF_F) alpha = expf(m - m_new);  // 0 while m = -inf
#pragma unroll
    for (int offset = kPrefillLanesPerRow / 2; offset > 0; offset >>= 1) {
      sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    }
    l = l * alpha + sum;
    m = m_new;
    __syncwarp();  // p_row is written and read by the 8 lanes of row r, all in this warp

#pragma unroll
    for (int i = 0; i < kPrefillDPerLane; ++i) acc[i] *= alpha;
    for (int c = 0; c < nk; ++c) {
      const float pc = p_row[c];
      // A key masked for this row weighs 0 but its V row may hold anything (NaN: 0 * NaN).
      if (pc == 0.0f) continue;
      const float* v_row = v_s + c * D;
#pragma unroll
      for (int i = 0; i < kPrefillDPerLane; ++i) {
        const int d = cg + kPrefillLanesPerRow * i;
        if (d < D) acc[i] += pc * v_row[d];
      }
    }
  }

  if (!row_in) return;
  if (splits > 1) {  // m in base-2 units (score * log2 e), as the combine kernel weighs them
    const int64_t th = t * a.heads + h;
    float* acc_out = partials + (th * splits + split) * D;
#pragma unroll
    for (int i = 0; i < kPrefillDPerLane; ++i) {
      const int d = cg + kPrefillLanesPerRow * i;
      if (d < D) acc_out[d] = acc[i];
    }
    if (cg == 0) {
      float* m_out = partials + a.T * a.heads * splits * D + th * splits + split;
      *m_out = m == -CUDART_INF_F ? m : m * 1.4426950408889634f;
      m_out[a.T * a.heads * splits] = l;
    }
    return;
  }
  float* o = a.out + t * q_width + static_cast<int64_t>(h) * D;
  const float inv = 1.0f / l;
#pragma unroll
  for (int i = 0; i < kPrefillDPerLane; ++i) {
    const int d = cg + kPrefillLanesPerRow * i;
    if (d < D) o[d] = valid ? acc[i] * inv : keyless_output(a.slots, p);
  }
}

}  // namespace

namespace detail {

/// Ways to split the keys of each block of `rows` query rows: enough blocks for `target`
/// in all, at most `most`.
int prefill_splits(int64_t T, int64_t heads, int64_t rows, int64_t target, int64_t most) {
  const int64_t blocks = (T + rows - 1) / rows * heads;
  if (blocks <= 0) return 1;
  return static_cast<int>(std::clamp<int64_t>((target + blocks - 1) / blocks, 1, most));
}

/// The partials any t <= T needs when t tokens split splits(t, heads, limits) ways.
int64_t prefill_scratch_floats(int64_t T, int64_t heads, int64_t head_dim,
                               int (*splits_for)(int64_t, int64_t, const DeviceLimits&), const DeviceLimits& limits) {
  if (T <= 0 || heads <= 0 || head_dim <= 0) return 0;
  int64_t most = 0;  // the largest t * splits(t)
  for (int64_t t = 1; t <= T; ++t) {
    const int splits = splits_for(t, heads, limits);
    if (splits > 1) most = std::max(most, attention_decode_partials_floats(t, heads, head_dim, splits));
    if (splits == 1) break;  // splits only fall as t grows
  }
  return most;
}

}  // namespace detail

int attention_prefill_splits(int64_t T, int64_t heads, const DeviceLimits& limits) {
  return prefill_splits(T, heads, kPrefillRows, kPrefillBlocksPerSm * limits.sm_count, kPrefillMaxSplits);
}

int64_t attention_prefill_scratch_floats(int64_t T, int64_t heads, int64_t head_dim, const DeviceLimits& limits) {
  return prefill_scratch_floats(T, heads, head_dim, attention_prefill_splits, limits);
}

cudaError_t attention_prefill(const float* q, const float* k_cache, const float* v_cache, const void* positions,
                              bool pos_i64, float* out, int64_t T, int64_t heads, int64_t kv_heads, int64_t head_dim,
                              int64_t max_ctx, int64_t window, float scale, float* scratch, const Launch& launch,
                              const CacheSlots& slots) {
  if (check_attention_shape(T, heads, kv_heads, head_dim, max_ctx, window) != cudaSuccess || slots.seq < 1 ||
      (slots.ids != nullptr && T % slots.seq != 0)) {
    return cudaErrorInvalidValue;
  }
  if (T == 0) return cudaSuccess;
  const AttentionArgs a = make_args(q, k_cache, v_cache, positions, pos_i64, out, T, heads, kv_heads, head_dim, max_ctx,
                                    window, scale, slots);
  const bool vec4 = head_dim % 4 == 0 && aligned16(k_cache) && aligned16(v_cache);
  const size_t smem = prefill_smem_bytes(static_cast<int>(head_dim));
  const int splits = attention_prefill_splits(T, heads, *launch.limits);
  if (splits > 1 && scratch == nullptr) return cudaErrorInvalidValue;
  const int64_t seq = slots.ids != nullptr ? slots.seq : T;
  const int64_t row_blocks = (T / seq) * ((seq + kPrefillRows - 1) / kPrefillRows);
  if (row_blocks > INT32_MAX) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(heads), static_cast<unsigned>(splits));
  // Above 48 KiB of dynamic shared memory a kernel must opt in (per device: so every launch).
  const auto kernel = vec4 ? attention_prefill_kernel<true> : attention_prefill_kernel<false>;
  const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (attr != cudaSuccess) return attr;
  // A plain launch (launch.h): this kernel runs long enough that an early start gains
  // nothing, and the waits would cost it registers, which slows it down.
  kernel<<<grid, kPrefillThreads, smem, launch.stream>>>(a, scratch, splits);
  // The combine is the call's first kernel launched through launch_kernel.
  if (splits > 1) launch_combine_rows(a, scratch, splits, vec4, launch);
  return cudaGetLastError();
}

}  // namespace gearbox::cuda
