// The CUDA cuBLASLt GEMM against the CPU kernels (devices/cpu/kernels.h) as the reference;
// the shared helpers and conventions (poisoned outputs, sentinels, tolerances) are in
// tests/support/cuda_test_util.h, the shared cases in tests/support/cuda_kernel_cases.h.
// Label `gpu`: every test skips where there is no CUDA device.

#include <thread>

#include "gearbox/logging.h"
#include "support/cuda_test_util.h"

namespace gearbox {
namespace {

using namespace cuda_test;  // NOLINT(google-build-using-namespace)

TEST_F(CudaKernels, CublasLtPrimeRunsEveryStepAndLeavesNoError) {
  // prime() reports only through its debug line: every step there has a time (a failed one
  // would be -1), and no CUDA error is left behind for the next caller. Under
  // compute-sanitizer it makes no API call fail (cuBLASLt's handle needs a current context).
  std::vector<std::string> lines;
  const LogLevel was = log_level();
  set_log_level(LogLevel::kDebug);
  set_log_sink([&lines](LogLevel, std::string_view line) { lines.emplace_back(line); });
  // As on the library's loading thread: a thread with no current context.
  std::thread([] { cuda::CublasLtGemm::prime(); }).join();
  set_log_sink(nullptr);
  set_log_level(was);
  const auto line = std::find_if(lines.begin(), lines.end(), [](const std::string& l) {
    return l.find("cuBLASLt: warmed up") != std::string::npos;
  });
  ASSERT_NE(line, lines.end()) << "prime() logged no line";
  EXPECT_EQ(line->find("-1"), std::string::npos) << *line;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST_F(CudaKernels, CublasLtGemmMatchesCpu) {
  Result<std::unique_ptr<cuda::CublasLtGemm>> gemm = cuda::CublasLtGemm::create();
  ASSERT_TRUE(gemm.ok()) << gemm.status().to_string();
  EXPECT_EQ(cuda::CublasLtGemm::version().rfind("cublasLt ", 0), 0u) << cuda::CublasLtGemm::version();
  std::vector<LinearShape> shapes;
  for (const kernel_cases::LinearCase& c : kernel_cases::gemm_cases()) {
    if (c.use.check) shapes.push_back({c.N, c.K});
  }
  for (DataType type : kWeightTypes) {
    for (int64_t M : kernel_cases::kGemmCheckedRows) {
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

}  // namespace
}  // namespace gearbox
