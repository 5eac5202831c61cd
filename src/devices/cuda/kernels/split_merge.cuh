// The combine of split-KV partials, for the attention kernels that split a query's keys
// across blocks: decode's second kernel (more splits than a cluster takes, or no clusters)
// and the split prefill's (split_merge.cu). Internal to the attention families.
#pragma once

#include <cuda_runtime.h>

#include "devices/cuda/kernels/attention_common.cuh"
#include "devices/cuda/launch.h"

namespace gearbox::cuda::detail {

/// out[t, h, :] for each of a's T * heads rows from `splits` partials per row (the layout of
/// attention_common.cuh): a block per row, any number of splits up to kMaxSplits. vec4: the
/// rows' head_dim slices may be read as float4 (taken where partials is 16-byte aligned too).
void launch_combine(const AttentionArgs& a, const float* partials, int splits, bool vec4, const Launch& launch);
/// launch_combine for prefill's many rows and few splits: a warp per row where the splits fit
/// in a warp (<= 32), else launch_combine.
void launch_combine_rows(const AttentionArgs& a, const float* partials, int splits, bool vec4, const Launch& launch);

}  // namespace gearbox::cuda::detail
