// The CUDA kernels (devices/cuda/kernels/, gemm_cublaslt.h) against the CPU kernels
// (devices/cpu/kernels.h) as the reference, over awkward shapes and every weight dtype.
//
// bf16 / f16 weights are compared with the CPU kernel run on the same rounded weights (as
// f32), so tolerances stay those of f32. Every output buffer is poisoned with NaN before a
// launch and followed by 64 sentinel floats; NaN / Inf left in an output, a changed
// sentinel or a set error flag fails, and every failure names the case, the max error and
// the first mismatch (GEARBOX_TEST_VERBOSE=1 prints the max error of every comparison).
// Label `gpu`: every test skips where there is no CUDA device.
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

namespace gearbox {
namespace {

// ---- device helpers ---------------------------------------------------------------------------

constexpr int64_t kGuard = 64;
constexpr float kSentinel = -12345.5f;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// Throws (gtest reports it as a failure naming the call) when a CUDA call fails.
void cuda_check(cudaError_t err, const char* call) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(err));
}
#define CUDA_CHECK(call) cuda_check((call), #call)

bool cuda_device_present() {
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

struct Tolerance {
  double atol = 1e-5;
  double rtol = 1e-4;
};

/// got[i] within atol + rtol * |want[i]| + slack[i] (slack: per-element allowance for long
/// f32 reductions, empty = none); NaN / Inf in got fails. Names the case, the max error,
/// the first mismatch and how many elements failed.
::testing::AssertionResult close(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                                 Tolerance tol = {}, const std::vector<double>& slack = {}) {
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

::testing::AssertionResult all_nan(const std::string& what, const std::vector<float>& v, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) {
    if (!std::isnan(v[i])) return ::testing::AssertionFailure() << what << ": [" << i << "] = " << v[i] << ", want NaN";
  }
  return ::testing::AssertionSuccess();
}

/// Allowance for an f32 sum of products in another order: ~2 ulps of sum |x_k w_k| per
/// element, about 10 standard deviations of the rounding walk of two summation orders.
constexpr double kReductionSlack = 2.5e-7;

std::vector<double> reduction_slack(const std::vector<float>& x, const std::vector<float>& w, int64_t M, int64_t N,
                                    int64_t K) {
  std::vector<double> slack(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += std::abs(static_cast<double>(x[m * K + k]) * w[n * K + k]);
      slack[m * N + n] = kReductionSlack * s + 1e-6;
    }
  }
  return slack;
}

/// Allowance for act(gate) * up where gate and up are x * wg^T and x * wu^T [M, N]: the two
/// reductions' allowances carried through the product (|act'| <= 1.13).
std::vector<double> gated_slack(const std::vector<float>& x, const std::vector<float>& wg, const std::vector<float>& wu,
                                const std::vector<float>& gate, const std::vector<float>& up, int64_t M, int64_t N,
                                int64_t K) {
  const std::vector<double> sg = reduction_slack(x, wg, M, N, K);
  const std::vector<double> su = reduction_slack(x, wu, M, N, K);
  std::vector<double> slack(sg.size());
  for (size_t i = 0; i < slack.size(); ++i) {
    slack[i] = 1.2 * (sg[i] * (std::abs(up[i]) + su[i]) + su[i] * std::abs(gate[i]));
  }
  return slack;
}

// ---- data ------------------------------------------------------------------------------------------

std::vector<float> random_floats(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

constexpr DataType kWeightTypes[] = {DataType::kF32, DataType::kBF16, DataType::kF16};

/// Weights rounded to `type`: the f32 values the CPU reference uses and the device bytes.
struct Weights {
  std::vector<float> rounded;
  std::vector<uint8_t> bytes;
};

float round_to(DataType type, float v) {
  if (type == DataType::kBF16) return internal::bf16_to_f32(internal::f32_to_bf16(v));
  if (type == DataType::kF16) return internal::f16_to_f32(internal::f32_to_f16(v));
  return v;
}

/// `lead` extra zero elements come first, so that the weights start at a misaligned address.
Weights make_weights(DataType type, const std::vector<float>& values, int lead = 0) {
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

std::string shape(std::initializer_list<std::pair<const char*, int64_t>> dims) {
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

std::vector<int64_t> iota(int64_t start, int64_t count) {
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

// ---- embedding --------------------------------------------------------------------------------------

TEST_F(CudaKernels, EmbeddingMatchesCpuForEveryWeightAndIdType) {
  const int64_t vocab = 37;
  for (DataType type : kWeightTypes) {
    for (bool ids_i64 : {false, true}) {
      for (int64_t hidden : {1, 7, 64, 1152}) {
        const std::vector<int64_t> ids = {0, 36, 5, 5, 17};
        const auto count = static_cast<int64_t>(ids.size());
        const Weights table = make_weights(type, random_floats(vocab * hidden, 1));
        DeviceBuffer<uint8_t> d_table(table.bytes);
        Indices d_ids(ids_i64, ids);
        Floats out = Floats::poisoned(count * hidden);
        const float scale = 33.9411f;
        ASSERT_EQ(cudaSuccess, with_weight_type(type, [&](auto tag) {
                    using W = decltype(tag);
                    return cuda::embedding<W>(d_ids.get(), ids_i64, count, weight_ptr<W>(d_table, 0), vocab, hidden,
                                              scale, out.get(), flag(), launch_);
                  }));
        std::vector<float> want(static_cast<size_t>(count * hidden));
        ASSERT_TRUE(
            cpu::embedding(ids.data(), DataType::kI64, count, table.rounded.data(), vocab, hidden, scale, want.data())
                .ok());
        const std::string what = std::string("embedding ") + data_type_name(type) + " " + shape({{"hidden", hidden}});
        EXPECT_EQ(take_flag(), 0) << what;
        EXPECT_TRUE(close(what, out.download(), want, {0, 0})) << "a scaled gather is exact";
        EXPECT_TRUE(out.guard_intact()) << what;
      }
    }
  }
}

TEST_F(CudaKernels, EmbeddingOutOfRangeIdWritesNaNAndSetsTheFlag) {
  const int64_t vocab = 10, hidden = 64;
  const Weights table = make_weights(DataType::kBF16, random_floats(vocab * hidden, 2));
  DeviceBuffer<uint8_t> d_table(table.bytes);
  for (int64_t bad : {int64_t{10}, int64_t{-1}, int64_t{1} << 40}) {
    Indices ids(true, {3, bad, 4});
    Floats out = Floats::poisoned(3 * hidden);
    ASSERT_EQ(cudaSuccess, cuda::embedding<__nv_bfloat16>(ids.get(), true, 3, weight_ptr<__nv_bfloat16>(d_table, 0),
                                                          vocab, hidden, 1.0f, out.get(), flag(), launch_));
    EXPECT_EQ(take_flag(), 1) << "id " << bad;
    const std::vector<float> got = out.download();
    EXPECT_TRUE(all_nan("bad row", got, hidden, 2 * hidden));
    EXPECT_EQ(got[0], table.rounded[3 * hidden]) << "the good rows are still written";
    EXPECT_TRUE(out.guard_intact());
  }
}

// ---- RMSNorm ----------------------------------------------------------------------------------------

TEST_F(CudaKernels, RmsNormMatchesCpuOnAwkwardShapesAlignedAndNot) {
  for (DataType type : kWeightTypes) {
    for (int64_t dim : {1, 7, 13, 64, 80, 256, 513, 1152, 2304}) {
      for (int64_t rows : {1, 3, 129}) {
        for (int lead : {0, 1}) {  // lead 1: x, y and w all misaligned -> the scalar path
          const float offset = lead == 0 ? 1.0f : 0.0f;
          const std::vector<float> x = random_floats(rows * dim, 3);
          const Weights w = make_weights(type, random_floats(dim, 4), lead);
          std::vector<float> x_lead(static_cast<size_t>(lead), 0.0f);
          x_lead.insert(x_lead.end(), x.begin(), x.end());
          Floats d_x(x_lead);
          DeviceBuffer<uint8_t> d_w(w.bytes);
          Floats y = Floats::poisoned(rows * dim + lead);
          ASSERT_EQ(cudaSuccess, with_weight_type(type, [&](auto tag) {
                      using W = decltype(tag);
                      return cuda::rms_norm<W>(d_x.get() + lead, weight_ptr<W>(d_w, lead), y.get() + lead, rows, dim,
                                               1e-6f, offset, launch_);
                    }));
          sync();
          std::vector<float> want(x.size());
          cpu::rms_norm(x.data(), w.rounded.data(), want.data(), rows, dim, 1e-6f, offset);
          std::vector<float> got = y.download();
          got.erase(got.begin(), got.begin() + lead);
          const std::string what = std::string("rms_norm ") + data_type_name(type) + " " +
                                   shape({{"rows", rows}, {"dim", dim}, {"lead", lead}});
          EXPECT_TRUE(close(what, got, want));
          EXPECT_TRUE(y.guard_intact()) << what;
        }
      }
    }
  }
}

TEST_F(CudaKernels, RmsNormInPlace) {
  const int64_t rows = 5, dim = 1152;
  const std::vector<float> x = random_floats(rows * dim, 5);
  const std::vector<float> w = random_floats(dim, 6);
  Floats d_xy(x);
  Floats d_w(w);
  ASSERT_EQ(cudaSuccess, cuda::rms_norm<float>(d_xy.get(), d_w.get(), d_xy.get(), rows, dim, 1e-6f, 1.0f, launch_));
  sync();
  std::vector<float> want(x.size());
  cpu::rms_norm(x.data(), w.data(), want.data(), rows, dim, 1e-6f, 1.0f);
  EXPECT_TRUE(close("rms_norm in place", d_xy.download(), want));
  EXPECT_TRUE(d_xy.guard_intact());
}

// ---- RoPE ----------------------------------------------------------------------------------------------

TEST_F(CudaKernels, RopeMatchesCpuInPlaceAndNot) {
  for (bool pos_i64 : {false, true}) {
    for (int64_t heads : {1, 4}) {
      for (int64_t hd : {2, 8, 80, 256}) {
        for (int64_t T : {1, 7, 33}) {
          for (int64_t start : {0, 700}) {
            for (float theta : {1e4f, 1e6f}) {
              const std::vector<float> x = random_floats(T * heads * hd, 7);
              const std::vector<int64_t> pos = iota(start, T);
              Indices d_pos(pos_i64, pos);
              Floats d_x(x);
              Floats y = Floats::poisoned(T * heads * hd);
              const bool in_place = start == 700;
              float* out = in_place ? d_x.get() : y.get();
              ASSERT_EQ(cudaSuccess,
                        cuda::rope(d_x.get(), d_pos.get(), pos_i64, out, T, heads, hd, theta, 1.0f, flag(), launch_));
              EXPECT_EQ(take_flag(), 0);
              std::vector<float> want(x.size());
              ASSERT_TRUE(cpu::rope(x.data(), pos.data(), DataType::kI64, want.data(), T, heads, hd, theta).ok());
              // The f32 angle pos * inv_freq may differ by an ulp of inv_freq (powf rounding).
              std::vector<double> slack(x.size());
              for (int64_t t = 0; t < T; ++t) {
                for (int64_t e = 0; e < heads * hd; ++e) {
                  const int64_t base = t * heads * hd + e / hd * hd;
                  const int64_t i = e % hd % (hd / 2);
                  slack[t * heads * hd + e] =
                      2.5e-7 * static_cast<double>(pos[t]) * (std::abs(x[base + i]) + std::abs(x[base + i + hd / 2]));
                }
              }
              const std::string what = "rope " + shape({{"T", T}, {"heads", heads}, {"hd", hd}, {"start", start}}) +
                                       "theta=" + std::to_string(theta);
              EXPECT_TRUE(close(what, in_place ? d_x.download() : y.download(), want, {}, slack));
              EXPECT_TRUE(d_x.guard_intact() && y.guard_intact()) << what;
            }
          }
        }
      }
    }
  }
}

TEST_F(CudaKernels, RopePositionScaleScalesThePosition) {
  // position_scale 0.5 at even positions p rotates exactly as scale 1 at p / 2.
  const int64_t T = 6, heads = 2, hd = 80;
  const std::vector<float> x = random_floats(T * heads * hd, 8);
  const std::vector<int64_t> pos = {0, 2, 10, 64, 700, 4096};
  std::vector<int64_t> half_pos;
  for (int64_t p : pos) half_pos.push_back(p / 2);
  Indices d_pos(false, pos);
  Floats d_x(x);
  Floats y = Floats::poisoned(T * heads * hd);
  ASSERT_EQ(cudaSuccess, cuda::rope(d_x.get(), d_pos.get(), false, y.get(), T, heads, hd, 1e4f, 0.5f, flag(), launch_));
  EXPECT_EQ(take_flag(), 0);
  std::vector<float> want(x.size());
  ASSERT_TRUE(cpu::rope(x.data(), half_pos.data(), DataType::kI64, want.data(), T, heads, hd, 1e4f).ok());
  EXPECT_TRUE(close("rope position_scale 0.5", y.download(), want, {2e-5, 1e-4}));
  EXPECT_TRUE(y.guard_intact());
}

TEST_F(CudaKernels, RopeWithFreqsMatchesCpu) {
  // Given inverse frequencies (Llama-3 scaling): the same f32 angles as the CPU, so only
  // sincosf and the rotation's rounding differ.
  for (int64_t hd : {2, 16, 128}) {
    for (float scale : {1.0f, 0.125f}) {
      const int64_t T = 9, heads = 3;
      const std::vector<float> x = random_floats(T * heads * hd, 10);
      std::vector<float> inv_freq;
      for (int64_t i = 0; i < hd / 2; ++i) inv_freq.push_back(0.9f / static_cast<float>(i + 1));
      const std::vector<int64_t> pos = iota(300, T);
      Indices d_pos(true, pos);
      Floats d_x(x);
      Floats d_freq(inv_freq);
      Floats y = Floats::poisoned(T * heads * hd);
      ASSERT_EQ(cudaSuccess, cuda::rope_with_freqs(d_x.get(), d_pos.get(), true, y.get(), T, heads, hd, d_freq.get(),
                                                   scale, flag(), launch_));
      EXPECT_EQ(take_flag(), 0);
      std::vector<float> want(x.size());
      ASSERT_TRUE(
          cpu::rope_with_freqs(x.data(), pos.data(), DataType::kI64, want.data(), T, heads, hd, inv_freq, scale).ok());
      const std::string what = "rope_with_freqs " + shape({{"hd", hd}}) + "scale=" + std::to_string(scale);
      EXPECT_TRUE(close(what, y.download(), want, {2e-5, 1e-4}));
      EXPECT_TRUE(y.guard_intact()) << what;
    }
  }
  Floats y = Floats::poisoned(8);
  Indices d_pos(true, {1});
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::rope_with_freqs(y.get(), d_pos.get(), true, y.get(), 1, 1, 8, nullptr, 1.0f, flag(), launch_))
      << "no table";
}

TEST_F(CudaKernels, RopeNegativePositionPoisonsItsRowAndSetsTheFlag) {
  const int64_t heads = 2, hd = 8;
  Indices d_pos(false, {3, -1});
  Floats d_x(random_floats(2 * heads * hd, 9));
  Floats y = Floats::poisoned(2 * heads * hd);
  ASSERT_EQ(cudaSuccess, cuda::rope(d_x.get(), d_pos.get(), false, y.get(), 2, heads, hd, 1e4f, 1.0f, flag(), launch_));
  EXPECT_EQ(take_flag(), 1);
  const std::vector<float> got = y.download();
  EXPECT_TRUE(all_nan("negative position row", got, heads * hd, 2 * heads * hd));
  EXPECT_TRUE(std::isfinite(got[0]));
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::rope(d_x.get(), d_pos.get(), false, y.get(), 2, heads, 7, 1e4f, 1.0f, flag(), launch_))
      << "odd head_dim";
}

// ---- fused chains ---------------------------------------------------------------------------------------

/// Slack for RoPE: the f32 angle may differ by an ulp of inv_freq (see RopeMatchesCpu...).
std::vector<double> rope_slack(const std::vector<float>& x, const std::vector<int64_t>& pos, int64_t heads,
                               int64_t hd) {
  std::vector<double> slack(x.size());
  for (size_t t = 0; t < pos.size(); ++t) {
    for (int64_t e = 0; e < heads * hd; ++e) {
      const size_t base = t * static_cast<size_t>(heads * hd) + static_cast<size_t>(e / hd * hd);
      const auto i = static_cast<size_t>(e % hd % (hd / 2));
      slack[t * static_cast<size_t>(heads * hd) + static_cast<size_t>(e)] =
          2.5e-7 * static_cast<double>(pos[t]) * 4.0 * (std::abs(x[base + i]) + std::abs(x[base + i + hd / 2]));
    }
  }
  return slack;
}

TEST_F(CudaKernels, HeadNormRopeEqualsNormThenRopeForQAndK) {
  for (DataType type : kWeightTypes) {
    for (int64_t hd : {2, 6, 80, 256, 1024}) {  // 1024: threads loop over the rotation pairs
      for (int64_t T : {1, 3, 17, 40}) {
        for (bool in_place : {false, true}) {
          const int64_t q_heads = 4, k_heads = T == 3 ? 3 : 1;  // GQA; T == 3: odd head counts
          const std::vector<float> q = random_floats(T * q_heads * hd, 11, -3.0f, 3.0f);
          const std::vector<float> k = random_floats(T * k_heads * hd, 12, -3.0f, 3.0f);
          const Weights wq = make_weights(type, random_floats(hd, 13)), wk = make_weights(type, random_floats(hd, 14));
          const std::vector<int64_t> pos = iota(in_place ? 500 : 0, T);
          Indices d_pos(true, pos);
          Floats d_q(q), d_k(k);
          Floats yq = Floats::poisoned(q.size()), yk = Floats::poisoned(k.size());
          DeviceBuffer<uint8_t> d_wq(wq.bytes), d_wk(wk.bytes);
          float* out_q = in_place ? d_q.get() : yq.get();
          float* out_k = in_place ? d_k.get() : yk.get();
          // q's inverse frequencies from an uploaded table (as the engine runs it), k's computed.
          std::vector<float> q_freq;
          for (int64_t i = 0; i < hd / 2; ++i) q_freq.push_back(cpu::rope_inv_freq(1e4f, i, hd));
          Floats d_q_freq(q_freq);
          ASSERT_EQ(cudaSuccess, with_weight_type(type, [&](auto tag) {
                      using W = decltype(tag);
                      const cuda::HeadNormRope<W> parts[2] = {
                          {d_q.get(), weight_ptr<W>(d_wq, 0), out_q, q_heads, 1e4f, 1.0f, d_q_freq.get()},
                          {d_k.get(), weight_ptr<W>(d_wk, 0), out_k, k_heads, 1e6f, 1.0f}};
                      return cuda::head_norm_rope<W>(parts, 2, d_pos.get(), true, T, hd, 1e-6f, 1.0f, flag(), launch_);
                    }));
          EXPECT_EQ(take_flag(), 0);
          auto reference = [&](const std::vector<float>& x, const Weights& w, int64_t heads, float theta) {
            std::vector<float> normed(x.size()), want(x.size());
            cpu::rms_norm(x.data(), w.rounded.data(), normed.data(), T * heads, hd, 1e-6f, 1.0f);
            EXPECT_TRUE(cpu::rope(normed.data(), pos.data(), DataType::kI64, want.data(), T, heads, hd, theta).ok());
            return std::make_pair(want, rope_slack(normed, pos, heads, hd));
          };
          const auto [want_q, slack_q] = reference(q, wq, q_heads, 1e4f);
          const auto [want_k, slack_k] = reference(k, wk, k_heads, 1e6f);
          const std::string what = std::string("head_norm_rope ") + data_type_name(type) + " " +
                                   shape({{"hd", hd}, {"T", T}, {"in_place", in_place}});
          EXPECT_TRUE(close(what + " q", in_place ? d_q.download() : yq.download(), want_q, {}, slack_q));
          EXPECT_TRUE(close(what + " k", in_place ? d_k.download() : yk.download(), want_k, {}, slack_k));
          EXPECT_TRUE(yq.guard_intact() && yk.guard_intact() && d_q.guard_intact() && d_k.guard_intact()) << what;
        }
      }
    }
  }
}

// The q and k of a stacked QKV linear's output y [T, Nq + Nk + Nv] (rows Nq + Nk + Nv floats
// apart) give what the same rows give as contiguous tensors, and a part without weights
// copies v out of y: bit for bit, with 1 and 3 KV heads and head_dim 8 and 256.
TEST_F(CudaKernels, HeadNormRopeReadsAStackedOutputAndCopiesV) {
  for (int64_t hd : {8, 256}) {
    for (int64_t kv_heads : {1, 3}) {
      const int64_t T = 7, q_heads = 6, nq = q_heads * hd, nk = kv_heads * hd, row = nq + 2 * nk;
      const std::vector<float> y_host = random_floats(T * row, 21, -3.0f, 3.0f);
      std::vector<float> q, k, v;
      for (int64_t t = 0; t < T; ++t) {
        const auto at = y_host.begin() + t * row;
        q.insert(q.end(), at, at + nq);
        k.insert(k.end(), at + nq, at + nq + nk);
        v.insert(v.end(), at + nq + nk, at + row);
      }
      Floats y(y_host), d_q(q), d_k(k), w(random_floats(hd, 22));
      Floats out_q = Floats::poisoned(T * nq), out_k = Floats::poisoned(T * nk), out_v = Floats::poisoned(T * nk);
      Floats ref_q = Floats::poisoned(T * nq), ref_k = Floats::poisoned(T * nk);
      Indices pos(false, iota(40, T));
      const cuda::HeadNormRope<float> stacked[3] = {
          {y.get(), w.get(), out_q.get(), q_heads, 1e4f, 1.0f, nullptr, row},
          {y.get() + nq, w.get(), out_k.get(), kv_heads, 1e6f, 1.0f, nullptr, row},
          {y.get() + nq + nk, nullptr, out_v.get(), kv_heads, 0, 0, nullptr, row}};
      const cuda::HeadNormRope<float> separate[2] = {{d_q.get(), w.get(), ref_q.get(), q_heads, 1e4f, 1.0f},
                                                     {d_k.get(), w.get(), ref_k.get(), kv_heads, 1e6f, 1.0f}};
      ASSERT_EQ(cudaSuccess,
                cuda::head_norm_rope<float>(stacked, 3, pos.get(), false, T, hd, 1e-6f, 1.0f, flag(), launch_));
      ASSERT_EQ(cudaSuccess,
                cuda::head_norm_rope<float>(separate, 2, pos.get(), false, T, hd, 1e-6f, 1.0f, flag(), launch_));
      EXPECT_EQ(take_flag(), 0);
      const std::string what = "head_norm_rope from a stacked output " + shape({{"hd", hd}, {"kv_heads", kv_heads}});
      EXPECT_TRUE(close(what + " q", out_q.download(), ref_q.download(), {0, 0}));
      EXPECT_TRUE(close(what + " k", out_k.download(), ref_k.download(), {0, 0}));
      EXPECT_TRUE(close(what + " v", out_v.download(), v, {0, 0}));
      EXPECT_TRUE(out_q.guard_intact() && out_k.guard_intact() && out_v.guard_intact() && y.guard_intact()) << what;
    }
  }
  Floats x(random_floats(64, 23)), yy = Floats::poisoned(64), w(random_floats(8, 24));
  Indices pos(false, {0, 1});
  const cuda::HeadNormRope<float> narrow{x.get(), w.get(), yy.get(), 2, 1e4f, 1.0f, nullptr, 15};
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::head_norm_rope<float>(&narrow, 1, pos.get(), false, 2, 8, 1e-6f, 1.0f, nullptr, launch_))
      << "rows closer together than heads * head_dim";
}

TEST_F(CudaKernels, HeadNormRopeWithAPositionScaleEqualsTheUnfusedKernels) {
  const int64_t T = 5, heads = 4, hd = 256;
  const std::vector<float> x = random_floats(T * heads * hd, 17, -2.0f, 2.0f);
  Floats d_x(x), w(random_floats(hd, 18)), fused = Floats::poisoned(x.size()), normed = Floats::poisoned(x.size()),
                                           unfused = Floats::poisoned(x.size());
  Indices pos(true, {0, 9, 300, 2047, 8191});
  const cuda::HeadNormRope<float> part{d_x.get(), w.get(), fused.get(), heads, 1e6f, 0.125f};
  ASSERT_EQ(cudaSuccess, cuda::head_norm_rope<float>(&part, 1, pos.get(), true, T, hd, 1e-6f, 1.0f, nullptr, launch_));
  ASSERT_EQ(cudaSuccess, cuda::rms_norm<float>(d_x.get(), w.get(), normed.get(), T * heads, hd, 1e-6f, 1.0f, launch_));
  ASSERT_EQ(cudaSuccess,
            cuda::rope(normed.get(), pos.get(), true, unfused.get(), T, heads, hd, 1e6f, 0.125f, nullptr, launch_));
  sync();
  EXPECT_TRUE(
      close("head_norm_rope vs rms_norm + rope, scale 0.125", fused.download(), unfused.download(), {1e-6, 1e-5}));
}

TEST_F(CudaKernels, HeadNormRopeNegativePositionPoisonsItsRowsAndBadShapesAreRejected) {
  const int64_t hd = 8, T = 2;
  Floats x(random_floats(T * hd, 15)), y = Floats::poisoned(T * hd), w(random_floats(hd, 16));
  Indices pos(false, {3, -1});
  const cuda::HeadNormRope<float> part{x.get(), w.get(), y.get(), 1, 1e4f, 1.0f};
  ASSERT_EQ(cudaSuccess, cuda::head_norm_rope<float>(&part, 1, pos.get(), false, T, hd, 1e-6f, 0.0f, flag(), launch_));
  EXPECT_EQ(take_flag(), 1);
  const std::vector<float> got = y.download();
  for (int64_t i = 0; i < hd; ++i) {
    EXPECT_TRUE(std::isfinite(got[static_cast<size_t>(i)]));
    EXPECT_TRUE(std::isnan(got[static_cast<size_t>(hd + i)]));
  }
  // Several heads and tokens: only the bad token's rows (token 5) are poisoned.
  {
    const int64_t many = 9, heads = 2;
    Floats xm(random_floats(many * heads * hd, 19)), ym = Floats::poisoned(many * heads * hd);
    Indices pm(false, {0, 1, 2, 3, 4, -7, 6, 7, 8});
    const cuda::HeadNormRope<float> pw{xm.get(), w.get(), ym.get(), heads, 1e4f, 1.0f};
    ASSERT_EQ(cudaSuccess,
              cuda::head_norm_rope<float>(&pw, 1, pm.get(), false, many, hd, 1e-6f, 0.0f, flag(), launch_));
    EXPECT_EQ(take_flag(), 1);
    const std::vector<float> out = ym.download();
    for (int64_t i = 0; i < many * heads * hd; ++i) {
      EXPECT_EQ(std::isnan(out[static_cast<size_t>(i)]), i / (heads * hd) == 5) << i;
    }
  }
  EXPECT_EQ(cudaErrorInvalidValue, cuda::head_norm_rope<float>(&part, 3, pos.get(), false, T, hd, 1e-6f, 0.0f, nullptr,
                                                               launch_));  // too many parts
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::head_norm_rope<float>(&part, 1, pos.get(), false, T, 7, 1e-6f, 0.0f, nullptr, launch_));  // odd
}

TEST_F(CudaKernels, NormAddNormEqualsNormAddThenNorm) {
  for (DataType type : kWeightTypes) {
    for (int64_t dim : {1, 7, 320, 1152, 2048, 2305, 8200}) {
      for (int64_t rows : {1, 5, 9, 40}) {  // up to 8 rows: 1024 threads a row; more: 256
        for (int variant : {0, 1, 2}) {     // 0: separate buffers, 1: sum = residual and y = x, 2: no next norm
          const std::vector<float> x = random_floats(rows * dim, 21, -4.0f, 4.0f);
          const std::vector<float> r = random_floats(rows * dim, 22, -8.0f, 8.0f);
          const Weights w1 = make_weights(type, random_floats(dim, 23)),
                        w2 = make_weights(type, random_floats(dim, 24));
          Floats d_x(x), d_r(r), sum = Floats::poisoned(x.size()), y = Floats::poisoned(x.size());
          DeviceBuffer<uint8_t> d_w1(w1.bytes), d_w2(w2.bytes);
          float* sum_out = variant == 1 ? d_r.get() : sum.get();
          float* y_out = variant == 1 ? d_x.get() : y.get();
          ASSERT_EQ(cudaSuccess, with_weight_type(type, [&](auto tag) {
                      using W = decltype(tag);
                      return cuda::norm_add_norm<W>(d_x.get(), weight_ptr<W>(d_w1, 0), d_r.get(), sum_out,
                                                    variant == 2 ? nullptr : weight_ptr<W>(d_w2, 0),
                                                    variant == 2 ? nullptr : y_out, rows, dim, 1e-6f, 1.0f, launch_);
                    }));
          sync();
          std::vector<float> normed(x.size()), want_sum(x.size()), want_y(x.size());
          cpu::rms_norm(x.data(), w1.rounded.data(), normed.data(), rows, dim, 1e-6f, 1.0f);
          cpu::add(r.data(), normed.data(), want_sum.data(), rows * dim);
          cpu::rms_norm(want_sum.data(), w2.rounded.data(), want_y.data(), rows, dim, 1e-6f, 1.0f);
          const std::string what = std::string("norm_add_norm ") + data_type_name(type) + " " +
                                   shape({{"dim", dim}, {"rows", rows}, {"variant", variant}});
          EXPECT_TRUE(close(what + " sum", variant == 1 ? d_r.download() : sum.download(), want_sum));
          if (variant != 2) {
            EXPECT_TRUE(close(what + " y", variant == 1 ? d_x.download() : y.download(), want_y));
          } else {
            EXPECT_TRUE(std::isnan(y.download()[0])) << what << ": y untouched without a next norm";
          }
          EXPECT_TRUE(sum.guard_intact() && y.guard_intact() && d_x.guard_intact() && d_r.guard_intact()) << what;
        }
      }
    }
  }
}

// ---- KV cache write --------------------------------------------------------------------------------------

TEST_F(CudaKernels, NormAddNormToEqualsNormAddNormThenConvert) {
  // The variant feeding a GEMM writes y rounded to W: exactly the bytes of norm_add_norm
  // then convert_f32_to (so the engine's numbers do not depend on fusion), and the same sum.
  for (int64_t dim : {7, 1152, 2305, 8200}) {  // cached kernel, and the looping one beyond 2048
    for (int64_t rows : {1, 9, 40}) {
      const std::vector<float> x = random_floats(rows * dim, 31, -4.0f, 4.0f);
      const std::vector<float> r = random_floats(rows * dim, 32, -8.0f, 8.0f);
      for (DataType type : {DataType::kBF16, DataType::kF16}) {
        const Weights w1 = make_weights(type, random_floats(dim, 33)), w2 = make_weights(type, random_floats(dim, 34));
        DeviceBuffer<uint8_t> d_w1(w1.bytes), d_w2(w2.bytes);
        Floats d_x(x), d_r(r), sum = Floats::poisoned(x.size()), y = Floats::poisoned(x.size()),
                               got_sum = Floats::poisoned(x.size());
        DeviceBuffer<uint16_t> want = DeviceBuffer<uint16_t>::poisoned(rows * dim),
                               got = DeviceBuffer<uint16_t>::poisoned(rows * dim);
        ASSERT_EQ(cudaSuccess, with_weight_type(type, [&](auto tag) {
                    using W = decltype(tag);
                    const W* g1 = weight_ptr<W>(d_w1, 0);
                    const W* g2 = weight_ptr<W>(d_w2, 0);
                    cudaError_t err = cuda::norm_add_norm<W>(d_x.get(), g1, d_r.get(), sum.get(), g2, y.get(), rows,
                                                             dim, 1e-6f, 1.0f, launch_);
                    if (err == cudaSuccess) {
                      err = cuda::convert_f32_to(y.get(), reinterpret_cast<W*>(want.get()), rows * dim, launch_);
                    }
                    if (err == cudaSuccess) {
                      err = cuda::norm_add_norm_to<W>(d_x.get(), g1, d_r.get(), got_sum.get(), g2,
                                                      reinterpret_cast<W*>(got.get()), rows, dim, 1e-6f, 1.0f, launch_);
                    }
                    return err;
                  }));
        sync();
        const std::string what =
            std::string("norm_add_norm_to ") + data_type_name(type) + " " + shape({{"dim", dim}, {"rows", rows}});
        EXPECT_EQ(got.download(), want.download()) << what;
        EXPECT_EQ(got_sum.download(), sum.download()) << what << " sum";
        EXPECT_TRUE(got.guard_intact() && got_sum.guard_intact()) << what;
      }
    }
  }
  Floats x = Floats::poisoned(8), s = Floats::poisoned(8);
  const auto* w = reinterpret_cast<const __nv_bfloat16*>(x.get());
  auto* y = reinterpret_cast<__nv_bfloat16*>(s.get() + 4);
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::norm_add_norm_to(x.get(), w, x.get(), s.get(), w, y, -1, 4, 1e-6f, 1.0f, launch_));
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::norm_add_norm_to(x.get(), w, x.get(), s.get(), static_cast<const __nv_bfloat16*>(nullptr), y, 1, 4,
                                   1e-6f, 1.0f, launch_))
      << "no next norm";
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::norm_add_norm_to(x.get(), w, x.get(), s.get(), w, static_cast<__nv_bfloat16*>(nullptr), 1, 4, 1e-6f,
                                   1.0f, launch_))
      << "no output";
}

TEST_F(CudaKernels, KvCacheWriteCopiesRowsAndFlagsBadPositions) {
  const int64_t max_ctx = 50;
  for (int64_t width : {7, 64, 256}) {
    for (bool with_bad : {false, true}) {
      const std::vector<int64_t> pos =
          with_bad ? std::vector<int64_t>{4, 50, 0, -1, 49} : std::vector<int64_t>{4, 0, 49};
      const auto T = static_cast<int64_t>(pos.size());
      const std::vector<float> k = random_floats(T * width, 10), v = random_floats(T * width, 11);
      const std::vector<float> kc0 = random_floats(max_ctx * width, 12), vc0 = random_floats(max_ctx * width, 13);
      Floats d_k(k), d_v(v), d_kc(kc0), d_vc(vc0);
      Indices d_pos(true, pos);
      ASSERT_EQ(cudaSuccess, cuda::kv_cache_write(d_k.get(), d_v.get(), d_pos.get(), true, T, width, d_kc.get(),
                                                  d_vc.get(), max_ctx, flag(), launch_));
      EXPECT_EQ(take_flag(), with_bad ? 1 : 0);
      std::vector<float> kc = kc0, vc = vc0;  // the rows with valid positions, written
      for (int64_t t = 0; t < T; ++t) {
        if (pos[t] < 0 || pos[t] >= max_ctx) continue;
        std::copy_n(k.begin() + t * width, width, kc.begin() + pos[t] * width);
        std::copy_n(v.begin() + t * width, width, vc.begin() + pos[t] * width);
      }
      const std::string what = "kv_cache_write " + shape({{"width", width}, {"bad", with_bad}});
      EXPECT_TRUE(close(what + " k", d_kc.download(), kc, {0, 0}));
      EXPECT_TRUE(close(what + " v", d_vc.download(), vc, {0, 0}));
      EXPECT_TRUE(d_kc.guard_intact() && d_vc.guard_intact()) << what;
    }
  }
}

// ---- gemv ---------------------------------------------------------------------------------------------

struct LinearShape {
  int64_t N;
  int64_t K;
};
constexpr LinearShape kGemvShapes[] = {{1, 1},      {7, 13},      {13, 7},    {64, 64},    {130, 130}, {1, 2304},
                                       {256, 1152}, {1152, 1152}, {2304, 13}, {130, 2304}, {5, 6912}};

/// Runs gemv (or gemv_multi with the weight split into targets) and checks it against
/// cpu::linear_small_m on the rounded weights.
void check_gemv(CudaKernels* fixture, const cuda::Launch& launch, DataType type, int64_t M, LinearShape s, bool bias,
                int lead, cuda::GemvGeometry geometry = cuda::kGemvDefaultGeometry, int64_t max_blocks = 0) {
  const std::vector<float> x = random_floats(M * s.K, 20);
  const Weights w = make_weights(type, random_floats(s.N * s.K, 21), lead);
  const std::vector<float> b = random_floats(s.N, 22);
  std::vector<float> x_lead(static_cast<size_t>(lead), 0.0f);
  x_lead.insert(x_lead.end(), x.begin(), x.end());
  Floats d_x(x_lead), d_b(b);
  DeviceBuffer<uint8_t> d_w(w.bytes);
  Floats y = Floats::poisoned(M * s.N);
  ASSERT_EQ(cudaSuccess, with_weight_type(type, [&](auto tag) {
              using W = decltype(tag);
              return cuda::gemv<W>(d_x.get() + lead, weight_ptr<W>(d_w, lead), bias ? d_b.get() : nullptr, y.get(), M,
                                   s.N, s.K, launch, geometry, max_blocks);
            }));
  CUDA_CHECK(cudaStreamSynchronize(launch.stream));
  std::vector<float> want(static_cast<size_t>(M * s.N));
  cpu::linear_small_m(x.data(), w.rounded.data(), bias ? b.data() : nullptr, want.data(), M, s.N, s.K);
  const std::string what = std::string("gemv ") + data_type_name(type) + " " +
                           shape({{"M", M},
                                  {"N", s.N},
                                  {"K", s.K},
                                  {"bias", bias},
                                  {"lead", lead},
                                  {"rows", geometry.rows},
                                  {"unroll", geometry.unroll},
                                  {"max_blocks", max_blocks}});
  EXPECT_TRUE(close(what, y.download(), want, {}, reduction_slack(x, w.rounded, M, s.N, s.K)));
  EXPECT_TRUE(y.guard_intact()) << what;
  (void)fixture;
}

TEST_F(CudaKernels, GemvMatchesCpuOnAwkwardShapes) {
  for (DataType type : kWeightTypes) {
    for (int64_t M : {1, 3, 8}) {
      for (LinearShape s : kGemvShapes) check_gemv(this, launch_, type, M, s, /*bias=*/M == 3, /*lead=*/0);
    }
  }
}

TEST_F(CudaKernels, GemvEveryRowCountAndTheScalarPath) {
  for (DataType type : kWeightTypes) {
    for (int64_t M = 1; M <= 8; ++M) {
      check_gemv(this, launch_, type, M, {130, 1152}, /*bias=*/true, /*lead=*/0);
      check_gemv(this, launch_, type, M, {130, 1152}, /*bias=*/false, /*lead=*/1);  // misaligned x and w
    }
  }
}

TEST_F(CudaKernels, GemvEveryGeometryMatchesCpuAtOneRow) {
  for (const cuda::GemvGeometry g : cuda::kGemvGeometries) {
    for (DataType type : kWeightTypes) {
      bool bias = false;
      for (LinearShape s : kGemvShapes) {
        check_gemv(this, launch_, type, 1, s, bias, /*lead=*/0, g);
        bias = !bias;
      }
      check_gemv(this, launch_, type, 1, {130, 1152}, /*bias=*/true, /*lead=*/1, g);  // the scalar path
      check_gemv(this, launch_, type, 1, {1152, 6912}, /*bias=*/false, /*lead=*/0, g);
    }
  }
  Floats dummy = Floats::poisoned(1);
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::gemv<float>(dummy.get(), dummy.get(), nullptr, dummy.get(), 2, 1, 1, launch_, {8, 2}))
      << "M > 1 takes the default geometry only";
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::gemv<float>(dummy.get(), dummy.get(), nullptr, dummy.get(), 1, 1, 1, launch_, {3, 3}))
      << "a geometry no kernel serves";
}

// A grid smaller than the launch's blocks' worth of rows: each block serves several units in
// turn (one, two, three or seven blocks for up to 2304 rows; units that straddle gemv_multi's
// targets; multi-pass K; the gated pairing), with poisoned outputs and sentinels.
TEST_F(CudaKernels, GemvBlocksServingSeveralUnitsMatchCpu) {
  const LinearShape shapes[] = {{130, 1152}, {2304, 13}, {1152, 6912}, {7, 13}};
  for (int64_t max_blocks : {1, 2, 3, 7}) {
    for (DataType type : kWeightTypes) {
      for (LinearShape s : shapes) check_gemv(this, launch_, type, 3, s, /*bias=*/true, /*lead=*/0, {4, 2}, max_blocks);
      for (const cuda::GemvGeometry g : cuda::kGemvGeometries) {
        check_gemv(this, launch_, type, 1, {130, 1152}, /*bias=*/false, /*lead=*/0, g, max_blocks);
        check_gemv(this, launch_, type, 1, {130, 1152}, /*bias=*/true, /*lead=*/1, g, max_blocks);  // scalar path
      }
      check_gemv(this, launch_, type, 1, {1152, 6912}, /*bias=*/true, /*lead=*/0, {2, 2}, max_blocks);
    }
  }
  const int64_t K = 1152;
  const std::vector<int64_t> ns = {1, 70, 130, 3};
  const std::vector<float> x = random_floats(K, 60);
  Floats d_x(x);
  for (int64_t max_blocks : {1, 3}) {
    for (const cuda::GemvGeometry g : {cuda::GemvGeometry{2, 2}, cuda::GemvGeometry{8, 2}}) {
      std::vector<Weights> ws;
      std::vector<DeviceBuffer<uint8_t>> d_ws;
      std::vector<Floats> ys;
      for (size_t i = 0; i < ns.size(); ++i) {
        ws.push_back(make_weights(DataType::kBF16, random_floats(ns[i] * K, 61 + static_cast<uint32_t>(i))));
        d_ws.emplace_back(ws.back().bytes);
        ys.push_back(Floats::poisoned(ns[i]));
      }
      std::vector<cuda::GemvTarget<__nv_bfloat16>> targets;
      for (size_t i = 0; i < ns.size(); ++i) {
        targets.push_back({weight_ptr<__nv_bfloat16>(d_ws[i], 0), nullptr, ys[i].get(), ns[i]});
      }
      ASSERT_EQ(cudaSuccess, cuda::gemv_multi<__nv_bfloat16>(d_x.get(), targets.data(), static_cast<int>(ns.size()), 1,
                                                             K, launch_, g, max_blocks));
      sync();
      for (size_t i = 0; i < ns.size(); ++i) {
        std::vector<float> want(static_cast<size_t>(ns[i]));
        cpu::linear_small_m(x.data(), ws[i].rounded.data(), nullptr, want.data(), 1, ns[i], K);
        const std::string what = "gemv_multi target " + std::to_string(i) + " " +
                                 shape({{"N", ns[i]}, {"rows", g.rows}, {"max_blocks", max_blocks}});
        EXPECT_TRUE(close(what, ys[i].download(), want, {}, reduction_slack(x, ws[i].rounded, 1, ns[i], K)));
        EXPECT_TRUE(ys[i].guard_intact()) << what;
      }
    }
    // The gated pairing: 300 outputs of gate and up rows over K = 1152.
    const int64_t N = 300;
    const Weights wg = make_weights(DataType::kBF16, random_floats(N * K, 70));
    const Weights wu = make_weights(DataType::kBF16, random_floats(N * K, 71));
    DeviceBuffer<uint8_t> d_wg(wg.bytes), d_wu(wu.bytes);
    Floats y = Floats::poisoned(N);
    ASSERT_EQ(cudaSuccess, cuda::gemv_gated<__nv_bfloat16>(d_x.get(), weight_ptr<__nv_bfloat16>(d_wg, 0),
                                                           weight_ptr<__nv_bfloat16>(d_wu, 0), nullptr, nullptr,
                                                           cuda::GatedActivation::kGeluTanh, y.get(), 1, N, K, launch_,
                                                           cuda::GemvGeometry{2, 4}, max_blocks));
    sync();
    std::vector<float> gate(static_cast<size_t>(N)), up(static_cast<size_t>(N)), want(static_cast<size_t>(N));
    cpu::linear_small_m(x.data(), wg.rounded.data(), nullptr, gate.data(), 1, N, K);
    cpu::linear_small_m(x.data(), wu.rounded.data(), nullptr, up.data(), 1, N, K);
    cpu::gelu_tanh_mul(gate.data(), up.data(), want.data(), N);
    const std::string what = "gemv_gated " + shape({{"N", N}, {"max_blocks", max_blocks}});
    EXPECT_TRUE(close(what, y.download(), want, {}, gated_slack(x, wg.rounded, wu.rounded, gate, up, 1, N, K)));
    EXPECT_TRUE(y.guard_intact()) << what;
  }
  Floats dummy = Floats::poisoned(1);
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::gemv<float>(dummy.get(), dummy.get(), nullptr, dummy.get(), 1, 1, 1, launch_, {4, 2}, -1))
      << "a negative block cap";
}

// The grid a one-row GEMV asks for (before the resident-block cap): the 1B's QKV (1024 + 256 +
// 256 rows of 1152, bf16, r2u2: 128 threads a row, 4 rows a block) and the mini's (320 + 80 +
// 80 rows of 320: 32 threads a row, 16 rows a block), f32 weights, a K of no whole 16 bytes.
// A one-row GEMV storing straight into page-locked host memory, as the CUDA device binds a
// host output (DeviceBackend::writes_output_to_host): every geometry, awkward N (a unit cut
// short, one row), the scalar path, blocks serving several units, a bias, and a launch whose
// other target is in device memory; guard floats on both sides of the host output.
TEST_F(CudaKernels, GemvStoresIntoPageLockedHostMemory) {
  struct Case {
    int64_t N, K;
    int lead;  // 1: misaligned x and weights (the scalar path)
  };
  const Case cases[] = {{1, 1152, 0}, {130, 1152, 0}, {1000, 1152, 0}, {4097, 64, 0}, {33, 13, 1}, {7, 6912, 0}};
  constexpr int64_t kGuardFloats = 16;
  for (const cuda::GemvGeometry g : cuda::kGemvGeometries) {
    for (const Case& c : cases) {
      for (const int64_t max_blocks : {int64_t{0}, int64_t{3}}) {
        const std::vector<float> x = random_floats(c.K, 80);
        std::vector<float> x_lead(static_cast<size_t>(c.lead), 0.0f);
        x_lead.insert(x_lead.end(), x.begin(), x.end());
        const Weights w = make_weights(DataType::kBF16, random_floats(c.N * c.K, 81), c.lead);
        const Weights w2 = make_weights(DataType::kBF16, random_floats(5 * c.K, 82), c.lead);
        const std::vector<float> b = random_floats(c.N, 83);
        Floats d_x(x_lead), d_b(b), y2 = Floats::poisoned(5);
        DeviceBuffer<uint8_t> d_w(w.bytes), d_w2(w2.bytes);
        float* host = nullptr;
        const size_t host_floats = static_cast<size_t>(c.N + 2 * kGuardFloats);
        ASSERT_EQ(cudaSuccess, cudaHostAlloc(reinterpret_cast<void**>(&host), host_floats * 4, cudaHostAllocDefault));
        std::fill(host, host + host_floats, kNaN);
        std::fill(host, host + kGuardFloats, kSentinel);
        std::fill(host + kGuardFloats + c.N, host + host_floats, kSentinel);
        float* const y_host = host + kGuardFloats;
        const cuda::GemvTarget<__nv_bfloat16> targets[2] = {
            {weight_ptr<__nv_bfloat16>(d_w2, c.lead), nullptr, y2.get(), 5},
            {weight_ptr<__nv_bfloat16>(d_w, c.lead), d_b.get(), y_host, c.N}};
        ASSERT_EQ(cudaSuccess,
                  cuda::gemv_multi<__nv_bfloat16>(d_x.get() + c.lead, targets, 2, 1, c.K, launch_, g, max_blocks));
        sync();
        std::vector<float> want(static_cast<size_t>(c.N)), want2(5);
        cpu::linear_small_m(x.data(), w.rounded.data(), b.data(), want.data(), 1, c.N, c.K);
        cpu::linear_small_m(x.data(), w2.rounded.data(), nullptr, want2.data(), 1, 5, c.K);
        const std::string what = "gemv into page-locked host memory " + shape({{"N", c.N},
                                                                               {"K", c.K},
                                                                               {"lead", c.lead},
                                                                               {"rows", g.rows},
                                                                               {"unroll", g.unroll},
                                                                               {"max_blocks", max_blocks}});
        EXPECT_TRUE(close(what, std::vector<float>(y_host, y_host + c.N), want, {},
                          reduction_slack(x, w.rounded, 1, c.N, c.K)));
        EXPECT_TRUE(
            close(what + ", the device target", y2.download(), want2, {}, reduction_slack(x, w2.rounded, 1, 5, c.K)));
        EXPECT_TRUE(y2.guard_intact()) << what;
        EXPECT_TRUE(std::all_of(host, host + kGuardFloats, [](float v) { return v == kSentinel; }) &&
                    std::all_of(y_host + c.N, host + host_floats, [](float v) { return v == kSentinel; }))
            << what << ": a guard float of the host output was written";
        CUDA_CHECK(cudaFreeHost(host));
      }
    }
  }
}

// A one-row GEMV storing into page-locked host memory and saying how much of it is there
// (GemvProgress), as the CUDA device runs a pageable host output: every geometry on awkward N
// and the scalar path, then a long launch the host polls while it runs, checking at every
// poll that the elements below the least slot are the final ones (bit for bit: the same
// launch into device memory). At the end every slot holds y's bytes, and guard slots after
// them are untouched.
TEST_F(CudaKernels, GemvProgressSaysWhatIsStoredInHostMemory) {
  struct Case {
    int64_t N, K;
    int lead;  // 1: misaligned x and weights (the scalar path)
    int64_t max_blocks;
    int every;  // units between a block's slot moves
  };
  const Case cases[] = {{1, 1152, 0, 0, 1},    {1000, 1152, 0, 0, 1},  {1000, 1152, 0, 3, 1},
                        {1000, 1152, 0, 3, 4}, {4097, 64, 0, 0, 3},    {33, 13, 1, 0, 1},
                        {7, 6912, 0, 0, 2},    {32768, 1152, 0, 7, 1}, {32768, 1152, 0, 7, 8}};
  constexpr int kSlots = 40;  // fewer than most grids: the launch runs at most this many blocks
  constexpr int kGuardSlotCount = 8;
  constexpr uint32_t kSlotGuard = 0xdeadbeefu;
  for (const cuda::GemvGeometry g : cuda::kGemvGeometries) {
    for (const Case& c : cases) {
      if (c.N > 4097 && !(g == cuda::GemvGeometry{4, 4})) continue;  // the long launch once
      const std::vector<float> x = random_floats(c.K, 90);
      std::vector<float> x_lead(static_cast<size_t>(c.lead), 0.0f);
      x_lead.insert(x_lead.end(), x.begin(), x.end());
      const Weights w = make_weights(DataType::kBF16, random_floats(c.N * c.K, 91), c.lead);
      Floats d_x(x_lead), y_device = Floats::poisoned(c.N);
      DeviceBuffer<uint8_t> d_w(w.bytes);
      const __nv_bfloat16* wp = weight_ptr<__nv_bfloat16>(d_w, c.lead);
      const std::string what = "gemv progress " + shape({{"N", c.N},
                                                         {"K", c.K},
                                                         {"lead", c.lead},
                                                         {"rows", g.rows},
                                                         {"unroll", g.unroll},
                                                         {"max_blocks", c.max_blocks},
                                                         {"every", c.every}});
      // The reference: the same launch into device memory.
      const cuda::GemvTarget<__nv_bfloat16> on_device{wp, nullptr, y_device.get(), c.N};
      ASSERT_EQ(cudaSuccess,
                cuda::gemv_multi<__nv_bfloat16>(d_x.get() + c.lead, &on_device, 1, 1, c.K, launch_, g, c.max_blocks))
          << what;
      sync();
      const std::vector<float> want = y_device.download();
      float* y_host = nullptr;
      uint32_t* slots = nullptr;
      ASSERT_EQ(cudaSuccess,
                cudaHostAlloc(reinterpret_cast<void**>(&y_host), static_cast<size_t>(c.N) * 4, cudaHostAllocMapped));
      ASSERT_EQ(cudaSuccess,
                cudaHostAlloc(reinterpret_cast<void**>(&slots), (kSlots + kGuardSlotCount) * 4, cudaHostAllocMapped));
      std::fill(y_host, y_host + c.N, kNaN);
      std::fill(slots, slots + kSlots, 0u);
      std::fill(slots + kSlots, slots + kSlots + kGuardSlotCount, kSlotGuard);
      const cuda::GemvTarget<__nv_bfloat16> on_host{wp, nullptr, y_host, c.N};
      ASSERT_EQ(cudaSuccess, cuda::gemv_multi<__nv_bfloat16>(d_x.get() + c.lead, &on_host, 1, 1, c.K, launch_, g,
                                                             c.max_blocks, nullptr, {slots, kSlots, c.every}))
          << what;
      // While it runs: what the slots vouch for is final.
      const auto least = [&] {
        uint32_t v = UINT32_MAX;
        for (int i = 0; i < kSlots; ++i) v = std::min(v, std::atomic_ref<uint32_t>(slots[i]).load());
        return static_cast<int64_t>(v);
      };
      int64_t checked = 0;  // elements
      int partial_polls = 0;
      bool early_wrong = false;
      for (;;) {
        const bool done = cudaStreamQuery(stream_) != cudaErrorNotReady;
        const int64_t there = std::min(least() / 4, c.N);
        if (there > 0 && there < c.N) ++partial_polls;
        for (; checked < there && !early_wrong; ++checked) {
          early_wrong = std::memcmp(&y_host[checked], &want[static_cast<size_t>(checked)], 4) != 0;
        }
        if (done || early_wrong) break;
      }
      sync();
      EXPECT_FALSE(early_wrong) << what << ": element " << checked - 1 << " was vouched for before it was stored";
      EXPECT_EQ(0, std::memcmp(y_host, want.data(), static_cast<size_t>(c.N) * 4)) << what;
      for (int i = 0; i < kSlots; ++i) EXPECT_EQ(slots[i], static_cast<uint32_t>(c.N * 4)) << what << ", slot " << i;
      for (int i = kSlots; i < kSlots + kGuardSlotCount; ++i)
        EXPECT_EQ(slots[i], kSlotGuard) << what << ", guard slot " << i;
      if (c.N > 4097) std::printf("%s: %d polls found part of y there\n", what.c_str(), partial_polls);
      CUDA_CHECK(cudaFreeHost(y_host));
      CUDA_CHECK(cudaFreeHost(slots));
    }
  }
  // Progress serves one row of one target, with slots.
  Floats dummy = Floats::poisoned(16);
  uint32_t slot = 0;
  const cuda::GemvTarget<float> one{dummy.get(), nullptr, dummy.get(), 1};
  const cuda::GemvTarget<float> two[2] = {one, one};
  EXPECT_EQ(cudaErrorInvalidValue, cuda::gemv_multi<float>(dummy.get(), &one, 1, 2, 1, launch_,
                                                           cuda::kGemvDefaultGeometry, 0, nullptr, {&slot, 1}))
      << "two rows";
  EXPECT_EQ(cudaErrorInvalidValue, cuda::gemv_multi<float>(dummy.get(), two, 2, 1, 1, launch_,
                                                           cuda::kGemvDefaultGeometry, 0, nullptr, {&slot, 1}))
      << "two targets";
  EXPECT_EQ(cudaErrorInvalidValue, cuda::gemv_multi<float>(dummy.get(), &one, 1, 1, 1, launch_,
                                                           cuda::kGemvDefaultGeometry, 0, nullptr, {&slot, 0}))
      << "no slots";
  EXPECT_EQ(cudaErrorInvalidValue, cuda::gemv_multi<float>(dummy.get(), &one, 1, 1, 1, launch_,
                                                           cuda::kGemvDefaultGeometry, 0, nullptr, {&slot, 1, 0}))
      << "a slot never moved";
}

TEST_F(CudaKernels, GemvBlocksCountsEveryOutputsBlocks) {
  const int64_t qkv_1b[3] = {1024, 256, 256}, qkv_mini[3] = {320, 80, 80}, one[1] = {1000};
  EXPECT_EQ(cuda::gemv_blocks(qkv_1b, 3, 1152, 2, {2, 2}), 384);
  EXPECT_EQ(cuda::gemv_blocks(qkv_1b, 3, 1152, 2, {4, 2}), 192);
  EXPECT_EQ(cuda::gemv_blocks(qkv_mini, 3, 320, 2, {2, 2}), 20 + 5 + 5);
  EXPECT_EQ(cuda::gemv_blocks(one, 1, 1152, 4, {2, 2}), 500);  // 288 chunks: 256 threads a row, 2 rows
  EXPECT_EQ(cuda::gemv_blocks(one, 1, 7, 2, {2, 2}), 63);      // 7 scalars: 32 threads a row, 16 rows
  EXPECT_EQ(cuda::gemv_blocks(one, 0, 1152, 2, {2, 2}), 0);
  EXPECT_GT(cuda::device_limits(0).sm_count, 0);
}

TEST_F(CudaKernels, GemvMultiMatchesSeparateLinears) {
  const int64_t K = 1152;
  // M = 1 once per geometry, M > 1 with the default.
  std::vector<std::pair<int64_t, cuda::GemvGeometry>> runs = {{2, cuda::kGemvDefaultGeometry},
                                                              {5, cuda::kGemvDefaultGeometry}};
  for (const cuda::GemvGeometry g : cuda::kGemvGeometries) runs.emplace_back(1, g);
  for (DataType type : kWeightTypes) {
    for (const auto& [M, geometry] : runs) {
      for (const std::vector<int64_t>& ns :
           {std::vector<int64_t>{256, 64, 64}, std::vector<int64_t>{6912, 6912}, std::vector<int64_t>{1, 7, 130, 3}}) {
        const std::vector<float> x = random_floats(M * K, 30);
        Floats d_x(x);
        std::vector<Weights> ws;
        std::vector<DeviceBuffer<uint8_t>> d_ws;
        std::vector<std::vector<float>> biases;
        std::vector<Floats> d_bs, ys;
        for (size_t i = 0; i < ns.size(); ++i) {
          ws.push_back(make_weights(type, random_floats(ns[i] * K, 31 + static_cast<uint32_t>(i))));
          d_ws.emplace_back(ws.back().bytes);
          biases.push_back(random_floats(ns[i], 40 + static_cast<uint32_t>(i)));
          d_bs.emplace_back(biases.back());
          ys.push_back(Floats::poisoned(M * ns[i]));
        }
        ASSERT_EQ(cudaSuccess, with_weight_type(type, [&](auto tag) {
                    using W = decltype(tag);
                    std::vector<cuda::GemvTarget<W>> targets;
                    for (size_t i = 0; i < ns.size(); ++i) {
                      // Odd targets without bias: both forms in one launch.
                      targets.push_back(
                          {weight_ptr<W>(d_ws[i], 0), i % 2 == 0 ? d_bs[i].get() : nullptr, ys[i].get(), ns[i]});
                    }
                    return cuda::gemv_multi<W>(d_x.get(), targets.data(), static_cast<int>(targets.size()), M, K,
                                               launch_, geometry);
                  }));
        sync();
        for (size_t i = 0; i < ns.size(); ++i) {
          std::vector<float> want(static_cast<size_t>(M * ns[i]));
          cpu::linear_small_m(x.data(), ws[i].rounded.data(), i % 2 == 0 ? biases[i].data() : nullptr, want.data(), M,
                              ns[i], K);
          const std::string what =
              std::string("gemv_multi ") + data_type_name(type) + " target " + std::to_string(i) + " " +
              shape({{"M", M}, {"N", ns[i]}, {"K", K}, {"rows", geometry.rows}, {"unroll", geometry.unroll}});
          EXPECT_TRUE(close(what, ys[i].download(), want, {}, reduction_slack(x, ws[i].rounded, M, ns[i], K)));
          EXPECT_TRUE(ys[i].guard_intact()) << what;
        }
      }
    }
  }
  Floats dummy = Floats::poisoned(1);
  EXPECT_EQ(cudaErrorInvalidValue, cuda::gemv<float>(dummy.get(), dummy.get(), nullptr, dummy.get(), 9, 1, 1, launch_))
      << "M above kGemvMaxRows";
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::gemv<float>(dummy.get(), dummy.get(), nullptr, dummy.get(), 1, 1, cuda::kGemvMaxK + 1, launch_))
      << "K above kGemvMaxK";
}

TEST_F(CudaKernels, GemvGatedEqualsLinearThenGatedActivation) {
  struct Case {
    int64_t M, N, K;
    bool bias;
    int lead;  // 1: misaligned x and weights (the scalar path)
  };
  const Case cases[] = {{1, 1, 1, false, 0},      {1, 7, 13, true, 0},       {3, 130, 1152, true, 0},
                        {8, 130, 1152, false, 0}, {1, 6912, 1152, false, 0}, {2, 5, 6912, true, 0},
                        {5, 33, 64, false, 1},    {1, 1152, 2304, false, 0}, {1, 33, 64, true, 1},
                        {1, 1152, 6912, true, 0}};
  std::vector<std::pair<Case, cuda::GemvGeometry>> runs;
  for (const Case& c : cases) {
    if (c.M > 1) {
      runs.emplace_back(c, cuda::kGemvDefaultGeometry);
    } else {
      for (const cuda::GemvGeometry g : cuda::kGemvGeometries) runs.emplace_back(c, g);
    }
  }
  for (DataType type : kWeightTypes) {
    for (cuda::GatedActivation act : {cuda::GatedActivation::kGeluTanh, cuda::GatedActivation::kSilu}) {
      for (const auto& [c, geometry] : runs) {
        const std::vector<float> x = random_floats(c.M * c.K, 50);
        const Weights wg = make_weights(type, random_floats(c.N * c.K, 51), c.lead);
        const Weights wu = make_weights(type, random_floats(c.N * c.K, 52), c.lead);
        const std::vector<float> bg = random_floats(c.N, 53), bu = random_floats(c.N, 54);
        std::vector<float> x_lead(static_cast<size_t>(c.lead), 0.0f);
        x_lead.insert(x_lead.end(), x.begin(), x.end());
        Floats d_x(x_lead), d_bg(bg), d_bu(bu);
        DeviceBuffer<uint8_t> d_wg(wg.bytes), d_wu(wu.bytes);
        Floats y = Floats::poisoned(c.M * c.N);
        ASSERT_EQ(cudaSuccess, with_weight_type(type, [&](auto tag) {
                    using W = decltype(tag);
                    return cuda::gemv_gated<W>(d_x.get() + c.lead, weight_ptr<W>(d_wg, c.lead),
                                               weight_ptr<W>(d_wu, c.lead), c.bias ? d_bg.get() : nullptr,
                                               c.bias ? d_bu.get() : nullptr, act, y.get(), c.M, c.N, c.K, launch_,
                                               geometry);
                  }));
        sync();
        const auto n = static_cast<size_t>(c.M * c.N);
        std::vector<float> gate(n), up(n), want(n);
        cpu::linear_small_m(x.data(), wg.rounded.data(), c.bias ? bg.data() : nullptr, gate.data(), c.M, c.N, c.K);
        cpu::linear_small_m(x.data(), wu.rounded.data(), c.bias ? bu.data() : nullptr, up.data(), c.M, c.N, c.K);
        if (act == cuda::GatedActivation::kGeluTanh) {
          cpu::gelu_tanh_mul(gate.data(), up.data(), want.data(), c.M * c.N);
        } else {
          cpu::silu_mul(gate.data(), up.data(), want.data(), c.M * c.N);
        }
        const std::vector<double> slack = gated_slack(x, wg.rounded, wu.rounded, gate, up, c.M, c.N, c.K);
        const std::string what = std::string("gemv_gated ") + data_type_name(type) +
                                 (act == cuda::GatedActivation::kGeluTanh ? " gelu " : " silu ") +
                                 shape({{"M", c.M},
                                        {"N", c.N},
                                        {"K", c.K},
                                        {"bias", c.bias},
                                        {"lead", c.lead},
                                        {"rows", geometry.rows},
                                        {"unroll", geometry.unroll}});
        EXPECT_TRUE(close(what, y.download(), want, {}, slack));
        EXPECT_TRUE(y.guard_intact()) << what;
      }
    }
  }
  Floats dummy = Floats::poisoned(1);
  EXPECT_EQ(cudaErrorInvalidValue, cuda::gemv_gated<float>(dummy.get(), dummy.get(), dummy.get(), nullptr, nullptr,
                                                           cuda::GatedActivation::kSilu, dummy.get(), 9, 1, 1, launch_))
      << "M above kGemvMaxRows";
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::gemv_gated<float>(dummy.get(), dummy.get(), dummy.get(), nullptr, nullptr,
                                    static_cast<cuda::GatedActivation>(7), dummy.get(), 1, 1, 1, launch_))
      << "unknown activation";
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::gemv_gated<float>(dummy.get(), dummy.get(), dummy.get(), nullptr, nullptr,
                                    cuda::GatedActivation::kSilu, dummy.get(), 1, 1, cuda::kGemvMaxK + 1, launch_))
      << "K above kGemvMaxK";
}

/// The input a GemvNormInput launch computes, as the CPU kernels do: sum = residual +
/// rms_norm(x, w_post), input = rms_norm(sum, w_next).
struct NormInputCase {
  std::vector<float> x, residual, sum, input;
  Weights w_post, w_next;
  NormInputCase(DataType type, int64_t K, uint32_t seed)
      : x(random_floats(K, seed, -4.0f, 4.0f)),
        residual(random_floats(K, seed + 1, -8.0f, 8.0f)),
        sum(static_cast<size_t>(K)),
        input(static_cast<size_t>(K)),
        w_post(make_weights(type, random_floats(K, seed + 2))),
        w_next(make_weights(type, random_floats(K, seed + 3))) {
    std::vector<float> normed(static_cast<size_t>(K));
    cpu::rms_norm(x.data(), w_post.rounded.data(), normed.data(), 1, K, 1e-6f, 1.0f);
    cpu::add(residual.data(), normed.data(), sum.data(), K);
    cpu::rms_norm(sum.data(), w_next.rounded.data(), input.data(), 1, K, 1e-6f, 1.0f);
  }
};

/// A NormInputCase on the device: its vectors, a poisoned sum and the launch's argument.
struct DeviceNormInput {
  Floats x, residual, sum;
  DeviceBuffer<uint8_t> w_post, w_next;
  explicit DeviceNormInput(const NormInputCase& c)
      : x(c.x),
        residual(c.residual),
        sum(Floats::poisoned(static_cast<int64_t>(c.x.size()))),
        w_post(c.w_post.bytes),
        w_next(c.w_next.bytes) {}
  template <typename W>
  cuda::GemvNormInput<W> get() const {
    return {x.get(), weight_ptr<W>(w_post, 0), residual.get(), sum.get(), weight_ptr<W>(w_next, 0), 1e-6f, 1.0f};
  }
  /// The launch wrote sum as the CPU does and touched nothing else of its own.
  ::testing::AssertionResult check(const std::string& what, const NormInputCase& c) const {
    if (x.download() != c.x || residual.download() != c.residual) {
      return ::testing::AssertionFailure() << what << ": x or residual changed";
    }
    if (!x.guard_intact() || !residual.guard_intact() || !sum.guard_intact()) {
      return ::testing::AssertionFailure() << what << ": a guard of x, residual or sum";
    }
    return close(what + " sum", sum.download(), c.sum);
  }
};

/// Twice the allowance for a reduction in another order: the input itself differs from the
/// CPU's by the norms' own reduction orders (a rounding or two of every element).
std::vector<double> doubled(std::vector<double> slack) {
  for (double& v : slack) v *= 2.0;
  return slack;
}

TEST_F(CudaKernels, GemvNormInputEqualsNormAddNormThenGemv) {
  struct Case {
    int64_t K;
    std::vector<int64_t> ns;  // gemv_multi targets
    int64_t gated_n;
  };
  // K: one 16-byte chunk of bf16, 66 quads (not a multiple of the 256 threads), the 1B's
  // hidden size, the largest served.
  const Case cases[] = {{8, {1, 7}, 3}, {264, {130, 3, 64}, 300}, {1152, {256, 64, 64}, 1152}, {4096, {40}, 70}};
  for (DataType type : kWeightTypes) {
    for (const Case& c : cases) {
      std::vector<std::pair<cuda::GemvGeometry, int64_t>> runs = {{cuda::kGemvDefaultGeometry, 0}};
      if (c.K == 1152) {
        for (const cuda::GemvGeometry g : cuda::kGemvGeometries) runs.emplace_back(g, 0);
        runs.emplace_back(cuda::GemvGeometry{2, 2}, 1);  // one block serves every unit
        runs.emplace_back(cuda::GemvGeometry{4, 2}, 3);
      }
      for (const auto& [geometry, max_blocks] : runs) {
        const std::string what =
            std::string("gemv with a norm input ") + data_type_name(type) + " " +
            shape({{"K", c.K}, {"rows", geometry.rows}, {"unroll", geometry.unroll}, {"max_blocks", max_blocks}});
        const NormInputCase in(type, c.K, 80);
        // gemv_multi, even targets with a bias.
        {
          DeviceNormInput d_in(in);
          std::vector<Weights> ws;
          std::vector<DeviceBuffer<uint8_t>> d_ws;
          std::vector<std::vector<float>> biases;
          std::vector<Floats> d_bs, ys;
          for (size_t i = 0; i < c.ns.size(); ++i) {
            ws.push_back(make_weights(type, random_floats(c.ns[i] * c.K, 90 + static_cast<uint32_t>(i))));
            d_ws.emplace_back(ws.back().bytes);
            biases.push_back(random_floats(c.ns[i], 95 + static_cast<uint32_t>(i)));
            d_bs.emplace_back(biases.back());
            ys.push_back(Floats::poisoned(c.ns[i]));
          }
          ASSERT_EQ(cudaSuccess, with_weight_type(type, [&](auto tag) {
                      using W = decltype(tag);
                      std::vector<cuda::GemvTarget<W>> targets;
                      for (size_t i = 0; i < c.ns.size(); ++i) {
                        targets.push_back(
                            {weight_ptr<W>(d_ws[i], 0), i % 2 == 0 ? d_bs[i].get() : nullptr, ys[i].get(), c.ns[i]});
                      }
                      const cuda::GemvNormInput<W> norm = d_in.get<W>();
                      return cuda::gemv_multi<W>(nullptr, targets.data(), static_cast<int>(targets.size()), 1, c.K,
                                                 launch_, geometry, max_blocks, &norm);
                    }));
          sync();
          EXPECT_TRUE(d_in.check(what + " (multi)", in));
          for (size_t i = 0; i < c.ns.size(); ++i) {
            std::vector<float> want(static_cast<size_t>(c.ns[i]));
            cpu::linear_small_m(in.input.data(), ws[i].rounded.data(), i % 2 == 0 ? biases[i].data() : nullptr,
                                want.data(), 1, c.ns[i], c.K);
            const std::string target = what + " target " + std::to_string(i) + " N=" + std::to_string(c.ns[i]);
            EXPECT_TRUE(close(target, ys[i].download(), want, {},
                              doubled(reduction_slack(in.input, ws[i].rounded, 1, c.ns[i], c.K))));
            EXPECT_TRUE(ys[i].guard_intact()) << target;
          }
        }
        // gemv_gated.
        for (cuda::GatedActivation act : {cuda::GatedActivation::kGeluTanh, cuda::GatedActivation::kSilu}) {
          DeviceNormInput d_in(in);
          const int64_t N = c.gated_n;
          const Weights wg = make_weights(type, random_floats(N * c.K, 100));
          const Weights wu = make_weights(type, random_floats(N * c.K, 101));
          DeviceBuffer<uint8_t> d_wg(wg.bytes), d_wu(wu.bytes);
          Floats y = Floats::poisoned(N);
          ASSERT_EQ(cudaSuccess, with_weight_type(type, [&](auto tag) {
                      using W = decltype(tag);
                      const cuda::GemvNormInput<W> norm = d_in.get<W>();
                      return cuda::gemv_gated<W>(nullptr, weight_ptr<W>(d_wg, 0), weight_ptr<W>(d_wu, 0), nullptr,
                                                 nullptr, act, y.get(), 1, N, c.K, launch_, geometry, max_blocks,
                                                 &norm);
                    }));
          sync();
          const std::string gated = what + (act == cuda::GatedActivation::kGeluTanh ? " gated gelu" : " gated silu");
          EXPECT_TRUE(d_in.check(gated, in));
          const auto n = static_cast<size_t>(N);
          std::vector<float> gate(n), up(n), want(n);
          cpu::linear_small_m(in.input.data(), wg.rounded.data(), nullptr, gate.data(), 1, N, c.K);
          cpu::linear_small_m(in.input.data(), wu.rounded.data(), nullptr, up.data(), 1, N, c.K);
          if (act == cuda::GatedActivation::kGeluTanh) {
            cpu::gelu_tanh_mul(gate.data(), up.data(), want.data(), N);
          } else {
            cpu::silu_mul(gate.data(), up.data(), want.data(), N);
          }
          EXPECT_TRUE(close(gated, y.download(), want, {},
                            doubled(gated_slack(in.input, wg.rounded, wu.rounded, gate, up, 1, N, c.K))));
          EXPECT_TRUE(y.guard_intact()) << gated;
        }
      }
    }
  }
}

TEST_F(CudaKernels, GemvNormInputRejectsWhatItDoesNotServe) {
  const int64_t K = 64;
  const NormInputCase in(DataType::kBF16, K, 110);
  DeviceNormInput d_in(in);
  const Weights w = make_weights(DataType::kBF16, random_floats(2 * K, 111));
  DeviceBuffer<uint8_t> d_w(w.bytes);
  Floats y = Floats::poisoned(2);
  using B = __nv_bfloat16;
  const cuda::GemvNormInput<B> good = d_in.get<B>();
  const auto multi = [&](const cuda::GemvNormInput<B>& norm, int64_t M, int64_t k, int64_t n = 2) {
    const cuda::GemvTarget<B> target{weight_ptr<B>(d_w, 0), nullptr, y.get(), n};
    return cuda::gemv_multi<B>(nullptr, &target, 1, M, k, launch_, cuda::kGemvDefaultGeometry, 0, &norm);
  };
  EXPECT_EQ(cudaErrorInvalidValue, multi(good, 2, K)) << "two rows";
  EXPECT_EQ(cudaErrorInvalidValue, multi(good, 1, cuda::kGemvNormMaxK + 8)) << "K above kGemvNormMaxK";
  EXPECT_EQ(cudaErrorInvalidValue, multi(good, 1, K - 4)) << "K not whole 16-byte chunks of bf16";
  EXPECT_EQ(cudaErrorInvalidValue, multi(good, 1, K, 0)) << "no output rows: nothing writes sum";
  cuda::GemvNormInput<B> bad = good;
  bad.residual = good.residual + 1;
  EXPECT_EQ(cudaErrorInvalidValue, multi(bad, 1, K)) << "unaligned residual";
  bad = good;
  bad.w_post = good.w_post + 1;
  EXPECT_EQ(cudaErrorInvalidValue, multi(bad, 1, K)) << "unaligned norm weight";
  bad = good;
  bad.sum = nullptr;
  EXPECT_EQ(cudaErrorInvalidValue, multi(bad, 1, K)) << "no sum";
  bad = good;
  bad.w_next = nullptr;
  EXPECT_EQ(cudaErrorInvalidValue, cuda::gemv_gated<B>(nullptr, weight_ptr<B>(d_w, 0), weight_ptr<B>(d_w, 0), nullptr,
                                                       nullptr, cuda::GatedActivation::kSilu, y.get(), 1, 1, K, launch_,
                                                       cuda::kGemvDefaultGeometry, 0, &bad))
      << "no next norm";
  EXPECT_EQ(cudaErrorInvalidValue, cuda::gemv_gated<B>(nullptr, weight_ptr<B>(d_w, 0), weight_ptr<B>(d_w, 0), nullptr,
                                                       nullptr, cuda::GatedActivation::kSilu, y.get(), 1, 0, K, launch_,
                                                       cuda::kGemvDefaultGeometry, 0, &good))
      << "a gated launch without outputs";
  sync();
  EXPECT_TRUE(std::isnan(y.download()[0]) && std::isnan(d_in.sum.download()[0])) << "nothing ran";
}

// ---- cuBLASLt GEMM ---------------------------------------------------------------------------------------

TEST_F(CudaKernels, CublasLtGemmMatchesCpu) {
  Result<std::unique_ptr<cuda::CublasLtGemm>> gemm = cuda::CublasLtGemm::create();
  ASSERT_TRUE(gemm.ok()) << gemm.status().to_string();
  EXPECT_EQ(cuda::CublasLtGemm::version().rfind("cublasLt ", 0), 0u) << cuda::CublasLtGemm::version();
  const LinearShape shapes[] = {{7, 13}, {64, 64}, {130, 1152}, {1152, 130}, {2304, 1152}, {13, 2304}};
  for (DataType type : kWeightTypes) {
    for (int64_t M : {1, 5, 127, 129, 300}) {
      for (LinearShape s : shapes) {
        const std::vector<float> x = random_floats(M * s.K, 50);
        const Weights w = make_weights(type, random_floats(s.N * s.K, 51));
        const std::vector<float> b = random_floats(s.N, 52);
        const bool bias = M == 5 || M == 129;
        Floats d_x(x), d_b(b);
        DeviceBuffer<uint8_t> d_w(w.bytes);
        DeviceBuffer<uint8_t> scratch =
            DeviceBuffer<uint8_t>::poisoned(std::max<int64_t>(1, cuda::CublasLtGemm::scratch_bytes(M, s.K, type)));
        Floats y = Floats::poisoned(M * s.N);
        const std::string what = std::string("cublasLt ") + data_type_name(type) + " " +
                                 shape({{"M", M}, {"N", s.N}, {"K", s.K}, {"bias", bias}});
        // bf16 / f16: cuBLASLt multiplies x rounded to W, so the reference does too.
        std::vector<float> xr(x.size());
        std::transform(x.begin(), x.end(), xr.begin(), [&](float v) { return round_to(type, v); });
        std::vector<float> want(static_cast<size_t>(M * s.N));
        std::vector<float> cpu_scratch(static_cast<size_t>(cpu::linear_blocked_scratch_floats(s.K)));
        cpu::linear_blocked(xr.data(), w.rounded.data(), bias ? b.data() : nullptr, want.data(), M, s.N, s.K,
                            cpu_scratch.data());
        // Tensor-core accumulation (and split-K) is not IEEE-ordered f32: 4x the slack there.
        std::vector<double> slack = reduction_slack(xr, w.rounded, M, s.N, s.K);
        for (double& v : slack) v *= type == DataType::kF32 ? 1.0 : 4.0;

        std::vector<cublasLtMatmulHeuristicResult_t> algos;
        const Status hs = (*gemm)->heuristics(M, s.N, s.K, type, 4, &algos);
        ASSERT_TRUE(hs.ok()) << what << ": " << hs.to_string();
        EXPECT_TRUE((*gemm)->algo_supports(algos.front().algo, M, s.N, s.K, type)) << what;
        // The first run picks the algorithm itself; the second is given the last candidate.
        const cublasLtMatmulAlgo_t* given = &algos.back().algo;
        for (const cublasLtMatmulAlgo_t* algo : {static_cast<const cublasLtMatmulAlgo_t*>(nullptr), given}) {
          const Status rs = (*gemm)->run(algo, d_x.get(), d_w.get(), type, bias ? d_b.get() : nullptr, y.get(), M, s.N,
                                         s.K, scratch.get(), launch_);
          ASSERT_TRUE(rs.ok()) << what << ": " << rs.to_string();
          sync();
          EXPECT_TRUE(close(what + (algo ? " (given algo)" : " (heuristic)"), y.download(), want, {}, slack));
          EXPECT_TRUE(y.guard_intact() && scratch.guard_intact()) << what;
        }
        if (type == DataType::kF32) continue;
        // The two halves (one conversion for several GEMMs of one x) give run()'s bytes.
        const std::vector<float> whole = y.download();
        Floats y2 = Floats::poisoned(M * s.N);
        ASSERT_TRUE(cuda::CublasLtGemm::convert_input(d_x.get(), type, M, s.K, scratch.get(), launch_).ok()) << what;
        const Status cs = (*gemm)->run_converted(given, scratch.get(), d_w.get(), type, bias ? d_b.get() : nullptr,
                                                 y2.get(), M, s.N, s.K, launch_);
        ASSERT_TRUE(cs.ok()) << what << ": " << cs.to_string();
        sync();
        EXPECT_EQ(y2.download(), whole) << what << ": convert_input + run_converted differ from run()";
        EXPECT_TRUE(y2.guard_intact() && scratch.guard_intact()) << what;
        if (bias) continue;
        // Output in the weights' type: the product rounded once, with its own algorithms.
        std::vector<cublasLtMatmulHeuristicResult_t> rounded_algos;
        const Status rh = (*gemm)->heuristics(M, s.N, s.K, type, 4, &rounded_algos, type);
        ASSERT_TRUE(rh.ok()) << what << ": " << rh.to_string();
        DeviceBuffer<uint16_t> y16 = DeviceBuffer<uint16_t>::poisoned(M * s.N);
        for (const cublasLtMatmulAlgo_t* algo :
             {static_cast<const cublasLtMatmulAlgo_t*>(nullptr),
              static_cast<const cublasLtMatmulAlgo_t*>(&rounded_algos.back().algo)}) {
          const Status rr =
              (*gemm)->run_converted_rounded(algo, scratch.get(), d_w.get(), type, y16.get(), M, s.N, s.K, launch_);
          ASSERT_TRUE(rr.ok()) << what << ": " << rr.to_string();
          sync();
          std::vector<float> got;
          for (uint16_t v : y16.download()) {
            got.push_back(type == DataType::kBF16 ? internal::bf16_to_f32(v) : internal::f16_to_f32(v));
          }
          // One rounding of the output on top: half an ulp of W, at most 2^-8 of the value for bf16,
          // 2^-11 for f16 (no split-K partial sum is rounded to W: heuristics() excludes those).
          const double ulp = type == DataType::kBF16 ? 1.0 / 256 : 1.0 / 2048;
          EXPECT_TRUE(close(what + " rounded to W", got, want, {1e-5, 1e-4 + ulp}, slack));
          EXPECT_TRUE(y16.guard_intact() && scratch.guard_intact()) << what << " rounded to W";
        }
      }
    }
  }
  Floats x(std::vector<float>(16, 1.0f));
  EXPECT_EQ(cuda::CublasLtGemm::convert_input(x.get(), DataType::kF32, 1, 16, x.get(), launch_).code(),
            StatusCode::kInvalidArgument)
      << "f32 weights: nothing to convert";
  EXPECT_EQ(cuda::CublasLtGemm::convert_input(x.get(), DataType::kBF16, 1, 16, nullptr, launch_).code(),
            StatusCode::kInvalidArgument)
      << "no scratch";
  EXPECT_EQ(
      (*gemm)->run_converted(nullptr, x.get(), x.get(), DataType::kF32, nullptr, x.get(), 1, 1, 16, launch_).code(),
      StatusCode::kInvalidArgument)
      << "f32 weights through run_converted";
  EXPECT_EQ(
      (*gemm)->run_converted_rounded(nullptr, x.get(), x.get(), DataType::kF32, x.get(), 1, 1, 16, launch_).code(),
      StatusCode::kInvalidArgument)
      << "f32 weights have no 16-bit output";
  std::vector<cublasLtMatmulHeuristicResult_t> none;
  EXPECT_EQ((*gemm)->heuristics(4, 4, 16, DataType::kBF16, 1, &none, DataType::kF16).code(),
            StatusCode::kInvalidArgument)
      << "bf16 weights, f16 output";
}

// ---- attention --------------------------------------------------------------------------------------------

struct AttentionCase {
  int64_t heads, kv_heads, head_dim, window;
};
constexpr AttentionCase kAttentionCases[] = {{4, 1, 8, 0},    {4, 1, 80, 3},  {4, 1, 256, 512}, {4, 2, 8, 3},
                                             {4, 2, 80, 512}, {4, 2, 256, 0}, {8, 8, 8, 512},   {8, 8, 80, 0},
                                             {8, 8, 256, 3},  {4, 1, 256, 0}, {4, 2, 12, 5}};
constexpr int64_t kMaxCtx = 1024;

/// The limits of a device with `sms` SMs and nothing else known: the split counts the tests
/// expect follow from the SM count alone, whatever GPU runs the tests.
cuda::DeviceLimits with_sms(int sms) {
  cuda::DeviceLimits limits;
  limits.sm_count = sms;
  return limits;
}

/// Caches [kMaxCtx, kv_heads * hd] with random rows where some query can look and NaN in
/// every other row, so that a kernel reading outside [lo, p] produces NaN.
std::vector<float> make_cache(const AttentionCase& c, const std::vector<int64_t>& pos, uint32_t seed) {
  const int64_t width = c.kv_heads * c.head_dim;
  std::vector<float> cache = random_floats(kMaxCtx * width, seed);
  const int64_t hi = *std::max_element(pos.begin(), pos.end());
  int64_t lo = hi;
  for (int64_t p : pos) lo = std::min(lo, c.window > 0 ? std::max<int64_t>(0, p - c.window + 1) : 0);
  for (int64_t j = 0; j < kMaxCtx; ++j) {
    if (j < lo || j > hi) std::fill_n(cache.begin() + j * width, width, kNaN);
  }
  return cache;
}

enum class AttentionKernel { kDecode, kPrefill, kPrefillMma };

/// Runs one attention kernel and returns its output (checking sentinels, partials included).
std::vector<float> run_attention(AttentionKernel kernel, const AttentionCase& c, const std::vector<float>& q,
                                 const Floats& kc, const Floats& vc, const Indices& pos, int64_t T, int max_splits,
                                 const cuda::Launch& launch, int* error_flag = nullptr) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  Floats d_q(q);
  Floats out = Floats::poisoned(T * c.heads * c.head_dim);
  int64_t scratch = cuda::attention_prefill_scratch_floats(T, c.heads, c.head_dim, *launch.limits);
  if (kernel == AttentionKernel::kDecode) {
    scratch = cuda::attention_decode_partials_floats(T, c.heads, c.head_dim, max_splits);
  } else if (kernel == AttentionKernel::kPrefillMma) {
    scratch = cuda::attention_prefill_mma_scratch_floats(T, c.heads, c.kv_heads, c.head_dim, kMaxCtx, *launch.limits);
  }
  Floats partials = Floats::poisoned(std::max<int64_t>(1, scratch));
  cudaError_t err;
  if (kernel == AttentionKernel::kDecode) {
    err = cuda::attention_decode(d_q.get(), nullptr, nullptr, kc.get(), vc.get(), pos.get(), pos.i64, out.get(), T,
                                 c.heads, c.kv_heads, c.head_dim, kMaxCtx, c.window, scale, partials.get(), max_splits,
                                 error_flag, launch);
  } else if (kernel == AttentionKernel::kPrefillMma) {
    err = cuda::attention_prefill_mma(d_q.get(), nullptr, nullptr, kc.get(), vc.get(), pos.get(), pos.i64, out.get(), T,
                                      c.heads, c.kv_heads, c.head_dim, kMaxCtx, c.window, scale, partials.get(),
                                      error_flag, launch);
  } else {
    err = cuda::attention_prefill(d_q.get(), kc.get(), vc.get(), pos.get(), pos.i64, out.get(), T, c.heads, c.kv_heads,
                                  c.head_dim, kMaxCtx, c.window, scale, partials.get(), launch);
  }
  CUDA_CHECK(err);
  CUDA_CHECK(cudaStreamSynchronize(launch.stream));
  if (!out.guard_intact() || !partials.guard_intact()) throw std::runtime_error("attention wrote past its outputs");
  return out.download();
}

std::vector<float> cpu_attention(const AttentionCase& c, const std::vector<float>& q, const std::vector<float>& kc,
                                 const std::vector<float>& vc, const std::vector<int64_t>& pos) {
  cpu::AttentionShape s;
  s.T = static_cast<int64_t>(pos.size());
  s.heads = c.heads;
  s.kv_heads = c.kv_heads;
  s.head_dim = c.head_dim;
  s.window = c.window;
  s.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  std::vector<float> out(static_cast<size_t>(s.T * c.heads * c.head_dim));
  std::vector<float> scratch(static_cast<size_t>(cpu::attention_scratch_floats(s, kMaxCtx)));
  cpu::attention_rowwise(q.data(), kc.data(), vc.data(), pos.data(), DataType::kI64, out.data(), s, scratch.data());
  return out;
}

std::string attention_name(const char* kernel, const AttentionCase& c, const std::vector<int64_t>& pos, int splits) {
  return std::string(kernel) + " " +
         shape({{"heads", c.heads},
                {"kv", c.kv_heads},
                {"hd", c.head_dim},
                {"window", c.window},
                {"T", static_cast<int64_t>(pos.size())},
                {"first_pos", pos.front()},
                {"max_splits", splits}});
}

TEST_F(CudaKernels, AttentionDecodeMatchesCpu) {
  // A fresh sequence (positions from 0) and decode steps after a filled cache (700, 701).
  const std::vector<std::vector<int64_t>> position_sets = {{0}, {0, 1}, iota(0, 7), {700}, {700, 701}};
  for (const AttentionCase& c : kAttentionCases) {
    for (const std::vector<int64_t>& pos : position_sets) {
      const auto T = static_cast<int64_t>(pos.size());
      const std::vector<float> q = random_floats(T * c.heads * c.head_dim, 60);
      const std::vector<float> kc = make_cache(c, pos, 61), vc = make_cache(c, pos, 62);
      Floats d_kc(kc), d_vc(vc);
      const std::vector<float> want = cpu_attention(c, q, kc, vc, pos);
      for (bool pos_i64 : {false, true}) {
        Indices d_pos(pos_i64, pos);
        for (int max_splits : {1, 16}) {
          const std::vector<float> got =
              run_attention(AttentionKernel::kDecode, c, q, d_kc, d_vc, d_pos, T, max_splits, launch_);
          EXPECT_TRUE(close(attention_name("attention_decode", c, pos, max_splits), got, want, {2e-5, 1e-4}));
        }
      }
    }
  }
}

TEST_F(CudaKernels, AttentionDecodeIsTheSameForAnyNumberOfSplits) {
  const AttentionCase c = {4, 1, 256, 0};
  const std::vector<int64_t> pos = {700, 701};
  const std::vector<float> q = random_floats(2 * c.heads * c.head_dim, 70);
  const std::vector<float> kc = make_cache(c, pos, 71), vc = make_cache(c, pos, 72);
  Floats d_kc(kc), d_vc(vc);
  Indices d_pos(true, pos);
  const std::vector<float> want = cpu_attention(c, q, kc, vc, pos);
  const std::vector<float> one = run_attention(AttentionKernel::kDecode, c, q, d_kc, d_vc, d_pos, 2, 1, launch_);
  EXPECT_TRUE(close("decode, 1 split", one, want, {2e-5, 1e-4}));
  for (int max_splits : {4, 16, 64, 256}) {
    const std::vector<float> got =
        run_attention(AttentionKernel::kDecode, c, q, d_kc, d_vc, d_pos, 2, max_splits, launch_);
    EXPECT_TRUE(close("decode splits " + std::to_string(max_splits) + " vs 1", got, one, {1e-5, 1e-5}));
  }
  EXPECT_EQ(cuda::attention_decode_splits(1024, 0, 16), 16);
  EXPECT_EQ(cuda::attention_decode_splits(1024, 3, 16), 1) << "a 3-key window needs no split";
  EXPECT_EQ(cuda::attention_decode_splits(100, 0, 64), 4) << "at least 32 keys per split";
}

// The splits' partials combine inside a thread-block cluster where the sm_90 code runs (up to
// 16 splits), else in a second kernel through the partials. Both paths against the CPU and
// each other: the second kernel's is taken here on any GPU by launching with limits that say
// the sm_90 code does not run (a GPU without clusters; no programmatic dependent launch
// either). Where it does not run, both launches take the second kernel.
TEST_F(CudaKernels, AttentionDecodeCombinesInAClusterOrInASecondKernel) {
  cuda::DeviceLimits no_clusters = *launch_.limits;
  no_clusters.hopper_code_runs = false;
  const cuda::Launch second_kernel{launch_.stream, false, false, &no_clusters};
  const std::vector<int64_t> pos = {700, 701};
  for (const AttentionCase& c : kAttentionCases) {
    const std::vector<float> q = random_floats(2 * c.heads * c.head_dim, 73);
    const std::vector<float> kc = make_cache(c, pos, 74), vc = make_cache(c, pos, 75);
    Floats d_kc(kc), d_vc(vc);
    Indices d_pos(false, pos);
    const std::vector<float> want = cpu_attention(c, q, kc, vc, pos);
    for (int max_splits : {2, 16}) {
      const std::string what = attention_name("attention_decode", c, pos, max_splits);
      const std::vector<float> cluster =
          run_attention(AttentionKernel::kDecode, c, q, d_kc, d_vc, d_pos, 2, max_splits, launch_);
      const std::vector<float> second =
          run_attention(AttentionKernel::kDecode, c, q, d_kc, d_vc, d_pos, 2, max_splits, second_kernel);
      EXPECT_TRUE(close(what + ", cluster combine", cluster, want, {2e-5, 1e-4}));
      EXPECT_TRUE(close(what + ", combine kernel", second, want, {2e-5, 1e-4}));
      EXPECT_TRUE(close(what + ", cluster vs combine kernel", cluster, second, {1e-5, 1e-5}));
    }
  }
}

TEST_F(CudaKernels, AttentionDecodeWithNewRowsEqualsCacheWriteThenAttention) {
  // The new rows of the caches hold NaN before the call: reading them instead of k_new /
  // v_new would show. T = 1 is the fused path, T = 3 the kv_cache_write + attention one.
  // positions_from_host: the kernel loads its first keys before waiting for the previous
  // kernel, which here is the one writing k_new / v_new (NaN until then): a key p read early,
  // from k_new or from the cache, would show as NaN. Positions 2 and 33 put p in a warp's
  // first step.
  for (const AttentionCase& c : kAttentionCases) {
    for (const std::vector<int64_t>& pos : {std::vector<int64_t>{0}, std::vector<int64_t>{2}, std::vector<int64_t>{33},
                                            std::vector<int64_t>{700}, std::vector<int64_t>{300, 301, 302}}) {
      const auto T = static_cast<int64_t>(pos.size());
      const int64_t width = c.kv_heads * c.head_dim;
      const std::vector<float> q = random_floats(T * c.heads * c.head_dim, 63);
      const std::vector<float> k_new = random_floats(T * width, 64), v_new = random_floats(T * width, 65);
      std::vector<float> kc = make_cache(c, pos, 66), vc = make_cache(c, pos, 67);
      for (int64_t t = 0; t < T; ++t) {
        std::fill_n(kc.begin() + pos[t] * width, width, kNaN);
        std::fill_n(vc.begin() + pos[t] * width, width, kNaN);
      }
      for (const auto& [max_splits, from_host] : {std::pair{1, false}, std::pair{16, false}, std::pair{64, false},
                                                  std::pair{1, true}, std::pair{16, true}, std::pair{64, true}}) {
        const std::vector<float> nans(static_cast<size_t>(T * width), kNaN),
            zeros(static_cast<size_t>(T * width), 0.0f);
        Floats d_kc(kc), d_vc(vc), d_k_src(k_new), d_v_src(v_new), d_k_new(nans), d_v_new(nans), d_zero(zeros), d_q(q);
        Indices d_pos(false, pos);
        Floats out = Floats::poisoned(T * c.heads * c.head_dim);
        Floats partials = Floats::poisoned(cuda::attention_decode_partials_floats(T, c.heads, c.head_dim, max_splits));
        sync();
        ASSERT_EQ(cudaSuccess, cuda::add(d_k_src.get(), d_zero.get(), d_k_new.get(), T * width, launch_));
        ASSERT_EQ(cudaSuccess, cuda::add(d_v_src.get(), d_zero.get(), d_v_new.get(), T * width, launch_));
        ASSERT_EQ(cudaSuccess,
                  cuda::attention_decode(d_q.get(), d_k_new.get(), d_v_new.get(), d_kc.get(), d_vc.get(), d_pos.get(),
                                         false, out.get(), T, c.heads, c.kv_heads, c.head_dim, kMaxCtx, c.window,
                                         1.0f / std::sqrt(static_cast<float>(c.head_dim)), partials.get(), max_splits,
                                         flag(), launch_, from_host));
        EXPECT_EQ(take_flag(), 0);
        sync();
        std::vector<float> kc_want = kc, vc_want = vc;
        for (int64_t t = 0; t < T; ++t) {
          std::copy_n(k_new.begin() + t * width, width, kc_want.begin() + pos[t] * width);
          std::copy_n(v_new.begin() + t * width, width, vc_want.begin() + pos[t] * width);
        }
        const std::string what = attention_name(
            from_host ? "attention_decode with new rows, first keys early" : "attention_decode with new rows", c, pos,
            max_splits);
        EXPECT_TRUE(close(what, out.download(), cpu_attention(c, q, kc_want, vc_want, pos), {2e-5, 1e-4}));
        // The caches: the new rows written, every other row as it was (NaN rows compare equal).
        const std::vector<float> kc_got = d_kc.download(), vc_got = d_vc.download();
        size_t differ = 0;
        for (size_t i = 0; i < kc_got.size(); ++i) {
          const auto same = [](float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); };
          differ += !same(kc_got[i], kc_want[i]) || !same(vc_got[i], vc_want[i]);
        }
        EXPECT_EQ(differ, 0u) << what << ": cache elements not as kv_cache_write leaves them";
        EXPECT_TRUE(out.guard_intact() && d_kc.guard_intact() && d_vc.guard_intact()) << what;
      }
    }
  }
}

// attention_decode_head_norm (the q / k norms and RoPE inside the decode attention) against
// head_norm_rope then attention_decode on the same device: the output, and the caches with the
// rotated key and v written at row p and every other row untouched. bf16 norm weights for every
// case, f32 and f16 for the first (the weights are read as the type says, nothing else
// depends on it); head dims 8, 12, 80 and 256; kG 1, 2 and 8 (64 heads on 8 KV heads: a warp
// normalizes two heads);
// one split, a cluster, more splits than a cluster takes; positions that put p in a warp's first
// step; an uploaded angle table and computed angles; the first keys loaded before the wait or
// not. The projections are written by a kernel launched right before (NaN until then), and the
// caches hold NaN at row p: reading either early shows.
TEST_F(CudaKernels, AttentionDecodeHeadNormEqualsHeadNormRopeThenAttention) {
  constexpr AttentionCase kCases[] = {{4, 1, 256, 512}, {4, 1, 256, 0}, {4, 2, 80, 3}, {8, 8, 8, 0},
                                      {4, 2, 12, 5},    {16, 4, 80, 0}, {64, 8, 64, 0}};
  for (DataType type : kWeightTypes) {
    for (const AttentionCase& c : kCases) {
      if (type != DataType::kBF16 && &c != &kCases[0]) continue;
      for (int64_t p : {0, 2, 33, 700}) {
        const std::vector<int64_t> pos = {p};
        const int64_t width = c.kv_heads * c.head_dim, hd = c.head_dim;
        const std::vector<float> q = random_floats(c.heads * hd, 81, -3.0f, 3.0f);
        const std::vector<float> k = random_floats(width, 82, -3.0f, 3.0f), v = random_floats(width, 83);
        const Weights wq = make_weights(type, random_floats(hd, 84)), wk = make_weights(type, random_floats(hd, 85));
        DeviceBuffer<uint8_t> d_wq(wq.bytes), d_wk(wk.bytes);
        std::vector<float> kc = make_cache(c, pos, 86), vc = make_cache(c, pos, 87);
        std::fill_n(kc.begin() + p * width, width, kNaN);
        std::fill_n(vc.begin() + p * width, width, kNaN);
        std::vector<float> freq;
        for (int64_t i = 0; i < hd / 2; ++i) freq.push_back(cpu::rope_inv_freq(1e4f, i, hd));
        Floats d_freq(freq);
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        for (int max_splits : {1, 16, 64}) {
          for (bool from_host : {false, true}) {
            const bool table = max_splits != 16;
            const std::string what = attention_name("attention_decode_head_norm", c, pos, max_splits) + " " +
                                     data_type_name(type) + (from_host ? " early keys" : "") +
                                     (table ? " angle table" : " computed angles");
            const std::vector<float> nans_q(q.size(), kNaN), nans_kv(static_cast<size_t>(width), kNaN);
            const std::vector<float> zeros(q.size(), 0.0f);
            Floats d_q_src(q), d_k_src(k), d_v_src(v), d_zero(zeros);
            Floats d_q(nans_q), d_k(nans_kv), d_v(nans_kv), d_kc(kc), d_vc(vc), d_kc_want(kc), d_vc_want(vc);
            Floats q_rot = Floats::poisoned(c.heads * hd), k_rot = Floats::poisoned(width);
            Floats out = Floats::poisoned(c.heads * hd), want = Floats::poisoned(c.heads * hd);
            const int64_t floats = cuda::attention_decode_partials_floats(1, c.heads, hd, max_splits);
            Floats partials = Floats::poisoned(floats), partials_want = Floats::poisoned(floats);
            Indices d_pos(p % 2 == 0, pos);
            sync();
            ASSERT_EQ(
                cudaSuccess, with_weight_type(type, [&](auto tag) -> cudaError_t {
                  using W = decltype(tag);
                  const W* q_w = weight_ptr<W>(d_wq, 0);
                  const W* k_w = weight_ptr<W>(d_wk, 0);
                  const float* inv_freq = table ? d_freq.get() : nullptr;
                  // The unfused chain: head_norm_rope, then the attention of the rotated rows.
                  const cuda::HeadNormRope<W> parts[2] = {
                      {d_q_src.get(), q_w, q_rot.get(), c.heads, 1e4f, 1.0f, inv_freq},
                      {d_k_src.get(), k_w, k_rot.get(), c.kv_heads, 1e4f, 1.0f, inv_freq}};
                  cudaError_t err =
                      cuda::head_norm_rope<W>(parts, 2, d_pos.get(), d_pos.i64, 1, hd, 1e-6f, 1.0f, flag(), launch_);
                  if (err != cudaSuccess) return err;
                  err =
                      cuda::attention_decode(q_rot.get(), k_rot.get(), d_v_src.get(), d_kc_want.get(), d_vc_want.get(),
                                             d_pos.get(), d_pos.i64, want.get(), 1, c.heads, c.kv_heads, hd, kMaxCtx,
                                             c.window, scale, partials_want.get(), max_splits, flag(), launch_);
                  if (err != cudaSuccess) return err;
                  // The fused launch, right behind the kernels that write its inputs.
                  for (auto [src, dst, n] : {std::tuple{&d_q_src, &d_q, c.heads * hd},
                                             std::tuple{&d_k_src, &d_k, width}, std::tuple{&d_v_src, &d_v, width}}) {
                    err = cuda::add(src->get(), d_zero.get(), dst->get(), n, launch_);
                    if (err != cudaSuccess) return err;
                  }
                  const cuda::AttentionHeadNorm<W> norm{q_w, k_w, 1e-6f, 1.0f, 1e4f, 1.0f, inv_freq};
                  return cuda::attention_decode_head_norm<W>(d_q.get(), d_k.get(), d_v.get(), d_kc.get(), d_vc.get(),
                                                             d_pos.get(), d_pos.i64, out.get(), c.heads, c.kv_heads, hd,
                                                             kMaxCtx, c.window, scale, norm, partials.get(), max_splits,
                                                             flag(), launch_, from_host);
                }));
            EXPECT_EQ(take_flag(), 0) << what;
            EXPECT_TRUE(close(what, out.download(), want.download(), {1e-5, 1e-4})) << what;
            // The caches: row p holds the rotated key (to the RMS sums' order) and v; every other
            // row is bit for bit what it was.
            const std::vector<float> kc_got = d_kc.download(), vc_got = d_vc.download();
            const std::vector<float> kc_want = d_kc_want.download(), vc_want = d_vc_want.download();
            const auto row = [&](const std::vector<float>& cache) {
              return std::vector<float>(cache.begin() + p * width, cache.begin() + (p + 1) * width);
            };
            EXPECT_TRUE(close(what + " key row", row(kc_got), row(kc_want), {1e-6, 1e-5}));
            EXPECT_EQ(row(vc_got), row(vc_want)) << what;
            size_t differ = 0;
            for (size_t i = 0; i < kc_got.size(); ++i) {
              if (static_cast<int64_t>(i) / width == p) continue;
              const auto same = [](float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); };
              differ += !same(kc_got[i], kc[i]) || !same(vc_got[i], vc[i]);
            }
            EXPECT_EQ(differ, 0u) << what << ": cache rows other than p changed";
            EXPECT_TRUE(out.guard_intact() && partials.guard_intact() && d_kc.guard_intact() && d_vc.guard_intact() &&
                        d_q.guard_intact() && d_k.guard_intact() && d_v.guard_intact())
                << what;
          }
        }
      }
    }
  }
}

/// Whether a and b hold the same bits (NaN rows included).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A position outside the cache gives NaN rows, writes no cache row and sets the flag, as
// head_norm_rope then attention_decode do; what the launch cannot serve is rejected.
TEST_F(CudaKernels, AttentionDecodeHeadNormBadPositionAndBadArguments) {
  const AttentionCase c = {4, 1, 256, 0};
  const int64_t hd = c.head_dim, width = c.kv_heads * hd;
  const std::vector<float> kc = make_cache(c, {5}, 91), vc = make_cache(c, {5}, 92);
  const Weights w = make_weights(DataType::kBF16, random_floats(hd, 93));
  DeviceBuffer<uint8_t> d_w(w.bytes);
  const auto* wp = weight_ptr<__nv_bfloat16>(d_w, 0);
  const cuda::AttentionHeadNorm<__nv_bfloat16> norm{wp, wp, 1e-6f, 1.0f, 1e4f, 1.0f, nullptr};
  Floats d_q(random_floats(c.heads * hd, 94)), d_k(random_floats(width, 95)), d_v(random_floats(width, 96));
  Floats partials = Floats::poisoned(cuda::attention_decode_partials_floats(1, c.heads, hd, 64));
  const float scale = 1.0f / 16.0f;
  for (int64_t p : {int64_t{-1}, kMaxCtx}) {
    for (bool from_host : {false, true}) {
      Floats d_kc(kc), d_vc(vc);
      Floats out = Floats::poisoned(c.heads * hd);
      Indices d_pos(true, {p});
      ASSERT_EQ(cudaSuccess,
                cuda::attention_decode_head_norm<__nv_bfloat16>(
                    d_q.get(), d_k.get(), d_v.get(), d_kc.get(), d_vc.get(), d_pos.get(), true, out.get(), c.heads,
                    c.kv_heads, hd, kMaxCtx, c.window, scale, norm, partials.get(), 64, flag(), launch_, from_host));
      EXPECT_EQ(take_flag(), 1) << "position " << p;
      const std::vector<float> got = out.download();
      EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](float x) { return std::isnan(x); })) << "position " << p;
      EXPECT_TRUE(same_bits(d_kc.download(), kc)) << "position " << p << ": the key cache changed";
      EXPECT_TRUE(same_bits(d_vc.download(), vc)) << "position " << p << ": the value cache changed";
    }
  }
  Floats d_kc(kc), d_vc(vc);
  Floats out = Floats::poisoned(c.heads * hd);
  Indices d_pos(true, {5});
  const auto launch = [&](const float* k, int64_t head_dim, const cuda::AttentionHeadNorm<__nv_bfloat16>& n) {
    return cuda::attention_decode_head_norm<__nv_bfloat16>(d_q.get(), k, d_v.get(), d_kc.get(), d_vc.get(), d_pos.get(),
                                                           true, out.get(), c.heads, c.kv_heads, head_dim, kMaxCtx, 0,
                                                           scale, n, partials.get(), 64, flag(), launch_);
  };
  cuda::AttentionHeadNorm<__nv_bfloat16> no_q = norm, no_k = norm;
  no_q.q_w = nullptr;
  no_k.k_w = nullptr;
  EXPECT_EQ(launch(nullptr, hd, norm), cudaErrorInvalidValue) << "no new key";
  EXPECT_EQ(launch(d_k.get(), 255, norm), cudaErrorInvalidValue) << "odd head_dim";
  EXPECT_EQ(launch(d_k.get(), 512, norm), cudaErrorInvalidValue) << "head_dim past the attention's limit";
  EXPECT_EQ(launch(d_k.get(), hd, no_q), cudaErrorInvalidValue) << "no q norm weights";
  EXPECT_EQ(launch(d_k.get(), hd, no_k), cudaErrorInvalidValue) << "no k norm weights";
  sync();
  EXPECT_TRUE(same_bits(d_kc.download(), kc)) << "a rejected launch wrote the cache";
  EXPECT_EQ(take_flag(), 0);
}

TEST_F(CudaKernels, AttentionPrefillMatchesCpu) {
  for (const AttentionCase& c : kAttentionCases) {
    for (int64_t T : {1, 2, 7, 33, 129}) {
      // From 0 (a prompt), and a chunk continuing at 700 (chunked prefill after a filled cache).
      for (int64_t start : {int64_t{0}, int64_t{700}}) {
        if (start == 700 && T > 33) continue;
        const std::vector<int64_t> pos = iota(start, T);
        const std::vector<float> q = random_floats(T * c.heads * c.head_dim, 80);
        const std::vector<float> kc = make_cache(c, pos, 81), vc = make_cache(c, pos, 82);
        Floats d_kc(kc), d_vc(vc);
        Indices d_pos(T % 2 == 0, pos);
        const std::vector<float> got = run_attention(AttentionKernel::kPrefill, c, q, d_kc, d_vc, d_pos, T, 1, launch_);
        EXPECT_TRUE(
            close(attention_name("attention_prefill", c, pos, 0), got, cpu_attention(c, q, kc, vc, pos), {2e-5, 1e-4}));
      }
    }
  }
}

TEST_F(CudaKernels, AttentionPrefillSplitOrNotMatchesCpu) {
  // 32 heads: 300 tokens give 19 * 32 = 608 row blocks (no split), 40 tokens 96 (split 6
  // ways, combined by the second kernel); causal and sliding.
  const cuda::DeviceLimits sms132 = with_sms(132);
  EXPECT_EQ(cuda::attention_prefill_splits(300, 32, sms132), 1);
  EXPECT_EQ(cuda::attention_prefill_splits(40, 32, sms132), 6);
  EXPECT_EQ(cuda::attention_prefill_splits(40, 32, with_sms(66)), 3) << "half the SMs, half the blocks";
  EXPECT_EQ(cuda::attention_prefill_splits(1, 4, sms132), 8) << "at most 8 splits";
  EXPECT_EQ(cuda::attention_prefill_scratch_floats(300, 32, 64, sms132),
            cuda::attention_decode_partials_floats(256, 32, 64, 2))
      << "256 tokens split 2 ways: the largest tokens x splits up to 300";
  for (const AttentionCase& c : {AttentionCase{32, 8, 64, 0}, AttentionCase{32, 8, 64, 100}}) {
    for (int64_t T : {40, 300}) {
      const std::vector<int64_t> pos = iota(5, T);
      const std::vector<float> q = random_floats(T * c.heads * c.head_dim, 83);
      const std::vector<float> kc = make_cache(c, pos, 84), vc = make_cache(c, pos, 85);
      Floats d_kc(kc), d_vc(vc);
      Indices d_pos(true, pos);
      const std::vector<float> got = run_attention(AttentionKernel::kPrefill, c, q, d_kc, d_vc, d_pos, T, 1, launch_);
      const std::string what =
          attention_name("attention_prefill", c, pos, cuda::attention_prefill_splits(T, c.heads, *launch_.limits));
      EXPECT_TRUE(close(what, got, cpu_attention(c, q, kc, vc, pos), {2e-5, 1e-4}));
    }
  }
}

TEST_F(CudaKernels, AttentionBadPositionGivesNaNRowsAndBadShapesAreRejected) {
  const AttentionCase c = {4, 2, 80, 0};
  const std::vector<int64_t> pos = {5, kMaxCtx, 6};  // the middle one is past the cache
  const std::vector<float> q = random_floats(3 * c.heads * c.head_dim, 90);
  Floats d_kc(random_floats(kMaxCtx * c.kv_heads * c.head_dim, 91));
  Floats d_vc(random_floats(kMaxCtx * c.kv_heads * c.head_dim, 92));
  Indices d_pos(false, pos);
  const int64_t row = c.heads * c.head_dim;
  for (AttentionKernel kernel : {AttentionKernel::kDecode, AttentionKernel::kPrefill, AttentionKernel::kPrefillMma}) {
    const std::vector<float> got = run_attention(kernel, c, q, d_kc, d_vc, d_pos, 3, 16, launch_, flag());
    // The decode kernel reports the bad position (the runtime reads the flag); prefill's is
    // reported by the KV-cache write that runs before it.
    EXPECT_EQ(take_flag(), kernel == AttentionKernel::kDecode ? 1 : 0);
    EXPECT_TRUE(all_nan("row of the bad position", got, row, 2 * row));
    EXPECT_TRUE(std::all_of(got.begin(), got.begin() + row, [](float v) { return std::isfinite(v); }));
    EXPECT_TRUE(std::all_of(got.begin() + 2 * row, got.end(), [](float v) { return std::isfinite(v); }));
  }
  Floats out = Floats::poisoned(1);
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::attention_decode(out.get(), nullptr, nullptr, out.get(), out.get(), d_pos.get(), false, out.get(), 1,
                                   4, 1, 300, kMaxCtx, 0, 1.0f, out.get(), 4, nullptr, launch_))
      << "head_dim above 256";
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::attention_decode(out.get(), out.get(), nullptr, out.get(), out.get(), d_pos.get(), false, out.get(),
                                   1, 4, 1, 8, kMaxCtx, 0, 1.0f, out.get(), 4, nullptr, launch_))
      << "k_new without v_new";
  EXPECT_EQ(cudaErrorInvalidValue, cuda::attention_prefill(out.get(), out.get(), out.get(), d_pos.get(), false,
                                                           out.get(), 1, 6, 4, 8, kMaxCtx, 0, 1.0f, nullptr, launch_))
      << "heads not a multiple of kv_heads";
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::attention_prefill_mma(out.get(), nullptr, nullptr, out.get(), out.get(), d_pos.get(), false,
                                        out.get(), 1, 4, 1, 300, kMaxCtx, 0, 1.0f, out.get(), nullptr, launch_))
      << "head_dim above 256";
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::attention_prefill_mma(out.get(), out.get(), nullptr, out.get(), out.get(), d_pos.get(), false,
                                        out.get(), 1, 4, 1, 8, kMaxCtx, 0, 1.0f, out.get(), nullptr, launch_))
      << "k_new without v_new";
}

// The tensor-core prefill rounds q, k, v and the softmax weights to bf16. With q, k, v that
// bf16 holds exactly, only the weights' rounding (relative 2^-9 each) is left, and the output,
// a weighted mean of v rows, is then off by at most 2^-9 * max |v| < 2.5e-3 (|v| <= 1 here).
constexpr Tolerance kMmaTolerance = {2.5e-3, 0.0};

std::vector<float> bf16_values(std::vector<float> v) {
  for (float& x : v) x = __bfloat162float(__float2bfloat16_rn(x));
  return v;
}

/// The tensor-core prefill at `pos` against the CPU on bf16-exact q, k, v (seeds from `seed`).
void expect_prefill_mma_matches_cpu(const AttentionCase& c, const std::vector<int64_t>& pos, bool pos_i64,
                                    uint32_t seed, const cuda::Launch& launch) {
  const auto T = static_cast<int64_t>(pos.size());
  const std::vector<float> q = bf16_values(random_floats(T * c.heads * c.head_dim, seed));
  const std::vector<float> kc = bf16_values(make_cache(c, pos, seed + 1));
  const std::vector<float> vc = bf16_values(make_cache(c, pos, seed + 2));
  Floats d_kc(kc), d_vc(vc);
  Indices d_pos(pos_i64, pos);
  const std::vector<float> got = run_attention(AttentionKernel::kPrefillMma, c, q, d_kc, d_vc, d_pos, T, 1, launch);
  const std::string what =
      attention_name("attention_prefill_mma", c, pos, cuda::attention_prefill_mma_splits(T, c.heads, *launch.limits));
  EXPECT_TRUE(close(what, got, cpu_attention(c, q, kc, vc, pos), kMmaTolerance));
}

TEST_F(CudaKernels, AttentionPrefillMmaMatchesCpu) {
  for (const AttentionCase& c : kAttentionCases) {
    for (int64_t T : {1, 2, 7, 33, 64, 65, 129}) {
      for (int64_t start : {int64_t{0}, int64_t{700}}) {
        if (start == 700 && T > 65) continue;
        expect_prefill_mma_matches_cpu(c, iota(start, T), T % 2 == 1, 86, launch_);
      }
    }
  }
}

TEST_F(CudaKernels, AttentionPrefillMmaSplitOrNotMatchesCpu) {
  // 32 heads: 40 tokens give 32 row blocks (split 4 ways), 300 give 160 (2 ways), 600 give
  // 320 (no split); causal and sliding.
  const cuda::DeviceLimits sms132 = with_sms(132);
  EXPECT_EQ(cuda::attention_prefill_mma_splits(40, 32, sms132), 4);
  EXPECT_EQ(cuda::attention_prefill_mma_splits(300, 32, sms132), 2);
  EXPECT_EQ(cuda::attention_prefill_mma_splits(600, 32, sms132), 1);
  EXPECT_EQ(cuda::attention_prefill_mma_scratch_floats(600, 32, 8, 64, kMaxCtx, sms132),
            kMaxCtx * 8 * 64 + cuda::attention_decode_partials_floats(512, 32, 64, 2))
      << "bf16 rows of both caches, then 512 tokens split 2 ways: the largest tokens x splits up to 600";
  EXPECT_EQ(cuda::attention_prefill_mma_scratch_floats(600, 32, 8, 12, kMaxCtx, sms132),
            cuda::attention_decode_partials_floats(512, 32, 12, 2))
      << "head_dim 12: no 16-byte rows, converted while staging";
  for (const AttentionCase& c : {AttentionCase{32, 8, 64, 0}, AttentionCase{32, 8, 64, 100}}) {
    for (int64_t T : {40, 300, 600}) expect_prefill_mma_matches_cpu(c, iota(5, T), true, 89, launch_);
  }
}

// Where head_dim % 8 == 0 and the scratch is 16-byte aligned, the tensor-core prefill copies
// its tiles from bf16 rows a first kernel converted (cp.async); otherwise it converts them
// while staging. Both round the same values the same way and sum in the same order, so their
// outputs are identical: a scratch one float off its alignment takes the second path.
TEST_F(CudaKernels, AttentionPrefillMmaCopiesOrConvertsItsTilesToTheSameBits) {
  for (const AttentionCase& c : kAttentionCases) {
    if (c.head_dim % 8 != 0) continue;
    for (const std::vector<int64_t>& pos : {iota(0, 7), iota(0, 129), iota(700, 65), iota(3, 300)}) {
      const auto T = static_cast<int64_t>(pos.size());
      const std::vector<float> q = random_floats(T * c.heads * c.head_dim, 95);
      Floats kc(make_cache(c, pos, 96)), vc(make_cache(c, pos, 97));
      Indices d_pos(true, pos);
      Floats d_q(q);
      const int64_t scratch =
          cuda::attention_prefill_mma_scratch_floats(T, c.heads, c.kv_heads, c.head_dim, kMaxCtx, *launch_.limits);
      std::vector<float> outs[2];
      for (int shift = 0; shift < 2; ++shift) {
        Floats out = Floats::poisoned(T * c.heads * c.head_dim);
        Floats partials = Floats::poisoned(scratch + 1);
        CUDA_CHECK(cuda::attention_prefill_mma(d_q.get(), nullptr, nullptr, kc.get(), vc.get(), d_pos.get(), true,
                                               out.get(), T, c.heads, c.kv_heads, c.head_dim, kMaxCtx, c.window,
                                               1.0f / std::sqrt(static_cast<float>(c.head_dim)), partials.get() + shift,
                                               nullptr, launch_));
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        ASSERT_TRUE(out.guard_intact() && partials.guard_intact());
        outs[shift] = out.download();
      }
      EXPECT_EQ(std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * sizeof(float)), 0) << attention_name(
          "attention_prefill_mma", c, pos, cuda::attention_prefill_mma_splits(T, c.heads, *launch_.limits));
    }
  }
}

// Given the new rows, the tensor-core prefill writes them to the caches in the kernel that
// converts the rows its queries see to bf16: outputs and caches must be what kv_cache_write
// followed by the attention leaves. The new rows hold NaN in the caches before the call, so
// converting them from there instead of from k_new / v_new would show. Positions: prompts
// from 0, a chunk after filled rows (700), a run from 3, two runs with a gap (each row of the
// gap's range checked against the call's positions), one position out of range (flagged,
// nothing written for it); k_new one float off 16 bytes takes kv_cache_write + the
// attention (as head_dim 12 does).
TEST_F(CudaKernels, AttentionPrefillMmaWithNewRowsEqualsCacheWriteThenAttention) {
  std::vector<int64_t> gap = iota(10, 20);
  for (int64_t p : iota(300, 20)) gap.push_back(p);
  const std::vector<int64_t> bad = {5, 6, kMaxCtx, 8};
  const auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    size_t differ = a.size() == b.size() ? 0 : 1;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
      differ += !(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])));
    }
    return differ;
  };
  for (const AttentionCase& c : kAttentionCases) {
    for (const std::vector<int64_t>& pos : {iota(0, 7), iota(0, 129), iota(700, 65), iota(3, 300), gap, bad}) {
      const auto T = static_cast<int64_t>(pos.size());
      const int64_t width = c.kv_heads * c.head_dim;
      const std::vector<float> q = random_floats(T * c.heads * c.head_dim, 98);
      const std::vector<float> k_new = random_floats(T * width, 99), v_new = random_floats(T * width, 100);
      const std::vector<int64_t> in_range = pos == bad ? std::vector<int64_t>{5, 6, 8} : pos;
      std::vector<float> kc = make_cache(c, in_range, 101), vc = make_cache(c, in_range, 102);
      std::vector<float> kc_want = kc, vc_want = vc;
      for (int64_t t = 0; t < T; ++t) {
        if (pos[t] >= kMaxCtx) continue;
        std::fill_n(kc.begin() + pos[t] * width, width, kNaN);
        std::fill_n(vc.begin() + pos[t] * width, width, kNaN);
        std::copy_n(k_new.begin() + t * width, width, kc_want.begin() + pos[t] * width);
        std::copy_n(v_new.begin() + t * width, width, vc_want.begin() + pos[t] * width);
      }
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      const int64_t scratch =
          cuda::attention_prefill_mma_scratch_floats(T, c.heads, c.kv_heads, c.head_dim, kMaxCtx, *launch_.limits);
      Indices d_pos(true, pos);
      Floats d_q(q);
      // The reference: the attention alone over the caches as kv_cache_write leaves them.
      Floats ref_kc(kc_want), ref_vc(vc_want);
      Floats ref_out = Floats::poisoned(T * c.heads * c.head_dim);
      Floats ref_scratch = Floats::poisoned(std::max<int64_t>(1, scratch));
      CUDA_CHECK(cuda::attention_prefill_mma(d_q.get(), nullptr, nullptr, ref_kc.get(), ref_vc.get(), d_pos.get(), true,
                                             ref_out.get(), T, c.heads, c.kv_heads, c.head_dim, kMaxCtx, c.window,
                                             scale, ref_scratch.get(), nullptr, launch_));
      sync();
      const std::vector<float> want = ref_out.download();
      for (int shift = 0; shift < 2; ++shift) {
        std::vector<float> k_in(static_cast<size_t>(shift), 0.0f), v_in(static_cast<size_t>(shift), 0.0f);
        k_in.insert(k_in.end(), k_new.begin(), k_new.end());
        v_in.insert(v_in.end(), v_new.begin(), v_new.end());
        Floats d_kc(kc), d_vc(vc), d_k_new(k_in), d_v_new(v_in);
        Floats out = Floats::poisoned(T * c.heads * c.head_dim);
        Floats d_scratch = Floats::poisoned(std::max<int64_t>(1, scratch));
        CUDA_CHECK(cuda::attention_prefill_mma(d_q.get(), d_k_new.get() + shift, d_v_new.get() + shift, d_kc.get(),
                                               d_vc.get(), d_pos.get(), true, out.get(), T, c.heads, c.kv_heads,
                                               c.head_dim, kMaxCtx, c.window, scale, d_scratch.get(), flag(), launch_));
        EXPECT_EQ(take_flag(), pos == bad ? 1 : 0);
        sync();
        const std::string what = attention_name("attention_prefill_mma with new rows", c, pos,
                                                cuda::attention_prefill_mma_splits(T, c.heads, *launch_.limits)) +
                                 (shift != 0 ? " (k_new unaligned)" : "");
        EXPECT_EQ(same(out.download(), want), 0u) << what << ": outputs differ from cache write + attention";
        EXPECT_EQ(same(d_kc.download(), kc_want) + same(d_vc.download(), vc_want), 0u)
            << what << ": cache elements not as kv_cache_write leaves them";
        EXPECT_TRUE(out.guard_intact() && d_kc.guard_intact() && d_vc.guard_intact() && d_scratch.guard_intact())
            << what;
      }
    }
  }
}

TEST_F(CudaKernels, AttentionPrefillSkipsCacheRowsNoQuerySees) {
  // Two runs of positions far apart with a 3-key window: the keys between them (and every
  // row no query sees) are NaN, which a kernel staging a whole key range must not let reach
  // an output through a zero weight.
  const AttentionCase c = {4, 1, 256, 3};
  std::vector<int64_t> pos = iota(10, 20);
  for (int64_t p : iota(300, 20)) pos.push_back(p);
  const auto T = static_cast<int64_t>(pos.size());
  std::vector<float> kc = bf16_values(random_floats(kMaxCtx * c.kv_heads * c.head_dim, 92));
  std::vector<float> vc = bf16_values(random_floats(kMaxCtx * c.kv_heads * c.head_dim, 93));
  const int64_t width = c.kv_heads * c.head_dim;
  for (int64_t j = 0; j < kMaxCtx; ++j) {
    const bool seen = std::any_of(pos.begin(), pos.end(), [&](int64_t p) { return j <= p && j > p - c.window; });
    if (!seen) {
      std::fill_n(kc.begin() + j * width, width, kNaN);
      std::fill_n(vc.begin() + j * width, width, kNaN);
    }
  }
  const std::vector<float> q = bf16_values(random_floats(T * c.heads * c.head_dim, 94));
  Floats d_kc(kc), d_vc(vc);
  Indices d_pos(false, pos);
  const std::vector<float> want = cpu_attention(c, q, kc, vc, pos);
  EXPECT_TRUE(close("attention_prefill, gap in positions",
                    run_attention(AttentionKernel::kPrefill, c, q, d_kc, d_vc, d_pos, T, 1, launch_), want,
                    {2e-5, 1e-4}));
  EXPECT_TRUE(close("attention_prefill_mma, gap in positions",
                    run_attention(AttentionKernel::kPrefillMma, c, q, d_kc, d_vc, d_pos, T, 1, launch_), want,
                    kMmaTolerance));
}

// ---- elementwise -------------------------------------------------------------------------------------------

TEST_F(CudaKernels, SpinKeepsTheStreamBusyAtLeastAsLongAsAsked) {
  // The builder's timing relies on it: events behind a spin are recorded no sooner than its
  // end. Only a lower bound is checked (a busy GPU may stretch it).
  cudaEvent_t start = nullptr, stop = nullptr;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  for (int64_t us : {0, 50, 300}) {
    CUDA_CHECK(cudaEventRecord(start, stream_));
    CUDA_CHECK(cuda::spin(us, launch_));
    CUDA_CHECK(cudaEventRecord(stop, stream_));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    EXPECT_GE(ms * 1000.0f, 0.95f * static_cast<float>(us)) << "spin(" << us << ")";
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  EXPECT_EQ(cuda::spin(-1, launch_), cudaErrorInvalidValue);
}

TEST_F(CudaKernels, ElementwiseOpsMatchCpuAlignedAndNot) {
  using CpuOp = void (*)(const float*, const float*, float*, int64_t);
  using CudaOp = cudaError_t (*)(const float*, const float*, float*, int64_t, const cuda::Launch&);
  const struct {
    const char* name;
    CpuOp cpu;
    CudaOp gpu;
  } ops[] = {{"gelu_tanh_mul", cpu::gelu_tanh_mul, cuda::gelu_tanh_mul},
             {"silu_mul", cpu::silu_mul, cuda::silu_mul},
             {"add", cpu::add, cuda::add}};
  for (const auto& op : ops) {
    for (int64_t n : {1, 3, 4, 5, 1000, 4099, 6912}) {
      for (int lead : {0, 1, 2}) {
        const std::vector<float> a = random_floats(n + lead, 100, -6.0f, 6.0f), b = random_floats(n + lead, 101);
        Floats d_a(a), d_b(b);
        Floats out = Floats::poisoned(n + lead);
        ASSERT_EQ(cudaSuccess, op.gpu(d_a.get() + lead, d_b.get() + lead, out.get() + lead, n, launch_));
        sync();
        std::vector<float> want(static_cast<size_t>(n));
        op.cpu(a.data() + lead, b.data() + lead, want.data(), n);
        std::vector<float> got = out.download();
        got.erase(got.begin(), got.begin() + lead);
        const std::string what = std::string(op.name) + " " + shape({{"n", n}, {"lead", lead}});
        EXPECT_TRUE(close(what, got, want));
        EXPECT_TRUE(out.guard_intact()) << what;
      }
    }
  }
  // add in place (out aliases a).
  const std::vector<float> a = random_floats(1001, 102), b = random_floats(1001, 103);
  Floats d_a(a), d_b(b);
  ASSERT_EQ(cudaSuccess, cuda::add(d_a.get(), d_b.get(), d_a.get(), 1001, launch_));
  sync();
  std::vector<float> want(a.size());
  cpu::add(a.data(), b.data(), want.data(), 1001);
  EXPECT_TRUE(close("add in place", d_a.download(), want, {0, 0}));
}

TEST_F(CudaKernels, TakeLastAndBiasRows) {
  for (int64_t batch : {1, 2}) {
    for (int64_t T : {1, 5}) {
      for (int64_t F : {7, 64}) {
        const std::vector<float> x = random_floats(batch * T * F, 110);
        Floats d_x(x);
        Floats y = Floats::poisoned(batch * F);
        ASSERT_EQ(cudaSuccess, cuda::take_last(d_x.get(), y.get(), batch, T, F, launch_));
        sync();
        std::vector<float> want;
        for (int64_t b = 0; b < batch; ++b) {
          want.insert(want.end(), x.begin() + (b * T + T - 1) * F, x.begin() + (b * T + T) * F);
        }
        const std::string what = "take_last " + shape({{"batch", batch}, {"T", T}, {"F", F}});
        EXPECT_TRUE(close(what, y.download(), want, {0, 0}));
        EXPECT_TRUE(y.guard_intact()) << what;
      }
    }
  }
  const std::vector<float> y0 = random_floats(3 * 13, 111), bias = random_floats(13, 112);
  Floats d_y(y0), d_bias(bias);
  ASSERT_EQ(cudaSuccess, cuda::add_bias_rows(d_y.get(), d_bias.get(), 3, 13, launch_));
  sync();
  std::vector<float> want = y0;
  for (size_t i = 0; i < want.size(); ++i) want[i] += bias[i % 13];
  EXPECT_TRUE(close("add_bias_rows", d_y.download(), want, {0, 0}));
  EXPECT_TRUE(d_y.guard_intact());
}

// A stacked GEMM's output y [rows, sum n_i] split into its outputs, each with its bias or
// none: widths that are multiples of 4 (float4 copies) and not (the scalar path), one to
// four targets, rows 1..33, and a y one float off 16 bytes (scalar).
TEST_F(CudaKernels, SplitColumnsCopiesEachTargetsColumnsAndBias) {
  const std::vector<std::vector<int64_t>> widths = {{4}, {1024, 256, 256}, {8, 12}, {5, 3, 7, 1}, {16, 4, 8, 4}};
  for (const std::vector<int64_t>& n : widths) {
    for (int64_t rows : {1, 3, 33}) {
      for (int lead : {0, 1}) {
        int64_t total = 0;
        for (int64_t w : n) total += w;
        const std::vector<float> y_host = random_floats(lead + rows * total, 130);
        Floats y(y_host);
        std::vector<Floats> outs, biases;
        std::vector<std::vector<float>> bias_host;
        cuda::ColumnSplit split{};
        split.count = static_cast<int>(n.size());
        for (size_t i = 0; i < n.size(); ++i) {
          outs.push_back(Floats::poisoned(rows * n[i]));
          bias_host.push_back(i % 2 == 0 ? random_floats(n[i], 131 + static_cast<uint32_t>(i)) : std::vector<float>{});
          biases.emplace_back(bias_host[i].empty() ? std::vector<float>{0.0f} : bias_host[i]);
        }
        for (size_t i = 0; i < n.size(); ++i) {
          split.targets[i] = {outs[i].get(), bias_host[i].empty() ? nullptr : biases[i].get(), n[i]};
        }
        ASSERT_EQ(cudaSuccess, cuda::split_columns(y.get() + lead, rows, split, launch_));
        sync();
        int64_t first = 0;
        for (size_t i = 0; i < n.size(); ++i) {
          std::vector<float> want;
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t c = 0; c < n[i]; ++c) {
              want.push_back(y_host[static_cast<size_t>(lead + r * total + first + c)] +
                             (bias_host[i].empty() ? 0.0f : bias_host[i][static_cast<size_t>(c)]));
            }
          }
          const std::string what =
              "split_columns " +
              shape(
                  {{"rows", rows}, {"target", static_cast<int64_t>(i)}, {"n", n[i]}, {"total", total}, {"lead", lead}});
          EXPECT_TRUE(close(what, outs[i].download(), want, {0, 0}));
          EXPECT_TRUE(outs[i].guard_intact()) << what;
          first += n[i];
        }
      }
    }
  }
  Floats y(std::vector<float>(8, 1.0f)), out = Floats::poisoned(8);
  cuda::ColumnSplit none{};
  EXPECT_EQ(cudaErrorInvalidValue, cuda::split_columns(y.get(), 1, none, launch_)) << "no target";
  cuda::ColumnSplit empty{};
  empty.count = 1;
  empty.targets[0] = {out.get(), nullptr, 0};
  EXPECT_EQ(cudaErrorInvalidValue, cuda::split_columns(y.get(), 1, empty, launch_)) << "a target of no columns";
}

TEST_F(CudaKernels, ConvertRoundsToNearestEvenLikeTheHost) {
  for (int64_t n : {1, 5, 4096, 4099}) {
    for (int lead : {0, 1}) {
      std::vector<float> x = random_floats(n + lead, 120, -70000.0f, 70000.0f);
      x[static_cast<size_t>(lead)] = 1.00390625f;  // a bf16 tie: rounds to even (1.0)
      Floats d_x(x);
      DeviceBuffer<uint16_t> bf = DeviceBuffer<uint16_t>::poisoned(n + lead),
                             hf = DeviceBuffer<uint16_t>::poisoned(n + lead);
      Floats f = Floats::poisoned(n);
      ASSERT_EQ(cudaSuccess, cuda::convert_f32_to<__nv_bfloat16>(
                                 d_x.get() + lead, reinterpret_cast<__nv_bfloat16*>(bf.get()) + lead, n, launch_));
      ASSERT_EQ(cudaSuccess,
                cuda::convert_f32_to<__half>(d_x.get() + lead, reinterpret_cast<__half*>(hf.get()) + lead, n, launch_));
      ASSERT_EQ(cudaSuccess, cuda::convert_f32_to<float>(d_x.get() + lead, f.get(), n, launch_));
      sync();
      const std::vector<uint16_t> got_bf = bf.download(), got_hf = hf.download();
      size_t mismatches = 0;
      for (int64_t i = 0; i < n; ++i) {
        const float v = x[static_cast<size_t>(i + lead)];
        const auto at = static_cast<size_t>(i + lead);
        if (got_bf[at] != internal::f32_to_bf16(v) || got_hf[at] != internal::f32_to_f16(v)) {
          if (mismatches++ == 0) {
            ADD_FAILURE() << "convert n=" << n << " lead=" << lead << ": first mismatch [" << i << "] " << v
                          << " -> bf16 " << got_bf[at] << " (host " << internal::f32_to_bf16(v) << "), f16 "
                          << got_hf[at] << " (host " << internal::f32_to_f16(v) << ")";
          }
        }
      }
      EXPECT_EQ(mismatches, 0u);
      EXPECT_TRUE(close("convert f32", f.download(), std::vector<float>(x.begin() + lead, x.end()), {0, 0}));
      EXPECT_TRUE(bf.guard_intact() && hf.guard_intact() && f.guard_intact());
    }
  }
}

TEST_F(CudaKernels, GatedActivationRowsReadsSixteenBitRowsWithAStride) {
  // The gate / up GEMMs' 16-bit outputs, as two [rows, n] matrices (ld = n) or one stacked
  // [rows, 2n] (ld = 2n, up at column n): against the CPU activation of the same rounded
  // values; the 16-bit output is the f32 output rounded, bit for bit.
  struct Case {
    int64_t rows, n, ld, up_at;  // up starts up_at elements after gate
    int lead;                    // elements before gate (1: unaligned, the scalar kernel)
  };
  const Case cases[] = {{1, 8, 8, 8, 0},          {3, 8, 16, 8, 0},      {5, 24, 48, 24, 0}, {2, 6912, 13824, 6912, 0},
                        {7, 1152, 1152, 8064, 0}, {1, 7, 7, 7, 0},       {4, 13, 26, 13, 0}, {3, 16, 40, 16, 0},
                        {2, 8, 8, 16, 1},         {129, 64, 128, 64, 0}, {0, 8, 8, 8, 0}};
  for (DataType type : {DataType::kBF16, DataType::kF16}) {
    for (cuda::GatedActivation activation : {cuda::GatedActivation::kGeluTanh, cuda::GatedActivation::kSilu}) {
      for (const Case& c : cases) {
        const int64_t span = c.lead + std::max<int64_t>(c.up_at + (c.rows - 1) * c.ld + c.n, 1);
        const std::vector<float> values = random_floats(span, 123, -5.0f, 5.0f);
        std::vector<uint16_t> bits;
        std::vector<float> rounded;
        for (float v : values) {
          bits.push_back(type == DataType::kBF16 ? internal::f32_to_bf16(v) : internal::f32_to_f16(v));
          rounded.push_back(round_to(type, v));
        }
        DeviceBuffer<uint16_t> d_in(bits), out16 = DeviceBuffer<uint16_t>::poisoned(c.rows * c.n);
        Floats out32 = Floats::poisoned(c.rows * c.n);
        const bool gelu = activation == cuda::GatedActivation::kGeluTanh;
        const std::string what =
            std::string("gated_activation_rows ") + data_type_name(type) + (gelu ? " gelu " : " silu ") +
            shape({{"rows", c.rows}, {"n", c.n}, {"ld", c.ld}, {"up_at", c.up_at}, {"lead", c.lead}});
        const auto run = [&](auto tag) {
          using W = decltype(tag);
          const W* gate = reinterpret_cast<const W*>(d_in.get()) + c.lead;
          ASSERT_EQ(cudaSuccess, cuda::gated_activation_rows(gate, gate + c.up_at, c.ld, activation, out32.get(),
                                                             c.rows, c.n, launch_))
              << what;
          ASSERT_EQ(cudaSuccess, cuda::gated_activation_rows(gate, gate + c.up_at, c.ld, activation,
                                                             reinterpret_cast<W*>(out16.get()), c.rows, c.n, launch_))
              << what;
        };
        if (type == DataType::kBF16) {
          run(__nv_bfloat16{});
        } else {
          run(__half{});
        }
        sync();
        std::vector<float> gate(static_cast<size_t>(c.rows * c.n)), up(gate.size()), want(gate.size());
        for (int64_t r = 0; r < c.rows; ++r) {
          for (int64_t i = 0; i < c.n; ++i) {
            gate[static_cast<size_t>(r * c.n + i)] = rounded[static_cast<size_t>(c.lead + r * c.ld + i)];
            up[static_cast<size_t>(r * c.n + i)] = rounded[static_cast<size_t>(c.lead + c.up_at + r * c.ld + i)];
          }
        }
        (gelu ? cpu::gelu_tanh_mul : cpu::silu_mul)(gate.data(), up.data(), want.data(), c.rows * c.n);
        const std::vector<float> got = out32.download();
        EXPECT_TRUE(close(what + " f32", got, want)) << what;
        std::vector<uint16_t> want16;
        for (float v : got)
          want16.push_back(type == DataType::kBF16 ? internal::f32_to_bf16(v) : internal::f32_to_f16(v));
        EXPECT_EQ(out16.download(), want16) << what << ": the 16-bit output is not the f32 output rounded";
        EXPECT_TRUE(out16.guard_intact() && out32.guard_intact() && d_in.guard_intact()) << what;
      }
    }
  }
  DeviceBuffer<uint16_t> x = DeviceBuffer<uint16_t>::poisoned(64);
  const auto* p = reinterpret_cast<const __nv_bfloat16*>(x.get());
  Floats y = Floats::poisoned(64);
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::gated_activation_rows(p, p + 8, 7, cuda::GatedActivation::kSilu, y.get(), 2, 8, launch_))
      << "ld < n";
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::gated_activation_rows(p, p + 8, 8, static_cast<cuda::GatedActivation>(7), y.get(), 2, 8, launch_))
      << "unknown activation";
}

TEST_F(CudaKernels, GatedActivationToEqualsActivationThenConvert) {
  // The fused activation + conversion feeding a GEMM must write exactly the bytes of the two
  // kernels it replaces (so the engine's numbers do not depend on fusion), and the
  // activation within the CPU's f32 tolerance before rounding.
  for (cuda::GatedActivation activation : {cuda::GatedActivation::kGeluTanh, cuda::GatedActivation::kSilu}) {
    for (int64_t n : {1, 7, 4096, 4099}) {
      for (int lead : {0, 1}) {  // 1: unaligned, the scalar kernel
        const std::vector<float> gate = random_floats(n + lead, 121, -6.0f, 6.0f);
        const std::vector<float> up = random_floats(n + lead, 122, -3.0f, 3.0f);
        Floats d_gate(gate), d_up(up), product = Floats::poisoned(n);
        const bool gelu = activation == cuda::GatedActivation::kGeluTanh;
        ASSERT_EQ(cudaSuccess, (gelu ? cuda::gelu_tanh_mul : cuda::silu_mul)(d_gate.get() + lead, d_up.get() + lead,
                                                                             product.get(), n, launch_));
        DeviceBuffer<uint16_t> want_bf = DeviceBuffer<uint16_t>::poisoned(n + lead),
                               want_hf = DeviceBuffer<uint16_t>::poisoned(n + lead),
                               got_bf = DeviceBuffer<uint16_t>::poisoned(n + lead),
                               got_hf = DeviceBuffer<uint16_t>::poisoned(n + lead);
        const auto bf16 = [&](const DeviceBuffer<uint16_t>& b) {
          return reinterpret_cast<__nv_bfloat16*>(b.get()) + lead;
        };
        const auto f16 = [&](const DeviceBuffer<uint16_t>& b) { return reinterpret_cast<__half*>(b.get()) + lead; };
        ASSERT_EQ(cudaSuccess, cuda::convert_f32_to(product.get(), bf16(want_bf), n, launch_));
        ASSERT_EQ(cudaSuccess, cuda::convert_f32_to(product.get(), f16(want_hf), n, launch_));
        ASSERT_EQ(cudaSuccess, cuda::gated_activation_to(d_gate.get() + lead, d_up.get() + lead, activation,
                                                         bf16(got_bf), n, launch_));
        ASSERT_EQ(cudaSuccess, cuda::gated_activation_to(d_gate.get() + lead, d_up.get() + lead, activation,
                                                         f16(got_hf), n, launch_));
        sync();
        const std::string what =
            std::string("gated_activation_to ") + (gelu ? "gelu" : "silu") + " " + shape({{"n", n}, {"lead", lead}});
        EXPECT_EQ(got_bf.download(), want_bf.download()) << what << " bf16";
        EXPECT_EQ(got_hf.download(), want_hf.download()) << what << " f16";
        std::vector<float> cpu_product(static_cast<size_t>(n));
        (gelu ? cpu::gelu_tanh_mul : cpu::silu_mul)(gate.data() + lead, up.data() + lead, cpu_product.data(), n);
        EXPECT_TRUE(close(what + " f32 product", product.download(), cpu_product));
        EXPECT_TRUE(got_bf.guard_intact() && got_hf.guard_intact()) << what;
      }
    }
  }
  Floats x = Floats::poisoned(4);
  EXPECT_EQ(cudaErrorInvalidValue, cuda::gated_activation_to(x.get(), x.get(), static_cast<cuda::GatedActivation>(7),
                                                             reinterpret_cast<__nv_bfloat16*>(x.get()), 4, launch_))
      << "unknown activation";
}

}  // namespace
}  // namespace gearbox
