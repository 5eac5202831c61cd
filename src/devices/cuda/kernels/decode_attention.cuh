// Flash-decoding for few queries: each query's keys split across blocks, the partials combined
// in a cluster or by a second kernel (decode_attention.cu).
#pragma once

#include "devices/cuda/kernels/conventions.h"
#include "devices/cuda/kernels/kv_cache.cuh"

namespace gearbox::cuda {

/// How attention_decode lays out its blocks: each query's keys cut into `splits` chunks, each
/// block serving `heads_per_block` query heads of one kv head.
struct DecodeGrid {
  int splits;
  int heads_per_block;
};
/// The grid attention_decode uses for T queries of `heads` heads over `kv_heads`. Splits:
/// enough for the longest key range (max_ctx, or the window) in chunks of at least 32 keys,
/// at most max_splits; and where T > 1 (a batched decode's rows, a prefill), no more than
/// give each of the device's sm_count SMs one (query, head, split): one query keeps the
/// splits its keys want, since its latency is the step's. Heads per block: the most (1, 2,
/// 4 or 8, dividing the group) that leave >= 256 blocks, else 1; heads_per_block > 0 sets
/// it. Fixed on the host from the call's shapes, so it does not change between the steps of
/// one captured graph.
DecodeGrid attention_decode_grid(int64_t T, int64_t heads, int64_t kv_heads, int64_t max_ctx, int64_t window,
                                 int max_splits, int sm_count, int heads_per_block = 0);
/// Floats of `partials` attention_decode needs: T * heads * max_splits * (head_dim + 2).
int64_t attention_decode_partials_floats(int64_t T, int64_t heads, int64_t head_dim, int max_splits);

/// Flash-decoding for few queries (T of 1..8 is the intended use; any T works): the keys of
/// each query are cut into attention_decode_grid(...).splits chunks handled by separate blocks.
/// Their partial results (max, sum, unnormalized output) are combined inside a thread-block
/// cluster where the sm_90 code runs (launch.limits->hopper_code_runs) and there are at most
/// 16 splits (one kernel), else by a second kernel through `partials`
/// (attention_decode_partials_floats(...) floats; may be null when neither applies).
/// max_splits in [1, 256].
/// k_new, v_new [T, kv_heads * head_dim] (both or neither): the new tokens' rows, written to
/// the caches first as kv_cache_write would (for T = 1 by the attention kernel itself, which
/// reads key p from k_new / v_new, so the decode step needs no separate launch).
/// A position outside [0, max_ctx): its output rows are NaN, nothing is written to the
/// caches for it, and *error_flag (nullable) is set.
/// positions_from_host: `positions` (and the slots) and the cache rows below p are complete
/// before the kernel ahead of this one starts (written ahead of the network, whose first
/// kernel waits for them: launch.h), so with k_new at T = 1 the kernel loads its first K / V
/// rows (all but p's) before it waits for the previous kernel.
/// slots: a batched network's (CacheSlots): each query reads and writes its slot's cache,
/// and padding queries output 0.
/// heads_per_block: query heads of one kv head that a block serves (1, 2, 4 or 8, dividing
/// heads / kv_heads), or 0 for the launcher's choice; the results do not depend on it. For
/// benchmarks and tests.
cudaError_t attention_decode(const float* q, const float* k_new, const float* v_new, float* k_cache, float* v_cache,
                             const void* positions, bool pos_i64, float* out, int64_t T, int64_t heads,
                             int64_t kv_heads, int64_t head_dim, int64_t max_ctx, int64_t window, float scale,
                             float* partials, int max_splits, int* error_flag, const Launch& launch,
                             bool positions_from_host = false, const CacheSlots& slots = {}, int heads_per_block = 0);

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
                                       int* error_flag, const Launch& launch, bool positions_from_host = false,
                                       const CacheSlots& slots = {});

}  // namespace gearbox::cuda
