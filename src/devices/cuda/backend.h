// What the CUDA device's files share: tactic ids, the CUDA error check, how the backend's
// kernels go out, its events, and the weights and per-context state the backend creates.
//
//   GEARBOX_CUDA(cudaMemcpy(...));  // returns a device_error Status on failure
//   const cuda::Launch on = launch_on(stream);
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/settings.h"
#include "devices/cuda/capture_lock.h"
#include "devices/cuda/fusion_plan.h"
#include "devices/cuda/gemm_cublaslt.h"
#include "devices/cuda/graphs.h"
#include "devices/cuda/host_outputs.h"
#include "devices/cuda/kernels/gemv.cuh"
#include "devices/cuda/launch.h"
#include "devices/cuda/linear_tactics.h"
#include "runtime/device_backend.h"

namespace gearbox::internal {

// Tactic ids (stored in engine files); the cuBLASLt ones and their row-bucketed form are in
// linear_tactics.h.
namespace lt = cuda::linear_tactics;
inline constexpr uint32_t kDefault = 0;
inline constexpr uint32_t kLinearGemv = 1;
inline constexpr uint32_t kLinearCublasLt = lt::kCublasLt;        // cuBLASLt's first heuristic for the call's shape
inline constexpr uint32_t kLinearCublasLtAlt = lt::kCublasLtAlt;  // + i: its i-th heuristic (i in [1, kAltAlgos])
inline constexpr int kAltAlgos = lt::kAltAlgos;
// The tensor-core GEMV (cuda::gemv_mma_multi, gemv_mma_gated): bf16 weights, up to
// cuda::kGemvMmaMaxRows rows of whole 16-byte chunks.
inline constexpr uint32_t kLinearGemvMma = 3;
inline constexpr uint32_t kLinearGemvGeometry = 10;  // + i: gemv with cuda::kGemvGeometries[i], i >= 1 (M = 1 only)
inline constexpr uint32_t kGemvGeometryCount = std::size(cuda::kGemvGeometries);
// + i: one GEMM (cuBLASLt's i-th heuristic, i in [0, kAltAlgos]) over the stacked weights of
// a multi-output linear (ir::linear_weights_stacked: fused QKV, gate+up) into the scratch,
// then split_columns writes each output (+ bias); 16-bit weights only. A gated MLP's gate / up
// linear (rounded_gate_up) writes the stacked output rounded to 16 bits and is not split.
inline constexpr uint32_t kLinearStacked = lt::kStacked;
inline constexpr uint32_t kAttentionSplitKv = 1;
inline constexpr uint32_t kAttentionTiled = 2;
inline constexpr uint32_t kAttentionMma = 3;  // bf16 tensor cores: bf16 networks only

/// Whether a linear's tactic is the SIMT GEMV (kLinearGemv: the default geometry), the kernel
/// that also takes a norm input, progress slots and stores into host memory.
inline bool is_simt_gemv(uint32_t tactic) {
  return tactic == kLinearGemv || (tactic > kLinearGemvGeometry && tactic < kLinearGemvGeometry + kGemvGeometryCount);
}
/// Whether a linear's tactic is one of the GEMV kernels, which read x and write y in f32 with
/// no scratch: the SIMT GEMV or the tensor-core one (kLinearGemvMma).
inline bool is_gemv(uint32_t tactic) { return is_simt_gemv(tactic) || tactic == kLinearGemvMma; }
inline bool is_stacked(uint32_t tactic) { return lt::is_stacked(tactic); }
/// The geometry of a SIMT GEMV tactic (the default for any other).
inline cuda::GemvGeometry gemv_geometry(uint32_t tactic) {
  return is_simt_gemv(tactic) && tactic != kLinearGemv ? cuda::kGemvGeometries[tactic - kLinearGemvGeometry]
                                                       : cuda::kGemvDefaultGeometry;
}
// Decode attention splits: up to 16 combine inside a thread-block cluster (sliding-window
// layers; one launch, kernels/decode_attention.cuh), more (long global contexts) in a second kernel.
inline constexpr int kMaxSplits = 32;

/// `err` as a Status: ok for cudaSuccess, else a device_error naming `what` and the error.
Status cuda_check(cudaError_t err, const char* what);
#define GEARBOX_CUDA(call) GEARBOX_RETURN_IF_ERROR(cuda_check((call), #call))

/// The limits of the device the backend runs on (device 0, made current by cuda_backend()).
inline const cuda::DeviceLimits& backend_limits() { return cuda::device_limits(0); }

/// How the backend's kernels go out on `stream`: with programmatic dependent launch where it is
/// enabled and the stream is not the legacy default stream (the builder's synchronous timing).
/// first_plain: the call's first kernel goes out plainly (a network's first kernel waits for
/// the inputs enqueued ahead of the network).
cuda::Launch launch_on(cudaStream_t stream, bool first_plain = false);

/// GEARBOX_CUDA_FUSION=0 runs every node by itself (for measuring what fusion buys): no fused
/// chains, the KV-cache write as its own launch before the split-KV and tensor-core
/// attentions, and no stacked-weight GEMMs offered to the builder.
inline bool fusion_enabled() { return settings().cuda_fusion; }

class CudaEvent final : public EventImpl {
 public:
  /// get() is null when creation failed. cudaEventDefault makes an event that times.
  explicit CudaEvent(unsigned flags = cudaEventDisableTiming) { (void)cudaEventCreateWithFlags(&event_, flags); }
  ~CudaEvent() override {
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
  }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  Status synchronize() override { return cuda_check(cudaEventSynchronize(event_), "cudaEventSynchronize"); }
  bool query() override { return cudaEventQuery(event_) != cudaErrorNotReady; }
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

class CudaWeights final : public DeviceWeights {
 public:
  ~CudaWeights() override {
    const std::lock_guard<std::mutex> lock(cuda_capture_mutex());
    if (base != nullptr) (void)cudaFree(base);
    if (rope_base != nullptr) (void)cudaFree(rope_base);
  }
  int64_t bytes() const noexcept override { return size; }
  /// A RoPE node's inverse frequencies (head_dim / 2 floats): its weight when it has one,
  /// else the table for its (theta, head_dim) (cpu::rope_inv_freq's values), or null.
  const float* rope_table(const ir::Node& rope) const {
    if (!rope.weights.empty()) return static_cast<const float*>(ptr[static_cast<size_t>(rope.weights[0])]);
    const auto it = rope_tables.find({rope.attrs.theta, rope.attrs.head_dim});
    return it == rope_tables.end() ? nullptr : it->second;
  }
  void* base = nullptr;
  int64_t size = 0;
  std::vector<const void*> ptr;  // per weight id
  std::vector<DataType> type;
  void* rope_base = nullptr;
  std::map<std::pair<float, int64_t>, const float*> rope_tables;
  // The network's steps (fused chains and single nodes), planned once at upload.
  std::vector<Step> steps;
};

class CudaContextState final : public DeviceContextState {
 public:
  ~CudaContextState() override {
    for (CapturedGraph& g : graphs) {
      if (g.exec != nullptr) (void)cudaGraphExecDestroy(g.exec);
    }
    for (ShapeGraphs& p : shape_graphs) {
      for (ShapeGraphs::Entry& e : p.graphs) (void)cudaGraphExecDestroy(e.exec);
    }
    const std::lock_guard<std::mutex> lock(cuda_capture_mutex());
    if (fault_host != nullptr) (void)cudaFreeHost(fault_host);
  }
  /// The kernels' error flag (kernels/conventions.h): mapped host memory, so that the runtime reads it
  /// after waiting for the context's work without a copy (take_input_fault). 0 = no fault.
  int* fault_host = nullptr;
  int* fault_device = nullptr;  // the same int as the kernels address it
  std::unique_ptr<cuda::CublasLtGemm> gemm;
  std::vector<CapturedGraph> graphs;      // per profile
  std::vector<ShapeGraphs> shape_graphs;  // per profile (those whose shapes vary)
  // Per network output: the progress slots its GEMV fills this call (HostOutputs::bind).
  std::vector<cuda::OutputProgress> host_progress;
  // cuBLASLt heuristics per (rows, N, K, weight type, output type), rows being
  // linear_tactics::list_rows(M), so a call needs no host-side query once its list has been
  // met (Session::warm_up meets them all).
  std::map<std::tuple<int64_t, int64_t, int64_t, int, int>, std::vector<cublasLtMatmulHeuristicResult_t>> algos;

  /// The algorithm cuBLASLt tactic `tactic` runs for a GEMM of m rows: the heuristic it names
  /// for the list's rows, from the list at linear_tactics::list_rows(m) (one list per bucket,
  /// not per m, so that a prompt of a length never met before runs kernels already loaded and
  /// chosen). out: the GEMM's output type (f32, or `type` for run_converted_rounded).
  Result<const cublasLtMatmulAlgo_t*> algo(uint32_t tactic, int64_t m, int64_t n, int64_t k, DataType type,
                                           DataType out = DataType::kF32) {
    m = cuda::linear_tactics::list_rows(m);
    const auto index = static_cast<size_t>(cuda::linear_tactics::heuristic(tactic, m));
    auto key = std::make_tuple(m, n, k, static_cast<int>(type), static_cast<int>(out));
    auto it = algos.find(key);
    if (it == algos.end()) {
      std::vector<cublasLtMatmulHeuristicResult_t> found;
      GEARBOX_RETURN_IF_ERROR(gemm->heuristics(m, n, k, type, kAltAlgos + 1, &found, out));
      it = algos.emplace(key, std::move(found)).first;
    }
    if (it->second.empty()) return unimplemented("cuBLASLt has no algorithm for this GEMM");
    return &it->second[std::min(index, it->second.size() - 1)].algo;
  }
};

}  // namespace gearbox::internal
