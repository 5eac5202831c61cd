// One cuBLASLt GEMM, as the CUDA device runs it, and one of our kernels reading its output:
// a program small enough to run alone under compute-sanitizer, so that what the sanitizer
// reports over the engine suite can be told apart between cuBLASLt's kernels and ours.
//
//   cublaslt_sanitizer_probe gemm M N K OUT INDEX    # OUT = f32 | bf16, heuristic INDEX
//   cublaslt_sanitizer_probe control written | unwritten
//
// `gemm` prints cuBLASLt's version and its heuristics for the shape. Then x [M, K] f32 and
// W [N, K] bf16 (seeded) are copied in; y [M, N] is a fresh allocation nothing else writes;
// the GEMM runs through CublasLtGemm (x rounded to bf16 by our conversion kernel, then
// run_converted or run_converted_rounded with heuristic INDEX), then cuda::add (f32 y) or
// cuda::gated_activation_rows (bf16 y) reads every element of y. y is copied back and
// checked against a CPU GEMM of the rounded operands, so a run that passes shows that the
// GEMM wrote every element. `control`: y written by cudaMemset, or never written, then read
// by cuda::add: the second must be reported by initcheck and the first must not. Exit status
// 0 when the checks pass, 1 otherwise, 2 on a usage error.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "devices/cuda/gemm_cublaslt.h"
#include "devices/cuda/kernels/elementwise.cuh"

namespace {

using gearbox::DataType;
namespace cuda = gearbox::cuda;

bool ok(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return true;
  std::fprintf(stderr, "%s failed: %s\n", what, cudaGetErrorString(err));
  return false;
}

bool ok(const gearbox::Status& s, const char* what) {
  if (s.ok()) return true;
  std::fprintf(stderr, "%s: %s\n", what, s.to_string().c_str());
  return false;
}

/// A device allocation freed at scope exit.
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    if (!ok(cudaMalloc(&p, bytes), "cudaMalloc")) p = nullptr;
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

float round_bf16(float v) { return __bfloat162float(__float2bfloat16(v)); }

/// Every launch on the legacy default stream, plainly, as the builder's timing launches.
cuda::Launch plain() { return {nullptr, false, false, &cuda::device_limits(0)}; }

uint32_t config_attribute(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute) {
  uint32_t value = 0;
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &value, sizeof(value), &written) !=
      CUBLAS_STATUS_SUCCESS) {
    return UINT32_MAX;
  }
  return value;
}

int control(const std::string& which) {
  constexpr int64_t n = 4096;
  DeviceBuffer y(n * sizeof(float));
  DeviceBuffer z(n * sizeof(float));
  if (y.p == nullptr || z.p == nullptr) return 1;
  if (which == "written" && !ok(cudaMemset(y.p, 0, n * sizeof(float)), "cudaMemset")) return 1;
  if (!ok(cuda::add(y.as<float>(), y.as<float>(), z.as<float>(), n, plain()), "cuda::add")) return 1;
  if (!ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize")) return 1;
  std::printf("control %s: %lld floats read by cuda::add\n", which.c_str(), static_cast<long long>(n));
  return 0;
}

int probe(int64_t M, int64_t N, int64_t K, DataType out_type, int index) {
  auto gemm = cuda::CublasLtGemm::create();
  if (!ok(gemm.status(), "CublasLtGemm::create")) return 1;
  std::printf("%s\n", cuda::CublasLtGemm::version().c_str());
  std::vector<cublasLtMatmulHeuristicResult_t> algos;
  if (!ok((*gemm)->heuristics(M, N, K, DataType::kBF16, 8, &algos, out_type), "heuristics")) return 1;
  for (size_t i = 0; i < algos.size(); ++i) {
    const cublasLtMatmulAlgo_t& a = algos[i].algo;
    std::printf("heuristic %zu: algo %u tile %u stages %u splitK %u reduction %u swizzle %u workspace %zu\n", i,
                config_attribute(a, CUBLASLT_ALGO_CONFIG_ID), config_attribute(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
                config_attribute(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                config_attribute(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                config_attribute(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
                config_attribute(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING), algos[i].workspaceSize);
  }
  if (index < 0 || index >= static_cast<int>(algos.size())) {
    std::fprintf(stderr, "heuristic %d: there are %zu\n", index, algos.size());
    return 2;
  }

  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(M * K));
  std::vector<__nv_bfloat16> w(static_cast<size_t>(N * K));
  std::vector<float> x_rounded(x.size());  // the operands the GEMM multiplies, for the reference
  std::vector<float> w_f32(w.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = dist(rng);
    x_rounded[i] = round_bf16(x[i]);
  }
  for (size_t i = 0; i < w.size(); ++i) {
    w[i] = __float2bfloat16(dist(rng));
    w_f32[i] = __bfloat162float(w[i]);
  }

  const size_t out_bytes = static_cast<size_t>(M * N) * (out_type == DataType::kF32 ? 4 : 2);
  DeviceBuffer dx(x.size() * sizeof(float));
  DeviceBuffer dw(w.size() * sizeof(__nv_bfloat16));
  DeviceBuffer scratch(static_cast<size_t>(cuda::CublasLtGemm::scratch_bytes(M, K, DataType::kBF16)));
  DeviceBuffer y(out_bytes);  // written by the GEMM only
  DeviceBuffer z(static_cast<size_t>(M * N) * sizeof(float));
  if (dx.p == nullptr || dw.p == nullptr || scratch.p == nullptr || y.p == nullptr || z.p == nullptr) return 1;
  if (!ok(cudaMemcpy(dx.p, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice), "copy x") ||
      !ok(cudaMemcpy(dw.p, w.data(), w.size() * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice), "copy w")) {
    return 1;
  }
  if (!ok(cuda::CublasLtGemm::convert_input(dx.as<float>(), DataType::kBF16, M, K, scratch.p, plain()),
          "convert_input")) {
    return 1;
  }
  const cublasLtMatmulAlgo_t* algo = &algos[static_cast<size_t>(index)].algo;
  if (out_type == DataType::kF32) {
    if (!ok((*gemm)->run_converted(algo, scratch.p, dw.p, DataType::kBF16, nullptr, y.as<float>(), M, N, K, plain()),
            "run_converted") ||
        !ok(cuda::add(y.as<float>(), y.as<float>(), z.as<float>(), M * N, plain()), "cuda::add")) {
      return 1;
    }
  } else {
    if (!ok((*gemm)->run_converted_rounded(algo, scratch.p, dw.p, DataType::kBF16, y.p, M, N, K, plain()),
            "run_converted_rounded") ||
        !ok(cuda::gated_activation_rows<__nv_bfloat16, float>(y.as<__nv_bfloat16>(), y.as<__nv_bfloat16>(), N,
                                                              cuda::GatedActivation::kGeluTanh, z.as<float>(), M, N,
                                                              plain()),
            "cuda::gated_activation_rows")) {
      return 1;
    }
  }
  if (!ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize")) return 1;

  std::vector<float> got(static_cast<size_t>(M * N));
  if (out_type == DataType::kF32) {
    if (!ok(cudaMemcpy(got.data(), y.p, out_bytes, cudaMemcpyDeviceToHost), "copy y")) return 1;
  } else {
    std::vector<__nv_bfloat16> raw(got.size());
    if (!ok(cudaMemcpy(raw.data(), y.p, out_bytes, cudaMemcpyDeviceToHost), "copy y")) return 1;
    for (size_t i = 0; i < raw.size(); ++i) got[i] = __bfloat162float(raw[i]);
  }
  // Each output against a CPU dot product of the rounded operands: within f32 summation error
  // (f32 y) or half a bf16 ulp more (bf16 y); a NaN or an element left unwritten fails.
  double worst = 0.0;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double ref = 0.0;
      double magnitude = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = static_cast<double>(x_rounded[m * K + k]) * w_f32[n * K + k];
        ref += p;
        magnitude += std::fabs(p);
      }
      const double bound = 1e-5 * magnitude + (out_type == DataType::kF32 ? 0.0 : std::fabs(ref) / 256.0) + 1e-6;
      const double err = std::fabs(got[m * N + n] - ref);
      if (!(err <= bound)) {
        std::fprintf(stderr, "y[%lld, %lld] = %g, expected %g (bound %g)\n", static_cast<long long>(m),
                     static_cast<long long>(n), got[m * N + n], ref, bound);
        return 1;
      }
      worst = std::max(worst, err / bound);
    }
  }
  std::printf(
      "gemm M=%lld N=%lld K=%lld out %s heuristic %d: all %lld outputs written and within bounds (worst %.3f "
      "of the bound), then read by our kernel\n",
      static_cast<long long>(M), static_cast<long long>(N), static_cast<long long>(K),
      out_type == DataType::kF32 ? "f32" : "bf16", index, static_cast<long long>(M) * N, worst);
  return 0;
}

int usage() {
  std::fprintf(stderr,
               "usage: cublaslt_sanitizer_probe gemm M N K f32|bf16 INDEX\n"
               "       cublaslt_sanitizer_probe control written|unwritten\n");
  return 2;
}

bool parse_dim(const char* s, int64_t* out) {
  char* end = nullptr;
  const long long v = std::strtoll(s, &end, 10);
  if (end == s || *end != '\0' || v < 1 || v > 65536) return false;
  *out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "control") == 0) {
    const std::string which = argv[2];
    if (which != "written" && which != "unwritten") return usage();
    return control(which);
  }
  if (argc != 7 || std::strcmp(argv[1], "gemm") != 0) return usage();
  int64_t M = 0, N = 0, K = 0;
  if (!parse_dim(argv[2], &M) || !parse_dim(argv[3], &N) || !parse_dim(argv[4], &K)) return usage();
  DataType out_type = DataType::kF32;
  if (std::strcmp(argv[5], "bf16") == 0) {
    out_type = DataType::kBF16;
  } else if (std::strcmp(argv[5], "f32") != 0) {
    return usage();
  }
  char* end = nullptr;
  const int index = static_cast<int>(std::strtol(argv[6], &end, 10));
  if (end == argv[6] || *end != '\0') return usage();
  return probe(M, N, K, out_type, index);
}
