// CUDA attention: the KV-cache write, flash-decoding for few queries and a tiled kernel for
// prefill. Causal, optional sliding window, grouped-query (kv head = h / (heads / kv_heads)).
//
//   q, out   [T, heads * hd]           caches [max_ctx, kv_heads * hd], row j = position j
//   partials acc [T, heads, splits, hd], m [T, heads, splits], l [T, heads, splits] (decode)
//
// Positions are read on the device in every kernel (never passed from the host), so a CUDA
// graph captured once stays valid at every decode step; only the number of splits is fixed
// on the host, from max_ctx. Softmax is the CPU's: scores dot(q, k) * scale, exp(s - max),
// divided by the sum at the end; the online (tile by tile) form rescales by exp(m_old - m_new).
// Decode works in base-2 units (exp2 of s * log2 e), prefill with expf.

#include <cooperative_groups.h>
#include <math_constants.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "devices/cuda/device_math.h"
#include "devices/cuda/kernels.h"
#include "devices/cuda/launch.h"

namespace gearbox::cuda {
namespace {

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
};

/// The first key a query at position p sees.
__device__ __forceinline__ int64_t window_start(int64_t p, int64_t window) {
  return window > 0 ? max(static_cast<int64_t>(0), p - window + 1) : 0;
}

__device__ __forceinline__ bool position_valid(int64_t p, int64_t max_ctx) { return p >= 0 && p < max_ctx; }

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

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// ---- KV-cache write ------------------------------------------------------------------------------

constexpr int kCacheWriteThreads = 256;

/// grid: T blocks of 256 threads; block t copies row t of k and v (float4 when kVec).
template <bool kVec>
__global__ void __launch_bounds__(kCacheWriteThreads)
    kv_cache_write_kernel(const float* k, const float* v, const void* positions, bool pos_i64, int64_t width,
                          float* k_cache, float* v_cache, int64_t max_ctx, int* error_flag) {
  allow_next_kernel();
  wait_for_prior_kernels();
  const int64_t t = blockIdx.x;
  const int64_t p = index_at(positions, pos_i64, t);
  if (!position_valid(p, max_ctx)) {
    if (threadIdx.x == 0 && error_flag != nullptr) atomicExch(error_flag, 1);
    return;
  }
  const float* k_row = k + t * width;
  const float* v_row = v + t * width;
  float* k_dst = k_cache + p * width;
  float* v_dst = v_cache + p * width;
  if constexpr (kVec) {
    const int n4 = static_cast<int>(width / 4);  // width < 2^31 (checked by the launcher)
    for (int i = static_cast<int>(threadIdx.x); i < n4; i += kCacheWriteThreads) {
      reinterpret_cast<float4*>(k_dst)[i] = reinterpret_cast<const float4*>(k_row)[i];
      reinterpret_cast<float4*>(v_dst)[i] = reinterpret_cast<const float4*>(v_row)[i];
    }
  } else {
    for (int i = static_cast<int>(threadIdx.x); i < width; i += kCacheWriteThreads) {
      k_dst[i] = k_row[i];
      v_dst[i] = v_row[i];
    }
  }
}

// ---- decode: split-KV partials -------------------------------------------------------------------
//
// Partials of split s for (t, h), with S = splits and TH = T * heads:
//   acc [TH, S, hd] (unnormalized output), then m [TH, S] (max score, base-2 units: score *
//   log2 e), then l [TH, S] (sum of exp2(score - m)).

constexpr int kDecodeWarps = 8;
constexpr int kDecodeThreads = 32 * kDecodeWarps;
constexpr int kDecodeKeysPerStep = 4;  // keys whose K and V rows a warp loads at once
constexpr int64_t kDecodeMinKeysPerSplit = kDecodeWarps * kDecodeKeysPerStep;
constexpr int kDecodeSlots = kMaxD / 32;  // dims per lane and head: 2 float4 or 8 floats

/// Keys [begin, end) of split `split` for a query at position p: the range [lo, p] cut into
/// `splits` chunks of at least kDecodeMinKeysPerSplit keys; trailing splits may be empty.
__device__ __forceinline__ void split_range(int64_t p, const AttentionArgs& a, int split, int splits, int64_t* begin,
                                            int64_t* end) {
  if (!position_valid(p, a.max_ctx)) {
    *begin = *end = 0;
    return;
  }
  const int64_t lo = window_start(p, a.window);
  const int64_t keys = p - lo + 1;
  const int64_t chunk = max((keys + splits - 1) / splits, kDecodeMinKeysPerSplit);
  *begin = min(lo + split * chunk, p + 1);
  *end = min(*begin + chunk, p + 1);
}

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

// ---- decode: the per-head norm and RoPE of q and k ----------------------------------------------
//
// head_norm_rope's arithmetic (kernels_fused.cu) on the rows the decode kernel reads: a warp
// per head, lane l holding rotation pairs i = l + 32 j (dims i and i + head_dim / 2), j < 4.

constexpr int kPairSlots = kMaxD / 2 / 32;

/// Weight i of a norm weight vector of kind w_kind (AttentionArgs::HeadNorm) as f32.
__device__ __forceinline__ float norm_weight(const void* w, int w_kind, int i) {
  if (w_kind == 1) return to_f32(static_cast<const __nv_bfloat16*>(w)[i]);
  if (w_kind == 2) return to_f32(static_cast<const __half*>(w)[i]);
  return static_cast<const float*>(w)[i];
}

/// The cos and sin of the rotation angles of the lane's pairs at position p.
__device__ __forceinline__ void rope_slice(int64_t p, const AttentionArgs::HeadNorm& n, int D, int lane,
                                           float (&cs)[kPairSlots], float (&sn)[kPairSlots]) {
#pragma unroll
  for (int j = 0; j < kPairSlots; ++j) {
    const int i = lane + 32 * j;
    cs[j] = 1.0f;
    sn[j] = 0.0f;
    if (i < D / 2) {
      rope_angle_cos_sin(p, n.position_scale, n.inv_freq != nullptr ? n.inv_freq[i] : rope_inv_freq(i, D, n.theta),
                         &cs[j], &sn[j]);
    }
  }
}

/// y = rope(rms_norm(x, w)) for one head of D (even) dims, by one warp: x in global memory
/// (written by the previous kernel), y in shared memory; each element as head_norm_rope
/// computes it (the RMS sum in another order).
__device__ __forceinline__ void norm_rope_head(const float* x, const void* w, const AttentionArgs::HeadNorm& n, int D,
                                               int lane, const float (&cs)[kPairSlots], const float (&sn)[kPairSlots],
                                               float* y) {
  const int half = D / 2;
  float xa[kPairSlots];
  float xb[kPairSlots];
  float wa[kPairSlots];
  float wb[kPairSlots];
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kPairSlots; ++j) {
    const int i = lane + 32 * j;
    const bool in = i < half;
    xa[j] = in ? x[i] : 0.0f;
    xb[j] = in ? x[i + half] : 0.0f;
    wa[j] = in ? norm_weight(w, n.w_kind, i) : 0.0f;
    wb[j] = in ? norm_weight(w, n.w_kind, i + half) : 0.0f;
    sum += xa[j] * xa[j] + xb[j] * xb[j];
  }
  const float inv_rms = inverse_rms(warp_sum(sum), D, n.eps);
#pragma unroll
  for (int j = 0; j < kPairSlots; ++j) {
    const int i = lane + 32 * j;
    if (i < half) norm_rotate(xa[j], xb[j], inv_rms, wa[j], wb[j], n.offset, cs[j], sn[j], &y[i], &y[i + half]);
  }
}

/// Query heads a block may serve for its warps to merge through a slot each in shared memory
/// (8 warps x kG x 1 KB); more merge one warp after the other (static shared memory is 48 KB).
constexpr int kSlotMergeMaxG = 4;

/// Splits one cluster can combine: H100 / H200 schedule clusters of up to 16 blocks.
constexpr int kMaxClusterSplits = 16;

/// The end of a clustered split kernel, where block r of the cluster holds split r's
/// (m, l, acc) in shared memory. Every block reads the splits' m and l (lane r of warp 0
/// reads split r) and forms the weights exp2(m_r - max m) as the combine kernel does; then
/// block r combines its 1 / splits share of the kG * D outputs, reading the acc of every
/// split at once (the DSMEM loads are independent, so their latencies overlap).
template <int kG>
__device__ __forceinline__ void combine_in_cluster(const AttentionArgs& a, float* out, bool valid, int splits,
                                                   float (&acc_s)[kG][kMaxD], float (&m_s)[kG], float (&l_s)[kG]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  static_assert(kMaxClusterSplits <= 32, "one lane per split");
  __shared__ float weight_s[kG][kMaxClusterSplits];
  __shared__ float inv_sum_s[kG];
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every block's results are final and visible to the cluster
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 32;
  if (tid < 32) {
#pragma unroll
    for (int g = 0; g < kG; ++g) {
      const bool in = lane < splits;
      const float m = in ? *cluster.map_shared_rank(&m_s[g], lane) : -CUDART_INF_F;
      const float l = in ? *cluster.map_shared_rank(&l_s[g], lane) : 0.0f;
      float m_max = m;
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) {
        m_max = fmaxf(m_max, __shfl_xor_sync(0xffffffffu, m_max, offset));
      }
      const float w = m == -CUDART_INF_F ? 0.0f : exp2f(m - m_max);
      if (in) weight_s[g][lane] = w;
      const float sum = warp_sum(w * l);
      if (lane == 0) inv_sum_s[g] = 1.0f / sum;
    }
  }
  __syncthreads();
  const int D = a.head_dim;
  const int total = kG * D;
  const int share = (total + splits - 1) / splits;
  const int first = static_cast<int>(cluster.block_rank()) * share;
  const int last = min(first + share, total);
  for (int e = first + tid; e < last; e += kDecodeThreads) {
    const int g = e / D;
    const int d = e % D;
    float parts[kMaxClusterSplits];
#pragma unroll
    for (int r = 0; r < kMaxClusterSplits; ++r)
      parts[r] = r < splits ? *cluster.map_shared_rank(&acc_s[g][d], r) : 0.0f;
    float sum = 0.0f;
#pragma unroll
    for (int r = 0; r < kMaxClusterSplits; ++r) sum += r < splits ? weight_s[g][r] * parts[r] : 0.0f;
    out[e] = valid ? sum * inv_sum_s[g] : CUDART_NAN_F;
  }
  cluster.sync();  // no block leaves while another reads its shared memory
#else
  (void)a, (void)out, (void)valid, (void)splits, (void)acc_s, (void)m_s, (void)l_s;
  __trap();  // never launched: the launcher takes clusters only where sm_90 code runs
#endif
}

/// One block: query t, kG query heads sharing one kv head, the keys of one split. Each of
/// the 8 warps is an independent online-softmax worker over steps of 4 keys (steps dealt
/// round-robin): it loads the 4 K rows and 4 V rows at once (lanes split head_dim), forms
/// the 4 x kG scores with warp sums that leave every lane holding all of them, and updates
/// its own (max, sum, acc) in registers with no block barrier. At the end the warps'
/// results are merged in shared memory in warp order (deterministic) and written as the
/// split's partial, or as the output when there is one split.
/// kCluster (sm_90): the splits of one (t, head group) are one thread-block cluster, and
/// block 0 of it combines the others' results from their shared memory (no partials, no
/// second kernel); splits <= kMaxClusterSplits.
/// grid: (splits, kv_heads * (group / kG), T) blocks of 256 threads.
template <int kG, bool kVec4, bool kCluster>
__global__ void __launch_bounds__(kDecodeThreads)
    attention_decode_split_kernel(const AttentionArgs a, float* partials, int splits) {
  __shared__ __align__(16) float q_s[kG][kMaxD];
  __shared__ __align__(16) float k_s[kMaxD];  // head norm: key p, normalized and rotated
  __shared__ float acc_s[kG][kMaxD];
  __shared__ float warp_m[kDecodeWarps][kG];
  __shared__ float warp_l[kDecodeWarps][kG];
  __shared__ float m_max_s[kG];
  __shared__ float l_sum_s[kG];
  allow_next_kernel();
  if (!a.keys_before_wait) wait_for_prior_kernels();

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 32;
  const int warp = tid / 32;
  const int D = a.head_dim;
  const int group = a.heads / a.kv_heads;
  const int subgroups = group / kG;
  const int kvh = static_cast<int>(blockIdx.y) / subgroups;
  const int head0 = kvh * group + (static_cast<int>(blockIdx.y) % subgroups) * kG;
  const int split = static_cast<int>(blockIdx.x);
  const int64_t t = blockIdx.z;
  const int64_t q_width = static_cast<int64_t>(a.heads) * D;
  const int64_t kv_width = static_cast<int64_t>(a.kv_heads) * D;

  const int64_t p = index_at(a.positions, a.pos_i64, t);
  int64_t begin = 0;
  int64_t end = 0;
  split_range(p, a, split, splits, &begin, &end);
  const bool valid = position_valid(p, a.max_ctx);
  // Head norm: warp u < kG normalizes and rotates query head head0 + u into q_s[u], warp kG
  // key p into k_s (warp w takes units w, w + 8, ...). The angles need only the position.
  const bool normed = a.norm.q_w != nullptr;
  const int norm_units = normed ? kG + 1 : 0;
  float cs[kPairSlots];
  float sn[kPairSlots];
  if (warp < norm_units) rope_slice(p, a.norm, D, lane, cs, sn);

  // A step: the warp's next kDecodeKeysPerStep keys from `base`, K and V rows loaded at once.
  const float* k_head = a.k_cache + static_cast<int64_t>(kvh) * D;
  const float* v_head = a.v_cache + static_cast<int64_t>(kvh) * D;
  // Key p's rows: k_new / v_new (written by the previous kernel), or k_s (head norm).
  const float* k_fresh = a.k_new == nullptr ? nullptr : normed ? k_s : a.k_new + static_cast<int64_t>(kvh) * D;
  const float* v_fresh = a.v_new == nullptr ? nullptr : a.v_new + static_cast<int64_t>(kvh) * D;
  float kf[kDecodeKeysPerStep][kDecodeSlots];
  float vf[kDecodeKeysPerStep][kDecodeSlots];
  // Key p's rows are read only where `fresh_allowed` (after the wait; with head norm, after
  // the barrier that publishes k_s); elsewhere they are left 0 for load_fresh below.
  const auto load_step = [&](int64_t base, bool fresh_allowed) {
#pragma unroll
    for (int b = 0; b < kDecodeKeysPerStep; ++b) {
      const bool in = base + b < end;             // rows past the end are not read (they may hold anything)
      if (a.k_new != nullptr && base + b == p) {  // uniform over the warp
        load_slice<kVec4, false>(k_fresh, D, lane, kf[b], in && fresh_allowed);
        load_slice<kVec4>(v_fresh, D, lane, vf[b], in && fresh_allowed);
      } else {
        load_slice<kVec4>(k_head + (base + b) * kv_width, D, lane, kf[b], in);
        load_slice<kVec4>(v_head + (base + b) * kv_width, D, lane, vf[b], in);
      }
    }
  };
  const int64_t first_base = begin + warp * kDecodeKeysPerStep;
  constexpr int64_t kStepStride = kDecodeThreads / 32 * kDecodeKeysPerStep;
  // Key p's rows, where the first step left them out.
  const auto load_fresh = [&] {
    if (first_base <= p && p < first_base + kDecodeKeysPerStep && p < end) {
      const int b = static_cast<int>(p - first_base);
#pragma unroll
      for (int i = 0; i < kDecodeKeysPerStep; ++i) {
        if (i == b) {
          load_slice<kVec4, false>(k_fresh, D, lane, kf[i], true);
          load_slice<kVec4>(v_fresh, D, lane, vf[i], true);
        }
      }
    }
  };
  if (a.keys_before_wait) {
    // Every key of the first step but p's, then p's once the kernel that wrote k_new is done.
    if (first_base < end) load_step(first_base, false);
    wait_for_prior_kernels();
    if (!normed) load_fresh();
  } else if (first_base < end && !normed) {
    load_step(first_base, true);
  }
  if (a.error_flag != nullptr && split == 0 && blockIdx.y == 0 && tid == 0 && !valid) {
    atomicExch(a.error_flag, 1);
  }
  // The new row enters the cache here (K with head norm after the barrier below); no block
  // reads cache row p (key p comes from k_new or k_s).
  const bool writes_row = a.k_new != nullptr && split == 0 && static_cast<int>(blockIdx.y) % subgroups == 0 && valid;
  if (writes_row) {
    for (int d = tid; d < D; d += kDecodeThreads) {
      if (!normed) a.k_cache_out[p * kv_width + static_cast<int64_t>(kvh) * D + d] = k_fresh[d];
      a.v_cache_out[p * kv_width + static_cast<int64_t>(kvh) * D + d] = v_fresh[d];
    }
  }

  if (normed) {
    for (int u = warp; u < norm_units; u += kDecodeWarps) {
      const bool key = u == kG;
      norm_rope_head(key ? a.k_new + static_cast<int64_t>(kvh) * D : a.q + t * q_width + (head0 + u) * D,
                     key ? a.norm.k_w : a.norm.q_w, a.norm, D, lane, cs, sn, key ? k_s : q_s[u]);
    }
  } else {
    for (int e = tid; e < kG * D; e += kDecodeThreads) {
      q_s[e / D][e % D] = a.q[t * q_width + static_cast<int64_t>(head0) * D + e];
    }
  }
  if constexpr (kG > kSlotMergeMaxG) {  // the warps add into acc_s; the slot merge overwrites it
    for (int e = tid; e < kG * D; e += kDecodeThreads) acc_s[e / D][e % D] = 0.0f;
  }
  __syncthreads();
  if (normed) {
    if (a.keys_before_wait) {
      load_fresh();
    } else if (first_base < end) {
      load_step(first_base, true);
    }
    if (writes_row) {
      for (int d = tid; d < D; d += kDecodeThreads)
        a.k_cache_out[p * kv_width + static_cast<int64_t>(kvh) * D + d] = k_s[d];
    }
  }

  float m[kG];
  float l[kG];
  float acc[kG][kDecodeSlots];
#pragma unroll
  for (int g = 0; g < kG; ++g) {
    m[g] = -CUDART_INF_F;
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < kDecodeSlots; ++i) acc[g][i] = 0.0f;
  }

  // Scores in base-2 units (s * log2 e): exp2f is one MUFU op where expf is a dozen, and
  // softmax is unchanged: exp(s - m) = exp2(s log2 e - m log2 e).
  const float scale_log2 = a.scale * 1.4426950408889634f;
  for (int64_t base = first_base; base < end; base += kStepStride) {
    if (base != first_base) load_step(base, true);  // the first step's rows are loaded above
#pragma unroll
    for (int g = 0; g < kG; ++g) {
      float q[kDecodeSlots];  // from shared memory each step: kG * 8 registers are too many
#pragma unroll
      for (int i = 0; i < kDecodeSlots; ++i) {
        const int d = slice_dim<kVec4>(lane, i);
        q[i] = d < D ? q_s[g][d] : 0.0f;
      }
      float score[kDecodeKeysPerStep];
      float step_max = -CUDART_INF_F;
#pragma unroll
      for (int b = 0; b < kDecodeKeysPerStep; ++b) {
        float part = 0.0f;
#pragma unroll
        for (int i = 0; i < kDecodeSlots; ++i) part += q[i] * kf[b][i];
        score[b] = base + b < end ? warp_sum(part) * scale_log2 : -CUDART_INF_F;
        step_max = fmaxf(step_max, score[b]);
      }
      const float m_new = fmaxf(m[g], step_max);  // finite: key `base` is in range
      const float alpha = exp2f(m[g] - m_new);    // 0 on the first step (m = -inf)
      l[g] *= alpha;
#pragma unroll
      for (int i = 0; i < kDecodeSlots; ++i) acc[g][i] *= alpha;
#pragma unroll
      for (int b = 0; b < kDecodeKeysPerStep; ++b) {
        const float e = exp2f(score[b] - m_new);  // 0 for keys past the end
        l[g] += e;
#pragma unroll
        for (int i = 0; i < kDecodeSlots; ++i) acc[g][i] += e * vf[b][i];
      }
      m[g] = m_new;
    }
  }

  // Merge the warps: weights exp2(m_w - m_max); warps without keys (m_w = -inf) weigh 0.
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < kG; ++g) {
      warp_m[warp][g] = m[g];
      warp_l[warp][g] = l[g];
    }
  }
  __syncthreads();
  if (tid < kG) {
    float mm = -CUDART_INF_F;
    for (int w = 0; w < kDecodeWarps; ++w) mm = fmaxf(mm, warp_m[w][tid]);
    float ls = 0.0f;
    for (int w = 0; w < kDecodeWarps; ++w) {
      const float mw = warp_m[w][tid];
      ls += mw == -CUDART_INF_F ? 0.0f : exp2f(mw - mm) * warp_l[w][tid];
    }
    m_max_s[tid] = mm;
    l_sum_s[tid] = ls;
  }
  if constexpr (kG <= kSlotMergeMaxG) {
    // Each warp writes its weighted sums to a slot of its own (its max over the warps taken as
    // above), then each output adds the slots in warp order: deterministic, and two barriers
    // where merging one warp after the other takes eight.
    __shared__ float slot_s[kDecodeWarps][kG][kMaxD];
#pragma unroll
    for (int g = 0; g < kG; ++g) {
      float mm = -CUDART_INF_F;
      for (int w = 0; w < kDecodeWarps; ++w) mm = fmaxf(mm, warp_m[w][g]);
      const float weight = m[g] == -CUDART_INF_F ? 0.0f : exp2f(m[g] - mm);
#pragma unroll
      for (int i = 0; i < kDecodeSlots; ++i) {
        const int d = slice_dim<kVec4>(lane, i);
        if (d < D) slot_s[warp][g][d] = weight * acc[g][i];
      }
    }
    __syncthreads();  // also publishes m_max_s and l_sum_s
    for (int e = tid; e < kG * D; e += kDecodeThreads) {
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kDecodeWarps; ++w) sum += slot_s[w][e / D][e % D];
      acc_s[e / D][e % D] = sum;
    }
    __syncthreads();
  } else {
    __syncthreads();
    for (int w = 0; w < kDecodeWarps; ++w) {  // in warp order: the sums are deterministic
      if (warp == w) {
#pragma unroll
        for (int g = 0; g < kG; ++g) {
          const float weight = m[g] == -CUDART_INF_F ? 0.0f : exp2f(m[g] - m_max_s[g]);
#pragma unroll
          for (int i = 0; i < kDecodeSlots; ++i) {
            const int d = slice_dim<kVec4>(lane, i);
            if (d < D) acc_s[g][d] += weight * acc[g][i];
          }
        }
      }
      __syncthreads();
    }
  }

  if constexpr (kCluster) {
    combine_in_cluster<kG>(a, a.out + t * q_width + static_cast<int64_t>(head0) * D, valid, splits, acc_s, m_max_s,
                           l_sum_s);
    return;
  }
  const int64_t th0 = t * a.heads + head0;  // (t, head0) row of the partials
  float* acc_out = partials + (th0 * splits + split) * D;
  float* m_out = partials + a.T * a.heads * splits * D + th0 * splits + split;
  float* l_out = m_out + a.T * a.heads * splits;
  for (int e = tid; e < kG * D; e += kDecodeThreads) {
    const int g = e / D;
    const int d = e % D;
    if (splits == 1) {
      a.out[t * q_width + static_cast<int64_t>(head0) * D + e] = valid ? acc_s[g][d] / l_sum_s[g] : CUDART_NAN_F;
    } else {
      acc_out[static_cast<int64_t>(g) * splits * D + d] = acc_s[g][d];
    }
  }
  if (splits > 1 && tid < kG) {
    m_out[static_cast<int64_t>(tid) * splits] = m_max_s[tid];
    l_out[static_cast<int64_t>(tid) * splits] = l_sum_s[tid];
  }
}

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
    for (int d = tid; d < D; d += kCombineThreads) o[d] = CUDART_NAN_F;
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

/// Prefill's combine: the same result as attention_decode_combine_kernel for each of the
/// T * heads rows, a warp per row and no barriers. Prefill has many rows and few splits
/// (<= 32: lane s takes split s's max and sum); the block-per-row kernel spent most of its
/// 11.5 us per 512-token layer (4 splits) in its four barriers. grid: ceil(T * heads / 8)
/// blocks of 256.
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
  if (!position_valid(index_at(a.positions, a.pos_i64, th / a.heads), a.max_ctx)) {
    for (int d = lane; d < D; d += 32) o[d] = CUDART_NAN_F;
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

template <int kG, bool kVec4>
void launch_decode_split(const AttentionArgs& a, bool cluster, float* partials, int splits, const Launch& launch) {
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(a.heads / kG), static_cast<unsigned>(a.T));
  if (!cluster) {
    launch_kernel(attention_decode_split_kernel<kG, kVec4, false>, grid, kDecodeThreads, 0, launch, a, partials,
                  splits);
    return;
  }
  const auto kernel = attention_decode_split_kernel<kG, kVec4, true>;
  if (splits > 8 && cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
    return;  // the error is cudaGetLastError()'s
  }
  launch_cluster_kernel(kernel, grid, kDecodeThreads, 0, launch, static_cast<unsigned>(splits), a, partials, splits);
}

template <int kG>
void launch_decode_split(const AttentionArgs& a, bool vec4, bool cluster, float* partials, int splits,
                         const Launch& launch) {
  if (vec4) {
    launch_decode_split<kG, true>(a, cluster, partials, splits, launch);
  } else {
    launch_decode_split<kG, false>(a, cluster, partials, splits, launch);
  }
}

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
/// grid: (ceil(T / 16), heads, splits) blocks of 128 threads.
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
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kPrefillRows;
  const int64_t q_width = static_cast<int64_t>(a.heads) * D;
  const int64_t kv_width = static_cast<int64_t>(a.kv_heads) * D;

  // This row's keys [lo, hi) and the block's, the union over its rows.
  const int64_t t = t0 + r;
  const bool row_in = t < a.T;
  const int64_t p = row_in ? index_at(a.positions, a.pos_i64, t) : -1;
  const bool valid = row_in && position_valid(p, a.max_ctx);
  const int64_t lo = valid ? window_start(p, a.window) : 0;
  const int64_t hi = valid ? p + 1 : 0;
  int64_t keys_begin = INT64_MAX;
  int64_t keys_end = 0;
  for (int rr = 0; rr < kPrefillRows && t0 + rr < a.T; ++rr) {
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
    q_s[rr * (D + 1) + d] = t0 + rr < a.T ? a.q[(t0 + rr) * q_width + static_cast<int64_t>(h) * D + d] : 0.0f;
  }
  float m = -CUDART_INF_F;
  float l = 0.0f;
  float acc[kPrefillDPerLane];
#pragma unroll
  for (int i = 0; i < kPrefillDPerLane; ++i) acc[i] = 0.0f;

  const float* k_head = a.k_cache + static_cast<int64_t>(kvh) * D;
  const float* v_head = a.v_cache + static_cast<int64_t>(kvh) * D;
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
    if (d < D) o[d] = valid ? acc[i] * inv : CUDART_NAN_F;
  }
}

// ---- prefill: tensor cores ---------------------------------------------------------------------------
// The same attention with QK^T and PV on mma.sync m16n8k16 (bf16 operands, f32 accumulation),
// in the flash-attention form: a block of 4 warps takes 64 query rows of one head, a warp 16
// of them; key tiles of 64 are staged in shared memory as bf16 (the caches are f32, converted
// while staging); each warp's scores stay in registers, where the softmax runs in f32 and the
// weights become the A operand of PV without leaving registers. Accuracy is bf16's: q, k, v
// and the softmax weights are rounded to 8 significant bits (the tests bound the error at
// 1e-2), so the builder offers this kernel to engines with bf16 weights only.

constexpr int kMmaRows = 64;  // query rows per block, 16 per warp
constexpr int kMmaKeys = 64;  // keys per tile
constexpr int kMmaThreads = 128;
constexpr int64_t kMmaBlocksPerSm = 2;  // blocks per SM the launch aims for by splitting the keys
// At most 4: every split writes T * heads * (head_dim + 2) floats of partials, which the
// combine kernel reads again (8 MB each way at 512 tokens of the 1B shape).
constexpr int64_t kMmaMaxSplits = 4;

/// bf16 elements per shared-memory row of a [64][kD] tile: 16 bytes of padding put the 8 rows
/// an ldmatrix reads in distinct banks.
__host__ __device__ constexpr int mma_stride(int kD) { return kD + 8; }

/// Shared memory: q, k, v tiles [64][mma_stride] bf16, then each row's key range [lo, hi)
/// (int64) and, per key of the tile, whether any row of the block sees it.
size_t mma_smem_bytes(int kD) {
  return 3 * sizeof(__nv_bfloat16) * kMmaRows * static_cast<size_t>(mma_stride(kD)) + 2 * sizeof(int64_t) * kMmaRows +
         kMmaKeys;
}

/// Four 8x8 bf16 matrices from shared memory; lane l gives the address of row l % 8 of matrix
/// l / 8. kTrans: each matrix transposed on the way.
template <bool kTrans>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const __nv_bfloat16* p) {
  if constexpr (kTrans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(p)));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(p)));
  }
}

/// c[16 x 8] += a[16 x 16] b[16 x 8], bf16 operands, f32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // lo in the low half
  return *reinterpret_cast<const uint32_t*>(&v);
}

/// dst[m][c][0, kD) = src[m] row c as bf16 for the 64 rows with keep(c), zeros elsewhere (rows
/// not kept, columns from D): a masked row may hold NaN, and 0 * NaN would reach the output.
/// The loads are latency-bound (a few per thread, each a DRAM round trip), so a thread issues
/// 16 of them (kMatrices matrices at once) before converting and storing any.
template <int kD, bool kVec4, int kMatrices, typename Keep>
__device__ __forceinline__ void stage_rows(__nv_bfloat16* const (&dst)[kMatrices], const float* const (&src)[kMatrices],
                                           int64_t src_stride, int D, Keep keep) {
  constexpr int S = mma_stride(kD);
  const int tid = static_cast<int>(threadIdx.x);
  if constexpr (kVec4) {
    constexpr int kQuads = kD / 4;
    constexpr int kPerThread = kMmaRows * kQuads / kMmaThreads;
    constexpr int kBatch = kPerThread < 16 / kMatrices ? kPerThread : 16 / kMatrices;
    static_assert(kPerThread % kBatch == 0);
    for (int b = 0; b < kPerThread; b += kBatch) {
      float4 v[kMatrices][kBatch];
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const int e = tid + (b + i) * kMmaThreads;
        const int c = e / kQuads;
        const int d = 4 * (e % kQuads);
        const bool in = d < D && keep(c);
#pragma unroll
        for (int m = 0; m < kMatrices; ++m) {
          v[m][i] = in ? __ldg(reinterpret_cast<const float4*>(src[m] + c * src_stride + d))
                       : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
      }
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const int e = tid + (b + i) * kMmaThreads;
        const int c = e / kQuads;
        const int d = 4 * (e % kQuads);
#pragma unroll
        for (int m = 0; m < kMatrices; ++m) {
          *reinterpret_cast<uint2*>(dst[m] + c * S + d) =
              make_uint2(pack_bf16(v[m][i].x, v[m][i].y), pack_bf16(v[m][i].z, v[m][i].w));
        }
      }
    }
  } else {
    for (int e = tid; e < kMmaRows * kD; e += kMmaThreads) {
      const int c = e / kD;
      const int d = e % kD;
      const bool in = d < D && keep(c);
#pragma unroll
      for (int m = 0; m < kMatrices; ++m) {
        dst[m][c * S + d] = __float2bfloat16_rn(in ? __ldg(src[m] + c * src_stride + d) : 0.0f);
      }
    }
  }
}

/// dst[c][0, kD) = src row c (bf16, D % 8 == 0) for the 64 rows with keep(c), zeros elsewhere
/// (rows not kept, columns from D), by cp.async: the copies run while the block computes, and
/// are complete for this thread after cp_async_wait_*, for the block after a barrier.
template <int kD, typename Keep>
__device__ __forceinline__ void stage_rows_async(__nv_bfloat16* dst, const __nv_bfloat16* src, int64_t src_stride,
                                                 int D, Keep keep) {
  constexpr int S = mma_stride(kD);
  constexpr int kChunks = kD / 8;  // 16 bytes each
  for (int e = static_cast<int>(threadIdx.x); e < kMmaKeys * kChunks; e += kMmaThreads) {
    const int c = e / kChunks;
    const int d = 8 * (e % kChunks);
    const bool in = d < D && keep(c);
    cp_async_16(dst + c * S + d, in ? src + c * src_stride + d : src, in);
  }
}

constexpr int kToBf16Threads = 256;
constexpr int64_t kToBf16BlocksPerSm = 2;  // the conversion's most blocks, per SM

/// lo = the minimum and hi = the maximum of the kToBf16Threads threads' values, in every
/// thread of the block (one barrier).
__device__ __forceinline__ void block_key_range(int64_t& lo, int64_t& hi) {
  __shared__ int64_t lo_s[kToBf16Threads / 32];
  __shared__ int64_t hi_s[kToBf16Threads / 32];
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    lo = min(lo, static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, static_cast<long long>(lo), offset)));
    hi = max(hi, static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, static_cast<long long>(hi), offset)));
  }
  const int warp = static_cast<int>(threadIdx.x) / 32;
  if (threadIdx.x % 32 == 0) {
    lo_s[warp] = lo;
    hi_s[warp] = hi;
  }
  __syncthreads();
  for (int w = 0; w < kToBf16Threads / 32; ++w) {
    lo = min(lo, lo_s[w]);
    hi = max(hi, hi_s[w]);
  }
}

/// Rows [lo, hi) of both caches as bf16 (k16, v16: [max_ctx, width]), where lo and hi bound
/// the keys the call's queries see (read from the positions on the device): the tensor-core
/// prefill then copies its tiles with cp.async instead of converting them on the way.
/// width % 8 == 0, caches 16-byte aligned. grid: kToBf16Blocks blocks of 256 threads, each
/// finding lo and hi itself (T positions from L2) and converting a strided share of 8-element
/// chunks.
__global__ void __launch_bounds__(kToBf16Threads)
    kv_rows_to_bf16_kernel(const float* k_cache, const float* v_cache, const void* positions, bool pos_i64, int64_t T,
                           int64_t window, int64_t max_ctx, int64_t width, __nv_bfloat16* k16, __nv_bfloat16* v16) {
  allow_next_kernel();
  // Positions are an input of the network, never written by its kernels: read before waiting.
  int64_t lo = INT64_MAX;
  int64_t hi = 0;
  for (int64_t t = threadIdx.x; t < T; t += kToBf16Threads) {
    const int64_t p = index_at(positions, pos_i64, t);
    if (!position_valid(p, max_ctx)) continue;
    lo = min(lo, window_start(p, window));
    hi = max(hi, p + 1);
  }
  block_key_range(lo, hi);
  wait_for_prior_kernels();  // the cache rows of this call were just written
  if (hi <= lo) return;
  const int64_t chunks = (hi - lo) * width / 8;
  const int64_t first = lo * width;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * kToBf16Threads + threadIdx.x; e < chunks;
       e += static_cast<int64_t>(gridDim.x) * kToBf16Threads) {
    const int64_t at = first + 8 * e;
    const float4 k0 = __ldg(reinterpret_cast<const float4*>(k_cache + at));
    const float4 k1 = __ldg(reinterpret_cast<const float4*>(k_cache + at) + 1);
    const float4 v0 = __ldg(reinterpret_cast<const float4*>(v_cache + at));
    const float4 v1 = __ldg(reinterpret_cast<const float4*>(v_cache + at) + 1);
    *reinterpret_cast<uint4*>(k16 + at) =
        make_uint4(pack_bf16(k0.x, k0.y), pack_bf16(k0.z, k0.w), pack_bf16(k1.x, k1.y), pack_bf16(k1.z, k1.w));
    *reinterpret_cast<uint4*>(v16 + at) =
        make_uint4(pack_bf16(v0.x, v0.y), pack_bf16(v0.z, v0.w), pack_bf16(v1.x, v1.y), pack_bf16(v1.z, v1.w));
  }
}

/// kv_cache_write and kv_rows_to_bf16_kernel in one launch, for the tensor-core prefill given
/// the call's new rows (k_new, v_new [T, width]): each new row goes to its cache row in f32
/// and to k16 / v16 in bf16, both from k_new / v_new, and the rows of [lo, hi) that the call
/// does not write are converted from the caches. When the positions are a run p0, p0 + 1, ...
/// (a prompt) those are [lo, p0); otherwise each chunk of [lo, hi) first looks for its row
/// among the call's T positions (a scan from L1: the rare shape). A position outside
/// [0, max_ctx) writes nothing and sets *error_flag. width % 8 == 0; k_new, v_new and the
/// caches 16-byte aligned. grid: up to kToBf16Blocks blocks of 256 threads, each finding lo,
/// hi and the run itself and taking a strided share of the 8-element chunks.
__global__ void __launch_bounds__(kToBf16Threads)
    kv_write_rows_to_bf16_kernel(const float* k_new, const float* v_new, const void* positions, bool pos_i64, int64_t T,
                                 int64_t window, int64_t max_ctx, int64_t width, float* k_cache, float* v_cache,
                                 __nv_bfloat16* k16, __nv_bfloat16* v16, int* error_flag) {
  allow_next_kernel();
  // Positions are an input of the network, never written by its kernels: read before waiting.
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t p0 = index_at(positions, pos_i64, 0);
  int64_t lo = INT64_MAX;
  int64_t hi = 0;
  bool run = true;
  bool bad = false;
  for (int64_t t = tid; t < T; t += kToBf16Threads) {
    const int64_t p = index_at(positions, pos_i64, t);
    run = run && p == p0 + t;
    if (!position_valid(p, max_ctx)) {
      bad = true;
      continue;
    }
    lo = min(lo, window_start(p, window));
    hi = max(hi, p + 1);
  }
  block_key_range(lo, hi);
  run = __syncthreads_and(run && !bad) != 0;
  bad = __syncthreads_or(bad) != 0;
  wait_for_prior_kernels();  // k_new / v_new were just written; earlier kernels read the caches
  if (bad && blockIdx.x == 0 && tid == 0 && error_flag != nullptr) atomicExch(error_flag, 1);
  const int64_t row_chunks = width / 8;
  const int64_t new_chunks = T * row_chunks;
  const int64_t old_rows = hi > lo ? (run ? p0 : hi) - lo : 0;  // run: lo <= p0
  const int64_t total = new_chunks + old_rows * row_chunks;
  const auto written_by_call = [&](int64_t j) {
    for (int64_t t = 0; t < T; ++t) {
      if (index_at(positions, pos_i64, t) == j) return true;
    }
    return false;
  };
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * kToBf16Threads + tid; e < total;
       e += static_cast<int64_t>(gridDim.x) * kToBf16Threads) {
    float4 k[2];
    float4 v[2];
    int64_t at;
    if (e < new_chunks) {
      const int64_t t = e / row_chunks;
      const int64_t p = index_at(positions, pos_i64, t);
      if (!position_valid(p, max_ctx)) continue;
      const int64_t from = t * width + 8 * (e % row_chunks);
      at = p * width + 8 * (e % row_chunks);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        k[i] = __ldg(reinterpret_cast<const float4*>(k_new + from) + i);
        v[i] = __ldg(reinterpret_cast<const float4*>(v_new + from) + i);
        reinterpret_cast<float4*>(k_cache + at)[i] = k[i];
        reinterpret_cast<float4*>(v_cache + at)[i] = v[i];
      }
    } else {
      const int64_t j = lo + (e - new_chunks) / row_chunks;
      if (!run && written_by_call(j)) continue;
      at = j * width + 8 * ((e - new_chunks) % row_chunks);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        k[i] = __ldg(reinterpret_cast<const float4*>(k_cache + at) + i);
        v[i] = __ldg(reinterpret_cast<const float4*>(v_cache + at) + i);
      }
    }
    *reinterpret_cast<uint4*>(k16 + at) = make_uint4(pack_bf16(k[0].x, k[0].y), pack_bf16(k[0].z, k[0].w),
                                                     pack_bf16(k[1].x, k[1].y), pack_bf16(k[1].z, k[1].w));
    *reinterpret_cast<uint4*>(v16 + at) = make_uint4(pack_bf16(v[0].x, v[0].y), pack_bf16(v[0].z, v[0].w),
                                                     pack_bf16(v[1].x, v[1].y), pack_bf16(v[1].z, v[1].w));
  }
}

/// One block: query rows t0 .. t0 + 63 of head h against the keys any of them sees (this
/// split's run of tiles when splits > 1, written as decode's partials like the tiled kernel).
/// Warp w owns rows 16w .. 16w + 15; a lane holds rows g = lane / 4 and g + 8 of its warp's
/// 16, and in each 8-wide column tile the columns 2 (lane % 4) and 2 (lane % 4) + 1 (the mma
/// accumulator layout). grid: (ceil(T / 64), heads, splits) blocks of 128 threads.
/// kAsync: K and V tiles come from the bf16 rows kv_rows_to_bf16_kernel wrote (k16, v16) by
/// cp.async, V(j) copied while the warps compute Q K(j)^T and K(j + 1) while they compute
/// P V(j) (flash-attention 2's schedule, one buffer each); else they are converted from the
/// f32 caches by every thread between two barriers.
template <int kD, bool kVec4, bool kAsync>
__global__ void __launch_bounds__(kMmaThreads, 2)
    attention_prefill_mma_kernel(const AttentionArgs a, float* partials, int splits, const __nv_bfloat16* k16,
                                 const __nv_bfloat16* v16) {
  constexpr int S = mma_stride(kD);
  constexpr int kDTiles = kD / 8;
  constexpr int kKeyTiles = kMmaKeys / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* q_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* k_s = q_s + kMmaRows * S;
  __nv_bfloat16* v_s = k_s + kMmaKeys * S;
  auto* lo_s = reinterpret_cast<int64_t*>(v_s + kMmaKeys * S);
  int64_t* hi_s = lo_s + kMmaRows;
  auto* seen_s = reinterpret_cast<bool*>(hi_s + kMmaRows);

  const int D = a.head_dim;
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int h = static_cast<int>(blockIdx.y);
  const int kvh = h / (a.heads / a.kv_heads);
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kMmaRows;
  const int64_t q_width = static_cast<int64_t>(a.heads) * D;
  const int64_t kv_width = static_cast<int64_t>(a.kv_heads) * D;

  // Each row's keys [lo, hi) (empty past T or at a bad position), and the block's: the union
  // of its rows' ranges, and whether every key in it is seen by some row (rows at
  // consecutive positions: a prompt), so that no tile needs `seen` — reduced over the 64
  // rows by warps 0 and 1, combined after the barrier below.
  __shared__ int64_t range_s[2][2];
  __shared__ bool dense_s[2];
  if (tid < kMmaRows) {
    const int64_t t = t0 + tid;
    const int64_t p = t < a.T ? index_at(a.positions, a.pos_i64, t) : -1;
    const bool valid = t < a.T && position_valid(p, a.max_ctx);
    const int64_t lo = valid ? window_start(p, a.window) : 0;
    const int64_t hi = valid ? p + 1 : 0;
    lo_s[tid] = lo;
    hi_s[tid] = hi;
    const int64_t p0 = index_at(a.positions, a.pos_i64, t0);  // row 0 (t0 < T: the block has rows)
    const int64_t first_hi = position_valid(p0, a.max_ctx) ? p0 + 1 : 0;
    bool dense = t >= a.T || (first_hi > 0 && hi == first_hi + tid);
    int64_t begin = hi == 0 ? INT64_MAX : lo;
    int64_t end = hi;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      begin = min(begin, static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, static_cast<long long>(begin), offset)));
      end = max(end, static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, static_cast<long long>(end), offset)));
    }
    dense = __all_sync(0xffffffffu, dense);
    if (tid % 32 == 0) {
      range_s[tid / 32][0] = begin;
      range_s[tid / 32][1] = end;
      dense_s[tid / 32] = dense;
    }
  }
  {
    __nv_bfloat16* const dst[1] = {q_s};
    const float* const src[1] = {a.q + t0 * q_width + static_cast<int64_t>(h) * D};
    stage_rows<kD, kVec4>(dst, src, q_width, D, [&](int c) { return t0 + c < a.T; });
  }
  __syncthreads();
  int64_t keys_begin = min(range_s[0][0], range_s[1][0]);
  int64_t keys_end = max(range_s[0][1], range_s[1][1]);
  const bool dense = dense_s[0] && dense_s[1];
  const int split = static_cast<int>(blockIdx.z);
  split_key_range(keys_begin, keys_end, split, splits, kMmaKeys);

  const int g = lane / 4;
  const int q4 = lane % 4;
  const int r0 = warp * 16 + g;  // this lane's rows r0 and r0 + 8
  // This lane's rows' key bounds as 32-bit offsets from keys_begin (the block's keys span at
  // most max_ctx < 2^31 positions; a row that sees nothing gets an empty range).
  const auto offset = [&](int64_t k) {
    return static_cast<int>(min(max(k - keys_begin, int64_t{-1}), int64_t{INT32_MAX}));
  };
  const bool valid_row[2] = {hi_s[r0] > 0, hi_s[r0 + 8] > 0};
  const int lo_o[2] = {offset(lo_s[r0]), offset(lo_s[r0 + 8])};
  const int hi_o[2] = {valid_row[0] ? offset(hi_s[r0]) : -1, valid_row[1] ? offset(hi_s[r0 + 8]) : -1};
  const int end_o = offset(keys_end);
  const float scale2 = a.scale * 1.4426950408889634f;  // scores in base-2 units
  float o[kDTiles][4];
#pragma unroll
  for (int n = 0; n < kDTiles; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) o[n][i] = 0.0f;
  }
  float m[2] = {-CUDART_INF_F, -CUDART_INF_F};
  float l[2] = {0.0f, 0.0f};

  const float* k_head = a.k_cache + static_cast<int64_t>(kvh) * D;
  const float* v_head = a.v_cache + static_cast<int64_t>(kvh) * D;
  const __nv_bfloat16* k16_head = k16 + static_cast<int64_t>(kvh) * D;
  const __nv_bfloat16* v16_head = v16 + static_cast<int64_t>(kvh) * D;
  // Whether some row of the block sees key j (every key in range does when dense).
  const auto seen = [=](int64_t j) {
    bool any = false;
    for (int r = 0; r < kMmaRows; ++r) any = any || (lo_s[r] <= j && j < hi_s[r]);
    return any;
  };
  // kAsync: a K row only needs to exist (a masked score is dropped whatever it holds); a V row
  // no query of the block sees must be zero (0 * NaN would reach the output).
  const auto k_in = [&](int64_t j0) { return [=](int c) { return j0 + c < keys_end; }; };
  const auto v_in = [&](int64_t j0) { return [=](int c) { return j0 + c < keys_end && (dense || seen(j0 + c)); }; };
  if constexpr (kAsync) {
    if (keys_begin < keys_end) {
      stage_rows_async<kD>(k_s, k16_head + keys_begin * kv_width, kv_width, D, k_in(keys_begin));
      cp_async_commit();
    }
  }
  for (int64_t j0 = keys_begin; j0 < keys_end; j0 += kMmaKeys) {
    if constexpr (kAsync) {
      cp_async_wait_all();
      __syncthreads();  // K(j0) is in; no warp still reads V(j0 - 64)
      stage_rows_async<kD>(v_s, v16_head + j0 * kv_width, kv_width, D, v_in(j0));
      cp_async_commit();
    } else {
      __syncthreads();  // the previous tile is no longer read
      if (!dense && tid < kMmaKeys) seen_s[tid] = seen(j0 + tid);
      if (!dense) __syncthreads();
      const auto keep = [&](int c) { return j0 + c < keys_end && (dense || seen_s[c]); };
      __nv_bfloat16* const dst[2] = {k_s, v_s};
      const float* const src[2] = {k_head + j0 * kv_width, v_head + j0 * kv_width};
      stage_rows<kD, kVec4>(dst, src, kv_width, D, keep);
      __syncthreads();
    }

    // s = q k^T for the warp's 16 rows and the tile's 64 keys.
    float s[kKeyTiles][4];
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) s[j][i] = 0.0f;
    }
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      uint32_t qa[4];
      ldmatrix_x4<false>(qa, q_s + (warp * 16 + lane % 16) * S + kk * 16 + (lane / 16) * 8);
#pragma unroll
      for (int jn = 0; jn < kKeyTiles / 2; ++jn) {
        uint32_t kb[4];
        ldmatrix_x4<false>(kb, k_s + (jn * 16 + lane % 8 + (lane / 16) * 8) * S + kk * 16 + ((lane / 8) % 2) * 8);
        mma_bf16(s[2 * jn], qa, kb[0], kb[1]);
        mma_bf16(s[2 * jn + 1], qa, kb[2], kb[3]);
      }
    }

    // Online softmax over the tile, per row (the 4 lanes of a row share its max).
    const auto j0_o = static_cast<int>(j0 - keys_begin);
    float tile_max[2] = {-CUDART_INF_F, -CUDART_INF_F};
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = i / 2;
        const int key = j0_o + j * 8 + 2 * q4 + i % 2;  // offset from keys_begin
        s[j][i] = key < end_o && key >= lo_o[row] && key < hi_o[row] ? s[j][i] * scale2 : -CUDART_INF_F;
        tile_max[row] = fmaxf(tile_max[row], s[j][i]);
      }
    }
    float alpha[2];
#pragma unroll
    for (int row = 0; row < 2; ++row) {
      tile_max[row] = fmaxf(tile_max[row], __shfl_xor_sync(0xffffffffu, tile_max[row], 1));
      tile_max[row] = fmaxf(tile_max[row], __shfl_xor_sync(0xffffffffu, tile_max[row], 2));
      const float m_new = fmaxf(m[row], tile_max[row]);
      // No key of this row yet (m_new = -inf): every weight is 0 and nothing is rescaled.
      alpha[row] = m_new == -CUDART_INF_F ? 1.0f : exp2f(m[row] - m_new);
      m[row] = m_new;
    }
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = i / 2;
        s[j][i] = m[row] == -CUDART_INF_F ? 0.0f : exp2f(s[j][i] - m[row]);
        sum[row] += s[j][i];
      }
    }
#pragma unroll
    for (int row = 0; row < 2; ++row) l[row] = l[row] * alpha[row] + sum[row];  // this lane's part of the sum
#pragma unroll
    for (int n = 0; n < kDTiles; ++n) {
      o[n][0] *= alpha[0];
      o[n][1] *= alpha[0];
      o[n][2] *= alpha[1];
      o[n][3] *= alpha[1];
    }

    if constexpr (kAsync) {
      __syncthreads();  // no warp still reads K(j0)
      if (j0 + kMmaKeys < keys_end) {
        stage_rows_async<kD>(k_s, k16_head + (j0 + kMmaKeys) * kv_width, kv_width, D, k_in(j0 + kMmaKeys));
        cp_async_commit();
        cp_async_wait_group<1>();  // V(j0) is in; K(j0 + 64) may still be on its way
      } else {
        cp_async_wait_all();
      }
      __syncthreads();
    }

    // o += p v: the weights of keys 16kk .. 16kk + 15 are the A operand as they lie.
#pragma unroll
    for (int kk = 0; kk < kMmaKeys / 16; ++kk) {
      const uint32_t pa[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                              pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dn = 0; dn < kDTiles / 2; ++dn) {
        uint32_t vb[4];
        ldmatrix_x4<true>(vb, v_s + (kk * 16 + lane % 16) * S + dn * 16 + (lane / 16) * 8);
        mma_bf16(o[2 * dn], pa, vb[0], vb[1]);
        mma_bf16(o[2 * dn + 1], pa, vb[2], vb[3]);
      }
    }
  }

#pragma unroll
  for (int row = 0; row < 2; ++row) {
    l[row] += __shfl_xor_sync(0xffffffffu, l[row], 1);
    l[row] += __shfl_xor_sync(0xffffffffu, l[row], 2);
  }
#pragma unroll
  for (int row = 0; row < 2; ++row) {
    const int64_t t = t0 + r0 + 8 * row;
    if (t >= a.T) continue;
    const bool valid = valid_row[row];
    const int64_t th = t * a.heads + h;
    float* dst = splits > 1 ? partials + (th * splits + split) * D : a.out + t * q_width + static_cast<int64_t>(h) * D;
    // splits > 1: unnormalized, m in base-2 units as the combine kernel weighs them.
    const float mult = splits > 1 ? 1.0f : (valid ? 1.0f / l[row] : CUDART_NAN_F);
    // Columns d and d + 1 are this lane's: one 8-byte store where dst is 8-byte aligned and
    // D is even (the output or the partials may start at any float).
    const bool paired = D % 2 == 0 && reinterpret_cast<uintptr_t>(dst) % 8 == 0;
#pragma unroll
    for (int n = 0; n < kDTiles; ++n) {
      const int d = n * 8 + 2 * q4;
      if (paired && d < D) {
        *reinterpret_cast<float2*>(dst + d) = make_float2(o[n][2 * row] * mult, o[n][2 * row + 1] * mult);
      } else {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          if (d + i < D) dst[d + i] = o[n][2 * row + i] * mult;
        }
      }
    }
    if (splits > 1 && q4 == 0) {
      float* m_out = partials + a.T * a.heads * splits * D + th * splits + split;
      *m_out = m[row];
      m_out[a.T * a.heads * splits] = l[row];
    }
  }
}

template <int kD>
cudaError_t launch_prefill_mma(const AttentionArgs& a, bool vec4, float* scratch, int splits, const __nv_bfloat16* k16,
                               const __nv_bfloat16* v16, const Launch& launch) {
  const auto kernel = k16 != nullptr ? attention_prefill_mma_kernel<kD, true, true>
                      : vec4         ? attention_prefill_mma_kernel<kD, true, false>
                                     : attention_prefill_mma_kernel<kD, false, false>;
  const size_t smem = mma_smem_bytes(kD);
  // Above 48 KiB of dynamic shared memory a kernel must opt in (per device: so every launch).
  const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (attr != cudaSuccess) return attr;
  const dim3 grid(static_cast<unsigned>((a.T + kMmaRows - 1) / kMmaRows), static_cast<unsigned>(a.heads),
                  static_cast<unsigned>(splits));
  kernel<<<grid, kMmaThreads, smem, launch.stream>>>(a, scratch, splits, k16,
                                                     v16);  // a plain launch, as the tiled kernel's
  return cudaSuccess;
}

cudaError_t check_attention_shape(int64_t T, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t max_ctx,
                                  int64_t window) {
  if (T < 0 || heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0 || head_dim <= 0 ||
      head_dim > kAttentionMaxHeadDim || max_ctx <= 0 || window < 0 || heads > 65535 || T > INT32_MAX) {
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

AttentionArgs make_args(const float* q, const float* k_cache, const float* v_cache, const void* positions, bool pos_i64,
                        float* out, int64_t T, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t max_ctx,
                        int64_t window, float scale) {
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
                       AttentionArgs::HeadNorm{}};
}

}  // namespace

// ---- exported entries ---------------------------------------------------------------------------------

cudaError_t kv_cache_write(const float* k, const float* v, const void* positions, bool pos_i64, int64_t T,
                           int64_t width, float* k_cache, float* v_cache, int64_t max_ctx, int* error_flag,
                           const Launch& launch) {
  if (T < 0 || width < 0 || max_ctx < 0 || T > INT32_MAX || width > INT32_MAX) return cudaErrorInvalidValue;
  if (T == 0 || width == 0) return cudaSuccess;
  const bool vec = width % 4 == 0 && aligned16(k) && aligned16(v) && aligned16(k_cache) && aligned16(v_cache);
  const auto blocks = static_cast<unsigned>(T);
  if (vec) {
    launch_kernel(kv_cache_write_kernel<true>, blocks, kCacheWriteThreads, 0, launch, k, v, positions, pos_i64, width,
                  k_cache, v_cache, max_ctx, error_flag);
  } else {
    launch_kernel(kv_cache_write_kernel<false>, blocks, kCacheWriteThreads, 0, launch, k, v, positions, pos_i64, width,
                  k_cache, v_cache, max_ctx, error_flag);
  }
  return cudaGetLastError();
}

int attention_decode_splits(int64_t max_ctx, int64_t window, int max_splits) {
  const int64_t keys = window > 0 ? std::min(window, max_ctx) : max_ctx;
  const int64_t wanted = (keys + kDecodeMinKeysPerSplit - 1) / kDecodeMinKeysPerSplit;
  return static_cast<int>(std::clamp<int64_t>(wanted, 1, std::clamp(max_splits, 1, kMaxSplits)));
}

int64_t attention_decode_partials_floats(int64_t T, int64_t heads, int64_t head_dim, int max_splits) {
  return T * heads * std::clamp(max_splits, 1, kMaxSplits) * (head_dim + 2);
}

namespace {

cudaError_t launch_attention_decode(const float* q, const float* k_new, const float* v_new, float* k_cache,
                                    float* v_cache, const void* positions, bool pos_i64, float* out, int64_t T,
                                    int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t max_ctx, int64_t window,
                                    float scale, float* partials, int max_splits, int* error_flag, const Launch& launch,
                                    bool positions_from_host, const AttentionArgs::HeadNorm& norm) {
  if (check_attention_shape(T, heads, kv_heads, head_dim, max_ctx, window) != cudaSuccess || max_splits < 1 ||
      max_splits > kMaxSplits || T > 65535 || (k_new == nullptr) != (v_new == nullptr)) {
    return cudaErrorInvalidValue;
  }
  if (T == 0) return cudaSuccess;
  const int splits = attention_decode_splits(max_ctx, window, max_splits);
  // One split needs no combining; up to kMaxClusterSplits are combined inside a cluster where
  // the sm_90 code runs, more by the combine kernel through `partials`.
  const bool cluster = splits > 1 && splits <= kMaxClusterSplits && launch.limits->hopper_code_runs;
  if (splits > 1 && !cluster && partials == nullptr) return cudaErrorInvalidValue;
  AttentionArgs a =
      make_args(q, k_cache, v_cache, positions, pos_i64, out, T, heads, kv_heads, head_dim, max_ctx, window, scale);
  a.error_flag = error_flag;
  a.norm = norm;
  Launch next = launch;  // the call's first kernel as `launch` says, the later ones as launch.following()
  if (k_new != nullptr && T == 1) {
    a.k_new = k_new;
    a.v_new = v_new;
    a.k_cache_out = k_cache;
    a.v_cache_out = v_cache;
    a.keys_before_wait = positions_from_host;
  } else if (k_new != nullptr) {
    const cudaError_t written = kv_cache_write(k_new, v_new, positions, pos_i64, T, kv_heads * head_dim, k_cache,
                                               v_cache, max_ctx, error_flag, next);
    if (written != cudaSuccess) return written;
    next = launch.following();
  }
  const bool vec4 = head_dim % 4 == 0 && aligned16(k_cache) && aligned16(v_cache) &&
                    (k_new == nullptr || (aligned16(k_new) && aligned16(v_new)));
  // Query heads per block (kG, dividing the group): more share each K / V row load, fewer
  // give more blocks. The kernel is latency-bound when its grid is small (one block per SM,
  // 8 warps), so take the largest kG that still leaves >= 256 blocks, else 1 (the group's
  // blocks then read the same K / V rows, mostly from L2).
  const int64_t group = heads / kv_heads;
  const auto blocks_for = [&](int64_t kg) { return splits * kv_heads * (group / kg) * T; };
  const auto fits = [&](int64_t kg) { return group % kg == 0 && blocks_for(kg) >= 256; };
  if (fits(8)) {
    launch_decode_split<8>(a, vec4, cluster, partials, splits, next);
  } else if (fits(4)) {
    launch_decode_split<4>(a, vec4, cluster, partials, splits, next);
  } else if (fits(2)) {
    launch_decode_split<2>(a, vec4, cluster, partials, splits, next);
  } else {
    launch_decode_split<1>(a, vec4, cluster, partials, splits, next);
  }
  if (splits > 1 && !cluster) launch_combine(a, partials, splits, vec4, launch.following());
  return cudaGetLastError();
}

template <typename W>
constexpr int weight_kind() {
  return std::is_same_v<W, __nv_bfloat16> ? 1 : std::is_same_v<W, __half> ? 2 : 0;
}

}  // namespace

cudaError_t attention_decode(const float* q, const float* k_new, const float* v_new, float* k_cache, float* v_cache,
                             const void* positions, bool pos_i64, float* out, int64_t T, int64_t heads,
                             int64_t kv_heads, int64_t head_dim, int64_t max_ctx, int64_t window, float scale,
                             float* partials, int max_splits, int* error_flag, const Launch& launch,
                             bool positions_from_host) {
  return launch_attention_decode(q, k_new, v_new, k_cache, v_cache, positions, pos_i64, out, T, heads, kv_heads,
                                 head_dim, max_ctx, window, scale, partials, max_splits, error_flag, launch,
                                 positions_from_host, AttentionArgs::HeadNorm{});
}

template <typename W>
cudaError_t attention_decode_head_norm(const float* q, const float* k_new, const float* v_new, float* k_cache,
                                       float* v_cache, const void* positions, bool pos_i64, float* out, int64_t heads,
                                       int64_t kv_heads, int64_t head_dim, int64_t max_ctx, int64_t window, float scale,
                                       const AttentionHeadNorm<W>& norm, float* partials, int max_splits,
                                       int* error_flag, const Launch& launch, bool positions_from_host) {
  if (k_new == nullptr || norm.q_w == nullptr || norm.k_w == nullptr || head_dim % 2 != 0) {
    return cudaErrorInvalidValue;
  }
  const AttentionArgs::HeadNorm n{norm.q_w,    norm.k_w,   weight_kind<W>(),    norm.eps,
                                  norm.offset, norm.theta, norm.position_scale, norm.inv_freq};
  return launch_attention_decode(q, k_new, v_new, k_cache, v_cache, positions, pos_i64, out, 1, heads, kv_heads,
                                 head_dim, max_ctx, window, scale, partials, max_splits, error_flag, launch,
                                 positions_from_host, n);
}

#define GEARBOX_ATTENTION_DECODE_HEAD_NORM(W)                                                                         \
  template cudaError_t attention_decode_head_norm<W>(                                                                 \
      const float*, const float*, const float*, float*, float*, const void*, bool, float*, int64_t, int64_t, int64_t, \
      int64_t, int64_t, float, const AttentionHeadNorm<W>&, float*, int, int*, const Launch&, bool);
GEARBOX_ATTENTION_DECODE_HEAD_NORM(float)
GEARBOX_ATTENTION_DECODE_HEAD_NORM(__nv_bfloat16)
GEARBOX_ATTENTION_DECODE_HEAD_NORM(__half)
#undef GEARBOX_ATTENTION_DECODE_HEAD_NORM

namespace {

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

}  // namespace

int attention_prefill_splits(int64_t T, int64_t heads, const DeviceLimits& limits) {
  return prefill_splits(T, heads, kPrefillRows, kPrefillBlocksPerSm * limits.sm_count, kPrefillMaxSplits);
}

int64_t attention_prefill_scratch_floats(int64_t T, int64_t heads, int64_t head_dim, const DeviceLimits& limits) {
  return prefill_scratch_floats(T, heads, head_dim, attention_prefill_splits, limits);
}

cudaError_t attention_prefill(const float* q, const float* k_cache, const float* v_cache, const void* positions,
                              bool pos_i64, float* out, int64_t T, int64_t heads, int64_t kv_heads, int64_t head_dim,
                              int64_t max_ctx, int64_t window, float scale, float* scratch, const Launch& launch) {
  if (check_attention_shape(T, heads, kv_heads, head_dim, max_ctx, window) != cudaSuccess) {
    return cudaErrorInvalidValue;
  }
  if (T == 0) return cudaSuccess;
  const AttentionArgs a =
      make_args(q, k_cache, v_cache, positions, pos_i64, out, T, heads, kv_heads, head_dim, max_ctx, window, scale);
  const bool vec4 = head_dim % 4 == 0 && aligned16(k_cache) && aligned16(v_cache);
  const size_t smem = prefill_smem_bytes(static_cast<int>(head_dim));
  const int splits = attention_prefill_splits(T, heads, *launch.limits);
  if (splits > 1 && scratch == nullptr) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((T + kPrefillRows - 1) / kPrefillRows), static_cast<unsigned>(heads),
                  static_cast<unsigned>(splits));
  // Above 48 KiB of dynamic shared memory a kernel must opt in (per device: so every launch).
  const auto kernel = vec4 ? attention_prefill_kernel<true> : attention_prefill_kernel<false>;
  const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (attr != cudaSuccess) return attr;
  // A plain launch (launch.h): this kernel runs long enough that an early start gains
  // nothing, and the waits cost it registers (96 -> 80 with them, 25% slower at 512 tokens).
  kernel<<<grid, kPrefillThreads, smem, launch.stream>>>(a, scratch, splits);
  // The combine is the call's first kernel launched through launch_kernel.
  if (splits > 1) launch_combine_rows(a, scratch, splits, vec4, launch);
  return cudaGetLastError();
}

int attention_prefill_mma_splits(int64_t T, int64_t heads, const DeviceLimits& limits) {
  return prefill_splits(T, heads, kMmaRows, kMmaBlocksPerSm * limits.sm_count, kMmaMaxSplits);
}

namespace {

/// Floats of scratch the bf16 rows of both caches take (none where the tiles cannot be
/// copied as 16-byte chunks), rounded up to 16 bytes: the partials follow them.
int64_t mma_kv_floats(int64_t kv_heads, int64_t head_dim, int64_t max_ctx) {
  if (head_dim % 8 != 0 || kv_heads <= 0 || max_ctx <= 0) return 0;
  return (max_ctx * kv_heads * head_dim + 3) / 4 * 4;  // 2 caches x 2 bytes = 1 float per element
}

}  // namespace

int64_t attention_prefill_mma_scratch_floats(int64_t T, int64_t heads, int64_t kv_heads, int64_t head_dim,
                                             int64_t max_ctx, const DeviceLimits& limits) {
  if (T <= 0) return 0;
  return mma_kv_floats(kv_heads, head_dim, max_ctx) +
         prefill_scratch_floats(T, heads, head_dim, attention_prefill_mma_splits, limits);
}

cudaError_t attention_prefill_mma(const float* q, const float* k_new, const float* v_new, float* k_cache,
                                  float* v_cache, const void* positions, bool pos_i64, float* out, int64_t T,
                                  int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t max_ctx, int64_t window,
                                  float scale, float* scratch, int* error_flag, const Launch& launch) {
  if (check_attention_shape(T, heads, kv_heads, head_dim, max_ctx, window) != cudaSuccess ||
      (k_new == nullptr) != (v_new == nullptr)) {
    return cudaErrorInvalidValue;
  }
  if (T == 0) return cudaSuccess;
  const AttentionArgs a =
      make_args(q, k_cache, v_cache, positions, pos_i64, out, T, heads, kv_heads, head_dim, max_ctx, window, scale);
  const bool vec4 = head_dim % 4 == 0 && aligned16(q) && aligned16(k_cache) && aligned16(v_cache);
  const int splits = attention_prefill_mma_splits(T, heads, *launch.limits);
  const int64_t kv_floats = mma_kv_floats(kv_heads, head_dim, max_ctx);
  if (scratch == nullptr && (splits > 1 || kv_floats > 0)) return cudaErrorInvalidValue;
  const int64_t width = kv_heads * head_dim;
  // The rows the queries see as bf16 first (16-byte chunks: head_dim % 8 == 0), then the
  // attention copies its tiles from there; given the new rows, one kernel also writes them
  // to the caches.
  __nv_bfloat16* k16 = nullptr;
  __nv_bfloat16* v16 = nullptr;
  if (kv_floats > 0 && aligned16(k_cache) && aligned16(v_cache) && aligned16(scratch)) {
    k16 = reinterpret_cast<__nv_bfloat16*>(scratch);
    v16 = k16 + max_ctx * width;
  }
  const bool fused_write = k_new != nullptr && k16 != nullptr && aligned16(k_new) && aligned16(v_new);
  // The first kernel launched through launch_kernel goes out as `launch` says, the later ones
  // as launch.following() (the attention kernel itself is a plain launch).
  Launch next = launch;
  if (k_new != nullptr && !fused_write) {
    const cudaError_t written =
        kv_cache_write(k_new, v_new, positions, pos_i64, T, width, k_cache, v_cache, max_ctx, error_flag, next);
    if (written != cudaSuccess) return written;
    next = launch.following();
  }
  const int64_t most_blocks = kToBf16BlocksPerSm * launch.limits->sm_count;
  if (fused_write) {
    const int64_t chunks = (T + max_ctx) * width / 8;  // at most: T new rows and max_ctx rows seen
    const auto blocks = static_cast<unsigned>(std::min<int64_t>(most_blocks, (chunks + 255) / 256));
    launch_kernel(kv_write_rows_to_bf16_kernel, blocks, kToBf16Threads, 0, next, k_new, v_new, positions, pos_i64, T,
                  window, max_ctx, width, k_cache, v_cache, k16, v16, error_flag);
    next = launch.following();
  } else if (k16 != nullptr) {
    const auto blocks = static_cast<unsigned>(std::min<int64_t>(most_blocks, (max_ctx * width / 8 + 255) / 256));
    launch_kernel(kv_rows_to_bf16_kernel, blocks, kToBf16Threads, 0, next, k_cache, v_cache, positions, pos_i64, T,
                  window, max_ctx, width, k16, v16);
    next = launch.following();
  }
  float* partials = scratch != nullptr ? scratch + kv_floats : nullptr;
  cudaError_t err;
  if (head_dim <= 64) {
    err = launch_prefill_mma<64>(a, vec4, partials, splits, k16, v16, launch);
  } else if (head_dim <= 128) {
    err = launch_prefill_mma<128>(a, vec4, partials, splits, k16, v16, launch);
  } else {
    err = launch_prefill_mma<256>(a, vec4, partials, splits, k16, v16, launch);
  }
  if (err != cudaSuccess) return err;
  if (splits > 1) launch_combine_rows(a, partials, splits, vec4, next);
  return cudaGetLastError();
}

}  // namespace gearbox::cuda
