// The residual step around a Gemma sublayer (post-norm, residual add, the next pre-norm), or
// around a pre-norm family's sublayer (the add and the next pre-norm), in one pass over each
// row (residual_norm.cu).
#pragma once

#include "devices/cuda/kernels/conventions.h"

namespace gearbox::cuda {

/// The residual step around a Gemma sublayer, per row of `dim`:
///   sum = residual + rms_norm(x, w_post)           (the post-norm and the residual add)
///   y   = rms_norm(sum, w_next)                    (the next pre-norm; skipped when w_next is null)
/// w_post null: sum = residual + x (a pre-norm family's residual add, no post-norm).
/// x, residual, sum, y [rows, dim]; sum may alias residual, y may alias x. One block per row.
template <typename W>
cudaError_t norm_add_norm(const float* x, const W* w_post, const float* residual, float* sum, const W* w_next, float* y,
                          int64_t rows, int64_t dim, float eps, float offset, const Launch& launch);
/// norm_add_norm with y rounded to W (nearest even, as convert_f32_to): a GEMM input in the
/// weights' type (prefill: the next linear reads it, and no conversion runs). w_next and y
/// must not be null; y must not alias x, residual or sum.
template <typename W>
cudaError_t norm_add_norm_to(const float* x, const W* w_post, const float* residual, float* sum, const W* w_next, W* y,
                             int64_t rows, int64_t dim, float eps, float offset, const Launch& launch);

}  // namespace gearbox::cuda
