// RMSNorm, RoPE, and both in one launch per layer for the per-head q / k norms
// (norm_rope.cu).
#pragma once

#include "devices/cuda/kernels/conventions.h"

namespace gearbox::cuda {

// ---- RMSNorm --------------------------------------------------------------------------------
/// For each of `rows` rows of `dim`: y = x * (1 / sqrt(mean(x^2) + eps)) * (float(w) + offset).
/// x, y [rows, dim] (f32, may alias), w [dim] (W). Per-head q/k norm: rows = T * heads,
/// dim = head_dim. Small dims (<= 512) take one warp per row, larger ones a block per row.
template <typename W>
cudaError_t rms_norm(const float* x, const W* w, float* y, int64_t rows, int64_t dim, float eps, float offset,
                     const Launch& launch);

// ---- rotary position embedding --------------------------------------------------------------
/// x, y [T, heads * head_dim] (may alias); positions [T]. Rotate-half RoPE over the whole
/// head_dim: angle = (float(pos) * position_scale) * inv_freq_i, inv_freq_i =
/// 1 / theta^(2i / head_dim) rounded to f32 as the CPU kernel computes it; cos/sin in f32.
/// head_dim must be even and positive (else cudaErrorInvalidValue). A negative position
/// poisons its row with NaN and sets *error_flag (nullable); with `padding` (a batched
/// network: kv_cache.cuh's CacheSlots) a position of -1 is a padding token, copied unrotated.
cudaError_t rope(const float* x, const void* positions, bool pos_i64, float* y, int64_t T, int64_t heads,
                 int64_t head_dim, float theta, float position_scale, int* error_flag, const Launch& launch,
                 bool padding = false);
/// rope() with the inverse frequencies given: inv_freq [head_dim / 2] in device memory
/// (Llama-3 scaling precomputes them), not null.
cudaError_t rope_with_freqs(const float* x, const void* positions, bool pos_i64, float* y, int64_t T, int64_t heads,
                            int64_t head_dim, const float* inv_freq, float position_scale, int* error_flag,
                            const Launch& launch, bool padding = false);

// ---- per-head norm + RoPE (one launch for q, k and a copied v) ------------------------------
/// One per-head norm + RoPE input: x [T, heads * head_dim] normalized per head_dim chunk
/// with w [head_dim] (RMSNorm, as rms_norm), then rotated as rope() with theta and
/// position_scale, into y [T, heads * head_dim]; y may alias x. x's rows may lie
/// x_row_stride floats apart (a column block of a wider matrix, e.g. q in a stacked QKV
/// linear's output; 0: heads * head_dim). w null: y is a copy of x (no norm, no rotation:
/// v carried out of the same matrix). rotate_only: no norm, x rotated as rope() rotates it
/// (the q and k of a family without q / k norms; w is not read). The parts of one launch are
/// all rotate_only or none (else cudaErrorInvalidValue).
template <typename W>
struct HeadNormRope {
  const float* x;
  const W* w;
  float* y;
  int64_t heads;
  float theta;
  float position_scale;
  /// [head_dim / 2]: inv_freq_i as cpu::rope_inv_freq computes it (device memory), or null to
  /// compute each (a double-precision pow per pair and token).
  const float* inv_freq = nullptr;
  int64_t x_row_stride = 0;
  bool rotate_only = false;
};
inline constexpr int kHeadNormRopeMaxParts = 3;
/// rms_norm(head_dim) + rope for up to three tensors (q, k, and a copied v) of one layer in
/// one launch, or rope alone for parts that are rotate_only: one block per (token, head) for one token, one warp per
/// (token, head) for several (head_dim % 8 == 0, <= 512, 16-byte aligned rows). head_dim even, <= 1024; eps and offset
/// are the norms'. A negative position poisons its normed rows with NaN and sets *error_flag, as rope() does; with
/// `padding`, a position of -1 is a padding token whose normed rows are 0.
template <typename W>
cudaError_t head_norm_rope(const HeadNormRope<W>* parts, int count, const void* positions, bool pos_i64, int64_t T,
                           int64_t head_dim, float eps, float offset, int* error_flag, const Launch& launch,
                           bool padding = false);

}  // namespace gearbox::cuda
