// CUDA linear of a few rows on tensor cores (batched decode): y[M, N] = x[M, K] * W[N, K]^T
// (+ bias[N]), M <= 16, bf16 W (gemv.cuh: gemv_mma_multi, gemv_mma_gated).
//
//   x [M, K] f32    W [N, K] bf16    bias [N] f32    y [M, N] f32
//
// The SIMT GEMV (gemv.cu) multiplies every weight it loads by each row of x in f32 FMAs, so
// at 8 rows it is bound by arithmetic, not by the weight stream. Here a weight tile is the A
// operand of mma.sync m16n8k16 (16 rows of W by 16 of K) and the rows of x are its B operand
// (8 rows an n-tile, two n-tiles above 8 rows): one instruction does the 2048 multiply-adds
// the GEMV's threads spend 2048 FMAs on, and the kernel is left bound by the stream again.
//
// Layout of the work:
// - A block serves one unit: 16 rows of one target's W (gemv_mma_multi: the units of up to 4
//   targets are numbered one after another, as gemv_multi's), or 16 gate rows and the same
//   16 up rows (gemv_mma_gated: two A tiles per warp, one x). K is cut into chunks of 32
//   columns; warp w takes chunks w, w + warps, ... and the partial tiles of the block's 8
//   warps (16 where there are fewer units than SMs: launch_mma) are summed through shared
//   memory in a fixed order (results do not depend on timing).
// - Lane (g, q) = (lane / 4, lane % 4) loads 16 bytes of W rows g and g + 8 at columns
//   32 c + 8 q .. 32 c + 8 q + 7, and the same 8 columns of x row g (and g + 8): no shared
//   memory, no ldmatrix. Which logical column of the mma each element is does not matter as
//   long as A and B agree, and with this order both fragments are those 16-byte loads as
//   they come (see mma_columns below). A row of W is read as 64-byte runs, whole sectors.
// - A warp issues U chunks' loads (ld.global.nc for W, not kept in L1) before its first mma.
//   The source issues the first U chunks of W before the kernel waits for its predecessor
//   (programmatic dependent launch, launch.h) and x after; ptxas places the W loads after
//   the wait too, so they do not overlap the kernel before (decision 0028).
// - x is f32 in effect (gemv.cuh): x = hi + lo in bf16, two mmas per tile.
// - Rows of a unit past N load its first row and are not stored; rows of x past M and
//   columns past K are zeros; K % 8 == 0 (gemv_mma_served) so a 16-byte load is all in or
//   all out.

#include <cstdint>

#include "devices/cuda/device_math.h"
#include "devices/cuda/kernels/gemv.cuh"
#include "devices/cuda/launch.h"

namespace gearbox::cuda {
namespace {

constexpr int kTileRows = 16;  // W rows a unit takes (the mma's M)
constexpr int kChunk = 32;     // K columns of a chunk: 4 lanes x 8

struct MmaParams {
  const float* x;                           // [M, K]
  const __nv_bfloat16* w[kGemvMaxTargets];  // gated: gate, up
  const float* bias[kGemvMaxTargets];       // nullable
  float* y[kGemvMaxTargets];                // [M, n[i]]
  int64_t n[kGemvMaxTargets];               // rows of each target
  int64_t block_end[kGemvMaxTargets];       // units of targets 0..i, cumulative
  int count;
  int M;
  int K;
  GatedActivation activation;
};

/// x[8 floats] as the B fragments of the two mma steps of a chunk, hi and lo terms:
/// b[s][0], b[s][1] for step s (mma_columns).
struct XFragments {
  uint32_t hi[2][2];
  uint32_t lo[2][2];
};

__device__ __forceinline__ void split_pair(float a, float b, uint32_t* hi, uint32_t* lo) {
  const __nv_bfloat16 ha = __float2bfloat16_rn(a), hb = __float2bfloat16_rn(b);
  *hi = static_cast<uint32_t>(__bfloat16_as_ushort(ha)) | (static_cast<uint32_t>(__bfloat16_as_ushort(hb)) << 16);
  *lo = pack_bf16(a - __bfloat162float(ha), b - __bfloat162float(hb));
}

/// mma_columns: lane (g, q) holds columns 8q .. 8q + 7 of its chunk (words 0..3 of its
/// 16-byte W loads, element pairs (0, 1), (2, 3), (4, 5), (6, 7)). Step s of the chunk
/// multiplies words 2s and 2s + 1, which the mma takes as the logical columns 2q, 2q + 1 and
/// 2q + 8, 2q + 9: over the 4 lanes of a group the two steps cover the chunk's 32 columns
/// once each. B must pair x's columns the same way: b0 = x[4s], x[4s + 1] and
/// b1 = x[4s + 2], x[4s + 3] of the lane's 8.
__device__ __forceinline__ XFragments x_fragments(const float4& lo4, const float4& hi4) {
  XFragments f;
  split_pair(lo4.x, lo4.y, &f.hi[0][0], &f.lo[0][0]);
  split_pair(lo4.z, lo4.w, &f.hi[0][1], &f.lo[0][1]);
  split_pair(hi4.x, hi4.y, &f.hi[1][0], &f.lo[1][0]);
  split_pair(hi4.z, hi4.w, &f.hi[1][1], &f.lo[1][1]);
  return f;
}

/// tile [kTiles][NT] += W rows (g, g + 8) x x rows for one chunk: a[t][h] is row g + 8h of
/// A tile t.
template <int kTiles, int NT>
__device__ __forceinline__ void mma_chunk(float (&acc)[kTiles][NT][4], const uint4 (&a)[kTiles][2],
                                          const float4 (&x)[NT][2]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const XFragments b = x_fragments(x[nt][0], x[nt][1]);
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      const uint32_t step0[4] = {a[t][0].x, a[t][1].x, a[t][0].y, a[t][1].y};
      const uint32_t step1[4] = {a[t][0].z, a[t][1].z, a[t][0].w, a[t][1].w};
      mma_bf16(acc[t][nt], step0, b.hi[0][0], b.hi[0][1]);
      mma_bf16(acc[t][nt], step0, b.lo[0][0], b.lo[0][1]);
      mma_bf16(acc[t][nt], step1, b.hi[1][0], b.hi[1][1]);
      mma_bf16(acc[t][nt], step1, b.lo[1][0], b.lo[1][1]);
    }
  }
}

/// grid: one block of kWarps warps per unit. NT: n-tiles of x (1: M <= 8, 2: M <= 16).
/// kGated: a unit is 16 gate rows (w[0]) and the same 16 up rows (w[1]) of y[0].
template <int NT, bool kGated, int kWarps>
__global__ void __launch_bounds__(kWarps * 32) gemv_mma_kernel(const MmaParams p) {
  constexpr int kTiles = kGated ? 2 : 1;
  constexpr int kThreads = kWarps * 32;
  // Chunks a warp loads before its first mma: 4 KiB of W a warp in flight, within the
  // registers of 16 warps an SM (the x fragments of two n-tiles take as many as a second A
  // tile).
  constexpr int U = kTiles * NT == 1 ? 4 : 2;
  __shared__ float partial[kWarps][kTiles][NT][4][32];

  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, q = lane % 4;
  const int K = p.K;
  const int M = p.M;

  // The unit's target; constant indices only, so p stays in the param space.
  const int64_t block = blockIdx.x;
  int64_t first_block = 0;
  const __nv_bfloat16* w = p.w[0];
  const float* bias = p.bias[0];
  float* y = p.y[0];
  int64_t N = p.n[0];
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
  const int64_t n0 = (block - first_block) * kTileRows;

  const __nv_bfloat16* rows[kTiles][2];
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
    const __nv_bfloat16* matrix = kGated ? p.w[t] : w;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t n = n0 + g + 8 * h;
      rows[t][h] = matrix + (n < N ? n : n0) * static_cast<int64_t>(K) + 8 * q;
    }
  }
  // x rows g (+ 8 nt) of this lane, or null past M.
  const float* x_rows[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int m = g + 8 * nt;
    x_rows[nt] = m < M ? p.x + static_cast<int64_t>(m) * K + 8 * q : nullptr;
  }
  // Warp w takes chunks w, w + kWarps, ...; a pass loads U of them.
  const int chunks = (K + kChunk - 1) / kChunk;
  const int stride = U * kWarps;

  uint4 a[U][kTiles][2];
  float4 xs[U][NT][2];
  // Whether this lane's 8 columns of chunk c lie within K (K % 8 == 0: all 8 or none).
  const auto lane_in = [&](int c) { return c < chunks && c * kChunk + 8 * q < K; };
  const auto fetch_w = [&](int c0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + u * kWarps;
      const bool in = lane_in(c);
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
#pragma unroll
        for (int h = 0; h < 2; ++h) a[u][t][h] = in ? load_stream_16(rows[t][h] + c * kChunk) : make_uint4(0, 0, 0, 0);
      }
    }
  };
  const auto fetch_x = [&](int c0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + u * kWarps;
      const bool in = lane_in(c);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        xs[u][nt][0] = xs[u][nt][1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (in && x_rows[nt] != nullptr) {
          // Plain loads: x is the previous kernel's output, and the compiler may move a
          // read-only (__ldg) load above wait_for_prior_kernels().
          const float4* px = reinterpret_cast<const float4*>(x_rows[nt] + c * kChunk);
          xs[u][nt][0] = px[0];
          xs[u][nt][1] = px[1];
        }
      }
    }
  };

  float acc[kTiles][NT][4] = {};
  allow_next_kernel();
  fetch_w(warp);  // W depends on nothing the previous kernel writes
  wait_for_prior_kernels();
  fetch_x(warp);
  for (int c0 = warp; c0 < chunks; c0 += stride) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (c0 + u * kWarps < chunks) mma_chunk<kTiles, NT>(acc, a[u], xs[u]);
    }
    if (c0 + stride < chunks) {
      fetch_w(c0 + stride);
      fetch_x(c0 + stride);
    }
  }

#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) partial[warp][t][nt][i][lane] = acc[t][nt][i];
    }
  }
  __syncthreads();
  // Thread j stores row r = j % 16 of the unit for x row j / 16: accumulator i of lane l of
  // every warp, where the fragment puts W row g (+ 8 for i >= 2) and x row 2q (+ 1 for odd i),
  // summed over the warps in a fixed order.
  for (int j = static_cast<int>(threadIdx.x); j < NT * 8 * kTileRows; j += kThreads) {
    const int r = j % kTileRows, m = j / kTileRows;
    const int nt = m / 8, col = m % 8;
    const int i = (r >= 8 ? 2 : 0) + col % 2;
    const int l = (r % 8) * 4 + col / 2;
    const int64_t n = n0 + r;
    if (m >= M || n >= N) continue;
    float sums[kTiles];
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      float s = 0.0f;
#pragma unroll
      for (int v = 0; v < kWarps; ++v) s += partial[v][t][nt][i][l];
      sums[t] = s;
    }
    if constexpr (kGated) {
      const float gate = sums[0] + (p.bias[0] != nullptr ? p.bias[0][n] : 0.0f);
      const float up = sums[1] + (p.bias[1] != nullptr ? p.bias[1][n] : 0.0f);
      y[m * N + n] = p.activation == GatedActivation::kGeluTanh ? gelu_tanh_times(gate, up) : silu_times(gate, up);
    } else {
      y[m * N + n] = sums[0] + (bias != nullptr ? bias[n] : 0.0f);
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

/// A launch of fewer units than the device has SMs (a narrow W: the 1B's o_proj and
/// down_proj have 72) runs 16 warps a unit, so that the few SMs it keeps busy have twice as
/// much of W in flight; otherwise 8, two blocks an SM.
template <bool kGated>
cudaError_t launch_mma(const MmaParams& p, int64_t units, const Launch& launch) {
  if (units > INT32_MAX) return cudaErrorInvalidValue;  // the grid's x
  const bool narrow = units < launch.limits->sm_count;
  const bool two = p.M > 8;
  const auto kernel = narrow ? (two ? gemv_mma_kernel<2, kGated, 16> : gemv_mma_kernel<1, kGated, 16>)
                             : (two ? gemv_mma_kernel<2, kGated, 8> : gemv_mma_kernel<1, kGated, 8>);
  launch_kernel(kernel, static_cast<unsigned>(units), narrow ? 512 : 256, 0, launch, p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t gemv_mma_multi(const float* x, const GemvTarget<__nv_bfloat16>* targets, int count, int64_t M, int64_t K,
                           const Launch& launch) {
  if (targets == nullptr || count < 1 || count > kGemvMaxTargets || !gemv_mma_served(M, K)) {
    return cudaErrorInvalidValue;
  }
  MmaParams p{};
  p.x = x;
  p.count = count;
  p.M = static_cast<int>(M);
  p.K = static_cast<int>(K);
  int64_t units = 0;
  for (int i = 0; i < count; ++i) {
    const GemvTarget<__nv_bfloat16>& t = targets[i];
    if (t.n < 0 || (t.n > 0 && (t.w == nullptr || t.y == nullptr || !aligned16(t.w)))) return cudaErrorInvalidValue;
    p.w[i] = t.w;
    p.bias[i] = t.bias;
    p.y[i] = t.y;
    p.n[i] = t.n;
    units += (t.n + kTileRows - 1) / kTileRows;
    p.block_end[i] = units;
  }
  for (int i = count; i < kGemvMaxTargets; ++i) p.block_end[i] = units;
  if (M > 0 && K > 0 && (x == nullptr || !aligned16(x))) return cudaErrorInvalidValue;
  if (M == 0 || units == 0) return cudaSuccess;
  return launch_mma<false>(p, units, launch);
}

cudaError_t gemv_mma_gated(const float* x, const __nv_bfloat16* w_gate, const __nv_bfloat16* w_up,
                           const float* bias_gate, const float* bias_up, GatedActivation activation, float* y,
                           int64_t M, int64_t N, int64_t K, const Launch& launch) {
  if (!gemv_mma_served(M, K) || N < 0 ||
      (N > 0 && (w_gate == nullptr || w_up == nullptr || y == nullptr || !aligned16(w_gate) || !aligned16(w_up))) ||
      (activation != GatedActivation::kGeluTanh && activation != GatedActivation::kSilu)) {
    return cudaErrorInvalidValue;
  }
  if (M > 0 && K > 0 && (x == nullptr || !aligned16(x))) return cudaErrorInvalidValue;
  if (M == 0 || N == 0) return cudaSuccess;
  MmaParams p{};
  p.x = x;
  p.w[0] = w_gate;
  p.w[1] = w_up;
  p.bias[0] = bias_gate;
  p.bias[1] = bias_up;
  p.y[0] = y;
  p.n[0] = N;
  p.count = 1;
  p.M = static_cast<int>(M);
  p.K = static_cast<int>(K);
  p.activation = activation;
  const int64_t units = (N + kTileRows - 1) / kTileRows;
  for (int64_t& end : p.block_end) end = units;
  return launch_mma<true>(p, units, launch);
}

}  // namespace gearbox::cuda
