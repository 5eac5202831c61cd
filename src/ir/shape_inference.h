// Shape inference: every tensor's dims from the network inputs' dims. The one home of
// every shape rule (network.h states them in words).
#pragma once

#include <span>
#include <vector>

#include "gearbox/dims.h"
#include "gearbox/status.h"
#include "ir/network.h"

namespace gearbox::ir {

/// Fills `dims` (one entry per network tensor) from `input_dims` (one per network input,
/// in InputSpec order). The network must have passed validate_network.
/// Errors: kInvalidArgument naming the input or the op, the tensor and the dims, e.g.
/// "node 3 'layers.0.q_proj' (linear): input 'x' has last dim 300 but weight
/// 'model.layers.0.self_attn.q_proj.weight' expects 320".
Status infer_shapes(const Network& network, std::span<const Dims> input_dims, std::vector<Dims>& dims);

/// Checks one input's dims against its InputSpec (rank, static extents, extents >= 1).
Status check_input_dims(const Network& network, size_t input, const Dims& dims);

/// Rows of a tensor in the IR's layout (the last dim contiguous): volume / last extent;
/// 0 for an empty tensor, 1 for a scalar.
int64_t row_count(const Dims& dims) noexcept;

/// Bytes of one tensor of `dims` in `dtype`; saturates at INT64_MAX.
int64_t tensor_bytes(const Dims& dims, DataType dtype) noexcept;

/// Whether a linear node of two or more outputs has its weights W_0, W_1, ... one after
/// another in the weight payload (same dtype and K, each starting where the previous one
/// ends), so that they are one [sum N_i, K] matrix a device may multiply by at once. The
/// Gemma-3 builder lays out q/k/v and gate/up so wherever their sizes are multiples of the
/// payload's 64-byte alignment.
bool linear_weights_stacked(const Network& network, const Node& node) noexcept;

}  // namespace gearbox::ir
