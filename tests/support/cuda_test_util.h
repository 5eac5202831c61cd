// Shared helpers of the CUDA kernel tests (tests/devices/cuda/*_test.cpp, one file per kernel
// family, one executable cuda_kernels_test): the CUDA kernels (devices/cuda/kernels/,
// gemm_cublaslt.h) against the CPU kernels (devices/cpu/kernels.h) as the reference, over
// the cases of support/cuda_kernel_cases.h, awkward shapes and every weight dtype.
//
// bf16 / f16 weights are compared with the CPU kernel run on the same rounded weights (as
// f32), so tolerances stay those of f32. Every output buffer is poisoned with NaN before a
// launch and followed by 64 sentinel floats; NaN / Inf left in an output, a changed
// sentinel or a set error flag fails, and every failure names the case, the max error and
// the first mismatch (GEARBOX_TEST_VERBOSE=1 prints the max error of every comparison).
// Label `gpu`: every test skips where there is no CUDA device.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "core/half.h"
#include "devices/cpu/kernels.h"
#include "devices/cuda/gemm_cublaslt.h"
#include "devices/cuda/kernels/decode_attention.cuh"
#include "devices/cuda/kernels/elementwise.cuh"
#include "devices/cuda/kernels/embedding.cuh"
#include "devices/cuda/kernels/gemv.cuh"
#include "devices/cuda/kernels/kv_cache.cuh"
#include "devices/cuda/kernels/norm_rope.cuh"
#include "devices/cuda/kernels/prefill_attention.cuh"
#include "devices/cuda/kernels/prefill_attention_mma.cuh"
#include "devices/cuda/kernels/residual_norm.cuh"

#include "support/cuda_kernel_cases.h"

namespace gearbox::cuda_test {

// ---- device helpers ---------------------------------------------------------------------------

inline constexpr int64_t kGuard = 64;
inline constexpr float kSentinel = -12345.5f;
inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// Throws (gtest reports it as a failure naming the call) when a CUDA call fails.
inline void cuda_check(cudaError_t err, const char* call) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(err));
}
#define CUDA_CHECK(call) cuda_check((call), #call)

inline bool cuda_device_present() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return count > 0;
}

/// n elements of T in device memory followed by kGuard guard elements (the float sentinel,
/// or 0x5a bytes for other types) that no kernel may touch.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<T>& host) : n_(static_cast<int64_t>(host.size())) {
    CUDA_CHECK(cudaMalloc(&ptr_, bytes(n_ + kGuard)));
    std::vector<T> guard(static_cast<size_t>(kGuard), sentinel());
    CUDA_CHECK(cudaMemcpy(ptr_ + n_, guard.data(), bytes(kGuard), cudaMemcpyHostToDevice));
    upload(host);
  }
  /// An output: n NaN-poisoned elements (or 0xff bytes).
  static DeviceBuffer poisoned(int64_t n) { return DeviceBuffer(std::vector<T>(static_cast<size_t>(n), poison())); }
  DeviceBuffer(DeviceBuffer&& other) noexcept : ptr_(other.ptr_), n_(other.n_) { other.ptr_ = nullptr; }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  ~DeviceBuffer() {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
  }

  T* get() const { return ptr_; }
  int64_t size() const { return n_; }
  void upload(const std::vector<T>& host) {
    if (static_cast<int64_t>(host.size()) != n_) throw std::runtime_error("upload: size mismatch");
    if (n_ > 0) CUDA_CHECK(cudaMemcpy(ptr_, host.data(), bytes(n_), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(static_cast<size_t>(n_));
    if (n_ > 0) CUDA_CHECK(cudaMemcpy(host.data(), ptr_, bytes(n_), cudaMemcpyDeviceToHost));
    return host;
  }
  bool guard_intact() const {
    std::vector<T> guard(static_cast<size_t>(kGuard));
    CUDA_CHECK(cudaMemcpy(guard.data(), ptr_ + n_, bytes(kGuard), cudaMemcpyDeviceToHost));
    const T s = sentinel();
    return std::all_of(guard.begin(), guard.end(), [&](const T& v) { return std::memcmp(&v, &s, sizeof(T)) == 0; });
  }

 private:
  static size_t bytes(int64_t n) { return static_cast<size_t>(n) * sizeof(T); }
  static T pattern(unsigned char byte, float f) {
    if constexpr (std::is_same_v<T, float>) return f;
    T v;
    std::memset(&v, byte, sizeof(T));
    return v;
  }
  static T sentinel() { return pattern(0x5a, kSentinel); }
  static T poison() { return pattern(0xff, kNaN); }

  T* ptr_ = nullptr;
  int64_t n_ = 0;
};

using Floats = DeviceBuffer<float>;

// ---- comparison -----------------------------------------------------------------------------------

using kernel_cases::Tolerance;

/// got[i] within atol + rtol * |want[i]| + slack[i] (slack: per-element allowance for long
/// f32 reductions, empty = none); NaN / Inf in got fails. Names the case, the max error,
/// the first mismatch and how many elements failed.
inline ::testing::AssertionResult close(const std::string& what, const std::vector<float>& got,
                                        const std::vector<float>& want, Tolerance tol = {},
                                        const std::vector<double>& slack = {}) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << what << ": " << got.size() << " values, want " << want.size();
  }
  size_t bad = 0;
  size_t first_bad = 0;
  size_t worst = 0;
  double max_err = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    const double bound = tol.atol + tol.rtol * std::abs(want[i]) + (slack.empty() ? 0.0 : slack[i]);
    if (!std::isfinite(got[i]) || !(err <= bound)) {
      if (bad++ == 0) first_bad = i;
    }
    if (!(err <= max_err)) {  // NaN counts as the largest error
      max_err = err;
      worst = i;
    }
  }
  std::ostringstream summary;
  summary << what << ": max error " << max_err << " at [" << worst << "] (" << got.size() << " values)";
  // GEARBOX_TEST_VERBOSE=1 prints every comparison, to review the margins.
  static const bool verbose = std::getenv("GEARBOX_TEST_VERBOSE") != nullptr;
  if (verbose) std::printf("%s%s\n", bad == 0 ? "[ok] " : "[BAD] ", summary.str().c_str());
  if (bad == 0) return ::testing::AssertionSuccess() << summary.str();
  return ::testing::AssertionFailure() << summary.str() << "; " << bad << " out of tolerance, first [" << first_bad
                                       << "] got " << got[first_bad] << " want " << want[first_bad];
}

inline ::testing::AssertionResult all_nan(const std::string& what, const std::vector<float>& v, size_t begin,
                                          size_t end) {
  for (size_t i = begin; i < end; ++i) {
    if (!std::isnan(v[i])) return ::testing::AssertionFailure() << what << ": [" << i << "] = " << v[i] << ", want NaN";
  }
  return ::testing::AssertionSuccess();
}

/// Allowance for an f32 sum of products in another order: ~2 ulps of sum |x_k w_k| per
/// element, about 10 standard deviations of the rounding walk of two summation orders.
inline constexpr double kReductionSlack = 2.5e-7;

/// The allowance for each [m, n] of x [M, K] * w [N, K]^T: (kReductionSlack + extra) of
/// sum_k |x w| (extra: a kernel's own relative error, as mma_extra_slack's) and 1e-6.
inline std::vector<double> reduction_slack(const std::vector<float>& x, const std::vector<float>& w, int64_t M,
                                           int64_t N, int64_t K, double extra = 0.0) {
  std::vector<double> slack(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += std::abs(static_cast<double>(x[m * K + k]) * w[n * K + k]);
      slack[m * N + n] = (kReductionSlack + extra) * s + 1e-6;
    }
  }
  return slack;
}

/// The tensor-core GEMV's relative error beyond another summation order (reduction_slack's
/// extra): x is carried as two bf16 terms (within 2^-17 of x), and the tensor cores' f32
/// accumulation may truncate rather than round each time a tile's products are added (at most
/// 2^-23 of the running sum, twice a 16-column step: hi and lo).
inline double mma_extra_slack(int64_t K) {
  return std::ldexp(1.0, -17) + std::ldexp(1.0, -23) * 2.0 * static_cast<double>((K + 15) / 16);
}

/// Allowance for act(gate) * up where gate and up are x * wg^T and x * wu^T [M, N]: the two
/// reductions' allowances (reduction_slack with `extra`) carried through the product
/// (|act'| <= 1.13).
inline std::vector<double> gated_slack(const std::vector<float>& x, const std::vector<float>& wg,
                                       const std::vector<float>& wu, const std::vector<float>& gate,
                                       const std::vector<float>& up, int64_t M, int64_t N, int64_t K,
                                       double extra = 0.0) {
  const std::vector<double> sg = reduction_slack(x, wg, M, N, K, extra);
  const std::vector<double> su = reduction_slack(x, wu, M, N, K, extra);
  std::vector<double> slack(sg.size());
  for (size_t i = 0; i < slack.size(); ++i) {
    slack[i] = 1.2 * (sg[i] * (std::abs(up[i]) + su[i]) + su[i] * std::abs(gate[i]));
  }
  return slack;
}

/// y[M, N] = x w^T (+ b) on the CPU for any M: cpu::linear_small_m over runs of at most its
/// kSmallMMaxRows rows.
inline void cpu_linear(const std::vector<float>& x, const std::vector<float>& w, const float* bias, float* y, int64_t M,
                       int64_t N, int64_t K) {
  for (int64_t m0 = 0; m0 < M; m0 += cpu::kSmallMMaxRows) {
    const int64_t rows = std::min<int64_t>(cpu::kSmallMMaxRows, M - m0);
    cpu::linear_small_m(x.data() + m0 * K, w.data(), bias, y + m0 * N, rows, N, K);
  }
}

// ---- data ------------------------------------------------------------------------------------------

inline std::vector<float> random_floats(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

using kernel_cases::kWeightTypes;

/// Weights rounded to `type`: the f32 values the CPU reference uses and the device bytes.
struct Weights {
  std::vector<float> rounded;
  std::vector<uint8_t> bytes;
};

inline float round_to(DataType type, float v) {
  if (type == DataType::kBF16) return internal::bf16_to_f32(internal::f32_to_bf16(v));
  if (type == DataType::kF16) return internal::f16_to_f32(internal::f32_to_f16(v));
  return v;
}

/// `lead` extra zero elements come first, so that the weights start at a misaligned address.
inline Weights make_weights(DataType type, const std::vector<float>& values, int lead = 0) {
  Weights w;
  const size_t elem = data_type_size(type);
  w.bytes.resize((values.size() + static_cast<size_t>(lead)) * elem);
  for (size_t i = 0; i < values.size(); ++i) {
    w.rounded.push_back(round_to(type, values[i]));
    uint8_t* dst = w.bytes.data() + (i + static_cast<size_t>(lead)) * elem;
    if (type == DataType::kF32) {
      std::memcpy(dst, &values[i], 4);
    } else {
      const uint16_t h = type == DataType::kBF16 ? internal::f32_to_bf16(values[i]) : internal::f32_to_f16(values[i]);
      std::memcpy(dst, &h, 2);
    }
  }
  return w;
}

/// Calls f(W{}) with the CUDA weight type of `type`.
template <typename F>
cudaError_t with_weight_type(DataType type, F&& f) {
  if (type == DataType::kBF16) return f(__nv_bfloat16{});
  if (type == DataType::kF16) return f(__half{});
  return f(0.0f);
}

template <typename W>
const W* weight_ptr(const DeviceBuffer<uint8_t>& buf, int lead) {
  return reinterpret_cast<const W*>(buf.get()) + lead;
}

inline std::string shape(std::initializer_list<std::pair<const char*, int64_t>> dims) {
  std::ostringstream s;
  for (const auto& [name, v] : dims) s << name << "=" << v << " ";
  return s.str();
}

/// Token ids or positions as the kernels read them.
struct Indices {
  Indices(bool use_i64, const std::vector<int64_t>& values)
      : i64(use_i64), buf64(values), buf32(std::vector<int32_t>(values.begin(), values.end())) {}
  const void* get() const { return i64 ? static_cast<const void*>(buf64.get()) : buf32.get(); }
  bool i64;
  DeviceBuffer<int64_t> buf64;
  DeviceBuffer<int32_t> buf32;
};

inline std::vector<int64_t> iota(int64_t start, int64_t count) {
  std::vector<int64_t> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[static_cast<size_t>(i)] = start + i;
  return v;
}

// ---- fixture ----------------------------------------------------------------------------------------

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_device_present()) GTEST_SKIP() << "no CUDA device";
    CUDA_CHECK(cudaStreamCreate(&stream_));
    // Programmatic dependent launch wherever the sm_90 code runs, as the engine launches.
    const cuda::DeviceLimits& limits = cuda::device_limits(0);
    launch_ = {stream_, limits.hopper_code_runs, limits.hopper_code_runs, &limits};
    flag_ = std::make_unique<DeviceBuffer<int>>(std::vector<int>{0});
  }
  void TearDown() override {
    flag_.reset();
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }

  /// Waits for the stream and fails on an asynchronous error.
  void sync() { CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  int* flag() { return flag_->get(); }
  /// The error flag after the stream's work, then cleared.
  int take_flag() {
    sync();
    const int v = flag_->download()[0];
    flag_->upload({0});
    return v;
  }

  cudaStream_t stream_ = nullptr;
  cuda::Launch launch_;  // on stream_
  std::unique_ptr<DeviceBuffer<int>> flag_;
};

/// A linear layer's output rows N and reduction length K.
struct LinearShape {
  int64_t N;
  int64_t K;
};

}  // namespace gearbox::cuda_test
