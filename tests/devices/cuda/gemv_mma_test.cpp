// The tensor-core GEMV (gemv_mma_multi, gemv_mma_gated: bf16 weights, up to 16 rows) against
// the CPU kernels (devices/cpu/kernels.h) on the case table's shapes, with poisoned outputs
// and sentinels (tests/support/cuda_test_util.h). Label `gpu`: every test skips where there
// is no CUDA device.

#include "support/cuda_test_util.h"

namespace gearbox {
namespace {

using namespace cuda_test;  // NOLINT(google-build-using-namespace)
using Bf16 = __nv_bfloat16;

/// Allowance for the tensor-core product against the f32 one (mma_extra_slack).
std::vector<double> mma_slack(const std::vector<float>& x, const std::vector<float>& w, int64_t M, int64_t N,
                              int64_t K) {
  return reduction_slack(x, w, M, N, K, mma_extra_slack(K));
}

/// The table's checked GEMV shapes the tensor-core kernel serves (K % 8 == 0) and those it
/// refuses.
std::vector<LinearShape> mma_shapes(bool served) {
  std::vector<LinearShape> shapes;
  for (const kernel_cases::LinearCase& c : kernel_cases::gemv_cases()) {
    if (c.use.check && cuda::gemv_mma_served(1, c.K) == served) shapes.push_back({c.N, c.K});
  }
  return shapes;
}

/// gemv_mma_multi over `ns` targets of one x [M, K] (odd targets without bias), against
/// cpu::linear_small_m on the rounded weights.
void check_mma(const cuda::Launch& launch, int64_t M, int64_t K, const std::vector<int64_t>& ns, uint32_t seed) {
  const std::vector<float> x = random_floats(M * K, seed);
  Floats d_x(x);
  std::vector<Weights> ws;
  std::vector<DeviceBuffer<uint8_t>> d_ws;
  std::vector<std::vector<float>> biases;
  std::vector<Floats> d_bs, ys;
  std::vector<cuda::GemvTarget<Bf16>> targets;
  for (size_t i = 0; i < ns.size(); ++i) {
    ws.push_back(make_weights(DataType::kBF16, random_floats(ns[i] * K, seed + 1 + static_cast<uint32_t>(i))));
    d_ws.emplace_back(ws.back().bytes);
    biases.push_back(random_floats(ns[i], seed + 10 + static_cast<uint32_t>(i)));
    d_bs.emplace_back(biases.back());
    ys.push_back(Floats::poisoned(M * ns[i]));
  }
  for (size_t i = 0; i < ns.size(); ++i) {
    targets.push_back({weight_ptr<Bf16>(d_ws[i], 0), i % 2 == 0 ? d_bs[i].get() : nullptr, ys[i].get(), ns[i]});
  }
  ASSERT_EQ(cudaSuccess,
            cuda::gemv_mma_multi(d_x.get(), targets.data(), static_cast<int>(targets.size()), M, K, launch));
  CUDA_CHECK(cudaStreamSynchronize(launch.stream));
  for (size_t i = 0; i < ns.size(); ++i) {
    std::vector<float> want(static_cast<size_t>(M * ns[i]));
    cpu_linear(x, ws[i].rounded, i % 2 == 0 ? biases[i].data() : nullptr, want.data(), M, ns[i], K);
    const std::string what = "gemv_mma target " + std::to_string(i) + " of " + std::to_string(ns.size()) + " " +
                             shape({{"M", M}, {"N", ns[i]}, {"K", K}});
    EXPECT_TRUE(close(what, ys[i].download(), want, {}, mma_slack(x, ws[i].rounded, M, ns[i], K)));
    EXPECT_TRUE(ys[i].guard_intact()) << what;
  }
}

TEST_F(CudaKernels, GemvMmaMatchesCpuOnAwkwardShapes) {
  for (int64_t M : kernel_cases::kGemvMmaCheckedRows) {
    uint32_t seed = 100;
    for (LinearShape s : mma_shapes(true)) check_mma(launch_, M, s.K, {s.N}, seed += 20);
  }
}

TEST_F(CudaKernels, GemvMmaEveryRowCount) {
  for (int64_t M = 1; M <= cuda::kGemvMmaMaxRows; ++M) {
    check_mma(launch_, M, 1152, {130}, 200);  // a unit cut short; K in whole chunks
    check_mma(launch_, M, 72, {17}, 210);     // K ends inside a chunk
  }
}

// Several targets in one launch (fused QKV, gate + up, and odd row counts whose units
// straddle the targets), K of no whole chunk and a K shorter than one chunk.
TEST_F(CudaKernels, GemvMmaMultiMatchesSeparateLinears) {
  for (int64_t M : {int64_t{1}, int64_t{5}, int64_t{8}, int64_t{12}, int64_t{16}}) {
    check_mma(launch_, M, 1152, {256, 64, 64}, 300);
    check_mma(launch_, M, 1152, {1, 7, 130, 3}, 310);
    check_mma(launch_, M, 8, {33, 16}, 320);
    check_mma(launch_, M, 6912, {130, 5}, 330);
  }
}

struct GatedCase {
  int64_t M, N, K;
  bool bias;
};

/// gemv_mma_gated against the CPU's linears and gated activation.
void check_gated(const cuda::Launch& launch, const GatedCase& c, cuda::GatedActivation act) {
  const std::vector<float> x = random_floats(c.M * c.K, 50);
  const Weights wg = make_weights(DataType::kBF16, random_floats(c.N * c.K, 51));
  const Weights wu = make_weights(DataType::kBF16, random_floats(c.N * c.K, 52));
  const std::vector<float> bg = random_floats(c.N, 53), bu = random_floats(c.N, 54);
  Floats d_x(x), d_bg(bg), d_bu(bu);
  DeviceBuffer<uint8_t> d_wg(wg.bytes), d_wu(wu.bytes);
  Floats y = Floats::poisoned(c.M * c.N);
  ASSERT_EQ(cudaSuccess, cuda::gemv_mma_gated(d_x.get(), weight_ptr<Bf16>(d_wg, 0), weight_ptr<Bf16>(d_wu, 0),
                                              c.bias ? d_bg.get() : nullptr, c.bias ? d_bu.get() : nullptr, act,
                                              y.get(), c.M, c.N, c.K, launch));
  CUDA_CHECK(cudaStreamSynchronize(launch.stream));
  const auto n = static_cast<size_t>(c.M * c.N);
  std::vector<float> gate(n), up(n), want(n);
  cpu_linear(x, wg.rounded, c.bias ? bg.data() : nullptr, gate.data(), c.M, c.N, c.K);
  cpu_linear(x, wu.rounded, c.bias ? bu.data() : nullptr, up.data(), c.M, c.N, c.K);
  if (act == cuda::GatedActivation::kGeluTanh) {
    cpu::gelu_tanh_mul(gate.data(), up.data(), want.data(), c.M * c.N);
  } else {
    cpu::silu_mul(gate.data(), up.data(), want.data(), c.M * c.N);
  }
  const std::string what = std::string("gemv_mma_gated") +
                           (act == cuda::GatedActivation::kGeluTanh ? " gelu " : " silu ") +
                           shape({{"M", c.M}, {"N", c.N}, {"K", c.K}, {"bias", c.bias}});
  EXPECT_TRUE(close(what, y.download(), want, {},
                    gated_slack(x, wg.rounded, wu.rounded, gate, up, c.M, c.N, c.K, mma_extra_slack(c.K))));
  EXPECT_TRUE(y.guard_intact()) << what;
}

TEST_F(CudaKernels, GemvMmaGatedEqualsLinearThenGatedActivation) {
  const GatedCase cases[] = {{1, 1, 8, false},       {3, 7, 16, true},    {8, 130, 1152, false},   {9, 130, 1152, true},
                             {16, 300, 1152, false}, {2, 33, 6912, true}, {16, 6912, 1152, false}, {5, 17, 72, true}};
  for (cuda::GatedActivation act : {cuda::GatedActivation::kGeluTanh, cuda::GatedActivation::kSilu}) {
    for (const GatedCase& c : cases) check_gated(launch_, c, act);
  }
}

// A launch of fewer units than SMs runs 16 warps a unit, else 8: launched as on a device of
// many SMs (every launch 16 warps) and of one SM (every launch 8), against the CPU, on N of 1
// to 130 units, M of one and two n-tiles, gated too.
TEST_F(CudaKernels, GemvMmaNarrowAndWideLaunches) {
  cuda::DeviceLimits many_sms = *launch_.limits, one_sm = *launch_.limits;
  many_sms.sm_count = 1 << 20;
  one_sm.sm_count = 1;
  for (const cuda::DeviceLimits* limits : {&many_sms, &one_sm}) {
    const cuda::Launch launch{launch_.stream, false, false, limits};
    for (int64_t M : {int64_t{3}, int64_t{16}}) {
      check_mma(launch, M, 1152, {16}, 500);
      check_mma(launch, M, 6912, {1152}, 510);
      check_mma(launch, M, 1152, {2080}, 520);
      check_gated(launch, {M, 130, 1152, true}, cuda::GatedActivation::kSilu);
    }
  }
}

// A row alone and the same row among 15 others give the same result bit for bit: the rows of
// x are separate columns of the mma, summed in the same order.
TEST_F(CudaKernels, GemvMmaRowsDoNotDependOnTheirNeighbours) {
  const int64_t N = 300, K = 1152;
  const std::vector<float> x = random_floats(16 * K, 400);
  const Weights w = make_weights(DataType::kBF16, random_floats(N * K, 401));
  DeviceBuffer<uint8_t> d_w(w.bytes);
  Floats d_x(x), all = Floats::poisoned(16 * N);
  const cuda::GemvTarget<Bf16> every{weight_ptr<Bf16>(d_w, 0), nullptr, all.get(), N};
  ASSERT_EQ(cudaSuccess, cuda::gemv_mma_multi(d_x.get(), &every, 1, 16, K, launch_));
  sync();
  const std::vector<float> together = all.download();
  for (int64_t m : {0, 7, 8, 15}) {
    Floats alone = Floats::poisoned(N);
    const cuda::GemvTarget<Bf16> one{weight_ptr<Bf16>(d_w, 0), nullptr, alone.get(), N};
    ASSERT_EQ(cudaSuccess, cuda::gemv_mma_multi(d_x.get() + m * K, &one, 1, 1, K, launch_));
    sync();
    const std::vector<float> got = alone.download();
    EXPECT_EQ(0, std::memcmp(got.data(), together.data() + m * N, static_cast<size_t>(N) * 4)) << "row " << m;
  }
}

TEST_F(CudaKernels, GemvMmaRefusesWhatItDoesNotServe) {
  Floats x = Floats::poisoned(64), y = Floats::poisoned(64);
  DeviceBuffer<uint8_t> w(std::vector<uint8_t>(4096));
  const Bf16* wp = weight_ptr<Bf16>(w, 0);
  const cuda::GemvTarget<Bf16> t{wp, nullptr, y.get(), 1};
  for (LinearShape s : mma_shapes(false)) {
    EXPECT_EQ(cudaErrorInvalidValue, cuda::gemv_mma_multi(x.get(), &t, 1, 1, s.K, launch_)) << "K " << s.K;
  }
  EXPECT_EQ(cudaErrorInvalidValue, cuda::gemv_mma_multi(x.get(), &t, 1, 17, 8, launch_)) << "17 rows";
  EXPECT_EQ(cudaErrorInvalidValue, cuda::gemv_mma_multi(x.get() + 1, &t, 1, 1, 8, launch_)) << "x unaligned";
  const cuda::GemvTarget<Bf16> odd{wp + 1, nullptr, y.get(), 1};
  EXPECT_EQ(cudaErrorInvalidValue, cuda::gemv_mma_multi(x.get(), &odd, 1, 1, 8, launch_)) << "w unaligned";
  EXPECT_EQ(cudaErrorInvalidValue, cuda::gemv_mma_multi(x.get(), &t, 0, 1, 8, launch_)) << "no target";
  EXPECT_EQ(cudaErrorInvalidValue,
            cuda::gemv_mma_gated(x.get(), wp, wp, nullptr, nullptr, static_cast<cuda::GatedActivation>(7), y.get(), 1,
                                 1, 8, launch_))
      << "unknown activation";
  EXPECT_EQ(cudaErrorInvalidValue, cuda::gemv_mma_gated(x.get(), wp, wp, nullptr, nullptr, cuda::GatedActivation::kSilu,
                                                        y.get(), 1, 1, 12, launch_))
      << "K of no whole 16 bytes";
  EXPECT_EQ(cudaSuccess, cuda::gemv_mma_multi(x.get(), &t, 1, 0, 8, launch_)) << "no rows: nothing to do";
  sync();
  EXPECT_TRUE(y.guard_intact());
}

}  // namespace
}  // namespace gearbox
