// cuBLASLt GEMM: descriptors per call (host-only, cheap), workspace and handle per object;
// the library itself loaded when the first object is created (cublaslt_library.h).
// See gemm_cublaslt.h for the layout mapping and the numerics.

#include "devices/cuda/gemm_cublaslt.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include "core/elapsed.h"
#include "core/log.h"
#include "devices/cuda/capture_lock.h"
#include "devices/cuda/cublaslt_library.h"
#include "devices/cuda/kernels/elementwise.cuh"

namespace gearbox::cuda {
namespace {

/// The loaded library. Everything below runs for a CublasLtGemm, whose create() loaded it.
const CublasLtLibrary& lt() {
  static const CublasLtLibrary* const library = cublaslt().value();
  return *library;
}

Status cublas_error(cublasStatus_t status, std::string_view call, int line) {
  if (call.starts_with("lt().")) call.remove_prefix(5);  // the C API's name, as the documentation spells it
  return device_error(std::string(call) + " failed: " + lt().cublasLtGetStatusName(status) + " (" +
                      lt().cublasLtGetStatusString(status) + ") at gemm_cublaslt.cpp:" + std::to_string(line));
}

Status cuda_error(cudaError_t err, const char* call, int line) {
  return device_error(std::string(call) + " failed: " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) +
                      ") at gemm_cublaslt.cpp:" + std::to_string(line));
}

#define GEARBOX_CUBLASLT_TRY(call)                                                                       \
  do {                                                                                                   \
    const cublasStatus_t gearbox_status_ = (call);                                                       \
    if (gearbox_status_ != CUBLAS_STATUS_SUCCESS) return cublas_error(gearbox_status_, #call, __LINE__); \
  } while (false)

#define GEARBOX_CUDA_TRY(call)                                                         \
  do {                                                                                 \
    const cudaError_t gearbox_err_ = (call);                                           \
    if (gearbox_err_ != cudaSuccess) return cuda_error(gearbox_err_, #call, __LINE__); \
  } while (false)

bool supported_weight_type(DataType type) {
  return type == DataType::kF32 || type == DataType::kBF16 || type == DataType::kF16;
}

cudaDataType_t cuda_type(DataType type) {
  switch (type) {
    case DataType::kBF16: return CUDA_R_16BF;
    case DataType::kF16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % CublasLtGemm::kAlignment == 0; }

Status check_shape(int64_t M, int64_t N, int64_t K, DataType weight_type) {
  if (!supported_weight_type(weight_type)) {
    return invalid_argument(std::string("cuBLASLt GEMM weights must be f32, bf16 or f16, not ") +
                            data_type_name(weight_type));
  }
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (M < 0 || N < 0 || K < 0 || M > kMax || N > kMax || K > kMax) {
    return invalid_argument("GEMM shape M=" + std::to_string(M) + " N=" + std::to_string(N) +
                            " K=" + std::to_string(K) + " is negative or too large");
  }
  return Status::ok_status();
}

/// y's element type: f32, or the weights' own 16-bit type.
Status check_out_type(DataType weight_type, DataType out_type) {
  if (out_type == DataType::kF32 || (out_type == weight_type && weight_type != DataType::kF32)) {
    return Status::ok_status();
  }
  return invalid_argument(std::string("a cuBLASLt GEMM of ") + data_type_name(weight_type) + " weights writes f32 or " +
                          data_type_name(weight_type) + ", not " + data_type_name(out_type));
}

/// False when `algo`'s configuration says it splits K and adds the partial sums in the output
/// type: the preference of a 16-bit output excludes those, and each result is checked
/// again here. An algorithm whose configuration cannot be read is left to the preference.
bool sums_in_compute_type(const cublasLtMatmulAlgo_t& algo) {
  int32_t splits = 1;
  uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
  size_t written = 0;
  if (lt().cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits),
                                                &written) != CUBLAS_STATUS_SUCCESS ||
      lt().cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof(scheme),
                                                &written) != CUBLAS_STATUS_SUCCESS) {
    return true;
  }
  return splits <= 1 || scheme == CUBLASLT_REDUCTION_SCHEME_NONE || scheme == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
}

/// The operation and layout descriptors of one shape (see the header for the mapping).
class MatmulDescs {
 public:
  MatmulDescs() = default;
  MatmulDescs(const MatmulDescs&) = delete;
  MatmulDescs& operator=(const MatmulDescs&) = delete;
  ~MatmulDescs() {
    // Destruction failures are not actionable; the descriptors are host memory.
    if (d_ != nullptr) (void)lt().cublasLtMatrixLayoutDestroy(d_);
    if (b_ != nullptr) (void)lt().cublasLtMatrixLayoutDestroy(b_);
    if (a_ != nullptr) (void)lt().cublasLtMatrixLayoutDestroy(a_);
    if (op_ != nullptr) (void)lt().cublasLtMatmulDescDestroy(op_);
  }

  /// out_type: y's elements, f32 or weight_type.
  Status init(int64_t M, int64_t N, int64_t K, DataType weight_type, DataType out_type) {
    const cudaDataType_t ab = cuda_type(weight_type);
    GEARBOX_CUBLASLT_TRY(lt().cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t transa = CUBLAS_OP_T;
    const cublasOperation_t transb = CUBLAS_OP_N;
    GEARBOX_CUBLASLT_TRY(
        lt().cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof(transa)));
    GEARBOX_CUBLASLT_TRY(
        lt().cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof(transb)));
    const auto m = static_cast<uint64_t>(M);
    const auto n = static_cast<uint64_t>(N);
    const auto k = static_cast<uint64_t>(K);
    GEARBOX_CUBLASLT_TRY(lt().cublasLtMatrixLayoutCreate(&a_, ab, k, n, static_cast<int64_t>(k)));  // W: K x N, ld K
    GEARBOX_CUBLASLT_TRY(lt().cublasLtMatrixLayoutCreate(&b_, ab, k, m, static_cast<int64_t>(k)));  // x^T: K x M, ld K
    GEARBOX_CUBLASLT_TRY(
        lt().cublasLtMatrixLayoutCreate(&d_, cuda_type(out_type), n, m, static_cast<int64_t>(n)));  // y^T
    return Status::ok_status();
  }

  cublasLtMatmulDesc_t op() const { return op_; }
  cublasLtMatrixLayout_t a() const { return a_; }
  cublasLtMatrixLayout_t b() const { return b_; }
  cublasLtMatrixLayout_t d() const { return d_; }  // C and D share it (beta = 0)

 private:
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr;
  cublasLtMatrixLayout_t b_ = nullptr;
  cublasLtMatrixLayout_t d_ = nullptr;
};

class MatmulPreference {
 public:
  MatmulPreference() = default;
  MatmulPreference(const MatmulPreference&) = delete;
  MatmulPreference& operator=(const MatmulPreference&) = delete;
  ~MatmulPreference() {
    if (pref_ != nullptr) (void)lt().cublasLtMatmulPreferenceDestroy(pref_);
  }

  /// out_type: y's elements. A 16-bit y admits no split-K algorithm that adds its partial
  /// sums in the output type (in place, or in a workspace of the output type): each partial
  /// would be rounded to bf16 / f16 before the sum, several ulps off where they cancel.
  Status init(DataType out_type) {
    GEARBOX_CUBLASLT_TRY(lt().cublasLtMatmulPreferenceCreate(&pref_));
    if (out_type != DataType::kF32) {
      const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
      GEARBOX_CUBLASLT_TRY(lt().cublasLtMatmulPreferenceSetAttribute(pref_, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                                     &schemes, sizeof(schemes)));
    }
    const uint64_t workspace = CublasLtGemm::kWorkspaceBytes;
    GEARBOX_CUBLASLT_TRY(lt().cublasLtMatmulPreferenceSetAttribute(pref_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                   &workspace, sizeof(workspace)));
    // Only algorithms that work with the alignment run() checks (default: 256 bytes).
    const auto alignment = static_cast<uint32_t>(CublasLtGemm::kAlignment);
    for (const cublasLtMatmulPreferenceAttributes_t attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
      GEARBOX_CUBLASLT_TRY(lt().cublasLtMatmulPreferenceSetAttribute(pref_, attr, &alignment, sizeof(alignment)));
    }
    return Status::ok_status();
  }

  cublasLtMatmulPreference_t get() const { return pref_; }

 private:
  cublasLtMatmulPreference_t pref_ = nullptr;
};

}  // namespace

Result<std::unique_ptr<CublasLtGemm>> CublasLtGemm::create() {
  if (Result<const CublasLtLibrary*> library = cublaslt(); !library.ok()) return library.status();
  cublasLtHandle_t handle = nullptr;
  const cublasStatus_t status = lt().cublasLtCreate(&handle);
  if (status != CUBLAS_STATUS_SUCCESS) return cublas_error(status, "cublasLtCreate(&handle)", __LINE__);
  void* workspace = nullptr;
  std::unique_lock<std::mutex> lock(internal::cuda_capture_mutex());
  const cudaError_t err = cudaMalloc(&workspace, kWorkspaceBytes);
  lock.unlock();
  if (err != cudaSuccess) {
    (void)lt().cublasLtDestroy(handle);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return resource_exhausted("cannot allocate the 32 MiB cuBLASLt workspace: the device is out of memory");
    }
    return cuda_error(err, "cudaMalloc(&workspace, kWorkspaceBytes)", __LINE__);
  }
  return std::unique_ptr<CublasLtGemm>(new CublasLtGemm(handle, workspace));
}

CublasLtGemm::~CublasLtGemm() {
  // A destructor cannot report: a failure here means the context is already gone.
  const std::lock_guard<std::mutex> lock(internal::cuda_capture_mutex());
  (void)cudaFree(workspace_);
  (void)lt().cublasLtDestroy(handle_);
}

int64_t CublasLtGemm::scratch_bytes(int64_t M, int64_t K, DataType weight_type) {
  if (weight_type == DataType::kBF16 || weight_type == DataType::kF16) return M * K * 2;
  return 0;
}

Status CublasLtGemm::heuristics(int64_t M, int64_t N, int64_t K, DataType weight_type, int max_algos,
                                std::vector<cublasLtMatmulHeuristicResult_t>* out, DataType out_type) {
  if (out == nullptr || max_algos < 1) return invalid_argument("heuristics needs an output vector and max_algos >= 1");
  out->clear();
  if (Status s = check_shape(M, N, K, weight_type); !s.ok()) return s;
  if (Status s = check_out_type(weight_type, out_type); !s.ok()) return s;
  if (M == 0 || N == 0 || K == 0) return invalid_argument("cuBLASLt heuristics need M, N, K >= 1");
  MatmulDescs descs;
  if (Status s = descs.init(M, N, K, weight_type, out_type); !s.ok()) return s;
  MatmulPreference pref;
  if (Status s = pref.init(out_type); !s.ok()) return s;
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(max_algos));
  int found = 0;
  GEARBOX_CUBLASLT_TRY(lt().cublasLtMatmulAlgoGetHeuristic(handle_, descs.op(), descs.a(), descs.b(), descs.d(),
                                                           descs.d(), pref.get(), max_algos, results.data(), &found));
  for (int i = 0; i < found; ++i) {
    const cublasLtMatmulHeuristicResult_t& r = results[static_cast<size_t>(i)];
    if (r.state == CUBLAS_STATUS_SUCCESS && (out_type == DataType::kF32 || sums_in_compute_type(r.algo))) {
      out->push_back(r);
    }
  }
  if (out->empty()) {
    return unimplemented("cuBLASLt has no algorithm for M=" + std::to_string(M) + " N=" + std::to_string(N) +
                         " K=" + std::to_string(K) + " with " + data_type_name(weight_type) + " weights and " +
                         data_type_name(out_type) + " output");
  }
  return Status::ok_status();
}

bool CublasLtGemm::algo_supports(const cublasLtMatmulAlgo_t& algo, int64_t M, int64_t N, int64_t K,
                                 DataType weight_type) {
  if (!check_shape(M, N, K, weight_type).ok() || M == 0 || N == 0 || K == 0) return false;
  MatmulDescs descs;
  if (!descs.init(M, N, K, weight_type, DataType::kF32).ok()) return false;
  cublasLtMatmulHeuristicResult_t result{};
  const cublasStatus_t status =
      lt().cublasLtMatmulAlgoCheck(handle_, descs.op(), descs.a(), descs.b(), descs.d(), descs.d(), &algo, &result);
  return status == CUBLAS_STATUS_SUCCESS && result.workspaceSize <= kWorkspaceBytes;
}

Status CublasLtGemm::run(const cublasLtMatmulAlgo_t* algo, const float* x, const void* w, DataType weight_type,
                         const float* bias, float* y, int64_t M, int64_t N, int64_t K, void* scratch,
                         const Launch& launch) {
  if (Status s = check_shape(M, N, K, weight_type); !s.ok()) return s;
  if (M == 0 || N == 0) return Status::ok_status();
  if (K == 0) return matmul(algo, x, w, weight_type, bias, y, DataType::kF32, M, N, K, launch);
  if (!aligned(x) || !aligned(w) || !aligned(y) || !aligned(bias)) {
    return invalid_argument("cuBLASLt GEMM pointers must be 16-byte aligned");
  }
  if (weight_type == DataType::kF32) return matmul(algo, x, w, weight_type, bias, y, DataType::kF32, M, N, K, launch);
  if (Status s = convert_input(x, weight_type, M, K, scratch, launch); !s.ok()) return s;
  return matmul(algo, scratch, w, weight_type, bias, y, DataType::kF32, M, N, K, launch.following());
}

Status CublasLtGemm::convert_input(const float* x, DataType weight_type, int64_t M, int64_t K, void* scratch,
                                   const Launch& launch) {
  if (Status s = check_shape(M, 1, K, weight_type); !s.ok()) return s;
  if (weight_type == DataType::kF32) return invalid_argument("an f32 GEMM reads x itself: nothing to convert");
  if (scratch == nullptr) {
    return invalid_argument("a bf16/f16 GEMM needs scratch of scratch_bytes(M, K) bytes for the converted x");
  }
  if (!aligned(x) || !aligned(scratch)) return invalid_argument("cuBLASLt GEMM pointers must be 16-byte aligned");
  if (M == 0 || K == 0) return Status::ok_status();
  if (weight_type == DataType::kBF16) {
    GEARBOX_CUDA_TRY(convert_f32_to<__nv_bfloat16>(x, static_cast<__nv_bfloat16*>(scratch), M * K, launch));
  } else {
    GEARBOX_CUDA_TRY(convert_f32_to<__half>(x, static_cast<__half*>(scratch), M * K, launch));
  }
  return Status::ok_status();
}

Status CublasLtGemm::run_converted(const cublasLtMatmulAlgo_t* algo, const void* x_converted, const void* w,
                                   DataType weight_type, const float* bias, float* y, int64_t M, int64_t N, int64_t K,
                                   const Launch& launch) {
  return matmul_converted(algo, x_converted, w, weight_type, bias, y, DataType::kF32, M, N, K, launch);
}

Status CublasLtGemm::run_converted_rounded(const cublasLtMatmulAlgo_t* algo, const void* x_converted, const void* w,
                                           DataType weight_type, void* y, int64_t M, int64_t N, int64_t K,
                                           const Launch& launch) {
  return matmul_converted(algo, x_converted, w, weight_type, nullptr, y, weight_type, M, N, K, launch);
}

Status CublasLtGemm::matmul_converted(const cublasLtMatmulAlgo_t* algo, const void* x_converted, const void* w,
                                      DataType weight_type, const float* bias, void* y, DataType out_type, int64_t M,
                                      int64_t N, int64_t K, const Launch& launch) {
  if (Status s = check_shape(M, N, K, weight_type); !s.ok()) return s;
  if (weight_type == DataType::kF32) {
    return invalid_argument("a GEMM of a converted x is for bf16 / f16 weights; f32 weights go through run()");
  }
  if (M == 0 || N == 0) return Status::ok_status();
  if (K > 0 && (x_converted == nullptr || !aligned(x_converted))) {
    return invalid_argument("cuBLASLt GEMM pointers must be 16-byte aligned");
  }
  return matmul(algo, x_converted, w, weight_type, bias, y, out_type, M, N, K, launch);
}

Status CublasLtGemm::matmul(const cublasLtMatmulAlgo_t* algo, const void* b, const void* w, DataType weight_type,
                            const float* bias, void* y, DataType out_type, int64_t M, int64_t N, int64_t K,
                            const Launch& launch) {
  if (K == 0) {  // an empty sum: y = bias (or 0); bias only with f32 output (the callers' contract)
    GEARBOX_CUDA_TRY(cudaMemsetAsync(y, 0, static_cast<size_t>(M * N) * data_type_size(out_type), launch.stream));
    if (bias != nullptr) GEARBOX_CUDA_TRY(add_bias_rows(static_cast<float*>(y), bias, M, N, launch));
    return Status::ok_status();
  }
  if (!aligned(w) || !aligned(y) || !aligned(bias))
    return invalid_argument("cuBLASLt GEMM pointers must be 16-byte aligned");
  MatmulDescs descs;
  if (Status s = descs.init(M, N, K, weight_type, out_type); !s.ok()) return s;
  cublasLtMatmulAlgo_t chosen{};
  if (algo != nullptr) {
    chosen = *algo;
  } else {
    std::vector<cublasLtMatmulHeuristicResult_t> best;
    if (Status s = heuristics(M, N, K, weight_type, 1, &best, out_type); !s.ok()) return s;
    chosen = best.front().algo;
  }
  const float alpha = 1.0f;
  const float beta = 0.0f;
  GEARBOX_CUBLASLT_TRY(lt().cublasLtMatmul(handle_, descs.op(), &alpha, w, descs.a(), b, descs.b(), &beta, y, descs.d(),
                                           y, descs.d(), &chosen, workspace_, kWorkspaceBytes, launch.stream));
  if (bias != nullptr) GEARBOX_CUDA_TRY(add_bias_rows(static_cast<float*>(y), bias, M, N, launch));
  return Status::ok_status();
}

namespace {

/// What CublasLtGemm::prime's work for one output type took, in ms; negative where a step
/// failed and the rest did not run.
struct PrimeTimes {
  double handle = -1, heuristic = -1, gemm = -1;
};

/// On `device`: a handle, then the first heuristic query and GEMM of a small bf16 shape with
/// `out_type` output, on scratch buffers of its own.
PrimeTimes prime_output(int device, DataType out_type) {
  PrimeTimes times;
  auto t = std::chrono::steady_clock::now();
  // A thread of its own has no current context, and cublasLtCreate expects one.
  if (cudaSetDevice(device) != cudaSuccess) {
    (void)cudaGetLastError();
    return times;
  }
  Result<std::unique_ptr<CublasLtGemm>> gemm = CublasLtGemm::create();
  if (!gemm.ok()) return times;
  times.handle = internal::ms_since(t);
  constexpr int64_t M = 16, N = 256, K = 256;
  constexpr size_t kPart = size_t{1} << 18;  // x, w and y at offsets of 256 KiB
  void* buffer = nullptr;
  {
    const std::lock_guard<std::mutex> lock(internal::cuda_capture_mutex());
    if (cudaMalloc(&buffer, 3 * kPart) != cudaSuccess) {
      (void)cudaGetLastError();
      return times;
    }
  }
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess &&
      cudaMemsetAsync(buffer, 0, 3 * kPart, stream) == cudaSuccess) {
    t = std::chrono::steady_clock::now();
    std::vector<cublasLtMatmulHeuristicResult_t> best;
    if ((*gemm)->heuristics(M, N, K, DataType::kBF16, 1, &best, out_type).ok()) {
      times.heuristic = internal::ms_since(t);
      t = std::chrono::steady_clock::now();
      auto* x = static_cast<char*>(buffer);
      const Launch launch{stream, false, false, nullptr};
      const Status ran = out_type == DataType::kF32
                             ? (*gemm)->run_converted(&best.front().algo, x, x + kPart, DataType::kBF16, nullptr,
                                                      reinterpret_cast<float*>(x + 2 * kPart), M, N, K, launch)
                             : (*gemm)->run_converted_rounded(&best.front().algo, x, x + kPart, DataType::kBF16,
                                                              x + 2 * kPart, M, N, K, launch);
      if (ran.ok() && cudaStreamSynchronize(stream) == cudaSuccess) times.gemm = internal::ms_since(t);
    }
  }
  (void)cudaGetLastError();
  if (stream != nullptr) (void)cudaStreamDestroy(stream);
  const std::lock_guard<std::mutex> lock(internal::cuda_capture_mutex());
  (void)cudaFree(buffer);
  return times;
}

}  // namespace

void CublasLtGemm::prime() {
  const auto start = std::chrono::steady_clock::now();
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  // Each output type's first heuristic query loads tables of its own: the two run at once.
  PrimeTimes rounded;
  std::thread other;
  try {
    other = std::thread([&rounded, device] { rounded = prime_output(device, DataType::kBF16); });
  } catch (const std::system_error&) {
    rounded = prime_output(device, DataType::kBF16);
  }
  const PrimeTimes f32 = prime_output(device, DataType::kF32);
  if (other.joinable()) other.join();
  GEARBOX_LOG(kDebug,
              "cuBLASLt: warmed up beside the load in %.1f ms; f32 output: handle %.1f ms, first heuristic %.1f ms, "
              "GEMM %.1f ms; 16-bit output: handle %.1f ms, first heuristic %.1f ms, GEMM %.1f ms",
              internal::ms_since(start), f32.handle, f32.heuristic, f32.gemm, rounded.handle, rounded.heuristic,
              rounded.gemm);
}

std::string CublasLtGemm::version() {
  Result<const CublasLtLibrary*> library = cublaslt();
  if (!library.ok()) return "cublasLt not loaded";    // matches no tactic table; create() says why
  const size_t v = (*library)->cublasLtGetVersion();  // major * 10000 + minor * 100 + patch
  return "cublasLt " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

}  // namespace gearbox::cuda
