// What the attention families share (kv_cache, decode_attention, split_merge,
// prefill_attention, prefill_attention_mma): the arguments every attention kernel takes, the
// layout of split-KV partials and the device helpers over them. Include from those .cu files
// only. Causal, optional sliding window, grouped-query (kv head = h / (heads / kv_heads)).
//
//   q, out   [T, heads * hd]           caches [max_ctx, kv_heads * hd], row j = position j
//   partials acc [T, heads, splits, hd], m [T, heads, splits], l [T, heads, splits] (decode)
//
// Positions are read on the device in every kernel (never passed from the host), so a CUDA
// graph captured once stays valid at every decode step; only the number of splits is fixed
// on the host, from max_ctx. Softmax is the CPU's: scores dot(q, k) * scale, exp(s - max),
// divided by the sum at the end; the online (tile by tile) form rescales by exp(m_old - m_new).
// Decode works in base-2 units (exp2 of s * log2 e), prefill with expf.
#pragma once

#include <cuda_runtime.h>
#include <math_constants.h>

#include <cstdint>

#include "devices/cuda/device_math.h"
#include "devices/cuda/kernels/kv_cache.cuh"
#include "devices/cuda/launch.h"

namespace gearbox::cuda::detail {

constexpr int kMaxD = static_cast<int>(kAttentionMaxHeadDim);
constexpr int kMaxSplits = 256;

struct AttentionArgs {
  const float* q;
  const float* k_cache;
  const float* v_cache;
  // Decode with T = 1 only, else null: the new token's K and V rows [kv_heads * hd], read in
  // place of cache row p and written there by the kernel (kv_cache_write's work).
  const float* k_new;
  const float* v_new;
  float* k_cache_out;
  float* v_cache_out;
  const void* positions;
  bool pos_i64;
  float* out;
  int64_t T;
  int heads;
  int kv_heads;
  int head_dim;
  int64_t max_ctx;
  int64_t window;
  float scale;
  int* error_flag;  // nullable: set to 1 by the decode kernel for a position outside the cache
  // Decode with k_new only: positions and every cache row but p's are written by no kernel of
  // the step, so the kernel reads them, and loads its first keys, before it waits for the
  // previous kernel (launch.h).
  bool keys_before_wait;
  // Decode with k_new only, else q_w null: q and k_new are the projections before the per-head
  // RMSNorm and RoPE (AttentionHeadNorm), which every block applies itself to the rows it reads.
  struct HeadNorm {
    const void* q_w;
    const void* k_w;
    int w_kind;  // the weights' type: 0 f32, 1 bf16, 2 f16
    float eps;
    float offset;
    float theta;
    float position_scale;
    const float* inv_freq;  // nullable
  } norm;
  // A batched network's slots (kv_cache.cuh); ids null: one sequence.
  CacheSlots slots;
};

/// The first key a query at position p sees.
__device__ __forceinline__ int64_t window_start(int64_t p, int64_t window) {
  return window > 0 ? max(static_cast<int64_t>(0), p - window + 1) : 0;
}

__device__ __forceinline__ bool position_valid(int64_t p, int64_t max_ctx) { return p >= 0 && p < max_ctx; }

/// Whether a token at position p is padding (position -1 of a batched network: CacheSlots).
__device__ __forceinline__ bool is_padding(const CacheSlots& s, int64_t p) { return s.ids != nullptr && p == -1; }

/// The first cache row of token t's slot: 0 for one sequence, ids[t / seq] * max_ctx in a
/// batched network (0 for a padding row's slot -1: its tokens read and write no row).
__device__ __forceinline__ int64_t slot_first_row(const CacheSlots& s, int64_t t, int64_t max_ctx) {
  if (s.ids == nullptr) return 0;
  const int64_t id = index_at(s.ids, s.i64, t / s.seq);
  return id < 0 ? 0 : id * max_ctx;
}

/// The output of a query that sees no key: 0 for padding, else NaN (a position outside the
/// cache, which the kernels have flagged).
__device__ __forceinline__ float keyless_output(const CacheSlots& s, int64_t p) {
  return is_padding(s, p) ? 0.0f : CUDART_NAN_F;
}

/// Narrows a block's keys [begin, end) to the split-th of `splits` runs of whole tiles of
/// `tile` keys (prefill with keys split across blocks); empty (begin >= end) for a split
/// past the last tile.
__device__ __forceinline__ void split_key_range(int64_t& begin, int64_t& end, int split, int splits, int tile) {
  if (splits <= 1 || begin >= end) return;
  const int64_t tiles = (end - begin + tile - 1) / tile;
  const int64_t per_split = (tiles + splits - 1) / splits;
  const int64_t first = begin + split * per_split * tile;
  end = min(end, first + per_split * tile);
  begin = first;
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Partials of split s for (t, h), with S = splits and TH = T * heads:
//   acc [TH, S, hd] (unnormalized output), then m [TH, S] (max score, base-2 units: score *
//   log2 e), then l [TH, S] (sum of exp2(score - m)).

constexpr int kDecodeSlots = kMaxD / 32;  // dims per lane and head: 2 float4 or 8 floats

/// The head_dim slice a lane owns: dims 4 * (lane + 32 s) .. + 3 for s < 2 (kVec4), or
/// dim lane + 32 s for s < 8, of `row` (a K or V row, or a partial's acc row); dims past D,
/// and every dim when !valid, read as 0 without touching memory.
/// kGlobal: row is global memory that no kernel writes while this one runs (read through the
/// read-only cache); else any memory (shared included).
template <bool kVec4, bool kGlobal = true>
__device__ __forceinline__ void load_slice(const float* row, int D, int lane, float (&f)[kDecodeSlots], bool valid) {
  const auto read = [](const auto* p) { return kGlobal ? __ldg(p) : *p; };
  if constexpr (kVec4) {
#pragma unroll
    for (int s = 0; s < kDecodeSlots / 4; ++s) {
      const int d4 = lane + 32 * s;
      const float4 v = valid && d4 < D / 4 ? read(reinterpret_cast<const float4*>(row) + d4) : make_float4(0, 0, 0, 0);
      f[4 * s] = v.x;
      f[4 * s + 1] = v.y;
      f[4 * s + 2] = v.z;
      f[4 * s + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int s = 0; s < kDecodeSlots; ++s) {
      const int d = lane + 32 * s;
      f[s] = valid && d < D ? read(row + d) : 0.0f;
    }
  }
}

/// The dim of slot i of a lane's slice (see load_slice).
template <bool kVec4>
__device__ __forceinline__ int slice_dim(int lane, int i) {
  return kVec4 ? 4 * (lane + 32 * (i / 4)) + i % 4 : lane + 32 * i;
}

inline cudaError_t check_attention_shape(int64_t T, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t max_ctx,
                                         int64_t window) {
  if (T < 0 || heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0 || head_dim <= 0 ||
      head_dim > kAttentionMaxHeadDim || max_ctx <= 0 || window < 0 || heads > 65535 || T > INT32_MAX) {
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

inline AttentionArgs make_args(const float* q, const float* k_cache, const float* v_cache, const void* positions,
                               bool pos_i64, float* out, int64_t T, int64_t heads, int64_t kv_heads, int64_t head_dim,
                               int64_t max_ctx, int64_t window, float scale, const CacheSlots& slots = {}) {
  return AttentionArgs{q,
                       k_cache,
                       v_cache,
                       nullptr,
                       nullptr,
                       nullptr,
                       nullptr,
                       positions,
                       pos_i64,
                       out,
                       T,
                       static_cast<int>(heads),
                       static_cast<int>(kv_heads),
                       static_cast<int>(head_dim),
                       max_ctx,
                       window,
                       scale,
                       nullptr,
                       false,
                       AttentionArgs::HeadNorm{},
                       slots};
}

/// Ways to split the keys of each block of `rows` query rows: enough blocks for `target`
/// in all, at most `most` (prefill_attention.cu).
int prefill_splits(int64_t T, int64_t heads, int64_t rows, int64_t target, int64_t most);
/// The partials any t <= T needs when t tokens split splits(t, heads, limits) ways
/// (prefill_attention.cu).
int64_t prefill_scratch_floats(int64_t T, int64_t heads, int64_t head_dim,
                               int (*splits_for)(int64_t, int64_t, const DeviceLimits&), const DeviceLimits& limits);

}  // namespace gearbox::cuda::detail
