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

// ---- KV-cache slots ---------------------------------------------------------------------------
/// A batched network's KV-cache slots (docs/ARCHITECTURE.md, "Batches and KV-cache slots"):
/// the caches hold whole caches of max_ctx rows one after another, and token t, of batch row
/// t / seq, keeps its keys in the cache of slot ids[t / seq] (cache rows from
/// ids[t / seq] * max_ctx). A token at position -1 is padding: it writes no cache row, reads
/// none, its attention output is 0, RoPE leaves it unrotated, and it sets no error flag.
/// ids [T / seq] (i64 or i32) in device memory, read inside the kernels like the positions,
/// so a captured graph stays valid as they change; the host has checked them (slot_table.h).
/// ids null: one sequence (one cache, no padding), every attention kernel's default.
struct CacheSlots {
  const void* ids = nullptr;
  bool i64 = true;
  int64_t seq = 1;
};

// ---- KV cache ---------------------------------------------------------------------------------
/// k_cache[positions[t], :] = k[t, :], v_cache[positions[t], :] = v[t, :] for t < T (in the
/// cache of t's slot, where `slots` has ids). k, v [T, width]; caches [max_ctx, width] (per
/// slot). A position outside [0, max_ctx) that is not padding sets *error_flag and its row
/// is skipped (the other rows are written).
cudaError_t kv_cache_write(const float* k, const float* v, const void* positions, bool pos_i64, int64_t T,
                           int64_t width, float* k_cache, float* v_cache, int64_t max_ctx, int* error_flag,
                           const Launch& launch, const CacheSlots& slots = {});

}  // namespace gearbox::cuda
