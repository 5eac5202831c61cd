// Embedding lookup: a row of the table per token id (embedding.cu).
#pragma once

#include "devices/cuda/kernels/conventions.h"

namespace gearbox::cuda {

/// out[i, :] = float(table[ids[i], :]) * scale for i in [0, count).
/// ids [count] (i32/i64), table [vocab, hidden] (W), out [count, hidden] (f32).
/// An id outside [0, vocab): that row of `out` is NaN and *error_flag is set to 1.
template <typename W>
cudaError_t embedding(const void* ids, bool ids_i64, int64_t count, const W* table, int64_t vocab, int64_t hidden,
                      float scale, float* out, int* error_flag, const Launch& launch);

}  // namespace gearbox::cuda
