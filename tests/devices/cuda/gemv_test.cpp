// The CUDA GEMV kernels (plain, multi-target, gated, host outputs) against the CPU kernels (devices/cpu/kernels.h) as
// the reference; the shared helpers and conventions (poisoned outputs, sentinels, tolerances) are in
// tests/support/cuda_test_util.h, the shared cases in tests/support/cuda_kernel_cases.h.
// Label `gpu`: every test skips where there is no CUDA device.

#include "support/cuda_test_util.h"

namespace gearbox {
namespace {

using namespace cuda_test;  // NOLINT(google-build-using-namespace)

// ---- gemv ---------------------------------------------------------------------------------------------

/// The table's GEMV shapes that the tests check (tests/support/cuda_kernel_cases.h).
std::vector<LinearShape> checked_gemv_shapes() {
  std::vector<LinearShape> shapes;
  for (const kernel_cases::LinearCase& c : kernel_cases::gemv_cases()) {
    if (c.use.check) shapes.push_back({c.N, c.K});
  }
  return shapes;
}

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
    for (int64_t M : kernel_cases::kGemvCheckedRows) {
      for (LinearShape s : checked_gemv_shapes()) check_gemv(this, launch_, type, M, s, /*bias=*/M == 3, /*lead=*/0);
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
      for (LinearShape s : checked_gemv_shapes()) {
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

}  // namespace
}  // namespace gearbox
