// CUDA generic products (generic.cuh), f32 with f32 accumulation.
//
//   matmul  a [..., M, K] @ b [..., K, N] -> y [..., M, N]     batch dims broadcast
//   sdpa    q [..., Lq, D], k [..., Lk, D], v [..., Lk, Dv] (+ mask) -> y [..., Lq, Dv]
//
// matmul: a shared-memory tiled kernel, 64 x 64 outputs a block of 256 threads (4 x 4 each,
// strided by 16 so that shared-memory reads are conflict-free), K in steps of 16; a block
// loops over the row tiles and batches the grid does not cover. The cuBLASLt wrapper
// (gemm_cublaslt.h) multiplies by a transposed weight matrix without batches, so it does not
// serve this op.
//
// sdpa: one block of 128 threads per (batch, query row), keys in tiles of 128 with an online
// softmax (running max and sum, the accumulator rescaled per tile), so any number of keys
// fits; the query row, one tile's probabilities and the Dv accumulators live in shared
// memory. Excluded keys (mask false, causal, or an added -inf) weigh nothing; a row whose
// keys are all excluded is 0.

#include <math_constants.h>

#include <cstdint>
#include <vector>

#include "devices/cuda/kernels/generic.cuh"
#include "devices/cuda/kernels/generic_device.cuh"

namespace gearbox::cuda {
namespace {

using namespace generic;  // NOLINT(google-build-using-namespace)

// ---- matmul -----------------------------------------------------------------------------------------

constexpr int kTileM = 64;
constexpr int kTileN = 64;
constexpr int kTileK = 16;
constexpr int kMatmulThreads = 256;

/// Batches: operand 0 of `batches` moves a (in matrices of M x K), operand 1 moves b.
__global__ void __launch_bounds__(kMatmulThreads)
    matmul_kernel(const float* a, const float* b, float* y, IndexMap batches, int64_t batch_count, int64_t m_size,
                  int64_t n_size, int64_t k_size) {
  __shared__ float as[kTileK][kTileM];
  __shared__ float bs[kTileK][kTileN];
  allow_next_kernel();
  wait_for_prior_kernels();
  const int tid = static_cast<int>(threadIdx.x);
  const int tx = tid % 16, ty = tid / 16;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTileN;
  const int64_t m_tiles = (m_size + kTileM - 1) / kTileM;
  for (int64_t batch = blockIdx.z; batch < batch_count; batch += gridDim.z) {
    int64_t off[2];
    offsets_at<2>(batches, batch, off);
    const float* a_mat = a + off[0] * m_size * k_size;
    const float* b_mat = b + off[1] * k_size * n_size;
    float* y_mat = y + batch * m_size * n_size;
    for (int64_t mt = blockIdx.y; mt < m_tiles; mt += gridDim.y) {
      const int64_t m0 = mt * kTileM;
      float acc[4][4] = {};
      for (int64_t k0 = 0; k0 < k_size; k0 += kTileK) {
#pragma unroll
        for (int q = 0; q < kTileM * kTileK / kMatmulThreads; ++q) {
          const int e = tid + q * kMatmulThreads;
          const int row = e / kTileK, col = e % kTileK;
          const int64_t gm = m0 + row, gk = k0 + col;
          as[col][row] = gm < m_size && gk < k_size ? a_mat[gm * k_size + gk] : 0.0f;
        }
#pragma unroll
        for (int q = 0; q < kTileK * kTileN / kMatmulThreads; ++q) {
          const int e = tid + q * kMatmulThreads;
          const int row = e / kTileN, col = e % kTileN;
          const int64_t gk = k0 + row, gn = n0 + col;
          bs[row][col] = gk < k_size && gn < n_size ? b_mat[gk * n_size + gn] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < kTileK; ++kk) {
          float av[4], bv[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) av[i] = as[kk][ty + 16 * i];
#pragma unroll
          for (int j = 0; j < 4; ++j) bv[j] = bs[kk][tx + 16 * j];
#pragma unroll
          for (int i = 0; i < 4; ++i) {
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
          }
        }
        __syncthreads();
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t gm = m0 + ty + 16 * i;
        if (gm >= m_size) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int64_t gn = n0 + tx + 16 * j;
          if (gn < n_size) y_mat[gm * n_size + gn] = acc[i][j];
        }
      }
    }
  }
}

/// Dims made of the first `count` extents of d.
Dims leading(const Dims& d, int32_t count) {
  std::vector<int64_t> e(d.extents().begin(), d.extents().begin() + count);
  return Dims(std::span<const int64_t>(e));
}

// ---- sdpa -------------------------------------------------------------------------------------------

constexpr int kSdpaThreads = 128;

/// Where the operands of one batch start and how the mask is walked.
struct SdpaShape {
  IndexMap batches;  // over y's batch dims; operands q, k, v, mask in elements
  int64_t batch_count;
  int64_t lq, lk, d, dv;
  int64_t mask_row_stride, mask_col_stride;  // along Lq and Lk (0 where broadcast)
};

__global__ void __launch_bounds__(kSdpaThreads)
    sdpa_kernel(const float* q, const float* k, const float* v, const void* mask, bool mask_bool, bool causal,
                float scale, float* y, SdpaShape s) {
  extern __shared__ float smem[];
  float* q_row = smem;                // [d]
  float* acc = q_row + s.d;           // [dv]
  float* probs = acc + s.dv;          // [kSdpaThreads]
  float* red = probs + kSdpaThreads;  // [kSdpaThreads / 32]
  allow_next_kernel();
  wait_for_prior_kernels();
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t rows = s.batch_count * s.lq;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t batch = row / s.lq, i = row % s.lq;
    int64_t off[4];
    offsets_at<4>(s.batches, batch, off);
    const float* qp = q + off[0] + i * s.d;
    const float* kp = k + off[1];
    const float* vp = v + off[2];
    const int64_t mask_base = off[3] + i * s.mask_row_stride;
    __syncthreads();  // the previous row's readers of q_row and acc are done
    for (int64_t d = tid; d < s.d; d += kSdpaThreads) q_row[d] = qp[d];
    for (int64_t d = tid; d < s.dv; d += kSdpaThreads) acc[d] = 0.0f;
    __syncthreads();
    const int64_t keys = causal ? (i + 1 < s.lk ? i + 1 : s.lk) : s.lk;
    float run_max = -CUDART_INF_F, run_sum = 0.0f;
    for (int64_t j0 = 0; j0 < keys; j0 += kSdpaThreads) {
      const int64_t j = j0 + tid;
      float score = -CUDART_INF_F;
      if (j < keys) {
        const float* kr = kp + j * s.d;
        float dot = 0.0f;
        for (int64_t d = 0; d < s.d; ++d) dot = fmaf(q_row[d], kr[d], dot);
        score = dot * scale;
        if (mask != nullptr) {
          const int64_t at = mask_base + j * s.mask_col_stride;
          if (mask_bool) {
            if (static_cast<const uint8_t*>(mask)[at] == 0) score = -CUDART_INF_F;
          } else {
            score += static_cast<const float*>(mask)[at];
          }
        }
      }
      const float tile_max = group_reduce<kSdpaThreads>(score, MaxOp{}, red);
      const float new_max = fmaxf(run_max, tile_max);
      if (new_max == -CUDART_INF_F) continue;  // every key so far excluded (uniform over the block)
      const float p = score == -CUDART_INF_F ? 0.0f : expf(score - new_max);
      probs[tid] = p;
      const float tile_sum = group_reduce<kSdpaThreads>(p, SumOp{}, red);  // its barrier publishes probs
      const float rescale = run_max == -CUDART_INF_F ? 0.0f : expf(run_max - new_max);
      run_sum = run_sum * rescale + tile_sum;
      run_max = new_max;
      const int64_t count = keys - j0 < kSdpaThreads ? keys - j0 : kSdpaThreads;
      for (int64_t d = tid; d < s.dv; d += kSdpaThreads) {
        float a = acc[d] * rescale;
        for (int64_t jj = 0; jj < count; ++jj) a = fmaf(probs[jj], vp[(j0 + jj) * s.dv + d], a);
        acc[d] = a;
      }
    }
    float* yr = y + row * s.dv;
    for (int64_t d = tid; d < s.dv; d += kSdpaThreads) yr[d] = run_sum > 0.0f ? acc[d] / run_sum : 0.0f;
  }
}

}  // namespace

cudaError_t generic_matmul(const float* a, const Dims& a_dims, const float* b, const Dims& b_dims, float* y,
                           const Dims& y_dims, const Launch& launch) {
  const int32_t ra = a_dims.rank(), rb = b_dims.rank(), ry = y_dims.rank();
  if (ra < 2 || rb < 2 || ry < 2) return cudaErrorInvalidValue;
  const int64_t m = a_dims[ra - 2], kk = a_dims[ra - 1], n = b_dims[rb - 1];
  if (b_dims[rb - 2] != kk || y_dims[ry - 2] != m || y_dims[ry - 1] != n) return cudaErrorInvalidValue;
  IndexMap batches = index_map(leading(y_dims, ry - 2));
  set_broadcast(batches, 0, leading(a_dims, ra - 2));
  set_broadcast(batches, 1, leading(b_dims, rb - 2));
  batches = collapsed(batches, 2);
  const int64_t batch_count = batches.volume();
  if (batch_count == 0 || m == 0 || n == 0) return cudaSuccess;
  const int64_t n_tiles = (n + kTileN - 1) / kTileN, m_tiles = (m + kTileM - 1) / kTileM;
  if (n_tiles > INT32_MAX) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(n_tiles), static_cast<unsigned>(std::min<int64_t>(m_tiles, 65535)),
                  static_cast<unsigned>(std::min<int64_t>(batch_count, 65535)));
  launch_kernel(matmul_kernel, grid, kMatmulThreads, 0, launch, a, b, y, batches, batch_count, m, n, kk);
  return cudaGetLastError();
}

cudaError_t generic_sdpa(const float* q, const Dims& q_dims, const float* k, const Dims& k_dims, const float* v,
                         const Dims& v_dims, const void* mask, const Dims& mask_dims, bool mask_bool, bool causal,
                         float scale, float* y, const Dims& y_dims, const Launch& launch) {
  const int32_t rq = q_dims.rank(), rk = k_dims.rank(), rv = v_dims.rank(), ry = y_dims.rank();
  if (rq < 2 || rk < 2 || rv < 2 || ry < 2) return cudaErrorInvalidValue;
  SdpaShape s{};
  s.lq = q_dims[rq - 2];
  s.d = q_dims[rq - 1];
  s.lk = k_dims[rk - 2];
  s.dv = v_dims[rv - 1];
  if (mask != nullptr && mask_dims.rank() > ry) return cudaErrorInvalidValue;
  if (k_dims[rk - 1] != s.d || v_dims[rv - 2] != s.lk || y_dims[ry - 2] != s.lq || y_dims[ry - 1] != s.dv) {
    return cudaErrorInvalidValue;
  }
  // The batch map, with the mask's two last dims (Lq, Lk) carried along to read their strides.
  std::vector<int64_t> extents(y_dims.extents().begin(), y_dims.extents().end() - 2);
  extents.push_back(s.lq);
  extents.push_back(s.lk);
  IndexMap with_mask = index_map(Dims(std::span<const int64_t>(extents)));
  if (mask != nullptr) set_broadcast(with_mask, 3, mask_dims);
  s.mask_row_stride = with_mask.stride[3][ry - 2];
  s.mask_col_stride = with_mask.stride[3][ry - 1];
  IndexMap batches = index_map(leading(y_dims, ry - 2));
  set_broadcast(batches, 0, leading(q_dims, rq - 2));
  set_broadcast(batches, 1, leading(k_dims, rk - 2));
  set_broadcast(batches, 2, leading(v_dims, rv - 2));
  for (int32_t d = 0; d < ry - 2; ++d) {
    batches.stride[0][d] *= s.lq * s.d;
    batches.stride[1][d] *= s.lk * s.d;
    batches.stride[2][d] *= s.lk * s.dv;
    batches.stride[3][d] = with_mask.stride[3][d];
  }
  s.batches = collapsed(batches, 4);
  s.batch_count = s.batches.volume();
  const int64_t rows = s.batch_count * s.lq;
  if (rows == 0 || s.dv == 0) return cudaSuccess;
  const size_t smem = static_cast<size_t>(s.d + s.dv + kSdpaThreads + kSdpaThreads / 32) * sizeof(float);
  if (smem > 48 * 1024) return cudaErrorInvalidValue;  // D + Dv above ~12000
  const auto blocks =
      static_cast<unsigned>(std::min<int64_t>(rows, std::max<int64_t>(kBlocksPerSm * launch.limits->sm_count, 1)));
  launch_kernel(sdpa_kernel, blocks, kSdpaThreads, smem, launch, q, k, v, mask, mask_bool, causal, scale, y, s);
  return cudaGetLastError();
}

}  // namespace gearbox::cuda
