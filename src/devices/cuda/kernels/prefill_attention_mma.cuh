// Attention for any number of queries on tensor cores (mma.sync, bf16 operands, f32
// accumulation), for bf16 engines (prefill_attention_mma.cu).
#pragma once

#include "devices/cuda/kernels/conventions.h"
#include "devices/cuda/kernels/kv_cache.cuh"

namespace gearbox::cuda {

/// How many ways attention_prefill_mma splits the keys of each block of 64 query rows: enough
/// blocks for two per SM of the device, at most 4.
int attention_prefill_mma_splits(int64_t T, int64_t heads, const DeviceLimits& limits);
/// Floats of scratch attention_prefill_mma needs for any T' <= T: the bf16 rows of both
/// caches (max_ctx rows, when head_dim % 8 == 0), then the splits' partials (as
/// attention_prefill_scratch_floats, with attention_prefill_mma_splits).
int64_t attention_prefill_mma_scratch_floats(int64_t T, int64_t heads, int64_t kv_heads, int64_t head_dim,
                                             int64_t max_ctx, const DeviceLimits& limits);
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
                                  float scale, float* scratch, int* error_flag, const Launch& launch);

}  // namespace gearbox::cuda
