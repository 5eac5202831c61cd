// CUDA row gathers and elementwise ops: embedding lookup, the gated activations, residual
// add, bias add, last-position copy and the f32 -> W conversion that feeds the GEMM.
//
//   gelu/silu_mul  gate, up [n] -> out [n]           add  a, b [n] -> out [n]
//   add_bias_rows  y [rows, n] += bias [n]           take_last  x [B, T, F] -> y [B, F]
//   split_columns  y [rows, sum n_i] -> out_i [rows, n_i] (+ bias_i)
//   convert_f32_to x [n] f32 -> y [n] W
//   gated_activation_to  gate, up [n] f32 -> out [n] W (gelu/silu_mul, then the conversion)
//   gated_activation_rows  gate, up [rows, n] W with row stride ld -> out [rows, n] f32 or W
//
// All memory-bound: float4 (16-byte) accesses when every pointer is 16-byte aligned, with a
// scalar tail; grid-stride loops over at most kBlocksPerSm blocks per SM of the device. Expressions are the CPU
// kernels' (devices/cpu/kernels_elementwise.cpp), with CUDA's tanhf / expf.

#include <math_constants.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "devices/cuda/device_math.h"
#include "devices/cuda/kernels/elementwise.cuh"
#include "devices/cuda/launch.h"

namespace gearbox::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kBlocksPerSm = 16;  // a grid-stride launch's most blocks: the SMs filled many times over

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

/// Blocks of a grid-stride launch over `items` (one a thread): enough for every item, at
/// least 1 and at most kBlocksPerSm per SM.
unsigned blocks_for(int64_t items, const Launch& launch) {
  const int64_t most = std::max<int64_t>(kBlocksPerSm * launch.limits->sm_count, 1);
  return static_cast<unsigned>(std::clamp<int64_t>((items + kThreads - 1) / kThreads, 1, most));
}

__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// ---- elementwise binary ops -------------------------------------------------------------------

/// Four W values in one 4 * sizeof(W)-byte store.
template <typename W>
struct alignas(4 * sizeof(W)) Pack4 {
  W v[4];
};

struct GeluTanhMul {
  __device__ float operator()(float g, float u) const { return gelu_tanh_times(g, u); }
};

struct SiluMul {
  __device__ float operator()(float g, float u) const { return silu_times(g, u); }
};

struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};

/// out[i] = W(op(a[i], b[i])) (W = float: the op alone; bf16 / f16: rounded to nearest even,
/// as convert_f32_to would); kVec: float4 loads over the first n / 4 * 4 elements and
/// 4-element stores, then the tail. Each element is read and written by one thread, so out
/// may alias a or b.
template <typename Op, bool kVec, typename W>
__global__ void __launch_bounds__(kThreads) binary_kernel(const float* a, const float* b, W* out, int64_t n, Op op) {
  allow_next_kernel();
  wait_for_prior_kernels();
  int64_t scalar_begin = 0;
  if constexpr (kVec) {
    const int64_t n4 = n / 4;
    for (int64_t i = global_thread(); i < n4; i += grid_threads()) {
      const float4 x = reinterpret_cast<const float4*>(a)[i];
      const float4 y = reinterpret_cast<const float4*>(b)[i];
      Pack4<W> p;
      convert_one(op(x.x, y.x), &p.v[0]);
      convert_one(op(x.y, y.y), &p.v[1]);
      convert_one(op(x.z, y.z), &p.v[2]);
      convert_one(op(x.w, y.w), &p.v[3]);
      reinterpret_cast<Pack4<W>*>(out)[i] = p;
    }
    scalar_begin = n4 * 4;
  }
  for (int64_t i = scalar_begin + global_thread(); i < n; i += grid_threads()) convert_one(op(a[i], b[i]), &out[i]);
}

template <typename Op, typename W = float>
cudaError_t launch_binary(const float* a, const float* b, W* out, int64_t n, const Launch& launch) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (aligned16(a) && aligned16(b) && reinterpret_cast<uintptr_t>(out) % alignof(Pack4<W>) == 0) {
    launch_kernel(binary_kernel<Op, true, W>, blocks_for(n / 4 + 1, launch), kThreads, 0, launch, a, b, out, n, Op{});
  } else {
    launch_kernel(binary_kernel<Op, false, W>, blocks_for(n, launch), kThreads, 0, launch, a, b, out, n, Op{});
  }
  return cudaGetLastError();
}

/// out[r * n + c] = Out(op(gate[r * ld + c], up[r * ld + c])) over rows x n, gate and up
/// 16-bit (W). kVec: n % 8 == 0, ld % 8 == 0 and every pointer 16-byte aligned: one 16-byte
/// load of 8 elements from each input, 8 outputs stored at once; else one element a thread.
template <typename Op, bool kVec, typename W, typename Out>
__global__ void __launch_bounds__(kThreads)
    gated_rows_kernel(const W* gate, const W* up, int64_t ld, Out* out, int64_t rows, int64_t n, Op op) {
  allow_next_kernel();
  wait_for_prior_kernels();
  if constexpr (kVec) {
    const int64_t chunks = n / 8;
    for (int64_t i = global_thread(); i < rows * chunks; i += grid_threads()) {
      const int64_t r = i / chunks, c = (i - r * chunks) * 8;
      const uint4 g = *reinterpret_cast<const uint4*>(gate + r * ld + c);
      const uint4 u = *reinterpret_cast<const uint4*>(up + r * ld + c);
      const uint32_t gw[4] = {g.x, g.y, g.z, g.w}, uw[4] = {u.x, u.y, u.z, u.w};
      float y[8];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 gf = unpack2(gw[q], W{}), uf = unpack2(uw[q], W{});
        y[2 * q] = op(gf.x, uf.x);
        y[2 * q + 1] = op(gf.y, uf.y);
      }
      Out* o = out + r * n + c;
      if constexpr (std::is_same_v<Out, float>) {
        reinterpret_cast<float4*>(o)[0] = make_float4(y[0], y[1], y[2], y[3]);
        reinterpret_cast<float4*>(o)[1] = make_float4(y[4], y[5], y[6], y[7]);
      } else {
        Pack4<Out> lo, hi;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          convert_one(y[q], &lo.v[q]);
          convert_one(y[4 + q], &hi.v[q]);
        }
        reinterpret_cast<Pack4<Out>*>(o)[0] = lo;
        reinterpret_cast<Pack4<Out>*>(o)[1] = hi;
      }
    }
  } else {
    for (int64_t i = global_thread(); i < rows * n; i += grid_threads()) {
      const int64_t r = i / n, c = i - r * n;
      convert_one(op(to_f32(gate[r * ld + c]), to_f32(up[r * ld + c])), &out[i]);
    }
  }
}

template <typename Op, typename W, typename Out>
cudaError_t launch_gated_rows(const W* gate, const W* up, int64_t ld, Out* out, int64_t rows, int64_t n,
                              const Launch& launch) {
  if (rows < 0 || n < 0 || ld < n) return cudaErrorInvalidValue;
  if (rows == 0 || n == 0) return cudaSuccess;
  if (n % 8 == 0 && ld % 8 == 0 && aligned16(gate) && aligned16(up) && aligned16(out)) {
    launch_kernel(gated_rows_kernel<Op, true, W, Out>, blocks_for(rows * n / 8, launch), kThreads, 0, launch, gate, up,
                  ld, out, rows, n, Op{});
  } else {
    launch_kernel(gated_rows_kernel<Op, false, W, Out>, blocks_for(rows * n, launch), kThreads, 0, launch, gate, up, ld,
                  out, rows, n, Op{});
  }
  return cudaGetLastError();
}

// ---- bias, last position ------------------------------------------------------------------------

/// y[r, c] += bias[c] over y [rows, n]. grid-stride over rows * n.
__global__ void __launch_bounds__(kThreads) add_bias_rows_kernel(float* y, const float* bias, int64_t rows, int64_t n) {
  allow_next_kernel();
  wait_for_prior_kernels();
  for (int64_t i = global_thread(); i < rows * n; i += grid_threads()) y[i] += bias[i % n];
}

/// y[b, f] = x[b, T - 1, f]. grid-stride over batch * F.
__global__ void __launch_bounds__(kThreads)
    take_last_kernel(const float* x, float* y, int64_t batch, int64_t T, int64_t F) {
  allow_next_kernel();
  wait_for_prior_kernels();
  for (int64_t i = global_thread(); i < batch * F; i += grid_threads()) {
    const int64_t b = i / F;
    y[i] = x[(b * T + T - 1) * F + i % F];
  }
}

/// out_i[r, c] = y[r, first_i + c] (+ bias_i[c]) for the targets of `split`. kVec: every n_i
/// % 4 == 0 and every pointer 16-byte aligned, so a float4 of y never spans two targets.
/// grid-stride over rows * (total / E) chunks of E = 4 or 1 floats.
template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    split_columns_kernel(const float* y, int64_t rows, const ColumnSplit split) {
  allow_next_kernel();
  wait_for_prior_kernels();
  constexpr int E = kVec ? 4 : 1;
  int64_t total = 0;
#pragma unroll
  for (int i = 0; i < kColumnSplitMaxTargets; ++i) total += i < split.count ? split.targets[i].n : 0;
  const int64_t row_chunks = total / E;
  for (int64_t e = global_thread(); e < rows * row_chunks; e += grid_threads()) {
    const int64_t r = e / row_chunks;
    int64_t c = (e % row_chunks) * E;
    // The target holding column c; constant indices only, so `split` stays in the param space.
    ColumnTarget t = split.targets[0];
#pragma unroll
    for (int i = 1; i < kColumnSplitMaxTargets; ++i) {
      if (i < split.count && c >= t.n) {
        c -= t.n;
        t = split.targets[i];
      }
    }
    float* dst = t.out + r * t.n + c;
    if constexpr (kVec) {
      float4 v = reinterpret_cast<const float4*>(y)[e];
      if (t.bias != nullptr) {
        const float4 b = *reinterpret_cast<const float4*>(t.bias + c);
        v = make_float4(v.x + b.x, v.y + b.y, v.z + b.z, v.w + b.w);
      }
      *reinterpret_cast<float4*>(dst) = v;
    } else {
      *dst = y[e] + (t.bias != nullptr ? t.bias[c] : 0.0f);
    }
  }
}

// ---- conversion ----------------------------------------------------------------------------------

/// y[i] = W(x[i]); kVec: float4 loads and 4-element stores, then the tail.
template <typename W, bool kVec>
__global__ void __launch_bounds__(kThreads) convert_kernel(const float* x, W* y, int64_t n) {
  allow_next_kernel();
  wait_for_prior_kernels();
  int64_t scalar_begin = 0;
  if constexpr (kVec) {
    const int64_t n4 = n / 4;
    for (int64_t i = global_thread(); i < n4; i += grid_threads()) {
      const float4 v = reinterpret_cast<const float4*>(x)[i];
      Pack4<W> p;
      convert_one(v.x, &p.v[0]);
      convert_one(v.y, &p.v[1]);
      convert_one(v.z, &p.v[2]);
      convert_one(v.w, &p.v[3]);
      reinterpret_cast<Pack4<W>*>(y)[i] = p;
    }
    scalar_begin = n4 * 4;
  }
  for (int64_t i = scalar_begin + global_thread(); i < n; i += grid_threads()) convert_one(x[i], &y[i]);
}

}  // namespace

// ---- exported entries ---------------------------------------------------------------------------------

cudaError_t gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n, const Launch& launch) {
  return launch_binary<GeluTanhMul>(gate, up, out, n, launch);
}

cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, const Launch& launch) {
  return launch_binary<SiluMul>(gate, up, out, n, launch);
}

cudaError_t add(const float* a, const float* b, float* out, int64_t n, const Launch& launch) {
  return launch_binary<Add>(a, b, out, n, launch);
}

cudaError_t split_columns(const float* y, int64_t rows, const ColumnSplit& split, const Launch& launch) {
  if (rows < 0 || split.count < 1 || split.count > kColumnSplitMaxTargets) return cudaErrorInvalidValue;
  int64_t total = 0;
  bool vec = aligned16(y);
  for (int i = 0; i < split.count; ++i) {
    const ColumnTarget& t = split.targets[i];
    if (t.n < 1 || t.out == nullptr) return cudaErrorInvalidValue;
    total += t.n;
    vec = vec && t.n % 4 == 0 && aligned16(t.out) && (t.bias == nullptr || aligned16(t.bias));
  }
  if (rows == 0) return cudaSuccess;
  if (vec) {
    launch_kernel(split_columns_kernel<true>, blocks_for(rows * total / 4, launch), kThreads, 0, launch, y, rows,
                  split);
  } else {
    launch_kernel(split_columns_kernel<false>, blocks_for(rows * total, launch), kThreads, 0, launch, y, rows, split);
  }
  return cudaGetLastError();
}

cudaError_t add_bias_rows(float* y, const float* bias, int64_t rows, int64_t n, const Launch& launch) {
  if (rows < 0 || n < 0) return cudaErrorInvalidValue;
  if (rows == 0 || n == 0) return cudaSuccess;
  launch_kernel(add_bias_rows_kernel, blocks_for(rows * n, launch), kThreads, 0, launch, y, bias, rows, n);
  return cudaGetLastError();
}

cudaError_t take_last(const float* x, float* y, int64_t batch, int64_t T, int64_t F, const Launch& launch) {
  if (batch < 0 || T < 1 || F < 0) return cudaErrorInvalidValue;
  if (batch == 0 || F == 0) return cudaSuccess;
  launch_kernel(take_last_kernel, blocks_for(batch * F, launch), kThreads, 0, launch, x, y, batch, T, F);
  return cudaGetLastError();
}

template <typename W>
cudaError_t convert_f32_to(const float* x, W* y, int64_t n, const Launch& launch) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (aligned16(x) && reinterpret_cast<uintptr_t>(y) % alignof(Pack4<W>) == 0) {
    launch_kernel(convert_kernel<W, true>, blocks_for(n / 4 + 1, launch), kThreads, 0, launch, x, y, n);
  } else {
    launch_kernel(convert_kernel<W, false>, blocks_for(n, launch), kThreads, 0, launch, x, y, n);
  }
  return cudaGetLastError();
}

namespace {
__global__ void spin_kernel(uint64_t nanoseconds) {
  const uint64_t start = global_ns();
  while (global_ns() - start < nanoseconds) {
  }
}
}  // namespace

cudaError_t spin(int64_t microseconds, const Launch& launch) {
  if (microseconds < 0) return cudaErrorInvalidValue;
  // A plain launch (<<<>>>): nothing before it is waited for early, nothing after it starts early.
  spin_kernel<<<1, 1, 0, launch.stream>>>(static_cast<uint64_t>(microseconds) * 1000u);
  return cudaGetLastError();
}

template <typename W>
cudaError_t gated_activation_to(const float* gate, const float* up, GatedActivation activation, W* out, int64_t n,
                                const Launch& launch) {
  switch (activation) {
    case GatedActivation::kGeluTanh: return launch_binary<GeluTanhMul>(gate, up, out, n, launch);
    case GatedActivation::kSilu: return launch_binary<SiluMul>(gate, up, out, n, launch);
  }
  return cudaErrorInvalidValue;
}

template <typename W, typename Out>
cudaError_t gated_activation_rows(const W* gate, const W* up, int64_t ld, GatedActivation activation, Out* out,
                                  int64_t rows, int64_t n, const Launch& launch) {
  switch (activation) {
    case GatedActivation::kGeluTanh: return launch_gated_rows<GeluTanhMul>(gate, up, ld, out, rows, n, launch);
    case GatedActivation::kSilu: return launch_gated_rows<SiluMul>(gate, up, ld, out, rows, n, launch);
  }
  return cudaErrorInvalidValue;
}

#define GEARBOX_INSTANTIATE_GATED_ROWS(W)                                                                              \
  template cudaError_t gated_activation_rows<W, float>(const W*, const W*, int64_t, GatedActivation, float*, int64_t,  \
                                                       int64_t, const Launch&);                                        \
  template cudaError_t gated_activation_rows<W, W>(const W*, const W*, int64_t, GatedActivation, W*, int64_t, int64_t, \
                                                   const Launch&);
GEARBOX_INSTANTIATE_GATED_ROWS(__nv_bfloat16)
GEARBOX_INSTANTIATE_GATED_ROWS(__half)
#undef GEARBOX_INSTANTIATE_GATED_ROWS

#define GEARBOX_INSTANTIATE_ELEMENTWISE(W)                                          \
  template cudaError_t convert_f32_to<W>(const float*, W*, int64_t, const Launch&); \
  template cudaError_t gated_activation_to<W>(const float*, const float*, GatedActivation, W*, int64_t, const Launch&);
GEARBOX_INSTANTIATE_ELEMENTWISE(float)
GEARBOX_INSTANTIATE_ELEMENTWISE(__nv_bfloat16)
GEARBOX_INSTANTIATE_ELEMENTWISE(__half)
#undef GEARBOX_INSTANTIATE_ELEMENTWISE

}  // namespace gearbox::cuda
