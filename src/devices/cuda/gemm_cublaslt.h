// The CUDA device's GEMM for M above the gemv range: y[M, N] = x[M, K] * W[N, K]^T (+ bias)
// through cuBLASLt, with f32 activations and output (or output in W's type:
// run_converted_rounded) and W in its checkpoint dtype.
//
//   Result<std::unique_ptr<CublasLtGemm>> gemm = CublasLtGemm::create();  // current device
//   std::vector<cublasLtMatmulHeuristicResult_t> algos;
//   Status s = (*gemm)->heuristics(M, N, K, DataType::kBF16, 8, &algos);    // at build time
//   ... time each algos[i].algo with events, keep the fastest ...
//   s = (*gemm)->run(&best, x, w, DataType::kBF16, nullptr, y, M, N, K, scratch, launch);
//
// bf16 / f16 weights: x is first rounded to W into the caller's `scratch` (scratch_bytes()),
// then cuBLASLt multiplies W x W -> f32 with f32 accumulation (CUBLAS_COMPUTE_32F): the
// result equals an f32 GEMM of the W-rounded x and W up to summation order. f32 weights use
// a plain f32 GEMM (CUBLAS_COMPUTE_32F, no TF32), to stay close to the CPU kernels.
//
// Layout: row-major y[M, N] is column-major y^T [N, M], and y^T = W x^T with W [N, K]
// row-major read as the column-major K x N matrix A, transposed (transa = T); x^T is the
// column-major K x M matrix B (transb = N).
//
// Requirements: x, w, y, bias and scratch 16-byte aligned (heuristics are asked for
// algorithms that need no more); the workspace (32 MiB) is allocated at creation, so run()
// never allocates and can be captured into a CUDA graph. Not thread-safe, and one object
// must not serve two streams concurrently (they would share the workspace).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "devices/cuda/launch.h"
#include "gearbox/data_type.h"
#include "gearbox/status.h"

namespace gearbox::cuda {

class CublasLtGemm {
 public:
  /// Workspace handed to every matmul (NVIDIA's recommendation for Hopper).
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;
  /// Alignment run() requires of every pointer, and heuristics() assumes.
  static constexpr size_t kAlignment = 16;

  /// A handle and a workspace on the current device; loads the library first where no load
  /// has begun (cublaslt_library.h). Errors: kDeviceError (the library cannot be loaded,
  /// cuBLASLt or cudaMalloc failed), kResourceExhausted (no memory for the workspace).
  static Result<std::unique_ptr<CublasLtGemm>> create();
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  /// Up to max_algos candidate algorithms for the shape, best first by cuBLASLt's estimate,
  /// for y of out_type elements (f32: run / run_converted; the weights' type:
  /// run_converted_rounded). Errors: kInvalidArgument (shape, type, out_type or max_algos),
  /// kUnimplemented (no algorithm), kDeviceError.
  Status heuristics(int64_t M, int64_t N, int64_t K, DataType weight_type, int max_algos,
                    std::vector<cublasLtMatmulHeuristicResult_t>* out, DataType out_type = DataType::kF32);

  /// True when `algo` (e.g. stored in an engine file) can run this shape and type, f32
  /// output, on the current device within the workspace.
  bool algo_supports(const cublasLtMatmulAlgo_t& algo, int64_t M, int64_t N, int64_t K, DataType weight_type);

  /// Bytes of `scratch` run() needs: M * K elements of W for bf16 / f16, 0 for f32.
  static int64_t scratch_bytes(int64_t M, int64_t K, DataType weight_type);

  /// Enqueues y[M, N] = x[M, K] * w[N, K]^T (+ bias[N]) on launch.stream; nothing synchronized.
  /// Our kernels around the GEMM (x's conversion, the bias) go out as `launch` describes
  /// (launch.h), the first of them as launch says and the next as launch.following().
  /// algo null: the first heuristic (a host-side query on every call; pass a stored algo on
  /// hot paths). bias (nullable) is added by a separate kernel, so the algorithms do not
  /// depend on it. M = 0 or N = 0 is a no-op; K = 0 writes bias (or 0).
  /// Errors: kInvalidArgument (shape, type, alignment, missing scratch), kUnimplemented,
  /// kDeviceError (a CUDA or cuBLASLt call failed; the message names it).
  Status run(const cublasLtMatmulAlgo_t* algo, const float* x, const void* w, DataType weight_type, const float* bias,
             float* y, int64_t M, int64_t N, int64_t K, void* scratch, const Launch& launch);

  /// run() in two halves, for several GEMMs of one x (a linear with several outputs): x
  /// rounded to `weight_type` (bf16 / f16) into `scratch` once, then any number of
  /// run_converted() calls reading it. Same shapes, alignment and errors as run();
  /// convert_input rejects f32 weights (an f32 GEMM reads x itself).
  static Status convert_input(const float* x, DataType weight_type, int64_t M, int64_t K, void* scratch,
                              const Launch& launch);
  Status run_converted(const cublasLtMatmulAlgo_t* algo, const void* x_converted, const void* w, DataType weight_type,
                       const float* bias, float* y, int64_t M, int64_t N, int64_t K, const Launch& launch);
  /// run_converted with y [M, N] in the weights' type (bf16 / f16): cuBLASLt's epilogue rounds
  /// the f32 accumulators to nearest even, so y holds what converting run_converted's f32
  /// output would (up to summation order; heuristics() offers no algorithm that rounds
  /// split-K partial sums to the output type); no bias. `algo` from heuristics(..., out_type =
  /// weight_type) or null. Errors as run_converted (f32 weights: kInvalidArgument).
  Status run_converted_rounded(const cublasLtMatmulAlgo_t* algo, const void* x_converted, const void* w,
                               DataType weight_type, void* y, int64_t M, int64_t N, int64_t K, const Launch& launch);

  /// Does cuBLASLt's first-use work in this process (a handle, then the first heuristic query
  /// and GEMM with f32 output and with 16-bit output, which cost tens of milliseconds each
  /// the first time) on small scratch buffers, and logs what each took at debug level. Run
  /// on the loading thread beside the engine's load (start_loading_cublaslt); a failure is
  /// left for the first real use to report.
  static void prime();

  /// "cublasLt X.Y.Z" of the library loaded at run time (loaded here where no load has
  /// begun), or "cublasLt not loaded" where it cannot be: create() then says why.
  static std::string version();

 private:
  CublasLtGemm(cublasLtHandle_t handle, void* workspace) : handle_(handle), workspace_(workspace) {}
  /// run_converted / run_converted_rounded: checks, then matmul() with y of out_type.
  Status matmul_converted(const cublasLtMatmulAlgo_t* algo, const void* x_converted, const void* w,
                          DataType weight_type, const float* bias, void* y, DataType out_type, int64_t M, int64_t N,
                          int64_t K, const Launch& launch);
  /// The matmul and the bias (f32 output only), b = x (f32) or its W-typed copy, y of
  /// out_type; shapes checked.
  Status matmul(const cublasLtMatmulAlgo_t* algo, const void* b, const void* w, DataType weight_type, const float* bias,
                void* y, DataType out_type, int64_t M, int64_t N, int64_t K, const Launch& launch);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
};

}  // namespace gearbox::cuda
