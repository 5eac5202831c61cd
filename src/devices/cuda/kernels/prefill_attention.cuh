// Tiled attention for any number of queries, f32 throughout (prefill_attention.cu).
#pragma once

#include "devices/cuda/kernels/conventions.h"
#include "devices/cuda/kernels/kv_cache.cuh"

namespace gearbox::cuda {

/// How many ways attention_prefill splits the keys of each block of 16 query rows: enough
/// blocks for four per SM of the device for short prompts, at most 8.
int attention_prefill_splits(int64_t T, int64_t heads, const DeviceLimits& limits);
/// Floats of scratch attention_prefill needs for any T' <= T (the splits' partials, as
/// attention_decode_partials_floats; 0 when no T' splits).
int64_t attention_prefill_scratch_floats(int64_t T, int64_t heads, int64_t head_dim, const DeviceLimits& limits);
/// Tiled attention for any T: a block takes 16 query rows of one head, walks the keys in
/// tiles of 32 staged in shared memory, online softmax, f32 (no tensor cores). With
/// attention_prefill_splits(T, heads, *launch.limits) > 1 the keys are split across blocks
/// and combined by a second kernel through `scratch` (attention_prefill_scratch_floats(T, ...)
/// floats). slots: a batched network's (CacheSlots; T a multiple of slots.seq): each batch
/// row's queries read its slot's cache, padding queries output 0.
cudaError_t attention_prefill(const float* q, const float* k_cache, const float* v_cache, const void* positions,
                              bool pos_i64, float* out, int64_t T, int64_t heads, int64_t kv_heads, int64_t head_dim,
                              int64_t max_ctx, int64_t window, float scale, float* scratch, const Launch& launch,
                              const CacheSlots& slots = {});

}  // namespace gearbox::cuda
