// Linear layers of few rows (decode): GEMVs that stream the weights once, one weight or
// several sharing x, a gated pair with its activation, and inputs computed in their prologue
// (gemv.cu).
#pragma once

#include "devices/cuda/kernels/conventions.h"
#include "devices/cuda/kernels/elementwise.cuh"

namespace gearbox::cuda {

// ---- linear, small M (decode): y[M, N] = x[M, K] * W[N, K]^T (+ bias[N]) --------------------
/// Rows of x one launch can serve (the CPU kernel's kSmallMMaxRows).
inline constexpr int64_t kGemvMaxRows = 8;
/// Weights one gemv_multi launch can serve.
inline constexpr int kGemvMaxTargets = 4;
/// Longest row (K) a gemv launch serves: the kernel indexes within a row in 32 bits.
inline constexpr int64_t kGemvMaxK = int64_t{1} << 30;

/// How a gemv launch divides W among its threads: a group of threads takes `rows` rows of W
/// (a gated launch: rows / 2 gate rows and the rows / 2 matching up rows), each thread
/// loading up to `unroll` 16-byte chunks of every row per pass before the first FMA; the
/// group has the fewest threads (32..256, a power of two) that cover K in one pass where
/// 256 can. More rows per group means fewer, longer-lived blocks and more loads in flight
/// per thread; which is fastest depends on N, K and the GPU, so the builder times them.
struct GemvGeometry {
  int rows = 4;
  int unroll = 2;
  friend constexpr bool operator==(GemvGeometry, GemvGeometry) = default;
};
/// The geometry an M = 1 launch takes by default; a launch of M > 1 rows may be passed it.
inline constexpr GemvGeometry kGemvDefaultGeometry{4, 2};
/// The geometry a launch of M > 1 rows runs (passed it or the default): R = 4 up to 4 rows;
/// above, R = 2, whose M * R accumulators leave a thread's registers for two blocks an SM.
constexpr GemvGeometry gemv_rows_geometry(int64_t M) { return M > 4 ? GemvGeometry{2, 2} : kGemvDefaultGeometry; }
/// The geometries an M = 1 launch takes (the default first).
inline constexpr GemvGeometry kGemvGeometries[] = {{4, 2}, {2, 2}, {2, 4}, {2, 8}, {4, 4}, {8, 2}};

/// A GEMV input the launch computes itself (decode, M = 1): the residual step of
/// norm_add_norm in the GEMV's prologue,
///   sum   = residual + rms_norm(x, w_post)       (written by the launch)
///   input = rms_norm(sum, w_next)                (the GEMV's x; never stored)
/// each block computing `input` into its shared memory after its first weight loads have
/// gone out and one block writing `sum`, so the norms cost no launch of their own (a kernel
/// boundary, not the arithmetic, is what a decode layer's norms cost). x, residual
/// and sum [K] f32 and 16-byte aligned; sum must not overlap x or residual, and no output of
/// the launch may overlap any of the three. w_post, w_next [K] (W); w_post null: sum =
/// residual + x (a pre-norm family's residual add, no post-norm).
template <typename W>
struct GemvNormInput {
  const float* x = nullptr;
  const W* w_post = nullptr;
  const float* residual = nullptr;
  float* sum = nullptr;
  const W* w_next = nullptr;
  float eps = 0.0f;
  float offset = 0.0f;
};
/// Largest K a launch with a GemvNormInput serves (x and the residual as f32 and both norm
/// weights as W take 48 KiB of shared memory a block at bf16, 64 KiB at f32).
inline constexpr int64_t kGemvNormMaxK = 4096;
/// Whether a launch of M rows of K columns of W takes a GemvNormInput (its pointers, the norm
/// weights' included, must also be 16-byte aligned).
template <typename W>
constexpr bool gemv_norm_input_served(int64_t M, int64_t K) {
  return M == 1 && K > 0 && K <= kGemvNormMaxK && K * static_cast<int64_t>(sizeof(W)) % 16 == 0;
}

/// x [M, K] f32, w [N, K] (W), bias [N] f32 or null, y [M, N] f32; 1 <= M <= 8 (M = 0 or
/// N = 0 is a no-op; M > 8, or a geometry the launch does not take, is
/// cudaErrorInvalidValue). Memory-bound: streams W once with 16-byte loads when
/// K * sizeof(W) % 16 == 0 and w, x are 16-byte aligned.
///
/// A launch runs at most as many blocks as the device holds at once (fewer when max_blocks
/// > 0 caps them, as tests do), each block serving several blocks' worth of rows in turn
/// with the next one's loads in flight.
template <typename W>
cudaError_t gemv(const float* x, const W* w, const float* bias, float* y, int64_t M, int64_t N, int64_t K,
                 const Launch& launch, GemvGeometry geometry = kGemvDefaultGeometry, int64_t max_blocks = 0);

/// Blocks' worth of rows of an aligned one-row gemv / gemv_multi launch over `count` outputs
/// of n[i] rows of K weights of weight_bytes each (the grid before the resident-block cap).
int64_t gemv_blocks(const int64_t* n, int count, int64_t K, int64_t weight_bytes, GemvGeometry geometry);

/// One weight of a gemv_multi launch: y [M, n] = x * w[n, K]^T (+ bias[n]).
template <typename W>
struct GemvTarget {
  const W* w = nullptr;
  const float* bias = nullptr;  // nullable
  float* y = nullptr;
  int64_t n = 0;
};
/// Where a one-row launch of one target that stores y into mapped host memory says, while it
/// runs, how much of y is there, so that the host can copy y on as it lands instead of after
/// the launch (a pageable host output, engine_handle.cpp). `slots` is `count` uint32 of
/// mapped host memory, zeroed by the host before the launch; the launch then runs at most
/// `count` blocks, and slot b (b < count) holds a byte offset e into y such that every
/// element of y below e that block b writes is stored and visible to the host (stored,
/// then the slot written with a release at system scope), ending at the bytes of y. So y is
/// there below the least slot. A block moves its slot after every `every` of its units (each
/// a block's worth of rows) and after its last; slots of no block are set to the end by
/// block 0 at its start.
struct GemvProgress {
  uint32_t* slots = nullptr;
  int count = 0;
  int every = 1;
};

/// Several weights sharing one x (fused QKV, gate+up) in one launch: count in [1, 4]
/// targets (host array), each computed as gemv() would. All share K and W.
/// norm_input (nullable): x is computed by the launch (GemvNormInput; x itself is not read
/// and may be null); a launch gemv_norm_input_served does not serve, or unaligned
/// pointers, or no output rows (nothing would write sum), is cudaErrorInvalidValue.
/// progress (slots nullable): see GemvProgress; a launch with slots takes M = 1, one target
/// of at most 2^30 - 1 rows, count >= 1 and every >= 1, else it is cudaErrorInvalidValue.
template <typename W>
cudaError_t gemv_multi(const float* x, const GemvTarget<W>* targets, int count, int64_t M, int64_t K,
                       const Launch& launch, GemvGeometry geometry = kGemvDefaultGeometry, int64_t max_blocks = 0,
                       const GemvNormInput<W>* norm_input = nullptr, GemvProgress progress = {});

/// A gated MLP's first half in one launch (decode: gate_up_proj + gelu_tanh_mul or
/// silu_mul): y[M, N] = act(x W_gate^T + b_gate) * (x W_up^T + b_up), with w_gate, w_up
/// [N, K] (W) and nullable biases [N]; the products are gemv()'s, the activation the
/// elementwise kernel's. Same limits as gemv(); y must not alias x. norm_input: as
/// gemv_multi's.
template <typename W>
cudaError_t gemv_gated(const float* x, const W* w_gate, const W* w_up, const float* bias_gate, const float* bias_up,
                       GatedActivation activation, float* y, int64_t M, int64_t N, int64_t K, const Launch& launch,
                       GemvGeometry geometry = kGemvDefaultGeometry, int64_t max_blocks = 0,
                       const GemvNormInput<W>* norm_input = nullptr);

// ---- linear, a few rows on tensor cores (batched decode): bf16 W -----------------------------
/// Rows of x one tensor-core launch serves: two n-tiles of 8 (gemv_mma.cu).
inline constexpr int64_t kGemvMmaMaxRows = 16;

/// Whether a tensor-core launch serves M rows of K: 1 <= M <= kGemvMmaMaxRows (M = 0 is a
/// no-op) and rows of whole 16-byte chunks (K % 8 == 0, K <= kGemvMaxK). Its x and every
/// weight must also be 16-byte aligned.
constexpr bool gemv_mma_served(int64_t M, int64_t K) {
  return M >= 0 && M <= kGemvMmaMaxRows && K >= 0 && K <= kGemvMaxK && K % 8 == 0;
}

/// gemv_multi on tensor cores (mma.sync m16n8k16): W streams once as gemv's does, and each of
/// its 16-row tiles multiplies all M rows of x at once, so M rows cost about what one row
/// costs where the GEMV's M * R accumulators a thread make it compute-bound. x stays f32 in
/// effect: each element is split into two bf16 terms, x = hi + lo, and W is multiplied by both
/// (x is represented within 2^-17 of itself, so a row's result is within about 2^-16 sum |x w|
/// of the f32 product: a batch row and its sequence alone agree as closely as the GEMV's
/// two summation orders do). f32 accumulation. Limits: gemv_mma_served(M, K), count in
/// [1, kGemvMaxTargets], x and every w 16-byte aligned; else cudaErrorInvalidValue.
cudaError_t gemv_mma_multi(const float* x, const GemvTarget<__nv_bfloat16>* targets, int count, int64_t M, int64_t K,
                           const Launch& launch);

/// gemv_gated on tensor cores: y[M, N] = act(x W_gate^T + b_gate) * (x W_up^T + b_up), each
/// block multiplying 16 gate rows and the same 16 up rows. Limits as gemv_mma_multi's; y must
/// not alias x.
cudaError_t gemv_mma_gated(const float* x, const __nv_bfloat16* w_gate, const __nv_bfloat16* w_up,
                           const float* bias_gate, const float* bias_up, GatedActivation activation, float* y,
                           int64_t M, int64_t N, int64_t K, const Launch& launch);

}  // namespace gearbox::cuda
