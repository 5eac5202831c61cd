// CUDA linear for small M (decode): y[M, N] = x[M, K] * W[N, K]^T (+ bias[N]), M <= 8.
//
//   x [M, K] f32    W [N, K] (bf16 / f16 / f32)    bias [N] f32    y [M, N] f32
//
// Memory-bound: W is read exactly once, so the kernel's job is to keep enough 16-byte loads
// in flight to approach DRAM bandwidth. Layout of the work:
// - A "row group" is R consecutive rows of W (the geometry's `rows`; 4 by default): each x
//   chunk read from L1 serves R W rows (x costs L1 bandwidth M times over), and a thread has
//   R rows' loads in flight.
// - TPR threads (32..256, a power of two, chosen from K) share one row group and split K
//   into 16-byte chunks, thread j taking chunks j, j + TPR, ...; TPR grows with K so that
//   each thread has at most U chunks per row per pass (the geometry's `unroll`; 2 by
//   default). A thread issues all U * R of its W loads (ld.global.nc, not allocated in L1,
//   so x stays there) before the first FMA. Which geometry streams W fastest depends on N and
//   K (how many blocks, how many passes over K) and the GPU, so M = 1 launches take any of
//   kGemvGeometries and the builder times them. M > 1 launches run gemv_rows_geometry(M):
//   M * R accumulators a thread, R = 2 above 4 rows so that two blocks fit an SM.
// - A chunk costs its load, its conversion and its multiply-adds, and little else: a
//   thread forms its rows' pointers once a unit and indexes within a row in 32 bits
//   (K <= kGemvMaxK), with one compare a slot (its chunks past K are neither loaded nor
//   read); rows of a group past N load the group's first row and are not stored. (A row
//   address recomputed in 64 bits at every load costs time in every layer GEMV.)
// - A block of 256 threads holds 256 / TPR row groups; the partial sums of one group are
//   reduced with warp shuffles, then across its warps through shared memory.
// - gemv_multi: the blocks of up to 4 weights (fused QKV, gate+up) are numbered one after
//   another and served by one grid; a block serves one weight only.
// - gemv_gated (a gated MLP's gate_up_proj + activation): a row group is gate rows
//   o .. o + R/2 - 1 and the same up rows, so the group's lanes hold both dot products of an
//   output and write act(gate) * up; the gate and up vectors are never stored.
// - The first pass's W loads are issued before the kernel waits for its predecessor
//   (programmatic dependent launch, launch.h): they overlap the previous kernel's end.
// - The grid is at most the blocks the device holds at once (its occupancy times the SM count
//   of the launch's DeviceLimits): what would be block b of a larger grid (a "unit") runs on
//   block b % gridDim.x, each block taking its units in turn and issuing the next one's first
//   loads before it reduces and stores the current one, so that no unit starts from an empty
//   pipeline (a grid of several waves would drain between them).
// - A norm input (GemvNormInput, M = 1): the launch computes its own x, the residual step of
//   norm_add_norm, instead of reading it. Before its wait a block copies both norm weights
//   into shared memory asynchronously (cp.async) behind its first W loads; after it, the
//   block copies the sublayer output and the residual in (all loads in flight at once),
//   forms sum and the normalized input there (two block reductions) and runs its units from
//   there; block 0 writes sum. The arithmetic per element is norm_add_norm's (residual_norm.h).
// - Progress (GemvProgress, M = 1 and one target): after every `every` units and its last,
//   the block meets at a barrier and thread 0 moves the block's slot to its next unit's first
//   output with a release store at system scope, so that the host can copy y out of mapped
//   host memory as it lands (engine_handle.cpp). The release waits for the block's stores
//   to reach the host, which is why it comes every `every` units and not after each.
// K * sizeof(W) % 16 != 0 or an unaligned x / W takes the same kernel with 1-element chunks.

#include <algorithm>
#include <climits>
#include <cstdint>
#include <iterator>
#include <type_traits>

#include "devices/cuda/device_math.h"
#include "devices/cuda/kernels/gemv.cuh"
#include "devices/cuda/launch.h"
#include "devices/cuda/residual_norm.h"

namespace gearbox::cuda {
namespace {

constexpr int kGemvThreads = 256;
/// Blocks per SM the register budget must allow: at M = 1, 4 blocks (<= 64 registers) where a
/// thread holds up to 4 chunks (R * U), 3 (<= 85) where it holds 8 (64 registers would make
/// those spill, which costs more than the fourth block gains), 2 where it holds 16 (106-128
/// registers); larger M, 2 (<= 128 registers): its M * R accumulators fit there with R = 4 up
/// to 4 rows and R = 2 above (gemv_rows_geometry).
__host__ __device__ constexpr int min_blocks_per_sm(int M, int loads) {
  return M == 1 ? (loads <= 4 ? 4 : loads <= 8 ? 3 : 2) : 2;
}

template <typename W>
struct GemvParams {
  const float* x;                      // [M, K]
  const W* w[kGemvMaxTargets];         // [n[i], K]
  const float* bias[kGemvMaxTargets];  // [n[i]] or null
  float* y[kGemvMaxTargets];           // [M, n[i]]
  int64_t n[kGemvMaxTargets];
  int64_t block_end[kGemvMaxTargets];  // blocks of targets 0..i, cumulative
  int64_t total_blocks;
  int count;
  int threads_per_row;  // TPR
  int64_t K;
  GatedActivation activation;  // gemv_gated
  GemvNormInput<W> norm;       // kNorm launches
  GemvProgress progress;       // slots null: none (M = 1, one target)
};

/// A progress slot's new value (GemvProgress), a store the host polls: relaxed (slots of no
/// block), or a release at system scope, after which the host that reads the value finds every
/// store ordered before it (the block's, through a barrier) in its memory.
__device__ __forceinline__ void store_to_host(uint32_t* slot, uint32_t value) {
  asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(slot), "r"(value) : "memory");
}
__device__ __forceinline__ void release_to_host(uint32_t* slot, uint32_t value) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(slot), "r"(value) : "memory");
}

/// A chunk of W: 16 bytes (kVec) or one element, with its load and its conversion to f32.
template <typename W, bool kVec>
struct Chunk;

template <typename W>
struct Chunk<W, true> {
  static constexpr int kElems = 16 / static_cast<int>(sizeof(W));
  uint4 raw;
  static __device__ __forceinline__ Chunk fetch(const W* p) { return {load_stream_16(p)}; }
  static __device__ __forceinline__ Chunk zero() { return {make_uint4(0u, 0u, 0u, 0u)}; }
  __device__ __forceinline__ void to_f32(float (&f)[kElems]) const {
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (sizeof(W) == 4) {
        f[i] = __uint_as_float(words[i]);
      } else {  // element 2i in the low half
        const float2 pair = unpack2(words[i], W{});
        f[2 * i] = pair.x;
        f[2 * i + 1] = pair.y;
      }
    }
  }
};

template <typename W>
struct Chunk<W, false> {
  static constexpr int kElems = 1;
  float value;
  static __device__ __forceinline__ Chunk fetch(const W* p) {
    if constexpr (sizeof(W) == 4) {
      return {__ldg(reinterpret_cast<const float*>(p))};
    } else {
      const unsigned short bits = __ldg(reinterpret_cast<const unsigned short*>(p));
      if constexpr (std::is_same_v<W, __nv_bfloat16>) {
        return {__uint_as_float(static_cast<uint32_t>(bits) << 16)};
      } else {
        return {__half2float(__ushort_as_half(bits))};
      }
    }
  }
  static __device__ __forceinline__ Chunk zero() { return {0.0f}; }
  __device__ __forceinline__ void to_f32(float (&f)[1]) const { f[0] = value; }
};

/// x[m, c * E : c * E + E] for E = 4 or 8 (16-byte aligned) or E = 1; kShared: from shared
/// memory (a norm input), else read-only through L1.
template <int E, bool kShared = false>
__device__ __forceinline__ void load_x(const float* p, float (&f)[E]) {
  if constexpr (E == 1) {
    f[0] = kShared ? *p : __ldg(p);
  } else {
#pragma unroll
    for (int q = 0; q < E / 4; ++q) {
      const float4 v = kShared ? reinterpret_cast<const float4*>(p)[q] : __ldg(reinterpret_cast<const float4*>(p) + q);
      f[4 * q] = v.x;
      f[4 * q + 1] = v.y;
      f[4 * q + 2] = v.z;
      f[4 * q + 3] = v.w;
    }
  }
}

/// Shared memory of a kNorm launch of K columns of W: x (which becomes the sum and then the
/// input) and the residual as f32, then both norm weights as W.
template <typename W>
__host__ __device__ constexpr size_t norm_shared_bytes(int64_t K) {
  return static_cast<size_t>(K) * (2 * sizeof(float) + 2 * sizeof(W));
}

/// kNorm, before the wait: the norm weights into shared memory (w_post then w_next, K each),
/// asynchronously: nothing waits for them before the wait for the previous kernel.
template <typename W>
__device__ __forceinline__ void stage_norm_weights(const GemvNormInput<W>& n, int64_t K, W* w_shared) {
  const int64_t chunks = K * static_cast<int64_t>(sizeof(W)) / 16;  // per weight
  // Without a post-norm, only w_next (at w_shared + K).
  for (int64_t c = n.w_post != nullptr ? threadIdx.x : chunks + threadIdx.x; c < 2 * chunks; c += kGemvThreads) {
    const W* src = c < chunks ? n.w_post + c * (16 / sizeof(W)) : n.w_next + (c - chunks) * (16 / sizeof(W));
    cp_async_16(w_shared + c * (16 / sizeof(W)), src);
  }
  cp_async_commit();
}

/// kNorm, after the wait: x_shared [K] = rms_norm(residual + rms_norm(x, w_post), w_next)
/// (residual_norm_staged; residual + x without w_post), the sum written to n.sum when
/// write_sum. x and the residual are copied into shared memory first (x_shared, then the
/// residual at x_shared + K), every load in flight at once, so the prologue costs one round
/// trip to L2 and two block reductions (one without w_post).
/// K % 4 == 0 and every vector 16-byte aligned (checked by the entries). Ends with a barrier.
template <typename W>
__device__ __forceinline__ void norm_input(const GemvNormInput<W>& n, int K, float* x_shared, const W* w_shared,
                                           float (*red)[kGemvThreads / 32], bool write_sum) {
  const int tid = static_cast<int>(threadIdx.x);
  float* const r_shared = x_shared + K;
  for (int c = tid; c < K / 4; c += kGemvThreads) {
    cp_async_16(x_shared + 4 * c, n.x + 4 * c);
    cp_async_16(r_shared + 4 * c, n.residual + 4 * c);
  }
  cp_async_commit();
  cp_async_wait_all();  // the weights' group too
  __syncthreads();
  float squares = 0.0f;
  for (int c = tid; c < K / 4; c += kGemvThreads) squares += squares4(get4(x_shared + 4 * c));
  int sums = 0;  // each of the two sums its own scratch, so no barrier between them
  const auto block_sum = [&](float v) { return block_sum_to_all<kGemvThreads>(v, red[sums++]); };
  float* const sum_out = write_sum ? n.sum : nullptr;
  if (n.w_post != nullptr) {  // uniform over the launch
    residual_norm_staged<true>(x_shared, r_shared, w_shared, w_shared + K, sum_out, K, n.eps, n.offset, tid,
                               kGemvThreads, squares, block_sum);
  } else {
    residual_norm_staged<false>(x_shared, r_shared, w_shared, w_shared + K, sum_out, K, n.eps, n.offset, tid,
                                kGemvThreads, squares, block_sum);
  }
  __syncthreads();
}

/// The work of block b of a launch of total_blocks blocks (a "unit"): which target it serves
/// and which of its rows this thread's group takes. A grid of fewer blocks runs units
/// b, b + gridDim.x, ... on block b. `group` is the thread's group within its block
/// (threadIdx.x / TPR) and `groups` the groups a block holds (256 / TPR), both fixed for a
/// launch and formed once.
template <typename W, bool kGated, int R>
struct GemvUnit {
  static constexpr int kOutsPerGroup = kGated ? R / 2 : R;
  const W* w = nullptr;
  const float* bias = nullptr;
  float* y = nullptr;
  int64_t N = 0;
  int64_t n0 = 0;       // the group's first output
  bool active = false;  // n0 < N; inactive threads still join the block's barriers

  __device__ __forceinline__ GemvUnit(const GemvParams<W>& p, int64_t block, int group, int groups) {
    // The unit's target; constant indices only, so p stays in the param space.
    int64_t first_block = 0;
    w = p.w[0];
    bias = p.bias[0];
    y = p.y[0];
    N = p.n[0];
    if constexpr (!kGated) {
#pragma unroll
      for (int i = 1; i < kGemvMaxTargets; ++i) {
        if (i < p.count && block >= p.block_end[i - 1]) {
          first_block = p.block_end[i - 1];
          w = p.w[i];
          bias = p.bias[i];
          y = p.y[i];
          N = p.n[i];
        }
      }
    }
    n0 = ((block - first_block) * groups + group) * kOutsPerGroup;
    active = n0 < N;
  }
  /// Row r of the group, `offset` elements in (an active unit's rows past N: its first row,
  /// loaded and never stored, so that no load needs a test of its own).
  __device__ __forceinline__ const W* row(const GemvParams<W>& p, int r, int64_t offset) const {
    const W* matrix = kGated && r >= kOutsPerGroup ? p.w[1] : w;
    const int64_t n = n0 + r % kOutsPerGroup;
    return matrix + (n < N ? n : n0) * p.K + offset;
  }
};

/// grid: up to total_blocks blocks of 256 threads; block b serves units b, b + gridDim.x, ...
/// (GemvUnit), each unit one target (see the file comment), so that the target's pointers
/// are uniform over the block. A block with another unit to go issues that unit's first
/// W loads before it reduces and stores the one it has, so a grid of resident blocks keeps
/// loads in flight across units. kGated: one target whose group rows are gate rows
/// o .. o + R/2 - 1 (w[0]) and the same up rows (w[1]) for the outputs o .. o + R/2 - 1 of
/// y[0] = act(x W_gate^T + b_gate) * (x W_up^T + b_up).
/// kNorm: x is computed into shared memory from p.norm (norm_input), dynamic shared memory
/// norm_shared_bytes<W>(K).
template <typename W, int M, bool kVec, bool kGated, int R, int kUnroll, bool kNorm>
__global__ void __launch_bounds__(kGemvThreads, min_blocks_per_sm(M, R* kUnroll)) gemv_kernel(const GemvParams<W> p) {
  static_assert(R >= 1 && (!kGated || R % 2 == 0), "a gated group pairs R / 2 gate rows with R / 2 up rows");
  static_assert(!kNorm || (M == 1 && kVec), "a norm input serves one row of 16-byte chunks");
  using Unit = GemvUnit<W, kGated, R>;
  constexpr int kOutsPerGroup = Unit::kOutsPerGroup;
  using C = Chunk<W, kVec>;
  constexpr int E = C::kElems;
  __shared__ float partial[kGemvThreads / 32][M * R];

  const int tpr = p.threads_per_row;
  const int j = static_cast<int>(threadIdx.x) % tpr;
  const int group = static_cast<int>(threadIdx.x) / tpr;
  const int groups = kGemvThreads / tpr;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int64_t K = p.K;
  // This thread's chunks of a row are j + off for off = 0, tpr, 2 tpr, ... below `limit`; a
  // pass takes kUnroll of them. Offsets are 32-bit (K <= kGemvMaxK, checked by the entries)
  // and the rows' pointers are formed once a unit (see the file comment).
  const int limit = static_cast<int>(K / E) - j;  // kVec: K % E == 0
  const int stride = tpr * kUnroll;

  C raw[kUnroll][R];  // slots past `limit` are neither loaded nor read
  const W* rows[R];   // the unit's rows at this thread's first chunk
  const auto point = [&](const Unit& unit) {
#pragma unroll
    for (int r = 0; r < R; ++r) rows[r] = unit.row(p, r, static_cast<int64_t>(j) * E);
  };
  const auto fetch = [&](int off0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int off = off0 + u * tpr;
      if (off < limit) {
#pragma unroll
        for (int r = 0; r < R; ++r) raw[u][r] = C::fetch(rows[r] + off * E);
      }
    }
  };

  // kNorm: norm_shared_bytes<W>(K) bytes; x_shared holds the input once computed.
  extern __shared__ float4 gemv_norm_shared[];
  float* const x_shared = reinterpret_cast<float*>(gemv_norm_shared);
  __shared__ float norm_red[kNorm ? 2 : 1][kGemvThreads / 32];

  int64_t block = blockIdx.x;
  int units_done = 0;  // progress: units since the launch
  allow_next_kernel();
  if (p.progress.slots != nullptr && blockIdx.x == 0) {
    // Slots of no block: every element they vouch for (none) is there.
    const auto end = static_cast<uint32_t>(p.n[0] * static_cast<int64_t>(sizeof(float)));
    for (int b = static_cast<int>(gridDim.x) + static_cast<int>(threadIdx.x); b < p.progress.count; b += kGemvThreads) {
      store_to_host(p.progress.slots + b, end);
    }
  }
  {
    // The first pass's weights depend on nothing the previous kernel writes: their loads
    // are in flight while it finishes (launch.h).
    const Unit first(p, block, group, groups);
    if (first.active) {
      point(first);
      fetch(0);
    }
  }
  W* const w_shared = reinterpret_cast<W*>(x_shared + 2 * K);
  if constexpr (kNorm) stage_norm_weights(p.norm, K, w_shared);
  wait_for_prior_kernels();
  if constexpr (kNorm) norm_input(p.norm, static_cast<int>(K), x_shared, w_shared, norm_red, blockIdx.x == 0);
  // x at this thread's first chunk (M = 1).
  const float* const x_row = (kNorm ? x_shared : p.x) + static_cast<int64_t>(j) * E;
  for (;;) {
    // Derived again from `block` (a few integer ops) rather than carried over from the
    // fetch of the previous iteration: carrying a second Unit across the reduction made
    // ptxas spill at the 64-register budget of 4 blocks per SM. Its rows are in `rows`.
    const Unit unit(p, block, group, groups);
    float acc[M][R];
#pragma unroll
    for (int m = 0; m < M; ++m) {
#pragma unroll
      for (int r = 0; r < R; ++r) acc[m][r] = 0.0f;
    }
    if (unit.active) {
      for (int off0 = 0; off0 < limit; off0 += stride) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int off = off0 + u * tpr;
          if (off >= limit) break;  // and every later slot
          if constexpr (M == 1) {
            // One row's floats live at a time: R * U chunks of W are already held in registers.
            float xf[E];
            load_x<E, kNorm>(x_row + off * E, xf);
#pragma unroll
            for (int r = 0; r < R; ++r) {
              float wf[E];
              raw[u][r].to_f32(wf);
#pragma unroll
              for (int e = 0; e < E; ++e) acc[0][r] = fmaf(xf[e], wf[e], acc[0][r]);
            }
          } else {
            float wf[R][E];
#pragma unroll
            for (int r = 0; r < R; ++r) raw[u][r].to_f32(wf[r]);
#pragma unroll
            for (int m = 0; m < M; ++m) {
              float xf[E];
              load_x<E>(p.x + m * K + static_cast<int64_t>(j + off) * E, xf);
#pragma unroll
              for (int r = 0; r < R; ++r) {
#pragma unroll
                for (int e = 0; e < E; ++e) acc[m][r] = fmaf(xf[e], wf[r][e], acc[m][r]);
              }
            }
          }
        }
        if (off0 + stride < limit) fetch(off0 + stride);
      }
    }
    // The next unit's first pass goes out before this unit's reduction and store.
    const int64_t next_block = block + gridDim.x;
    const bool more = next_block < p.total_blocks;  // uniform over the block
    if (more) {
      const Unit next(p, next_block, group, groups);
      if (next.active) {
        point(next);
        fetch(0);
      }
    }

    // Reduce over the TPR threads of the group; every lane of a warp ends with the warp's sums.
#pragma unroll
    for (int m = 0; m < M; ++m) {
#pragma unroll
      for (int r = 0; r < R; ++r) acc[m][r] = warp_sum(acc[m][r]);
    }
    // total: in the group's first warp, lane l < M * R holds the dot product of x row l / R
    // with group row l % R. A group is whole warps, so `leader` is uniform over a warp and
    // the shuffle below has every lane.
    float total = 0.0f;
    bool leader = unit.active;
    if (tpr == 32) {  // one warp per group
#pragma unroll
      for (int m = 0; m < M; ++m) {
#pragma unroll
        for (int r = 0; r < R; ++r) total = lane == m * R + r ? acc[m][r] : total;
      }
    } else {
      if (lane == 0) {
#pragma unroll
        for (int m = 0; m < M; ++m) {
#pragma unroll
          for (int r = 0; r < R; ++r) partial[warp][m * R + r] = acc[m][r];
        }
      }
      __syncthreads();  // tpr is uniform over the block, so every thread reaches this barrier
      const int warps_per_group = tpr / 32;
      leader = leader && warp % warps_per_group == 0;
      if (leader && lane < M * R) {
        for (int i = 0; i < warps_per_group; ++i) total += partial[warp + i][lane];
      }
    }
    if (leader) {
      const int m = lane / R;
      const int r = lane % R;
      const int64_t n0 = unit.n0;
      if constexpr (kGated) {
        const float up = __shfl_down_sync(0xffffffffu, total, kOutsPerGroup);  // up row r of the same x row
        const int64_t n = n0 + r;
        if (lane < M * R && r < kOutsPerGroup && n < unit.N) {
          const float g = total + (unit.bias != nullptr ? unit.bias[n] : 0.0f);
          const float u = up + (p.bias[1] != nullptr ? p.bias[1][n] : 0.0f);
          unit.y[m * unit.N + n] =
              p.activation == GatedActivation::kGeluTanh ? gelu_tanh_times(g, u) : silu_times(g, u);
        }
      } else {
        if (lane < M * R && n0 + r < unit.N) {
          unit.y[m * unit.N + n0 + r] = total + (unit.bias != nullptr ? unit.bias[n0 + r] : 0.0f);
        }
      }
    }
    if (p.progress.slots != nullptr && (!more || ++units_done % p.progress.every == 0)) {
      // The block's outputs so far are stored: after the barrier, thread 0's release store
      // (cumulative: the other threads' stores before the barrier are ordered before it)
      // moves the block's slot on to its next unit's first output (GemvProgress).
      __syncthreads();
      if (threadIdx.x == 0) {
        const int64_t rows_per_block = static_cast<int64_t>(kGemvThreads / tpr) * kOutsPerGroup;
        const int64_t below = more ? min(next_block * rows_per_block, p.n[0]) : p.n[0];
        release_to_host(p.progress.slots + blockIdx.x,
                        static_cast<uint32_t>(below * static_cast<int64_t>(sizeof(float))));
      }
    }
    if (!more) return;
    if (tpr != 32) __syncthreads();  // the leaders have read `partial` before it is written again
    block = next_block;
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

/// Largest y a launch with progress slots serves: its bytes fit a slot.
constexpr int64_t kGemvProgressMaxRows = (int64_t{1} << 30) - 1;

/// Blocks of `kernel` (256 threads, shared_bytes of dynamic shared memory) one SM holds at once,
/// by the occupancy of the device current at the call (0 if the query fails). Callers keep it
/// per kernel: a launch asks once.
template <typename Kernel>
int blocks_per_sm(Kernel kernel, size_t shared_bytes) {
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kGemvThreads, shared_bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return per_sm;
}

/// Blocks the device of `limits` holds at once at `per_sm` a SM (no cap if either is unknown).
int64_t resident_blocks(int per_sm, const DeviceLimits& limits) {
  const int64_t resident = int64_t{limits.sm_count} * per_sm;
  return resident < 1 ? INT64_MAX : resident;
}

/// Blocks of the kNorm kernel (M = 1) one SM holds at once, at the largest shared memory a norm
/// launch takes, which the kernel is allowed at the first call (beyond 48 KiB it must be).
template <typename W, bool kGated, int R, int U>
int norm_blocks_per_sm() {
  static const int per_sm = [] {
    const auto kernel = gemv_kernel<W, 1, true, kGated, R, U, true>;
    const auto most = static_cast<int>(norm_shared_bytes<W>(kGemvNormMaxK));
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most) != cudaSuccess) {
      (void)cudaGetLastError();  // the launch then fails where it needs more than the default
    }
    return blocks_per_sm(kernel, static_cast<size_t>(most));
  }();
  return per_sm;
}

/// A kNorm launch takes the vector kernel only (the entries check that it applies).
template <typename W, int M, bool kGated, int R, int U, bool kNorm>
void launch_gemv(const GemvParams<W>& p, bool vec, int64_t max_blocks, const Launch& launch) {
  int64_t blocks = p.total_blocks;
  size_t shared = 0;
  if constexpr (kNorm) {
    blocks = std::min(blocks, resident_blocks(norm_blocks_per_sm<W, kGated, R, U>(), *launch.limits));
    shared = norm_shared_bytes<W>(p.K);
  } else {
    static const int per_sm[2] = {blocks_per_sm(gemv_kernel<W, M, false, kGated, R, U, false>, 0),
                                  blocks_per_sm(gemv_kernel<W, M, true, kGated, R, U, false>, 0)};
    blocks = std::min(blocks, resident_blocks(per_sm[vec ? 1 : 0], *launch.limits));
  }
  if (max_blocks > 0) blocks = std::min(blocks, max_blocks);
  if (p.progress.slots != nullptr) blocks = std::min<int64_t>(blocks, p.progress.count);
  if constexpr (kNorm) {
    launch_kernel(gemv_kernel<W, M, true, kGated, R, U, true>, static_cast<unsigned>(blocks), kGemvThreads, shared,
                  launch, p);
  } else {
    const auto kernel =
        vec ? gemv_kernel<W, M, true, kGated, R, U, false> : gemv_kernel<W, M, false, kGated, R, U, false>;
    launch_kernel(kernel, static_cast<unsigned>(blocks), kGemvThreads, shared, launch, p);
  }
}

/// The M = 1 launch of geometry g: kGemvGeometries[I], or a later entry.
template <typename W, bool kGated, bool kNorm, size_t I = 0>
void launch_one_row(const GemvParams<W>& p, GemvGeometry g, bool vec, int64_t max_blocks, const Launch& launch) {
  if constexpr (I < std::size(kGemvGeometries)) {
    constexpr GemvGeometry kG = kGemvGeometries[I];
    if (g == kG) return launch_gemv<W, 1, kGated, kG.rows, kG.unroll, kNorm>(p, vec, max_blocks, launch);
    launch_one_row<W, kGated, kNorm, I + 1>(p, g, vec, max_blocks, launch);
  }
}

/// M = 1 takes any geometry of kGemvGeometries; larger M the default only (checked by the
/// entries). norm: a kNorm launch (M = 1, vec; checked by the entries).
template <typename W, bool kGated>
void launch_gemv(const GemvParams<W>& p, int64_t M, GemvGeometry g, bool vec, int64_t max_blocks, const Launch& launch,
                 bool norm) {
  if (norm) return launch_one_row<W, kGated, true>(p, g, vec, max_blocks, launch);
  if (M == 1) return launch_one_row<W, kGated, false>(p, g, vec, max_blocks, launch);
  constexpr GemvGeometry kFew = gemv_rows_geometry(4), kMany = gemv_rows_geometry(8);
  switch (M) {
    case 2: launch_gemv<W, 2, kGated, kFew.rows, kFew.unroll, false>(p, vec, max_blocks, launch); break;
    case 3: launch_gemv<W, 3, kGated, kFew.rows, kFew.unroll, false>(p, vec, max_blocks, launch); break;
    case 4: launch_gemv<W, 4, kGated, kFew.rows, kFew.unroll, false>(p, vec, max_blocks, launch); break;
    case 5: launch_gemv<W, 5, kGated, kMany.rows, kMany.unroll, false>(p, vec, max_blocks, launch); break;
    case 6: launch_gemv<W, 6, kGated, kMany.rows, kMany.unroll, false>(p, vec, max_blocks, launch); break;
    case 7: launch_gemv<W, 7, kGated, kMany.rows, kMany.unroll, false>(p, vec, max_blocks, launch); break;
    default: launch_gemv<W, 8, kGated, kMany.rows, kMany.unroll, false>(p, vec, max_blocks, launch); break;
  }
}

/// The fewest threads per group (32..256) that leave each thread at most `unroll` chunks per
/// pass.
int threads_per_row(int64_t chunks, int unroll) {
  int tpr = 32;
  while (tpr < kGemvThreads && static_cast<int64_t>(tpr) * unroll < chunks) tpr *= 2;
  return tpr;
}

/// Whether a launch of M rows may take geometry g.
bool geometry_served(GemvGeometry g, int64_t M) {
  if (M > 1) return g == kGemvDefaultGeometry || g == gemv_rows_geometry(M);
  for (const GemvGeometry& served : kGemvGeometries) {
    if (g == served) return true;
  }
  return false;
}

/// Whether a norm input (null: none) is served for a launch of M rows of K with 16-byte
/// chunks of W when vec: gemv_norm_input_served, every pointer but w_post given, and all
/// 16-byte aligned.
template <typename W>
bool norm_input_ok(const GemvNormInput<W>* n, int64_t M, int64_t K, bool vec) {
  if (n == nullptr) return true;
  return vec && gemv_norm_input_served<W>(M, K) && n->x != nullptr && n->residual != nullptr && n->sum != nullptr &&
         n->w_next != nullptr && aligned16(n->x) && aligned16(n->residual) && aligned16(n->sum) &&
         aligned16(n->w_post) && aligned16(n->w_next);
}

}  // namespace

// ---- exported entries -------------------------------------------------------------------------

template <typename W>
cudaError_t gemv_multi(const float* x, const GemvTarget<W>* targets, int count, int64_t M, int64_t K,
                       const Launch& launch, GemvGeometry geometry, int64_t max_blocks,
                       const GemvNormInput<W>* norm_input, GemvProgress progress) {
  if (targets == nullptr || count < 1 || count > kGemvMaxTargets || M < 0 || M > kGemvMaxRows || K < 0 ||
      K > kGemvMaxK || !geometry_served(geometry, M) || max_blocks < 0) {
    return cudaErrorInvalidValue;
  }
  if (progress.slots != nullptr && (M != 1 || count != 1 || progress.count < 1 || progress.every < 1 ||
                                    targets[0].n < 0 || targets[0].n > kGemvProgressMaxRows)) {
    return cudaErrorInvalidValue;
  }
  if (M == 0) return cudaSuccess;
  if (M > 1) geometry = gemv_rows_geometry(M);
  const int R = geometry.rows;
  constexpr int64_t kVecElems = 16 / static_cast<int64_t>(sizeof(W));
  GemvParams<W> p{};
  p.x = x;
  p.count = count;
  p.K = K;
  bool vec = K % kVecElems == 0 && (norm_input != nullptr || aligned16(x));
  for (int i = 0; i < count; ++i) {
    const GemvTarget<W>& t = targets[i];
    if (t.n < 0 || (t.n > 0 && (t.w == nullptr || t.y == nullptr))) return cudaErrorInvalidValue;
    vec = vec && aligned16(t.w);
  }
  if (!norm_input_ok(norm_input, M, K, vec)) return cudaErrorInvalidValue;
  if (norm_input != nullptr) p.norm = *norm_input;
  p.progress = progress;
  p.threads_per_row = threads_per_row(vec ? K / kVecElems : K, geometry.unroll);
  const int64_t rows_per_block = static_cast<int64_t>(kGemvThreads / p.threads_per_row) * R;
  for (int i = 0; i < count; ++i) {
    const GemvTarget<W>& t = targets[i];
    p.w[i] = t.w;
    p.bias[i] = t.bias;
    p.y[i] = t.y;
    p.n[i] = t.n;
    p.total_blocks += (t.n + rows_per_block - 1) / rows_per_block;
    p.block_end[i] = p.total_blocks;
  }
  for (int i = count; i < kGemvMaxTargets; ++i) p.block_end[i] = p.total_blocks;
  // Nothing would write sum. (An empty y with progress: the zeroed slots are its end already.)
  if (p.total_blocks == 0) return norm_input != nullptr ? cudaErrorInvalidValue : cudaSuccess;
  launch_gemv<W, false>(p, M, geometry, vec, max_blocks, launch, norm_input != nullptr);
  return cudaGetLastError();
}

int64_t gemv_blocks(const int64_t* n, int count, int64_t K, int64_t weight_bytes, GemvGeometry geometry) {
  if (n == nullptr || count < 1 || K < 1 || weight_bytes < 1 || 16 % weight_bytes != 0) return 0;
  const int64_t vec_elems = 16 / weight_bytes;
  const int tpr = threads_per_row(K % vec_elems == 0 ? K / vec_elems : K, geometry.unroll);
  const int64_t rows_per_block = static_cast<int64_t>(kGemvThreads / tpr) * geometry.rows;
  int64_t blocks = 0;
  for (int i = 0; i < count; ++i) blocks += (std::max<int64_t>(n[i], 0) + rows_per_block - 1) / rows_per_block;
  return blocks;
}

template <typename W>
cudaError_t gemv(const float* x, const W* w, const float* bias, float* y, int64_t M, int64_t N, int64_t K,
                 const Launch& launch, GemvGeometry geometry, int64_t max_blocks) {
  const GemvTarget<W> target{w, bias, y, N};
  return gemv_multi<W>(x, &target, 1, M, K, launch, geometry, max_blocks);
}

template <typename W>
cudaError_t gemv_gated(const float* x, const W* w_gate, const W* w_up, const float* bias_gate, const float* bias_up,
                       GatedActivation activation, float* y, int64_t M, int64_t N, int64_t K, const Launch& launch,
                       GemvGeometry geometry, int64_t max_blocks, const GemvNormInput<W>* norm_input) {
  if (M < 0 || M > kGemvMaxRows || N < 0 || K < 0 || K > kGemvMaxK || !geometry_served(geometry, M) || max_blocks < 0 ||
      (N > 0 && (w_gate == nullptr || w_up == nullptr || y == nullptr)) ||
      (activation != GatedActivation::kGeluTanh && activation != GatedActivation::kSilu)) {
    return cudaErrorInvalidValue;
  }
  constexpr int64_t kVecElems = 16 / static_cast<int64_t>(sizeof(W));
  const bool vec =
      K % kVecElems == 0 && (norm_input != nullptr || aligned16(x)) && aligned16(w_gate) && aligned16(w_up);
  if (!norm_input_ok(norm_input, M, K, vec) || (norm_input != nullptr && N == 0)) return cudaErrorInvalidValue;
  if (M == 0 || N == 0) return cudaSuccess;
  if (M > 1) geometry = gemv_rows_geometry(M);
  GemvParams<W> p{};
  if (norm_input != nullptr) p.norm = *norm_input;
  p.x = x;
  p.w[0] = w_gate;
  p.w[1] = w_up;
  p.bias[0] = bias_gate;
  p.bias[1] = bias_up;
  p.y[0] = y;
  p.n[0] = N;
  p.count = 1;
  p.K = K;
  p.activation = activation;
  p.threads_per_row = threads_per_row(vec ? K / kVecElems : K, geometry.unroll);
  const int64_t outputs_per_block = static_cast<int64_t>(kGemvThreads / p.threads_per_row) * (geometry.rows / 2);
  p.total_blocks = (N + outputs_per_block - 1) / outputs_per_block;
  for (int64_t& end : p.block_end) end = p.total_blocks;
  launch_gemv<W, true>(p, M, geometry, vec, max_blocks, launch, norm_input != nullptr);
  return cudaGetLastError();
}

#define GEARBOX_INSTANTIATE_GEMV(W)                                                                                    \
  template cudaError_t gemv<W>(const float*, const W*, const float*, float*, int64_t, int64_t, int64_t, const Launch&, \
                               GemvGeometry, int64_t);                                                                 \
  template cudaError_t gemv_multi<W>(const float*, const GemvTarget<W>*, int, int64_t, int64_t, const Launch&,         \
                                     GemvGeometry, int64_t, const GemvNormInput<W>*, GemvProgress);                    \
  template cudaError_t gemv_gated<W>(const float*, const W*, const W*, const float*, const float*, GatedActivation,    \
                                     float*, int64_t, int64_t, int64_t, const Launch&, GemvGeometry, int64_t,          \
                                     const GemvNormInput<W>*);
GEARBOX_INSTANTIATE_GEMV(float)
GEARBOX_INSTANTIATE_GEMV(__nv_bfloat16)
GEARBOX_INSTANTIATE_GEMV(__half)
#undef GEARBOX_INSTANTIATE_GEMV

}  // namespace gearbox::cuda
