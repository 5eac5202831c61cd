// Helpers shared by the generic-op kernels (generic*.cu; include from .cu files only): the
// strided index map that broadcasting, permute, expand, slice and the index ops walk, grid
// sizes, block reductions and typed element access.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math_constants.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "devices/cuda/device_math.h"
#include "devices/cuda/kernels/generic.cuh"
#include "devices/cuda/launch.h"
#include "ir/generic_shapes.h"

namespace gearbox::cuda::generic {

constexpr int kThreads = 256;
constexpr int64_t kBlocksPerSm = 16;  // a grid-stride launch's most blocks: the SMs filled many times over
constexpr int kMaxOperands = 4;

/// Blocks of a grid-stride launch over `items` (one a thread): at least 1, at most
/// kBlocksPerSm per SM of the device.
inline unsigned blocks_for(int64_t items, const Launch& launch, int threads = kThreads) {
  const int64_t most = std::max<int64_t>(kBlocksPerSm * launch.limits->sm_count, 1);
  return static_cast<unsigned>(std::clamp<int64_t>((items + threads - 1) / threads, 1, most));
}

/// An index space of `rank` extents (row-major, the last fastest) and, per operand, the
/// element stride each coordinate moves it by (0 on a broadcast dim). Passed by value.
struct IndexMap {
  int32_t rank = 0;
  int64_t extent[kMaxDims] = {};
  int64_t stride[kMaxOperands][kMaxDims] = {};

  int64_t volume() const {
    int64_t v = 1;
    for (int32_t d = 0; d < rank; ++d) v *= extent[d];
    return v;
  }
};

/// The map over `dims` with no operand set.
inline IndexMap index_map(const Dims& dims) {
  IndexMap m;
  m.rank = dims.rank();
  for (int32_t d = 0; d < m.rank; ++d) m.extent[d] = dims[d];
  return m;
}

/// Operand `op` of m reads a contiguous tensor of dims `in` aligned right to m's extents
/// (numpy broadcasting, ir::broadcast_strides): stride 0 where in's extent is 1 or missing.
inline void set_broadcast(IndexMap& m, int op, const Dims& in) {
  const std::vector<int64_t> strides = ir::broadcast_strides(in, m.rank);
  for (int32_t d = 0; d < m.rank; ++d) m.stride[op][d] = strides[static_cast<size_t>(d)];
}

/// Operand `op` of m is a contiguous tensor of m's own extents.
inline void set_contiguous(IndexMap& m, int op) {
  int64_t s = 1;
  for (int32_t d = m.rank - 1; d >= 0; --d) {
    m.stride[op][d] = s;
    s *= m.extent[d];
  }
}

/// The element strides of a contiguous tensor of `dims`.
inline void contiguous_strides(const Dims& dims, int64_t* strides) {
  int64_t s = 1;
  for (int32_t d = dims.rank() - 1; d >= 0; --d) {
    strides[d] = s;
    s *= dims[d];
  }
}

/// m with extents of 1 dropped and neighbouring dims merged wherever every one of the first
/// `ops` operands walks them as one (outer stride = inner stride * inner extent), so that
/// the kernels divide by as few extents as possible. Same offsets for every index.
inline IndexMap collapsed(const IndexMap& m, int ops) {
  IndexMap c;
  for (int32_t d = 0; d < m.rank; ++d) {
    if (m.extent[d] == 1) continue;
    if (c.rank > 0) {
      bool merge = true;
      for (int op = 0; op < ops; ++op) merge = merge && c.stride[op][c.rank - 1] == m.stride[op][d] * m.extent[d];
      if (merge) {
        c.extent[c.rank - 1] *= m.extent[d];
        for (int op = 0; op < ops; ++op) c.stride[op][c.rank - 1] = m.stride[op][d];
        continue;
      }
    }
    c.extent[c.rank] = m.extent[d];
    for (int op = 0; op < ops; ++op) c.stride[op][c.rank] = m.stride[op][d];
    ++c.rank;
  }
  return c;
}

#if defined(__CUDACC__)

__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

/// The offsets of the first kOps operands of m at linear index i.
template <int kOps>
__device__ __forceinline__ void offsets_at(const IndexMap& m, int64_t i, int64_t (&off)[kOps]) {
#pragma unroll
  for (int op = 0; op < kOps; ++op) off[op] = 0;
#pragma unroll
  for (int d = kMaxDims - 1; d >= 0; --d) {
    if (d < m.rank) {
      const int64_t e = m.extent[d];
      const int64_t c = i % e;
      i /= e;
#pragma unroll
      for (int op = 0; op < kOps; ++op) off[op] += c * m.stride[op][d];
    }
  }
}

struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

/// op over the kGroup threads of a group (32: a warp; or the whole block of kGroup threads),
/// returned to each of them. red: kGroup / 32 floats of shared memory for this group (block
/// groups only); the call starts with a barrier, so red may be reused call after call.
template <int kGroup, typename Op>
__device__ __forceinline__ float group_reduce(float v, Op op, float* red) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if constexpr (kGroup > 32) {
    __syncthreads();
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    v = red[0];
#pragma unroll
    for (int w = 1; w < kGroup / 32; ++w) v = op(v, red[w]);
  }
  return v;
}

/// Element i of a float vector of `type` (f32, bf16, f16) as f32.
__device__ __forceinline__ float load_float(const void* p, DataType type, int64_t i) {
  if (type == DataType::kBF16) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  if (type == DataType::kF16) return __half2float(static_cast<const __half*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

#endif  // defined(__CUDACC__)

}  // namespace gearbox::cuda::generic
