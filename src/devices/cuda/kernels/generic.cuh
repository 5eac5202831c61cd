// The generic ops of the network IR (ir/network.h, kUnary .. kConstant) on the CUDA device:
// elementwise math with numpy broadcasting, reductions, softmax, layer norm, batched matmul,
// scaled-dot-product attention, and the layout ops that move bytes (permute, expand, slice,
// concat, reshape, cast, index_select, gather, constant).
//
//   // y [2, 3, 5] = a [2, 3, 5] + b [5], f32, on on.stream:
//   cudaError_t err = generic_binary(ir::BinaryCode::kAdd, DataType::kF32, a, {2, 3, 5}, b, {5}, y, {2, 3, 5}, on);
//
// Tensors are row-major and contiguous, of rank 0..kMaxDims; `type` names the element type
// of a tensor as it is stored (f32, bf16, f16, i32, i64, bool as one byte 0 / 1). Every
// launcher mirrors the CPU kernel of the same op (devices/cpu/kernels.h) element for
// element, keeps the conventions of kernels/conventions.h (no allocation, no
// synchronization, graph-capturable, cudaErrorInvalidValue for what it cannot serve) and
// returns cudaSuccess at once for an empty output. Files:
//   generic.cu         unary, binary, where, cast, and the byte-moving layout ops
//   generic_reduce.cu  reduce, softmax / log_softmax, layer_norm
//   generic_matmul.cu  matmul, sdpa
// generic_device.cuh holds the device-side helpers they share (strided index maps).
#pragma once

#include <span>

#include "devices/cuda/kernels/conventions.h"
#include "gearbox/data_type.h"
#include "gearbox/dims.h"
#include "ir/network.h"

namespace gearbox::cuda {

// ---- elementwise --------------------------------------------------------------------------------

/// y = f(x) elementwise over n elements: every UnaryCode on f32 (alpha, beta: pow_scalar,
/// affine, clamp), kNeg / kAbs on i32 / i64, kLogicalNot on bool. y may alias x.
cudaError_t generic_unary(ir::UnaryCode code, DataType type, const void* x, void* y, int64_t n, float alpha, float beta,
                          const Launch& launch);

/// y = a op b with numpy broadcasting of a and b to y's dims. `type`: a's and b's (f32, i32,
/// i64 for arithmetic and comparisons; bool for logical ops and comparisons); y is `type`
/// for arithmetic, bool for comparisons and logical ops. Integer division truncates toward
/// zero; a zero divisor yields 0.
cudaError_t generic_binary(ir::BinaryCode code, DataType type, const void* a, const Dims& a_dims, const void* b,
                           const Dims& b_dims, void* y, const Dims& y_dims, const Launch& launch);

/// y = cond ? a : b with three-way broadcasting; cond bool, a, b and y of `type`.
cudaError_t generic_where(const void* cond, const Dims& cond_dims, DataType type, const void* a, const Dims& a_dims,
                          const void* b, const Dims& b_dims, void* y, const Dims& y_dims, const Launch& launch);

/// y [n] = x [n] converted to y_type: floats round to nearest even, float -> int truncates
/// toward zero and clamps to the integer's range (NaN -> 0), -> bool is x != 0, bool -> 1 /
/// 0. Any pair among f32, bf16, f16, i32, i64, bool. x_type and y_storage are the types the
/// tensors are stored in; y_storage is y_type, or f32 for a bf16 / f16 y kept in f32 (the
/// value rounded to y_type, stored as f32).
cudaError_t generic_cast(DataType x_type, const void* x, DataType y_type, DataType y_storage, void* y, int64_t n,
                         const Launch& launch);

// ---- layout (any element type: bytes are moved) --------------------------------------------------

/// y = x's `bytes` bytes (reshape, constant of its own type). x and y must not overlap.
cudaError_t generic_copy(const void* x, void* y, int64_t bytes, const Launch& launch);

/// y.dims[i] = x.dims[perm[i]].
cudaError_t generic_permute(DataType type, const void* x, const Dims& x_dims, std::span<const int64_t> perm, void* y,
                            const Dims& y_dims, const Launch& launch);

/// x broadcast to y_dims (x aligned right; an extent of 1 repeats).
cudaError_t generic_expand(DataType type, const void* x, const Dims& x_dims, void* y, const Dims& y_dims,
                           const Launch& launch);

/// y = x[..., start : start + y_dims[axis] * step : step, ...] along `axis`; start already
/// normalized to [0, x extent].
cudaError_t generic_slice(DataType type, const void* x, const Dims& x_dims, int32_t axis, int64_t start, int64_t step,
                          void* y, const Dims& y_dims, const Launch& launch);

/// x (one input of a concat) written into y at offset `at` along `axis` (y's other extents
/// equal x's): one launch per input.
cudaError_t generic_concat_part(DataType type, const void* x, const Dims& x_dims, int32_t axis, int64_t at, void* y,
                                const Dims& y_dims, const Launch& launch);

/// y = x with dim `axis` replaced by x.index(axis, index[j]) for j in [0, n); index [n] i32
/// (index_i64 false) or i64, negative values wrap once. An index outside [-extent, extent):
/// its slice of y is filled with 0xff bytes (NaN for floats) and *error_flag set to 1.
cudaError_t generic_index_select(DataType type, const void* x, const Dims& x_dims, int32_t axis, const void* index,
                                 bool index_i64, int64_t n, void* y, const Dims& y_dims, int* error_flag,
                                 const Launch& launch);

/// torch.gather(x, axis, index): y [index dims], y[p] = x[p with p[axis] = index[p]];
/// index of x's rank, its other extents <= x's. Bad index: as generic_index_select, for
/// that element.
cudaError_t generic_gather(DataType type, const void* x, const Dims& x_dims, int32_t axis, const void* index,
                           bool index_i64, const Dims& index_dims, void* y, int* error_flag, const Launch& launch);

// ---- reductions and normalizations (f32) ------------------------------------------------------------

/// y = sum / mean / amax / amin of x over the dims in `axes` (sorted, unique; empty = all).
/// y holds the kept dims in order (keepdim only changes y's dims, not its layout).
cudaError_t generic_reduce(ir::ReduceCode code, const float* x, const Dims& x_dims, std::span<const int64_t> axes,
                           float* y, const Launch& launch);

/// y = softmax (log_softmax: log of it) of x along `axis`, max-subtracted. y may alias x.
cudaError_t generic_softmax(bool log, const float* x, const Dims& x_dims, int32_t axis, float* y, const Launch& launch);

/// y [rows, f] = (x - mean) * rsqrt(var + eps) * w + b over each row of x [rows, f], biased
/// variance; w and b (each nullable: 1 and 0) [f] of w_type / b_type (f32, bf16, f16).
cudaError_t generic_layer_norm(const float* x, int64_t rows, int64_t f, const void* w, DataType w_type, const void* b,
                               DataType b_type, float eps, float* y, const Launch& launch);

// ---- products (f32, f32 accumulation) --------------------------------------------------------------

/// y [..., M, N] = a [..., M, K] @ b [..., K, N], batch dims broadcast numpy-style to y's.
cudaError_t generic_matmul(const float* a, const Dims& a_dims, const float* b, const Dims& b_dims, float* y,
                           const Dims& y_dims, const Launch& launch);

/// Scaled-dot-product attention: y [..., Lq, Dv] = softmax(q k^T * scale + mask) v for q
/// [..., Lq, D], k [..., Lk, D], v [..., Lk, Dv], batch dims broadcast to y's. mask
/// (nullable) broadcastable to [..., Lq, Lk]: bool (false excludes a key; mask_bool) or f32
/// (added). causal: query i sees keys j <= i. A query that sees no key gets 0.
cudaError_t generic_sdpa(const float* q, const Dims& q_dims, const float* k, const Dims& k_dims, const float* v,
                         const Dims& v_dims, const void* mask, const Dims& mask_dims, bool mask_bool, bool causal,
                         float scale, float* y, const Dims& y_dims, const Launch& launch);

}  // namespace gearbox::cuda
