// CUDA flash-decoding (decode_attention.cuh): a block per (split of the keys, group of query
// heads sharing a kv head, query), eight warps each an independent online-softmax worker,
// the splits' partials combined inside a thread-block cluster (sm_90) or by split_merge's
// combine kernel. Softmax in base-2 units (exp2 of s * log2 e).

#include <cooperative_groups.h>
#include <math_constants.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "devices/cuda/device_math.h"
#include "devices/cuda/kernels/attention_common.cuh"
#include "devices/cuda/kernels/decode_attention.cuh"
#include "devices/cuda/kernels/kv_cache.cuh"
#include "devices/cuda/kernels/split_merge.cuh"
#include "devices/cuda/launch.h"

namespace gearbox::cuda {
using namespace detail;  // the attention families' internals (attention_common.cuh)
namespace {

// ---- decode: split-KV partials -------------------------------------------------------------------

constexpr int kDecodeWarps = 8;
constexpr int kDecodeThreads = 32 * kDecodeWarps;
constexpr int kDecodeKeysPerStep = 4;  // keys whose K and V rows a warp loads at once
constexpr int64_t kDecodeMinKeysPerSplit = kDecodeWarps * kDecodeKeysPerStep;

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

// ---- decode: the per-head norm and RoPE of q and k ----------------------------------------------
//
// head_norm_rope's arithmetic (norm_rope.cu) on the rows the decode kernel reads: a warp
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

/// Splits one cluster can combine: sm_90 schedules clusters of up to 16 blocks (past the
/// portable 8, which the launch allows for the kernel).
constexpr int kMaxClusterSplits = 16;

/// The end of a clustered split kernel, where block r of the cluster holds split r's
/// (m, l, acc) in shared memory. Every block reads the splits' m and l (lane r of warp 0
/// reads split r) and forms the weights exp2(m_r - max m) as the combine kernel does; then
/// block r combines its 1 / splits share of the kG * D outputs, reading the acc of every
/// split at once (the DSMEM loads are independent, so their latencies overlap).
template <int kG>
__device__ __forceinline__ void combine_in_cluster(const AttentionArgs& a, float* out, int64_t p, int splits,
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
    out[e] = position_valid(p, a.max_ctx) ? sum * inv_sum_s[g] : keyless_output(a.slots, p);
  }
  cluster.sync();  // no block leaves while another reads its shared memory
#else
  (void)a, (void)out, (void)p, (void)splits, (void)acc_s, (void)m_s, (void)l_s;
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
  // Token t's cache: its slot's rows in a batched network (attention_common.cuh).
  const int64_t row0 = slot_first_row(a.slots, t, a.max_ctx);
  // Head norm: warp u < kG normalizes and rotates query head head0 + u into q_s[u], warp kG
  // key p into k_s (warp w takes units w, w + 8, ...). The angles need only the position.
  const bool normed = a.norm.q_w != nullptr;
  const int norm_units = normed ? kG + 1 : 0;
  float cs[kPairSlots];
  float sn[kPairSlots];
  if (warp < norm_units) rope_slice(p, a.norm, D, lane, cs, sn);

  // A step: the warp's next kDecodeKeysPerStep keys from `base`, K and V rows loaded at once.
  const float* k_head = a.k_cache + row0 * kv_width + static_cast<int64_t>(kvh) * D;
  const float* v_head = a.v_cache + row0 * kv_width + static_cast<int64_t>(kvh) * D;
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
  if (a.error_flag != nullptr && split == 0 && blockIdx.y == 0 && tid == 0 && !valid && !is_padding(a.slots, p)) {
    atomicExch(a.error_flag, 1);
  }
  // The new row enters the cache here (K with head norm after the barrier below); no block
  // reads cache row p (key p comes from k_new or k_s).
  const bool writes_row = a.k_new != nullptr && split == 0 && static_cast<int>(blockIdx.y) % subgroups == 0 && valid;
  if (writes_row) {
    for (int d = tid; d < D; d += kDecodeThreads) {
      if (!normed) a.k_cache_out[(row0 + p) * kv_width + static_cast<int64_t>(kvh) * D + d] = k_fresh[d];
      a.v_cache_out[(row0 + p) * kv_width + static_cast<int64_t>(kvh) * D + d] = v_fresh[d];
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
        a.k_cache_out[(row0 + p) * kv_width + static_cast<int64_t>(kvh) * D + d] = k_s[d];
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
    combine_in_cluster<kG>(a, a.out + t * q_width + static_cast<int64_t>(head0) * D, p, splits, acc_s, m_max_s,
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
      a.out[t * q_width + static_cast<int64_t>(head0) * D + e] =
          valid ? acc_s[g][d] / l_sum_s[g] : keyless_output(a.slots, p);
    } else {
      acc_out[static_cast<int64_t>(g) * splits * D + d] = acc_s[g][d];
    }
  }
  if (splits > 1 && tid < kG) {
    m_out[static_cast<int64_t>(tid) * splits] = m_max_s[tid];
    l_out[static_cast<int64_t>(tid) * splits] = l_sum_s[tid];
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

}  // namespace

DecodeGrid attention_decode_grid(int64_t T, int64_t heads, int64_t kv_heads, int64_t max_ctx, int64_t window,
                                 int max_splits, int sm_count, int heads_per_block) {
  const int64_t keys = window > 0 ? std::min(window, max_ctx) : max_ctx;
  const int64_t kvh = std::max<int64_t>(kv_heads, 1);
  const int64_t group = std::max<int64_t>(heads / kvh, 1);
  int64_t splits = std::clamp<int64_t>((keys + kDecodeMinKeysPerSplit - 1) / kDecodeMinKeysPerSplit, 1,
                                       std::clamp(max_splits, 1, kMaxSplits));
  // Several queries: as many splits as give the device's SMs one (query, head, split) each.
  // More make short splits whose blocks cost more than the keys they share out
  // (cuda_kernels_bench attention, "decode rows="). One query keeps the splits its keys want.
  if (T > 1) splits = std::min(splits, (std::max<int64_t>(sm_count, 1) + T * heads - 1) / (T * heads));
  if (heads_per_block > 0) return {static_cast<int>(splits), heads_per_block};
  // Query heads per block (kG, dividing the group): more share each K / V row load, fewer
  // give more blocks. Take the largest kG that still leaves >= 256 blocks, else 1 (the
  // group's blocks then read the same K / V rows, mostly from L2).
  for (const int kg : {8, 4, 2}) {
    if (group % kg == 0 && splits * kvh * (group / kg) * T >= 256) return {static_cast<int>(splits), kg};
  }
  return {static_cast<int>(splits), 1};
}

int64_t attention_decode_partials_floats(int64_t T, int64_t heads, int64_t head_dim, int max_splits) {
  return T * heads * std::clamp(max_splits, 1, kMaxSplits) * (head_dim + 2);
}

namespace {

cudaError_t launch_attention_decode(const float* q, const float* k_new, const float* v_new, float* k_cache,
                                    float* v_cache, const void* positions, bool pos_i64, float* out, int64_t T,
                                    int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t max_ctx, int64_t window,
                                    float scale, float* partials, int max_splits, int* error_flag, const Launch& launch,
                                    bool positions_from_host, const AttentionArgs::HeadNorm& norm,
                                    const CacheSlots& slots, int heads_per_block) {
  if (check_attention_shape(T, heads, kv_heads, head_dim, max_ctx, window) != cudaSuccess || max_splits < 1 ||
      max_splits > kMaxSplits || T > 65535 || (k_new == nullptr) != (v_new == nullptr) || slots.seq < 1 ||
      (heads_per_block != 0 &&
       (heads_per_block < 0 || heads_per_block > 8 || (heads_per_block & (heads_per_block - 1)) != 0 ||
        (heads / kv_heads) % heads_per_block != 0))) {
    return cudaErrorInvalidValue;
  }
  if (T == 0) return cudaSuccess;
  const DecodeGrid grid =
      attention_decode_grid(T, heads, kv_heads, max_ctx, window, max_splits, launch.limits->sm_count, heads_per_block);
  const int splits = grid.splits;
  // One split needs no combining; up to kMaxClusterSplits are combined inside a cluster where
  // the sm_90 code runs, more by the combine kernel through `partials`.
  const bool cluster = splits > 1 && splits <= kMaxClusterSplits && launch.limits->hopper_code_runs;
  if (splits > 1 && !cluster && partials == nullptr) return cudaErrorInvalidValue;
  AttentionArgs a = make_args(q, k_cache, v_cache, positions, pos_i64, out, T, heads, kv_heads, head_dim, max_ctx,
                              window, scale, slots);
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
                                               v_cache, max_ctx, error_flag, next, slots);
    if (written != cudaSuccess) return written;
    next = launch.following();
  }
  const bool vec4 = head_dim % 4 == 0 && aligned16(k_cache) && aligned16(v_cache) &&
                    (k_new == nullptr || (aligned16(k_new) && aligned16(v_new)));
  if (grid.heads_per_block == 8) {
    launch_decode_split<8>(a, vec4, cluster, partials, splits, next);
  } else if (grid.heads_per_block == 4) {
    launch_decode_split<4>(a, vec4, cluster, partials, splits, next);
  } else if (grid.heads_per_block == 2) {
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
                             bool positions_from_host, const CacheSlots& slots, int heads_per_block) {
  return launch_attention_decode(q, k_new, v_new, k_cache, v_cache, positions, pos_i64, out, T, heads, kv_heads,
                                 head_dim, max_ctx, window, scale, partials, max_splits, error_flag, launch,
                                 positions_from_host, AttentionArgs::HeadNorm{}, slots, heads_per_block);
}

template <typename W>
cudaError_t attention_decode_head_norm(const float* q, const float* k_new, const float* v_new, float* k_cache,
                                       float* v_cache, const void* positions, bool pos_i64, float* out, int64_t heads,
                                       int64_t kv_heads, int64_t head_dim, int64_t max_ctx, int64_t window, float scale,
                                       const AttentionHeadNorm<W>& norm, float* partials, int max_splits,
                                       int* error_flag, const Launch& launch, bool positions_from_host,
                                       const CacheSlots& slots) {
  if (k_new == nullptr || norm.q_w == nullptr || norm.k_w == nullptr || head_dim % 2 != 0) {
    return cudaErrorInvalidValue;
  }
  const AttentionArgs::HeadNorm n{norm.q_w,    norm.k_w,   weight_kind<W>(),    norm.eps,
                                  norm.offset, norm.theta, norm.position_scale, norm.inv_freq};
  return launch_attention_decode(q, k_new, v_new, k_cache, v_cache, positions, pos_i64, out, 1, heads, kv_heads,
                                 head_dim, max_ctx, window, scale, partials, max_splits, error_flag, launch,
                                 positions_from_host, n, slots, 0);
}

#define GEARBOX_ATTENTION_DECODE_HEAD_NORM(W)                                                                        \
  template cudaError_t attention_decode_head_norm<W>(const float*, const float*, const float*, float*, float*,       \
                                                     const void*, bool, float*, int64_t, int64_t, int64_t, int64_t,  \
                                                     int64_t, float, const AttentionHeadNorm<W>&, float*, int, int*, \
                                                     const Launch&, bool, const CacheSlots&);
GEARBOX_ATTENTION_DECODE_HEAD_NORM(float)
GEARBOX_ATTENTION_DECODE_HEAD_NORM(__nv_bfloat16)
GEARBOX_ATTENTION_DECODE_HEAD_NORM(__half)
#undef GEARBOX_ATTENTION_DECODE_HEAD_NORM

}  // namespace gearbox::cuda
