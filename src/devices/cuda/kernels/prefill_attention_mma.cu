// CUDA attention on tensor cores (prefill_attention_mma.cuh).

#include <math_constants.h>

#include <algorithm>
#include <cstdint>

#include "devices/cuda/device_math.h"
#include "devices/cuda/kernels/attention_common.cuh"
#include "devices/cuda/kernels/kv_cache.cuh"
#include "devices/cuda/kernels/prefill_attention_mma.cuh"
#include "devices/cuda/kernels/split_merge.cuh"
#include "devices/cuda/launch.h"

namespace gearbox::cuda {
using namespace detail;  // the attention families' internals (attention_common.cuh)
namespace {

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
  // A plain launch, as the tiled kernel's (prefill_attention.cu).
  kernel<<<grid, kMmaThreads, smem, launch.stream>>>(a, scratch, splits, k16, v16);
  return cudaSuccess;
}

}  // namespace

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
