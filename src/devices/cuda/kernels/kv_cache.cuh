// The KV caches every attention family reads, and kv_cache_write, which writes the new rows
// into them (kv_cache.cu).
#pragma once

#include "devices/cuda/kernels/conventions.h"

namespace gearbox::cuda {

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

// ---- KV cache ---------------------------------------------------------------------------------
/// k_cache[positions[t], :] = k[t, :], v_cache[positions[t], :] = v[t, :] for t < T.
/// k, v [T, width]; caches [max_ctx, width]. A position outside [0, max_ctx) sets
/// *error_flag and its row is skipped (the other rows are written).
cudaError_t kv_cache_write(const float* k, const float* v, const void* positions, bool pos_i64, int64_t T,
                           int64_t width, float* k_cache, float* v_cache, int64_t max_ctx, int* error_flag,
                           const Launch& launch);

}  // namespace gearbox::cuda
