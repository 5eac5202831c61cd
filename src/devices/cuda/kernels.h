// CUDA kernels of the CUDA device: one launcher per IR op family, each mirroring the CPU
// kernel of the same name (devices/cpu/kernels.h) element for element.
//
// Design (fixed for the CUDA device): activations, KV caches and every intermediate are
// f32; weights stay in their checkpoint dtype W (bf16 is the fast path, f16 and f32 also
// work), and every weight-reading kernel is instantiated for W in {float, __nv_bfloat16,
// __half} and accumulates in f32.
//
//   // y[1, 1152] = x[1, 1152] * W[1152, 1152]^T on `stream`, nothing synchronized:
//   cudaError_t err = gearbox::cuda::gemv<__nv_bfloat16>(x, w, nullptr, y, 1, 1152, 1152, stream);
//
// Conventions shared by every launcher:
// - It enqueues its kernels on `stream` and returns cudaGetLastError(): a launch error, or
//   cudaErrorInvalidValue for arguments it cannot serve (named per launcher). It never
//   synchronizes and never allocates, so every launcher can be captured into a CUDA graph.
// - Every pointer is device memory. Outputs must not alias inputs unless stated.
// - Vector (16-byte) loads are used when the pointers are 16-byte aligned and the row
//   lengths allow it; any other alignment or length takes a scalar path with the same
//   results, so there is no alignment requirement, only a speed one.
// - Launches use programmatic dependent launch on sm_90 (devices/cuda/launch.h): a kernel
//   may start before its predecessor on the stream ends, and waits for it before touching
//   anything the predecessor writes. Stream order is what callers see.
// - Error flag: `int* error_flag` (device-accessible memory, nullable) is set to 1 with an
//   atomic by a kernel that meets bad device-resident input (a token id outside the
//   vocabulary, a position outside the KV cache). It is never cleared by a kernel: the
//   caller reads it once the work is done and clears it (the CUDA backend keeps one per
//   context in mapped host memory; DeviceBackend::take_input_fault). The bad rows are
//   poisoned with NaN (embedding, rope, attention) or skipped (KV-cache write), never
//   silently zeroed.
// - Token ids and positions are i32 or i64 (`*_i64` = true for i64), in device memory.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace gearbox::cuda {

// ---- embedding ----------------------------------------------------------------------------
/// out[i, :] = float(table[ids[i], :]) * scale for i in [0, count).
/// ids [count] (i32/i64), table [vocab, hidden] (W), out [count, hidden] (f32).
/// An id outside [0, vocab): that row of `out` is NaN and *error_flag is set to 1.
template <typename W>
cudaError_t embedding(const void* ids, bool ids_i64, int64_t count, const W* table, int64_t vocab, int64_t hidden,
                      float scale, float* out, int* error_flag, cudaStream_t stream);

// ---- RMSNorm --------------------------------------------------------------------------------
/// For each of `rows` rows of `dim`: y = x * (1 / sqrt(mean(x^2) + eps)) * (float(w) + offset).
/// x, y [rows, dim] (f32, may alias), w [dim] (W). Per-head q/k norm: rows = T * heads,
/// dim = head_dim. Small dims (<= 512) take one warp per row, larger ones a block per row.
template <typename W>
cudaError_t rms_norm(const float* x, const W* w, float* y, int64_t rows, int64_t dim, float eps, float offset,
                     cudaStream_t stream);

// ---- rotary position embedding --------------------------------------------------------------
/// x, y [T, heads * head_dim] (may alias); positions [T]. Rotate-half RoPE over the whole
/// head_dim: angle = (float(pos) * position_scale) * inv_freq_i, inv_freq_i =
/// 1 / theta^(2i / head_dim) rounded to f32 as the CPU kernel computes it; cos/sin in f32.
/// head_dim must be even and positive (else cudaErrorInvalidValue). A negative position
/// poisons its row with NaN and sets *error_flag (nullable).
cudaError_t rope(const float* x, const void* positions, bool pos_i64, float* y, int64_t T, int64_t heads,
                 int64_t head_dim, float theta, float position_scale, int* error_flag, cudaStream_t stream);
/// rope() with the inverse frequencies given: inv_freq [head_dim / 2] in device memory
/// (Llama-3 scaling precomputes them), not null.
cudaError_t rope_with_freqs(const float* x, const void* positions, bool pos_i64, float* y, int64_t T, int64_t heads,
                            int64_t head_dim, const float* inv_freq, float position_scale, int* error_flag,
                            cudaStream_t stream);

// ---- KV cache ---------------------------------------------------------------------------------
/// k_cache[positions[t], :] = k[t, :], v_cache[positions[t], :] = v[t, :] for t < T.
/// k, v [T, width]; caches [max_ctx, width]. A position outside [0, max_ctx) sets
/// *error_flag and its row is skipped (the other rows are written).
cudaError_t kv_cache_write(const float* k, const float* v, const void* positions, bool pos_i64, int64_t T,
                           int64_t width, float* k_cache, float* v_cache, int64_t max_ctx, int* error_flag,
                           cudaStream_t stream);

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
/// The geometry of every M (M > 1 takes no other).
inline constexpr GemvGeometry kGemvDefaultGeometry{4, 2};
/// The geometries an M = 1 launch takes (the default first).
inline constexpr GemvGeometry kGemvGeometries[] = {{4, 2}, {2, 2}, {2, 4}, {2, 8}, {4, 4}, {8, 2}};

/// A GEMV input the launch computes itself (decode, M = 1): the residual step of
/// norm_add_norm in the GEMV's prologue,
///   sum   = residual + rms_norm(x, w_post)       (written by the launch)
///   input = rms_norm(sum, w_next)                (the GEMV's x; never stored)
/// each block computing `input` into its shared memory after its first weight loads have
/// gone out and one block writing `sum`, so the norms cost no launch of their own (the
/// kernel boundary is what a decode layer's norms cost: docs/PERFORMANCE.md). x, residual
/// and sum [K] f32 and 16-byte aligned; sum must not overlap x or residual, and no output of
/// the launch may overlap any of the three. w_post, w_next [K] (W).
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
/// with the next one's loads in flight; GEARBOX_CUDA_GEMV_PERSISTENT=0 gives every block's
/// worth its own block again.
template <typename W>
cudaError_t gemv(const float* x, const W* w, const float* bias, float* y, int64_t M, int64_t N, int64_t K,
                 cudaStream_t stream, GemvGeometry geometry = kGemvDefaultGeometry, int64_t max_blocks = 0);

/// Blocks' worth of rows of an aligned one-row gemv / gemv_multi launch over `count` outputs
/// of n[i] rows of K weights of weight_bytes each (the grid before the resident-block cap).
int64_t gemv_blocks(const int64_t* n, int count, int64_t K, int64_t weight_bytes, GemvGeometry geometry);
/// SMs of the device current at the first call (0 if the query fails).
int multiprocessor_count();

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
                       cudaStream_t stream, GemvGeometry geometry = kGemvDefaultGeometry, int64_t max_blocks = 0,
                       const GemvNormInput<W>* norm_input = nullptr, GemvProgress progress = {});

/// The activation of a gated pair: out = act(gate) * up (gelu_tanh_mul, silu_mul).
enum class GatedActivation : int { kGeluTanh = 0, kSilu = 1 };
/// A gated MLP's first half in one launch (decode: gate_up_proj + gelu_tanh_mul or
/// silu_mul): y[M, N] = act(x W_gate^T + b_gate) * (x W_up^T + b_up), with w_gate, w_up
/// [N, K] (W) and nullable biases [N]; the products are gemv()'s, the activation the
/// elementwise kernel's. Same limits as gemv(); y must not alias x. norm_input: as
/// gemv_multi's.
template <typename W>
cudaError_t gemv_gated(const float* x, const W* w_gate, const W* w_up, const float* bias_gate, const float* bias_up,
                       GatedActivation activation, float* y, int64_t M, int64_t N, int64_t K, cudaStream_t stream,
                       GemvGeometry geometry = kGemvDefaultGeometry, int64_t max_blocks = 0,
                       const GemvNormInput<W>* norm_input = nullptr);

// ---- attention --------------------------------------------------------------------------------
// q [T, heads * head_dim], caches [max_ctx, kv_heads * head_dim], out [T, heads * head_dim].
// Query t at position p = positions[t] attends to cache rows [lo, p], lo = window > 0 ?
// max(0, p - window + 1) : 0; query head h reads kv head h / (heads / kv_heads); scores
// are dot(q, k) * scale, softmax in f32. Positions are read from device memory inside the
// kernels, so a captured graph stays valid as they change. A position outside
// [0, max_ctx) yields a NaN output row (kv_cache_write has flagged it already).
// heads % kv_heads == 0 and 1 <= head_dim <= 256, else cudaErrorInvalidValue.

/// Largest head_dim the attention kernels serve.
inline constexpr int64_t kAttentionMaxHeadDim = 256;

/// Number of KV splits attention_decode uses: fixed by (max_ctx, window, max_splits) on
/// the host, so it does not change between decode steps of one captured graph.
int attention_decode_splits(int64_t max_ctx, int64_t window, int max_splits);
/// Floats of `partials` attention_decode needs: T * heads * max_splits * (head_dim + 2).
int64_t attention_decode_partials_floats(int64_t T, int64_t heads, int64_t head_dim, int max_splits);

/// Flash-decoding for few queries (T of 1..8 is the intended use; any T works): the keys of
/// each query are cut into attention_decode_splits(...) chunks handled by separate blocks.
/// Their partial results (max, sum, unnormalized output) are combined inside a thread-block
/// cluster where the sm_90 code runs and there are at most 16 splits (one kernel), else by
/// a second kernel through `partials` (attention_decode_partials_floats(...) floats; may be
/// null when neither applies). max_splits in [1, 256].
/// k_new, v_new [T, kv_heads * head_dim] (both or neither): the new tokens' rows, written to
/// the caches first as kv_cache_write would (for T = 1 by the attention kernel itself, which
/// reads key p from k_new / v_new, so the decode step needs no separate launch).
/// A position outside [0, max_ctx): its output rows are NaN, nothing is written to the
/// caches for it, and *error_flag (nullable) is set.
/// positions_from_host: `positions` and the cache rows below p are complete before the kernel
/// ahead of this one starts (written ahead of the network, whose first kernel waits for them:
/// launch.h), so with k_new at T = 1 the kernel loads its first K / V rows (all but p's)
/// before it waits for the previous kernel; GEARBOX_CUDA_EARLY_KEYS=0 turns that off.
cudaError_t attention_decode(const float* q, const float* k_new, const float* v_new, float* k_cache, float* v_cache,
                             const void* positions, bool pos_i64, float* out, int64_t T, int64_t heads,
                             int64_t kv_heads, int64_t head_dim, int64_t max_ctx, int64_t window, float scale,
                             float* partials, int max_splits, int* error_flag, cudaStream_t stream,
                             bool positions_from_host = false);

/// The per-head RMSNorm and RoPE of q and k (head_norm_rope's work) that
/// attention_decode_head_norm applies itself: q_w, k_w [head_dim] (W) normalize each head
/// as rms_norm does (eps, offset), then the heads rotate as rope() does (theta,
/// position_scale; inv_freq [head_dim / 2] in device memory, or null to compute each).
template <typename W>
struct AttentionHeadNorm {
  const W* q_w = nullptr;
  const W* k_w = nullptr;
  float eps = 0.0f;
  float offset = 0.0f;
  float theta = 0.0f;
  float position_scale = 1.0f;
  const float* inv_freq = nullptr;
};
/// attention_decode for one token (T = 1) whose q and k_new are the projections before the
/// per-head norms and RoPE: every block normalizes and rotates the query heads it serves and
/// the new key itself, as head_norm_rope would (the RMS sums in another order), and the cache
/// row p receives the rotated key and v_new. Nothing else is written: the result equals
/// head_norm_rope then attention_decode. k_new, v_new, q_w and k_w must not be null and
/// head_dim must be even, else cudaErrorInvalidValue; otherwise attention_decode's arguments
/// and limits.
template <typename W>
cudaError_t attention_decode_head_norm(const float* q, const float* k_new, const float* v_new, float* k_cache,
                                       float* v_cache, const void* positions, bool pos_i64, float* out, int64_t heads,
                                       int64_t kv_heads, int64_t head_dim, int64_t max_ctx, int64_t window, float scale,
                                       const AttentionHeadNorm<W>& norm, float* partials, int max_splits,
                                       int* error_flag, cudaStream_t stream, bool positions_from_host = false);

/// How many ways attention_prefill splits the keys of each block of 16 query rows: enough
/// blocks to fill an H200 for short prompts (1 from 512 tokens at 4 heads), at most 8.
int attention_prefill_splits(int64_t T, int64_t heads);
/// Floats of scratch attention_prefill needs for any T' <= T (the splits' partials, as
/// attention_decode_partials_floats; 0 when no T' splits).
int64_t attention_prefill_scratch_floats(int64_t T, int64_t heads, int64_t head_dim);
/// Tiled attention for any T: a block takes 16 query rows of one head, walks the keys in
/// tiles of 32 staged in shared memory, online softmax, f32 (no tensor cores). With
/// attention_prefill_splits(T, heads) > 1 the keys are split across blocks and combined by
/// a second kernel through `scratch` (attention_prefill_scratch_floats(T, ...) floats).
cudaError_t attention_prefill(const float* q, const float* k_cache, const float* v_cache, const void* positions,
                              bool pos_i64, float* out, int64_t T, int64_t heads, int64_t kv_heads, int64_t head_dim,
                              int64_t max_ctx, int64_t window, float scale, float* scratch, cudaStream_t stream);

/// How many ways attention_prefill_mma splits the keys of each block of 64 query rows: enough
/// blocks for two per SM of an H200 (1 from 4161 tokens at 4 heads), at most 4.
int attention_prefill_mma_splits(int64_t T, int64_t heads);
/// Floats of scratch attention_prefill_mma needs for any T' <= T: the bf16 rows of both
/// caches (max_ctx rows, when head_dim % 8 == 0), then the splits' partials (as
/// attention_prefill_scratch_floats, with attention_prefill_mma_splits).
int64_t attention_prefill_mma_scratch_floats(int64_t T, int64_t heads, int64_t kv_heads, int64_t head_dim,
                                             int64_t max_ctx);
/// attention_prefill on tensor cores (mma.sync, sm_80+): blocks of 64 query rows, key tiles
/// of 64, q k^T and p v as bf16 products accumulated in f32, softmax in f32. q, k, v and the
/// softmax weights are rounded to bf16, so outputs differ from attention_prefill's by up to
/// ~1e-2 of the values' scale: a kernel for bf16 engines. Where head_dim % 8 == 0 a first
/// kernel writes the cache rows the queries see as bf16 into the scratch, and the attention
/// copies its tiles from there asynchronously.
/// k_new, v_new [T, kv_heads * head_dim] (both or neither): the new tokens' rows, written to
/// the caches first as kv_cache_write would (by that first kernel, which converts them on the
/// way, where they are 16-byte aligned); a position outside [0, max_ctx) then writes nothing
/// and sets *error_flag (nullable). Otherwise the same arguments and limits as
/// attention_prefill; scratch: attention_prefill_mma_scratch_floats(T, ...) floats.
cudaError_t attention_prefill_mma(const float* q, const float* k_new, const float* v_new, float* k_cache,
                                  float* v_cache, const void* positions, bool pos_i64, float* out, int64_t T,
                                  int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t max_ctx, int64_t window,
                                  float scale, float* scratch, int* error_flag, cudaStream_t stream);

// ---- elementwise (n elements, f32) --------------------------------------------------------------
/// out = gelu_tanh(gate) * up, gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))).
cudaError_t gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream);
/// out = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream);
/// out = a + b (out may alias a or b).
cudaError_t add(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream);
/// y[r, :] += bias for each of `rows` rows of y [rows, n] (the GEMM's bias).
cudaError_t add_bias_rows(float* y, const float* bias, int64_t rows, int64_t n, cudaStream_t stream);
/// One output of split_columns: out [rows, n] (+ bias [n], nullable).
struct ColumnTarget {
  float* out;
  const float* bias;
  int64_t n;
};
inline constexpr int kColumnSplitMaxTargets = 4;
struct ColumnSplit {
  ColumnTarget targets[kColumnSplitMaxTargets];
  int count;
};
/// y [rows, sum n_i] -> out_i [rows, n_i] = the columns of target i (+ its bias): the outputs
/// of a multi-output linear computed as one GEMM over its stacked weights. 1..4 targets, each
/// n_i >= 1; no out_i may overlap y.
cudaError_t split_columns(const float* y, int64_t rows, const ColumnSplit& split, cudaStream_t stream);
/// x [batch, T, F] -> y [batch, F]: the last position of each sequence. T >= 1.
cudaError_t take_last(const float* x, float* y, int64_t batch, int64_t T, int64_t F, cudaStream_t stream);
/// y[i] = W(x[i]), round to nearest even (the GEMM's activation conversion; W = float copies).
template <typename W>
cudaError_t convert_f32_to(const float* x, W* y, int64_t n, cudaStream_t stream);
/// out[i] = W(act(gate[i]) * up[i]) for act GELU (tanh) or SiLU: gelu_tanh_mul / silu_mul
/// and convert_f32_to in one pass (a prefill's MLP activation feeding the down projection's
/// GEMM), the f32 product never stored. W: bf16 or f16 (or float).
template <typename W>
cudaError_t gated_activation_to(const float* gate, const float* up, GatedActivation activation, W* out, int64_t n,
                                cudaStream_t stream);
/// out[r, c] = Out(act(gate[r * ld + c]) * up[r * ld + c]) for r < rows, c < n: the gated
/// activation of 16-bit gate and up rows (the gate / up GEMMs' outputs rounded to W, each
/// [rows, n] with ld = n, or side by side in one stacked [rows, 2n] output with ld = 2n), out
/// [rows, n] contiguous, f32 or W (rounded to nearest even). W: bf16 or f16. ld >= n; out
/// must not overlap gate or up.
template <typename W, typename Out>
cudaError_t gated_activation_rows(const W* gate, const W* up, int64_t ld, GatedActivation activation, Out* out,
                                  int64_t rows, int64_t n, cudaStream_t stream);
/// The thread's next launch of one of these kernels goes out plainly, not with programmatic
/// dependent launch (launch.h): a network's first kernel then starts only once all work
/// enqueued ahead of the network has finished, so that no kernel of the network (each let
/// in early by its predecessor) runs ahead of the copies and the caller's kernels that wrote
/// its inputs. Before its wait, a kernel may thus read a network input that no kernel of the
/// network writes (the decode attention's positions).
void launch_next_plainly();
/// Drops a launch_next_plainly() that no launch used (a network of cuBLASLt calls only).
void forget_plain_launch();

/// One thread that keeps the stream busy for at least `microseconds` (by the GPU's global
/// timer): what the host enqueues behind it meanwhile then runs back to back, so events
/// around it time the device work and not the host's launches (the builder's tuning).
cudaError_t spin(int64_t microseconds, cudaStream_t stream);

// ---- fused chains (the CUDA device's decode path; each equals its unfused sequence) ----------
/// One per-head norm + RoPE input: x [T, heads * head_dim] normalized per head_dim chunk
/// with w [head_dim] (RMSNorm, as rms_norm), then rotated as rope() with theta and
/// position_scale, into y [T, heads * head_dim]; y may alias x. x's rows may lie
/// x_row_stride floats apart (a column block of a wider matrix, e.g. q in a stacked QKV
/// linear's output; 0: heads * head_dim). w null: y is a copy of x (no norm, no rotation:
/// v carried out of the same matrix).
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
};
inline constexpr int kHeadNormRopeMaxParts = 3;
/// rms_norm(head_dim) + rope for up to three tensors (q, k, and a copied v) of one layer in
/// one launch: one block per (token, head) for one token, one warp per (token, head) for
/// several (head_dim % 8 == 0, <= 512, 16-byte aligned rows). head_dim even, <= 1024; eps and offset are the
/// norms'. A negative position poisons its normed rows with NaN and sets *error_flag, as
/// rope() does.
template <typename W>
cudaError_t head_norm_rope(const HeadNormRope<W>* parts, int count, const void* positions, bool pos_i64, int64_t T,
                           int64_t head_dim, float eps, float offset, int* error_flag, cudaStream_t stream);

/// The residual step around a Gemma sublayer, per row of `dim`:
///   sum = residual + rms_norm(x, w_post)           (the post-norm and the residual add)
///   y   = rms_norm(sum, w_next)                    (the next pre-norm; skipped when w_next is null)
/// x, residual, sum, y [rows, dim]; sum may alias residual, y may alias x. One block per row.
template <typename W>
cudaError_t norm_add_norm(const float* x, const W* w_post, const float* residual, float* sum, const W* w_next, float* y,
                          int64_t rows, int64_t dim, float eps, float offset, cudaStream_t stream);
/// norm_add_norm with y rounded to W (nearest even, as convert_f32_to): a GEMM input in the
/// weights' type (prefill: the next linear reads it, and no conversion runs). w_next and y
/// must not be null; y must not alias x, residual or sum.
template <typename W>
cudaError_t norm_add_norm_to(const float* x, const W* w_post, const float* residual, float* sum, const W* w_next, W* y,
                             int64_t rows, int64_t dim, float eps, float offset, cudaStream_t stream);

}  // namespace gearbox::cuda
