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
#include <vector>

#include "gearbox/data_type.h"
#include "gearbox/dims.h"
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

// ---- batched networks (kernels_batched.cpp) ---------------------------------------------
// B rows of S tokens; row b's positions are leading padding (-1) and then real positions,
// its slot names its KV cache (-1: a row of padding only).
inline constexpr int64_t kPaddingPosition = -1;
inline constexpr int64_t kPaddingSlot = -1;
/// Per row, its count of leading padding positions. Errors: a negative position that is not
/// leading -1 -> kOutOfRange; positions not i32/i64 -> kInvalidArgument.
Result<std::vector<int64_t>> row_padding(const void* positions, DataType pos_type, int64_t rows, int64_t seq);
/// rope_with_freqs per row over its real tokens; padding tokens are copied unrotated.
/// x, y: [rows, seq, heads * head_dim]. Errors: row_padding's (nothing written).
Status rope_rows(const float* x, const void* positions, DataType pos_type, float* y, int64_t rows, int64_t seq,
                 int64_t heads, int64_t head_dim, std::span<const float> inv_freq, float position_scale);
/// The tensors of attention_rows.
struct SlotAttention {
  const float* q = nullptr;  ///< [rows, seq, heads * hd]
  const float* k = nullptr;  ///< [rows, seq, kv_heads * hd]
  const float* v = nullptr;  ///< [rows, seq, kv_heads * hd]
  const void* positions = nullptr;
  DataType pos_type = DataType::kI64;
  const void* slots = nullptr;  ///< [rows]
  DataType slot_type = DataType::kI64;
  int64_t rows = 0;
  int64_t seq = 0;
  int64_t slot_count = 0;    ///< caches in k_cache / v_cache
  int64_t max_ctx = 0;       ///< rows of one cache
  float* k_cache = nullptr;  ///< [slot_count * max_ctx, kv_heads * hd]
  float* v_cache = nullptr;
  float* out = nullptr;  ///< [rows, seq, heads * hd]
};
/// Per row: kv_cache_write of its real tokens into its slot's caches, then attention
/// (rowwise, or tiled when `tiled`) of its real queries; padding queries give 0. scratch:
/// attention_scratch_floats(shape with T = seq, max_ctx). Errors (nothing written): a slot
/// outside [-1, slot_count), one slot in two rows, a slot -1 row with a real position, a
/// position outside [0, max_ctx) that is not padding -> kOutOfRange.
Status attention_rows(const SlotAttention& args, const AttentionShape& shape, bool tiled, float* scratch);

// ---- elementwise ----------------------------------------------------------------------------
/// out = gelu_tanh(gate) * up, gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n);
/// out = silu(gate) * up, silu(x) = x / (1 + exp(-x)).
void silu_mul(const float* gate, const float* up, float* out, int64_t n);
/// out = a + b (out may alias a or b).
void add(const float* a, const float* b, float* out, int64_t n);

// ---- generic ops (ir/network.h) ---------------------------------------------------------
// Tensors of any rank, row-major and contiguous, described by data, dims and the dtype
// they are stored in (f32, i32, i64 or bool; the CPU device stores bf16/f16 as f32).
// Output dims are the inferred ones (ir/generic_shapes.h); the kernels trust them. Codes
// are ir::UnaryCode / BinaryCode / ReduceCode. Errors of the call (bad index, integer
// division by zero) are found before anything is written.

/// An input of a generic kernel.
struct In {
  const void* data = nullptr;
  Dims dims;
  DataType dtype = DataType::kF32;
};
/// The output of a generic kernel.
struct Out {
  void* data = nullptr;
  Dims dims;
  DataType dtype = DataType::kF32;
};

/// y = f(x), `code` a UnaryCode; f32, or i32/i64 for neg and abs, bool for logical_not.
void unary(const In& x, const Out& y, int32_t code, float alpha, float beta);
/// y = a op b with broadcasting, `code` a BinaryCode. Integer arithmetic wraps (two's
/// complement); integer div truncates toward zero; integer pow by a negative exponent is
/// 1 / a^-e truncated (0 unless a is 1 or -1). Errors (nothing written): an integer div
/// whose divisor holds a 0 -> kInvalidArgument.
Status binary(const In& a, const In& b, const Out& y, int32_t code);
/// y = cond ? a : b with three-way broadcasting (cond bool, a/b/y one dtype).
void where(const In& cond, const In& a, const In& b, const Out& y);
/// y = sum / mean / amax / amin of x over `axes` (empty = all); y's dims are x's without
/// (or with 1 at) the reduced axes. NaN propagates through amax / amin.
void reduce(const In& x, const Out& y, int32_t code, std::span<const int64_t> axes);
/// Softmax (or log-softmax) of x over `axis`, max-subtracted.
void softmax(const In& x, const Out& y, int32_t axis, bool log);
/// y [..., M, N] = a [..., M, K] b [..., K, N], batch dims broadcast, f32 accumulate.
void matmul(const In& a, const In& b, const Out& y);
/// y [..., Lq, Dv] = softmax(q k^T * scale + mask) v with broadcast batch dims. `mask`
/// (null for none) is bool (false excludes) or f32 (added); causal excludes keys j > i.
/// A row whose every key is excluded (or -inf) is 0. scratch: sdpa_scratch_floats(Lk).
void sdpa(const In& q, const In& k, const In& v, const In* mask, const Out& y, float scale, bool causal,
          float* scratch);
/// Scratch floats sdpa needs for `lk` keys.
int64_t sdpa_scratch_floats(int64_t lk);
/// Layer norm over the last dim: (x - mean) * rsqrt(var + eps) * w + b, biased variance;
/// w and b (f32, F values) may be null (1 and 0).
void layer_norm(const In& x, const float* w, const float* b, const Out& y, float eps);
/// y = x with dims permuted: y.dims[i] = x.dims[perm[i]]. Any dtype.
void permute(const In& x, const Out& y, std::span<const int64_t> perm);
/// y = x broadcast to y's dims (x aligned right). Any dtype.
void expand(const In& x, const Out& y);
/// y = x[start::step] along `axis` (y's dims give the count). Any dtype.
void slice(const In& x, const Out& y, int32_t axis, int64_t start, int64_t step);
/// y = the inputs joined along `axis`. Any dtype.
void concat(std::span<const In> xs, const Out& y, int32_t axis);
/// y = x converted to `to` (the declared dtype: f32 bf16 f16 i32 i64 bool), stored as
/// y.dtype. bf16/f16 round to nearest even; float -> int truncates toward zero and
/// saturates (NaN -> 0); i64 -> i32 wraps; -> bool is x != 0.
void cast(const In& x, const Out& y, DataType to);
/// y = x with dim `axis` taken at index[j]. Errors (nothing written): an index outside
/// [-extent, extent) -> kInvalidArgument naming its position and value.
Status index_select(const In& x, const In& index, const Out& y, int32_t axis);
/// torch.gather(x, axis, index) into y (index's dims). Errors: as index_select.
Status gather(const In& x, const In& index, const Out& y, int32_t axis);

}  // namespace gearbox::cpu
