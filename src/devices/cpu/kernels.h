// CPU kernels: the reference device's implementation of every IR op, in f32.
//
// All pointers are f32 row-major unless stated; weights are already f32 (the CPU device
// converts bf16/f16 weights once at upload). Each function is single-threaded and
// allocation-free: scratch comes from the caller. A kernel that can meet bad input
// (token ids, positions) returns a Status and writes nothing on error; the others cannot
// fail. Where an op has several tactics, each is a separate function with the same
// signature; the builder times them (see builder/tactics.h).
//
// Shapes: M rows of activations; linear weights [N, K] as in HF checkpoints.
#pragma once

#include <cstdint>
#include <span>

#include "gearbox/data_type.h"
#include "gearbox/status.h"

namespace gearbox::cpu {

// ---- embedding ----------------------------------------------------------------------
/// out[i, :] = table[ids[i], :] * scale for i in [0, count). ids are i32 or i64 (`id_type`).
/// Errors (nothing written): an id outside [0, vocab) -> kInvalidArgument naming the
/// position, the id and the vocabulary size.
Status embedding(const void* ids, DataType id_type, int64_t count, const float* table, int64_t vocab, int64_t hidden,
                 float scale, float* out);

// ---- normalization --------------------------------------------------------------------
/// For each of `rows` rows of `dim` elements: y = x * rsqrt(mean(x^2) + eps) * (w + offset),
/// accumulating in f32 (double not needed at these sizes). x and y may alias.
void rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps, float offset);

// ---- linear: y[M, N] = x[M, K] * W[N, K]^T (+ bias[N]) --------------------------------
/// Small-M tactic: one pass over W for all rows; keeps M accumulators per output, so it is
/// valid only for M <= kSmallMMaxRows. bias may be null.
inline constexpr int64_t kSmallMMaxRows = 8;
void linear_small_m(const float* x, const float* w, const float* bias, float* y, int64_t M, int64_t N, int64_t K);
/// Cache-blocked GEMM tactic for any M: packs blocks of W into `scratch` (at least
/// linear_blocked_scratch_floats(K) floats) and reuses them across rows.
void linear_blocked(const float* x, const float* w, const float* bias, float* y, int64_t M, int64_t N, int64_t K,
                    float* scratch);
/// Floats of scratch linear_blocked needs for a given K.
int64_t linear_blocked_scratch_floats(int64_t K);

// ---- rotary position embedding ----------------------------------------------------------
/// x: [T, heads * head_dim]; positions: T values (i32 or i64). Rotate-half RoPE over the
/// whole head_dim with inv_freq_i = theta^(-2i/head_dim), angles and cos/sin in f32.
/// x and y may alias. Errors: a negative position -> kInvalidArgument (nothing written).
Status rope(const float* x, const void* positions, DataType pos_type, float* y, int64_t T, int64_t heads,
            int64_t head_dim, float theta);
/// rope() with the inverse frequencies given (inv_freq [head_dim / 2]) and the angle
/// (float(pos) * position_scale) * inv_freq_i, as the CUDA kernels compute it.
Status rope_with_freqs(const float* x, const void* positions, DataType pos_type, float* y, int64_t T, int64_t heads,
                       int64_t head_dim, std::span<const float> inv_freq, float position_scale);
/// inv_freq_i = 1 / theta^(2i / head_dim) in f32, as rope() computes it (the CUDA device
/// uploads these values, so that both devices rotate by the same angles).
float rope_inv_freq(float theta, int64_t i, int64_t head_dim);

// ---- attention ----------------------------------------------------------------------------
/// Writes k, v ([T, width] each) into the caches ([max_ctx, width] each) at rows positions[t].
/// Errors (nothing written): a position outside [0, max_ctx) -> kOutOfRange.
Status kv_cache_write(const float* k, const float* v, const void* positions, DataType pos_type, int64_t T,
                      int64_t width, float* k_cache, float* v_cache, int64_t max_ctx);

/// Attention over the caches (already holding rows 0..positions[t]). q: [T, heads*hd],
/// caches [max_ctx, kv_heads*hd], out: [T, heads*hd]. Query t at position p attends to
/// rows j in [lo, p] with lo = window > 0 ? max(0, p - window + 1) : 0; query head h reads
/// kv head h / (heads / kv_heads); softmax(q.k * scale) in f32. Positions are assumed valid
/// (kv_cache_write checked them).
struct AttentionShape {
  int64_t T = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t window = 0;  // 0 = none
  float scale = 1.0f;
};
/// Row-wise tactic: one query row at a time, two passes (scores, then softmax and sum).
/// scratch: attention_scratch_floats(shape, max_ctx) floats.
void attention_rowwise(const float* q, const float* k_cache, const float* v_cache, const void* positions,
                       DataType pos_type, float* out, const AttentionShape& shape, float* scratch);
/// Tiled tactic: blocks of query rows sharing each key/value block, online softmax
/// (flash-attention style); better for long T. Same contract and scratch as rowwise.
void attention_tiled(const float* q, const float* k_cache, const float* v_cache, const void* positions,
                     DataType pos_type, float* out, const AttentionShape& shape, float* scratch);
/// Scratch floats either attention tactic needs.
int64_t attention_scratch_floats(const AttentionShape& shape, int64_t max_ctx);

// ---- elementwise ----------------------------------------------------------------------------
/// out = gelu_tanh(gate) * up, gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n);
/// out = silu(gate) * up, silu(x) = x / (1 + exp(-x)).
void silu_mul(const float* gate, const float* up, float* out, int64_t n);
/// out = a + b (out may alias a or b).
void add(const float* a, const float* b, float* out, int64_t n);

}  // namespace gearbox::cpu
