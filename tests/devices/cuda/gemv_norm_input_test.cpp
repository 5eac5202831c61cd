// The CUDA GEMV with its input norm fused (GemvNormInput) against the CPU kernels (devices/cpu/kernels.h) as the
// reference; the shared helpers and conventions (poisoned outputs, sentinels, tolerances) are in
// tests/support/cuda_test_util.h, the shared cases in tests/support/cuda_kernel_cases.h.
// Label `gpu`: every test skips where there is no CUDA device.

#include "support/cuda_test_util.h"

namespace gearbox {
namespace {

using namespace cuda_test;  // NOLINT(google-build-using-namespace)

/// The input a GemvNormInput launch computes, as the CPU kernels do: sum = residual +
/// rms_norm(x, w_post), input = rms_norm(sum, w_next); without `post` (a pre-norm family's
/// residual add), sum = residual + x.
struct NormInputCase {
  std::vector<float> x, residual, sum, input;
  Weights w_post, w_next;
  bool post = true;
  NormInputCase(DataType type, int64_t K, uint32_t seed, bool with_post = true)
      : x(random_floats(K, seed, -4.0f, 4.0f)),
        residual(random_floats(K, seed + 1, -8.0f, 8.0f)),
        sum(static_cast<size_t>(K)),
        input(static_cast<size_t>(K)),
        w_post(make_weights(type, random_floats(K, seed + 2))),
        w_next(make_weights(type, random_floats(K, seed + 3))),
        post(with_post) {
    std::vector<float> normed(x);
    if (post) cpu::rms_norm(x.data(), w_post.rounded.data(), normed.data(), 1, K, 1e-6f, 1.0f);
    cpu::add(residual.data(), normed.data(), sum.data(), K);
    cpu::rms_norm(sum.data(), w_next.rounded.data(), input.data(), 1, K, 1e-6f, 1.0f);
  }
};

/// A NormInputCase on the device: its vectors, a poisoned sum and the launch's argument.
struct DeviceNormInput {
  Floats x, residual, sum;
  DeviceBuffer<uint8_t> w_post, w_next;
  bool post;
  explicit DeviceNormInput(const NormInputCase& c)
      : x(c.x),
        residual(c.residual),
        sum(Floats::poisoned(static_cast<int64_t>(c.x.size()))),
        w_post(c.w_post.bytes),
        w_next(c.w_next.bytes),
        post(c.post) {}
  template <typename W>
  cuda::GemvNormInput<W> get() const {
    return {
        x.get(), post ? weight_ptr<W>(w_post, 0) : nullptr, residual.get(), sum.get(), weight_ptr<W>(w_next, 0), 1e-6f,
        1.0f};
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
      // Without the post-norm (a pre-norm family) on the default geometry.
      runs.emplace_back(cuda::kGemvDefaultGeometry, -1);
      for (auto [geometry, max_blocks] : runs) {
        const bool post = max_blocks >= 0;
        max_blocks = std::max<int64_t>(max_blocks, 0);
        const std::string what = std::string("gemv with a norm input ") + data_type_name(type) + " " +
                                 shape({{"K", c.K},
                                        {"rows", geometry.rows},
                                        {"unroll", geometry.unroll},
                                        {"max_blocks", max_blocks},
                                        {"post_norm", post}});
        const NormInputCase in(type, c.K, 80, post);
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

}  // namespace
}  // namespace gearbox
