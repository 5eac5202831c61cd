// CUDA generic reductions and row normalizations (generic.cuh), f32.
//
//   reduce      x [any dims] -> y [kept dims]      over any set of axes, no permute
//   softmax     x [outer, L, inner] -> like x      over the middle dim L (log_softmax too)
//   layer_norm  x [rows, F] -> like x              over the last dim
//
// One group of threads per output element or row: a warp where the reduced length is short,
// the whole block of 256 threads where it is long, in a grid-stride loop over the outputs.
// A reduction walks its elements in place through an IndexMap (kept dims for the output,
// reduced dims for the elements of one output), so no axis order is ever materialized.
// Sums run in another order than the CPU's (per thread, then a tree), within the test's
// reduction tolerance.

#include <math_constants.h>

#include <cstdint>

#include "devices/cuda/kernels/generic.cuh"
#include "devices/cuda/kernels/generic_device.cuh"

namespace gearbox::cuda {

using ir::ReduceCode;

namespace {

using namespace generic;  // NOLINT(google-build-using-namespace)

/// Reduced lengths up to this many elements take a warp per output, longer ones a block.
constexpr int64_t kWarpMaxLength = 1024;

/// max / min that propagate NaN (torch's amax / amin).
struct AmaxOp {
  __device__ float operator()(float a, float b) const { return a > b || a != a ? a : b; }
};
struct AminOp {
  __device__ float operator()(float a, float b) const { return a < b || a != a ? a : b; }
};

/// The group (warp or block) of this thread, how many groups a block holds, and this
/// thread's rank inside its group.
template <int kGroup>
struct Group {
  static constexpr int kPerBlock = kThreads / kGroup;
  __device__ static int index() { return static_cast<int>(threadIdx.x) / kGroup; }
  __device__ static int lane() { return static_cast<int>(threadIdx.x) % kGroup; }
  /// The first output of this group and the step between its outputs.
  __device__ static int64_t first() { return static_cast<int64_t>(blockIdx.x) * kPerBlock + index(); }
  __device__ static int64_t step() { return static_cast<int64_t>(gridDim.x) * kPerBlock; }
};

/// y[o] = op over the elements of x at kept(o) + reduced(r), r in [0, length).
template <int kGroup, typename Op>
__device__ void reduce_outputs(const float* x, const IndexMap& kept, const IndexMap& reduced, int64_t length,
                               int64_t outputs, float init, float divisor, float* y, Op op) {
  __shared__ float red[kThreads / 32];
  using G = Group<kGroup>;
  for (int64_t o = G::first(); o < outputs; o += G::step()) {
    int64_t base[1];
    offsets_at<1>(kept, o, base);
    float acc = init;
    for (int64_t r = G::lane(); r < length; r += kGroup) {
      int64_t off[1];
      offsets_at<1>(reduced, r, off);
      acc = op(acc, x[base[0] + off[0]]);
    }
    acc = group_reduce<kGroup>(acc, op, red + G::index() * (kGroup / 32));
    if (G::lane() == 0) y[o] = acc / divisor;
  }
}

template <int kGroup>
__global__ void __launch_bounds__(kThreads) reduce_kernel(ReduceCode code, const float* x, IndexMap kept,
                                                          IndexMap reduced, int64_t length, int64_t outputs, float* y) {
  allow_next_kernel();
  wait_for_prior_kernels();
  switch (code) {
    case ReduceCode::kSum: reduce_outputs<kGroup>(x, kept, reduced, length, outputs, 0.0f, 1.0f, y, SumOp{}); break;
    case ReduceCode::kMean:
      reduce_outputs<kGroup>(x, kept, reduced, length, outputs, 0.0f, static_cast<float>(length), y, SumOp{});
      break;
    case ReduceCode::kAmax:
      reduce_outputs<kGroup>(x, kept, reduced, length, outputs, -CUDART_INF_F, 1.0f, y, AmaxOp{});
      break;
    case ReduceCode::kAmin:
      reduce_outputs<kGroup>(x, kept, reduced, length, outputs, CUDART_INF_F, 1.0f, y, AminOp{});
      break;
  }
}

/// Softmax of the rows of x [outer, length, inner]: row r is o = r / inner, i = r % inner,
/// its elements at (o * length + l) * inner + i. Max-subtracted: y = exp(x - max) / sum, or
/// log_softmax y = x - max - log(sum).
template <int kGroup>
__global__ void __launch_bounds__(kThreads)
    softmax_kernel(bool log, const float* x, int64_t length, int64_t inner, int64_t rows, float* y) {
  __shared__ float red[kThreads / 32];
  allow_next_kernel();
  wait_for_prior_kernels();
  using G = Group<kGroup>;
  float* group_red = red + G::index() * (kGroup / 32);
  for (int64_t r = G::first(); r < rows; r += G::step()) {
    const int64_t base = (r / inner) * length * inner + r % inner;
    float mx = -CUDART_INF_F;
    for (int64_t l = G::lane(); l < length; l += kGroup) mx = AmaxOp{}(mx, x[base + l * inner]);
    mx = group_reduce<kGroup>(mx, AmaxOp{}, group_red);
    float sum = 0.0f;
    for (int64_t l = G::lane(); l < length; l += kGroup) sum += expf(x[base + l * inner] - mx);
    sum = group_reduce<kGroup>(sum, SumOp{}, group_red);
    if (log) {
      const float log_sum = logf(sum);
      for (int64_t l = G::lane(); l < length; l += kGroup) y[base + l * inner] = x[base + l * inner] - mx - log_sum;
    } else {
      for (int64_t l = G::lane(); l < length; l += kGroup) y[base + l * inner] = expf(x[base + l * inner] - mx) / sum;
    }
  }
}

/// Layer norm of each row of x [rows, f]: mean, then the biased variance of x - mean.
template <int kGroup>
__global__ void __launch_bounds__(kThreads)
    layer_norm_kernel(const float* x, int64_t rows, int64_t f, const void* w, DataType w_type, const void* b,
                      DataType b_type, float eps, float* y) {
  __shared__ float red[kThreads / 32];
  allow_next_kernel();
  wait_for_prior_kernels();
  using G = Group<kGroup>;
  float* group_red = red + G::index() * (kGroup / 32);
  const float n = static_cast<float>(f);
  for (int64_t r = G::first(); r < rows; r += G::step()) {
    const float* row = x + r * f;
    float sum = 0.0f;
    for (int64_t i = G::lane(); i < f; i += kGroup) sum += row[i];
    const float mean = group_reduce<kGroup>(sum, SumOp{}, group_red) / n;
    float squares = 0.0f;
    for (int64_t i = G::lane(); i < f; i += kGroup) {
      const float d = row[i] - mean;
      squares += d * d;
    }
    const float var = group_reduce<kGroup>(squares, SumOp{}, group_red) / n;
    const float inv = 1.0f / sqrtf(var + eps);
    for (int64_t i = G::lane(); i < f; i += kGroup) {
      float v = (row[i] - mean) * inv;
      if (w != nullptr) v *= load_float(w, w_type, i);
      if (b != nullptr) v += load_float(b, b_type, i);
      y[r * f + i] = v;
    }
  }
}

/// Blocks for `items` outputs at kPerBlock a block, at most kBlocksPerSm per SM.
unsigned group_blocks(int64_t items, int per_block, const Launch& launch) {
  return blocks_for(items, launch, per_block);
}

}  // namespace

cudaError_t generic_reduce(ReduceCode code, const float* x, const Dims& x_dims, std::span<const int64_t> axes, float* y,
                           const Launch& launch) {
  bool reduce_dim[kMaxDims] = {};
  for (int64_t a : axes) {
    if (a < 0 || a >= x_dims.rank()) return cudaErrorInvalidValue;
    reduce_dim[a] = true;
  }
  if (axes.empty()) {
    for (int32_t d = 0; d < x_dims.rank(); ++d) reduce_dim[d] = true;
  }
  int64_t strides[kMaxDims] = {};
  contiguous_strides(x_dims, strides);
  IndexMap kept, reduced;
  for (int32_t d = 0; d < x_dims.rank(); ++d) {
    IndexMap& m = reduce_dim[d] ? reduced : kept;
    m.extent[m.rank] = x_dims[d];
    m.stride[0][m.rank] = strides[d];
    ++m.rank;
  }
  kept = collapsed(kept, 1);
  reduced = collapsed(reduced, 1);
  const int64_t outputs = kept.volume(), length = reduced.volume();
  if (outputs == 0) return cudaSuccess;
  if (length > kWarpMaxLength) {
    launch_kernel(reduce_kernel<kThreads>, group_blocks(outputs, 1, launch), kThreads, 0, launch, code, x, kept,
                  reduced, length, outputs, y);
  } else {
    launch_kernel(reduce_kernel<32>, group_blocks(outputs, kThreads / 32, launch), kThreads, 0, launch, code, x, kept,
                  reduced, length, outputs, y);
  }
  return cudaGetLastError();
}

cudaError_t generic_softmax(bool log, const float* x, const Dims& x_dims, int32_t axis, float* y,
                            const Launch& launch) {
  if (axis < 0 || axis >= x_dims.rank()) return cudaErrorInvalidValue;
  int64_t outer = 1, inner = 1;
  for (int32_t d = 0; d < axis; ++d) outer *= x_dims[d];
  for (int32_t d = axis + 1; d < x_dims.rank(); ++d) inner *= x_dims[d];
  const int64_t length = x_dims[axis], rows = outer * inner;
  if (rows == 0 || length == 0) return cudaSuccess;
  if (length > kWarpMaxLength) {
    launch_kernel(softmax_kernel<kThreads>, group_blocks(rows, 1, launch), kThreads, 0, launch, log, x, length, inner,
                  rows, y);
  } else {
    launch_kernel(softmax_kernel<32>, group_blocks(rows, kThreads / 32, launch), kThreads, 0, launch, log, x, length,
                  inner, rows, y);
  }
  return cudaGetLastError();
}

cudaError_t generic_layer_norm(const float* x, int64_t rows, int64_t f, const void* w, DataType w_type, const void* b,
                               DataType b_type, float eps, float* y, const Launch& launch) {
  if (rows < 0 || f < 0) return cudaErrorInvalidValue;
  if (rows == 0 || f == 0) return cudaSuccess;
  if (f > kWarpMaxLength) {
    launch_kernel(layer_norm_kernel<kThreads>, group_blocks(rows, 1, launch), kThreads, 0, launch, x, rows, f, w,
                  w_type, b, b_type, eps, y);
  } else {
    launch_kernel(layer_norm_kernel<32>, group_blocks(rows, kThreads / 32, launch), kThreads, 0, launch, x, rows, f, w,
                  w_type, b, b_type, eps, y);
  }
  return cudaGetLastError();
}

}  // namespace gearbox::cuda
