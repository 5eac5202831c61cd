// CUDA generic elementwise and layout ops (generic.cuh).
//
//   unary          x [n] -> y [n]                    binary  a, b (broadcast) -> y
//   where          cond, a, b (broadcast) -> y       cast    x [n] -> y [n] (another type)
//   copy           bytes                             permute / expand / slice / concat part
//   index_select   x, index [n] -> y                 gather  x, index -> y [index dims]
//
// Memory-bound, one element a thread in grid-stride loops; broadcasting and the layout ops
// walk an IndexMap (generic_device.cuh) with its dims collapsed first. Math is f32 with
// CUDA's libm (expf, tanhf, erff ...), as the CPU kernels compute it with theirs (within a
// few ulps). The layout ops move elements as 1-, 2-, 4- or 8-byte words, whatever they hold.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math_constants.h>

#include <cstdint>

#include "devices/cuda/kernels/generic.cuh"
#include "devices/cuda/kernels/generic_device.cuh"

namespace gearbox::cuda {

using ir::BinaryCode;
using ir::UnaryCode;

namespace {

using namespace generic;  // NOLINT(google-build-using-namespace)

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// ---- unary ----------------------------------------------------------------------------------------

__device__ float unary_f32(UnaryCode code, float x, float alpha, float beta) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  constexpr float kSqrtHalf = 0.7071067811865476f;
  switch (code) {
    case UnaryCode::kNeg: return -x;
    case UnaryCode::kExp: return expf(x);
    case UnaryCode::kLog: return logf(x);
    case UnaryCode::kSqrt: return sqrtf(x);
    case UnaryCode::kRsqrt: return 1.0f / sqrtf(x);
    case UnaryCode::kTanh: return tanhf(x);
    case UnaryCode::kSigmoid: return 1.0f / (1.0f + expf(-x));
    case UnaryCode::kSilu: return x / (1.0f + expf(-x));
    case UnaryCode::kGeluErf: return 0.5f * x * (1.0f + erff(x * kSqrtHalf));
    case UnaryCode::kGeluTanh: return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
    case UnaryCode::kRelu: return x > 0.0f ? x : (x == x ? 0.0f : x);  // NaN stays NaN
    case UnaryCode::kAbs: return fabsf(x);
    case UnaryCode::kSin: return sinf(x);
    case UnaryCode::kCos: return cosf(x);
    case UnaryCode::kReciprocal: return 1.0f / x;
    case UnaryCode::kPowScalar: return powf(x, alpha);
    case UnaryCode::kAffine: return __fadd_rn(__fmul_rn(x, alpha), beta);      // no FMA: the CPU rounds twice
    case UnaryCode::kClamp: return x != x ? x : fminf(fmaxf(x, alpha), beta);  // NaN stays NaN
    case UnaryCode::kErf: return erff(x);
    case UnaryCode::kLogicalNot: break;
  }
  return CUDART_NAN_F;
}

/// y[i] = f(x[i]); T: float (every code), int32_t / int64_t (neg, abs), uint8_t (bool: not).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    unary_kernel(UnaryCode code, const T* x, T* y, int64_t n, float alpha, float beta) {
  allow_next_kernel();
  wait_for_prior_kernels();
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const T v = x[i];
    if constexpr (std::is_same_v<T, float>) {
      y[i] = unary_f32(code, v, alpha, beta);
    } else if constexpr (std::is_same_v<T, uint8_t>) {
      y[i] = v != 0 ? 0 : 1;
    } else {
      using U = std::make_unsigned_t<T>;
      const T neg = static_cast<T>(U{0} - static_cast<U>(v));  // wraps at the minimum, as two's complement
      y[i] = code == UnaryCode::kNeg || v < 0 ? neg : v;
    }
  }
}

// ---- binary -----------------------------------------------------------------------------------------

/// a / b truncated toward zero; 0 for a zero divisor; the minimum / -1 wraps to the minimum.
template <typename T>
__device__ __forceinline__ T int_div(T a, T b) {
  using U = std::make_unsigned_t<T>;
  if (b == 0) return 0;
  if (b == -1) return static_cast<T>(U{0} - static_cast<U>(a));
  return a / b;
}

/// a ^ b in integers: repeated squaring (wrapping) for b >= 0; for b < 0 the truncated
/// reciprocal (1 for a = 1, +-1 for a = -1, else 0; 0 for a = 0).
template <typename T>
__device__ __forceinline__ T int_pow(T a, T b) {
  using U = std::make_unsigned_t<T>;
  if (b < 0) {
    if (a == 1) return 1;
    if (a == -1) return (b & 1) != 0 ? -1 : 1;
    return 0;
  }
  U result = 1, base = static_cast<U>(a);
  for (U e = static_cast<U>(b); e != 0; e >>= 1) {
    if ((e & 1u) != 0) result *= base;
    base *= base;
  }
  return static_cast<T>(result);
}

template <typename T>
__device__ __forceinline__ T arithmetic(BinaryCode code, T a, T b) {
  if constexpr (std::is_same_v<T, float>) {
    switch (code) {
      case BinaryCode::kAdd: return a + b;
      case BinaryCode::kSub: return a - b;
      case BinaryCode::kMul: return a * b;
      case BinaryCode::kDiv: return a / b;
      case BinaryCode::kMaximum: return a != a || b != b ? CUDART_NAN_F : fmaxf(a, b);
      case BinaryCode::kMinimum: return a != a || b != b ? CUDART_NAN_F : fminf(a, b);
      case BinaryCode::kPow: return powf(a, b);
      default: return CUDART_NAN_F;
    }
  } else {
    using U = std::make_unsigned_t<T>;
    switch (code) {
      case BinaryCode::kAdd: return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
      case BinaryCode::kSub: return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
      case BinaryCode::kMul: return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
      case BinaryCode::kDiv: return int_div(a, b);
      case BinaryCode::kMaximum: return a > b ? a : b;
      case BinaryCode::kMinimum: return a < b ? a : b;
      case BinaryCode::kPow: return int_pow(a, b);
      default: return 0;
    }
  }
}

template <typename T>
__device__ __forceinline__ uint8_t compare(BinaryCode code, T a, T b) {
  switch (code) {
    case BinaryCode::kEq: return a == b;
    case BinaryCode::kNe: return a != b;
    case BinaryCode::kLt: return a < b;
    case BinaryCode::kLe: return a <= b;
    case BinaryCode::kGt: return a > b;
    case BinaryCode::kGe: return a >= b;
    case BinaryCode::kLogicalAnd: return a != 0 && b != 0;
    case BinaryCode::kLogicalOr: return a != 0 || b != 0;
    default: return 0;
  }
}

/// y[i] = a[m(i)] op b[m(i)] (operands 0 and 1 of m); y is T for arithmetic, bool (one byte)
/// for comparisons and logical ops. T: float, int32_t, int64_t, uint8_t (bool).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    binary_kernel(BinaryCode code, const T* a, const T* b, void* y, IndexMap m, int64_t n) {
  allow_next_kernel();
  wait_for_prior_kernels();
  const bool to_bool = code >= BinaryCode::kEq;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t off[2];
    offsets_at<2>(m, i, off);
    const T va = a[off[0]], vb = b[off[1]];
    if (to_bool) {
      static_cast<uint8_t*>(y)[i] = compare(code, va, vb);
    } else if constexpr (!std::is_same_v<T, uint8_t>) {
      static_cast<T*>(y)[i] = arithmetic(code, va, vb);
    }
  }
}

/// The map over y's dims reading a (operand 0) and b (operand 1), broadcast, collapsed.
IndexMap binary_map(const Dims& a, const Dims& b, const Dims& y) {
  IndexMap m = index_map(y);
  set_broadcast(m, 0, a);
  set_broadcast(m, 1, b);
  return collapsed(m, 2);
}

// ---- where, and the layout ops (elements as words U of 1, 2, 4 or 8 bytes) ---------------------------------------

/// y[i] = cond[m0(i)] ? a[m1(i)] : b[m2(i)].
template <typename U>
__global__ void __launch_bounds__(kThreads)
    where_kernel(const uint8_t* cond, const U* a, const U* b, U* y, IndexMap m, int64_t n) {
  allow_next_kernel();
  wait_for_prior_kernels();
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t off[3];
    offsets_at<3>(m, i, off);
    y[i] = cond[off[0]] != 0 ? a[off[1]] : b[off[2]];
  }
}

/// y[m1(i)] = x[m0(i)] for every index i of m (n of them).
template <typename U>
__global__ void __launch_bounds__(kThreads) copy_map_kernel(const U* x, U* y, IndexMap m, int64_t n) {
  allow_next_kernel();
  wait_for_prior_kernels();
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t off[2];
    offsets_at<2>(m, i, off);
    y[off[1]] = x[off[0]];
  }
}

/// The bytes of x into y: 16 bytes a step when both are 16-byte aligned (kVec), then the tail.
template <bool kVec>
__global__ void __launch_bounds__(kThreads) copy_bytes_kernel(const uint8_t* x, uint8_t* y, int64_t bytes) {
  allow_next_kernel();
  wait_for_prior_kernels();
  int64_t begin = 0;
  if constexpr (kVec) {
    const int64_t chunks = bytes / 16;
    for (int64_t i = global_thread(); i < chunks; i += grid_threads()) {
      reinterpret_cast<uint4*>(y)[i] = reinterpret_cast<const uint4*>(x)[i];
    }
    begin = chunks * 16;
  }
  for (int64_t i = begin + global_thread(); i < bytes; i += grid_threads()) y[i] = x[i];
}

/// index[i] wrapped into [0, extent), or -1 when outside [-extent, extent).
__device__ __forceinline__ int64_t wrapped_index(const void* index, bool i64, int64_t i, int64_t extent) {
  int64_t v = index_at(index, i64, i);
  if (v < 0) v += extent;
  return v >= 0 && v < extent ? v : -1;
}

/// y [outer, n, inner] = x [outer, extent, inner] at rows index[j]; a bad index: 0xff words
/// and the flag.
template <typename U>
__global__ void __launch_bounds__(kThreads)
    index_select_kernel(const U* x, int64_t extent, int64_t inner, const void* index, bool index_i64, int64_t n, U* y,
                        int64_t total, int* error_flag) {
  allow_next_kernel();
  wait_for_prior_kernels();
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const int64_t in = i % inner;
    const int64_t rest = i / inner;
    const int64_t j = rest % n, o = rest / n;
    const int64_t row = wrapped_index(index, index_i64, j, extent);
    if (row < 0) {
      if (error_flag != nullptr) atomicExch(error_flag, 1);
      y[i] = static_cast<U>(~U{0});
      continue;
    }
    y[i] = x[(o * extent + row) * inner + in];
  }
}

/// y[i] = x[m0(i) + wrap(index[i]) * axis_stride] (m over index's dims, x's axis stride 0).
template <typename U>
__global__ void __launch_bounds__(kThreads)
    gather_kernel(const U* x, IndexMap m, int64_t axis_stride, int64_t extent, const void* index, bool index_i64, U* y,
                  int64_t n, int* error_flag) {
  allow_next_kernel();
  wait_for_prior_kernels();
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t off[1];
    offsets_at<1>(m, i, off);
    const int64_t row = wrapped_index(index, index_i64, i, extent);
    if (row < 0) {
      if (error_flag != nullptr) atomicExch(error_flag, 1);
      y[i] = static_cast<U>(~U{0});
      continue;
    }
    y[i] = x[off[0] + row * axis_stride];
  }
}

/// f(U{}) with the word type of `type`'s storage size (1, 2, 4, 8 bytes).
template <typename F>
cudaError_t by_word(DataType type, F&& f) {
  switch (data_type_size(type)) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    case 4: return f(uint32_t{});
    case 8: return f(uint64_t{});
    default: return cudaErrorInvalidValue;
  }
}

/// Launches copy_map_kernel over m (operand 0: x, 1: y) after collapsing it.
cudaError_t copy_map(DataType type, const void* x, void* y, const IndexMap& map, const Launch& launch) {
  const IndexMap m = collapsed(map, 2);
  const int64_t n = m.volume();
  if (n == 0) return cudaSuccess;
  return by_word(type, [&](auto word) {
    using U = decltype(word);
    launch_kernel(copy_map_kernel<U>, blocks_for(n, launch), kThreads, 0, launch, static_cast<const U*>(x),
                  static_cast<U*>(y), m, n);
    return cudaGetLastError();
  });
}

// ---- cast -------------------------------------------------------------------------------------------

/// f rounded to bf16 (nearest even; NaN stays a quiet NaN), as core/half.h does on the host.
__device__ __forceinline__ uint16_t bf16_bits(float f) {
  uint32_t bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

/// f rounded to f16 (nearest even, overflow to inf; NaN as core/half.h writes it).
__device__ __forceinline__ uint16_t f16_bits(float f) {
  const uint32_t bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>(((bits >> 16) & 0x8000u) | 0x7e00u);
  return __half_as_ushort(__float2half_rn(f));
}

/// f truncated toward zero into [lo, hi] of an integer type (NaN: 0). hi_f: the first float
/// above the range (2^31 or 2^63).
__device__ __forceinline__ int64_t saturate(float f, int64_t lo, int64_t hi, float hi_f) {
  if (f != f) return 0;
  if (f >= hi_f) return hi;
  if (f <= static_cast<float>(lo)) return lo;
  return static_cast<int64_t>(truncf(f));
}

__global__ void __launch_bounds__(kThreads)
    cast_kernel(DataType x_type, const void* x, DataType y_type, DataType y_storage, void* y, int64_t n) {
  allow_next_kernel();
  wait_for_prior_kernels();
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    bool is_float = true;
    float f = 0.0f;
    int64_t v = 0;
    switch (x_type) {
      case DataType::kF32: f = static_cast<const float*>(x)[i]; break;
      case DataType::kBF16: f = __bfloat162float(static_cast<const __nv_bfloat16*>(x)[i]); break;
      case DataType::kF16: f = __half2float(static_cast<const __half*>(x)[i]); break;
      case DataType::kI32: v = static_cast<const int32_t*>(x)[i], is_float = false; break;
      case DataType::kI64: v = static_cast<const int64_t*>(x)[i], is_float = false; break;
      case DataType::kBool: v = static_cast<const uint8_t*>(x)[i] != 0 ? 1 : 0, is_float = false; break;
    }
    const float as_float = is_float ? f : static_cast<float>(v);
    switch (y_type) {
      case DataType::kF32: static_cast<float*>(y)[i] = as_float; break;
      case DataType::kBF16: {
        const uint16_t h = bf16_bits(as_float);
        if (y_storage == DataType::kF32) {
          static_cast<float*>(y)[i] = __uint_as_float(static_cast<uint32_t>(h) << 16);
        } else {
          static_cast<uint16_t*>(y)[i] = h;
        }
        break;
      }
      case DataType::kF16: {
        const uint16_t h = f16_bits(as_float);
        if (y_storage == DataType::kF32) {
          static_cast<float*>(y)[i] = __half2float(__ushort_as_half(h));
        } else {
          static_cast<uint16_t*>(y)[i] = h;
        }
        break;
      }
      case DataType::kI32:
        static_cast<int32_t*>(y)[i] =
            static_cast<int32_t>(is_float ? saturate(f, INT32_MIN, INT32_MAX, 2147483648.0f) : v);
        break;
      case DataType::kI64:
        static_cast<int64_t*>(y)[i] = is_float ? saturate(f, INT64_MIN, INT64_MAX, 9223372036854775808.0f) : v;
        break;
      case DataType::kBool: static_cast<uint8_t*>(y)[i] = (is_float ? f != 0.0f : v != 0) ? 1 : 0; break;
    }
  }
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------------------

cudaError_t generic_unary(UnaryCode code, DataType type, const void* x, void* y, int64_t n, float alpha, float beta,
                          const Launch& launch) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const unsigned blocks = blocks_for(n, launch);
  switch (type) {
    case DataType::kF32:
      launch_kernel(unary_kernel<float>, blocks, kThreads, 0, launch, code, static_cast<const float*>(x),
                    static_cast<float*>(y), n, alpha, beta);
      break;
    case DataType::kI32:
      launch_kernel(unary_kernel<int32_t>, blocks, kThreads, 0, launch, code, static_cast<const int32_t*>(x),
                    static_cast<int32_t*>(y), n, alpha, beta);
      break;
    case DataType::kI64:
      launch_kernel(unary_kernel<int64_t>, blocks, kThreads, 0, launch, code, static_cast<const int64_t*>(x),
                    static_cast<int64_t*>(y), n, alpha, beta);
      break;
    case DataType::kBool:
      launch_kernel(unary_kernel<uint8_t>, blocks, kThreads, 0, launch, code, static_cast<const uint8_t*>(x),
                    static_cast<uint8_t*>(y), n, alpha, beta);
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t generic_binary(BinaryCode code, DataType type, const void* a, const Dims& a_dims, const void* b,
                           const Dims& b_dims, void* y, const Dims& y_dims, const Launch& launch) {
  const IndexMap m = binary_map(a_dims, b_dims, y_dims);
  const int64_t n = m.volume();
  if (n == 0) return cudaSuccess;
  const unsigned blocks = blocks_for(n, launch);
  switch (type) {
    case DataType::kF32:
      launch_kernel(binary_kernel<float>, blocks, kThreads, 0, launch, code, static_cast<const float*>(a),
                    static_cast<const float*>(b), y, m, n);
      break;
    case DataType::kI32:
      launch_kernel(binary_kernel<int32_t>, blocks, kThreads, 0, launch, code, static_cast<const int32_t*>(a),
                    static_cast<const int32_t*>(b), y, m, n);
      break;
    case DataType::kI64:
      launch_kernel(binary_kernel<int64_t>, blocks, kThreads, 0, launch, code, static_cast<const int64_t*>(a),
                    static_cast<const int64_t*>(b), y, m, n);
      break;
    case DataType::kBool:
      if (code < BinaryCode::kEq) return cudaErrorInvalidValue;  // no arithmetic on bool
      launch_kernel(binary_kernel<uint8_t>, blocks, kThreads, 0, launch, code, static_cast<const uint8_t*>(a),
                    static_cast<const uint8_t*>(b), y, m, n);
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t generic_where(const void* cond, const Dims& cond_dims, DataType type, const void* a, const Dims& a_dims,
                          const void* b, const Dims& b_dims, void* y, const Dims& y_dims, const Launch& launch) {
  IndexMap map = index_map(y_dims);
  set_broadcast(map, 0, cond_dims);
  set_broadcast(map, 1, a_dims);
  set_broadcast(map, 2, b_dims);
  const IndexMap m = collapsed(map, 3);
  const int64_t n = m.volume();
  if (n == 0) return cudaSuccess;
  return by_word(type, [&](auto word) {
    using U = decltype(word);
    launch_kernel(where_kernel<U>, blocks_for(n, launch), kThreads, 0, launch, static_cast<const uint8_t*>(cond),
                  static_cast<const U*>(a), static_cast<const U*>(b), static_cast<U*>(y), m, n);
    return cudaGetLastError();
  });
}

cudaError_t generic_cast(DataType x_type, const void* x, DataType y_type, DataType y_storage, void* y, int64_t n,
                         const Launch& launch) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  launch_kernel(cast_kernel, blocks_for(n, launch), kThreads, 0, launch, x_type, x, y_type, y_storage, y, n);
  return cudaGetLastError();
}

cudaError_t generic_copy(const void* x, void* y, int64_t bytes, const Launch& launch) {
  if (bytes < 0) return cudaErrorInvalidValue;
  if (bytes == 0) return cudaSuccess;
  const auto* src = static_cast<const uint8_t*>(x);
  auto* dst = static_cast<uint8_t*>(y);
  if (aligned16(x) && aligned16(y)) {
    launch_kernel(copy_bytes_kernel<true>, blocks_for(bytes / 16 + 1, launch), kThreads, 0, launch, src, dst, bytes);
  } else {
    launch_kernel(copy_bytes_kernel<false>, blocks_for(bytes, launch), kThreads, 0, launch, src, dst, bytes);
  }
  return cudaGetLastError();
}

cudaError_t generic_permute(DataType type, const void* x, const Dims& x_dims, std::span<const int64_t> perm, void* y,
                            const Dims& y_dims, const Launch& launch) {
  if (static_cast<int32_t>(perm.size()) != x_dims.rank() || y_dims.rank() != x_dims.rank()) {
    return cudaErrorInvalidValue;
  }
  int64_t x_strides[kMaxDims] = {};
  contiguous_strides(x_dims, x_strides);
  IndexMap m = index_map(y_dims);
  for (int32_t d = 0; d < m.rank; ++d) {
    if (perm[static_cast<size_t>(d)] < 0 || perm[static_cast<size_t>(d)] >= x_dims.rank()) {
      return cudaErrorInvalidValue;
    }
    m.stride[0][d] = x_strides[perm[static_cast<size_t>(d)]];
  }
  set_contiguous(m, 1);
  return copy_map(type, x, y, m, launch);
}

cudaError_t generic_expand(DataType type, const void* x, const Dims& x_dims, void* y, const Dims& y_dims,
                           const Launch& launch) {
  if (y_dims.rank() < x_dims.rank()) return cudaErrorInvalidValue;
  IndexMap m = index_map(y_dims);
  set_broadcast(m, 0, x_dims);
  set_contiguous(m, 1);
  return copy_map(type, x, y, m, launch);
}

cudaError_t generic_slice(DataType type, const void* x, const Dims& x_dims, int32_t axis, int64_t start, int64_t step,
                          void* y, const Dims& y_dims, const Launch& launch) {
  if (axis < 0 || axis >= x_dims.rank() || y_dims.rank() != x_dims.rank() || step < 1) return cudaErrorInvalidValue;
  int64_t x_strides[kMaxDims] = {};
  contiguous_strides(x_dims, x_strides);
  IndexMap m = index_map(y_dims);
  for (int32_t d = 0; d < m.rank; ++d) m.stride[0][d] = x_strides[d] * (d == axis ? step : 1);
  set_contiguous(m, 1);
  const auto* base =
      static_cast<const uint8_t*>(x) + start * x_strides[axis] * static_cast<int64_t>(data_type_size(type));
  return copy_map(type, base, y, m, launch);
}

cudaError_t generic_concat_part(DataType type, const void* x, const Dims& x_dims, int32_t axis, int64_t at, void* y,
                                const Dims& y_dims, const Launch& launch) {
  if (axis < 0 || axis >= y_dims.rank() || y_dims.rank() != x_dims.rank()) return cudaErrorInvalidValue;
  int64_t y_strides[kMaxDims] = {};
  contiguous_strides(y_dims, y_strides);
  IndexMap m = index_map(x_dims);
  set_contiguous(m, 0);
  for (int32_t d = 0; d < m.rank; ++d) m.stride[1][d] = y_strides[d];
  auto* base = static_cast<uint8_t*>(y) + at * y_strides[axis] * static_cast<int64_t>(data_type_size(type));
  return copy_map(type, x, base, m, launch);
}

cudaError_t generic_index_select(DataType type, const void* x, const Dims& x_dims, int32_t axis, const void* index,
                                 bool index_i64, int64_t n, void* y, const Dims& y_dims, int* error_flag,
                                 const Launch& launch) {
  if (axis < 0 || axis >= x_dims.rank() || n < 0) return cudaErrorInvalidValue;
  int64_t inner = 1;
  for (int32_t d = axis + 1; d < x_dims.rank(); ++d) inner *= x_dims[d];
  const int64_t total = y_dims.volume();
  if (total == 0) return cudaSuccess;
  return by_word(type, [&](auto word) {
    using U = decltype(word);
    launch_kernel(index_select_kernel<U>, blocks_for(total, launch), kThreads, 0, launch, static_cast<const U*>(x),
                  x_dims[axis], inner, index, index_i64, n, static_cast<U*>(y), total, error_flag);
    return cudaGetLastError();
  });
}

cudaError_t generic_gather(DataType type, const void* x, const Dims& x_dims, int32_t axis, const void* index,
                           bool index_i64, const Dims& index_dims, void* y, int* error_flag, const Launch& launch) {
  if (axis < 0 || axis >= x_dims.rank() || index_dims.rank() != x_dims.rank()) return cudaErrorInvalidValue;
  int64_t x_strides[kMaxDims] = {};
  contiguous_strides(x_dims, x_strides);
  IndexMap m = index_map(index_dims);
  for (int32_t d = 0; d < m.rank; ++d) m.stride[0][d] = d == axis ? 0 : x_strides[d];
  m = collapsed(m, 1);  // the same offset for every linear index i, at which index is read
  const int64_t n = m.volume();
  if (n == 0) return cudaSuccess;
  return by_word(type, [&](auto word) {
    using U = decltype(word);
    launch_kernel(gather_kernel<U>, blocks_for(n, launch), kThreads, 0, launch, static_cast<const U*>(x), m,
                  x_strides[axis], x_dims[axis], index, index_i64, static_cast<U*>(y), n, error_flag);
    return cudaGetLastError();
  });
}

}  // namespace gearbox::cuda
