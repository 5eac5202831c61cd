// The CUDA device's tuning of tactics at build time: the timing of a node as it runs (a gated
// MLP's gate / up linear with its activation: GatedTiming), the median device time of a few
// runs, and the cuBLASLt heuristic per bucket of row counts (refine_by_rows). The GEMV
// geometries the builder times are the tactics kLinearGemvGeometry + i (backend.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "devices/cuda/backend.h"
#include "devices/cuda/fusion_plan.h"
#include "runtime/device_backend.h"

namespace gearbox::internal {

// The spin ahead of a timed node (time_node): longer than the host takes to enqueue a
// node's launches, cuBLASLt's included.
inline constexpr int64_t kTimingSpinMicros = 200;

/// The builder's timing of a gated MLP's gate / up linear n (the first node of a
/// kGatedLinear step), as its step runs it: the step's linear and activation (without the
/// down projection) through run_gated_gemv / run_gated_gemm, the activation into a buffer of
/// its own (the builder allocates only the timed node's tensors; an f32 output where a
/// GEMM-fed down projection would read 16 bits, the same for every tactic of the node).
/// Empty for any other node. The caller holds the capture lock.
class GatedTiming {
 public:
  static Result<GatedTiming> for_node(const ir::Network& net, const std::vector<Step>& steps, size_t n,
                                      const NodeArgs& args);
  GatedTiming() = default;
  GatedTiming(const GatedTiming&) = delete;
  GatedTiming& operator=(const GatedTiming&) = delete;
  GatedTiming(GatedTiming&& o) noexcept
      : pair_(std::move(o.pair_)),
        out_(std::exchange(o.out_, nullptr)),
        tensors_(std::move(o.tensors_)),
        tactics_(std::move(o.tactics_)) {}
  ~GatedTiming();

  bool applies() const { return out_ != nullptr; }
  /// The pair under `tactic` on the legacy stream.
  Status run(const ir::Network& net, const CudaWeights& weights, uint32_t tactic, const NodeArgs& args);

 private:
  Step pair_;
  float* out_ = nullptr;
  std::vector<void*> tensors_;     // the node's, and out_ as the activation's output
  std::vector<uint32_t> tactics_;  // per node: the linear's under test, else kDefault
};

/// The median device time of enqueue() over 5 runs after one warm-up, each behind a spin (as
/// time_node), on the legacy stream. The caller holds the capture lock.
Result<double> median_device_us(const std::function<Status()>& enqueue);

/// refine_tactic for the CUDA device: a linear whose tactic runs cuBLASLt and whose row
/// count spans more than one bucket of linear_tactics.h over the profile gets a row-bucketed
/// tactic of the same form (stacked or per output), each bucket's heuristic the fastest of
/// kAltAlgos + 1 at the bucket's top row count (capped at the profile's max), timed on the
/// node's weights with the GEMMs the linear runs (16-bit outputs where rounded_gate_up
/// holds). Linears of the same GEMM shapes share one timing through `memo`.
Result<uint32_t> refine_by_rows(const ir::Network& net, const CudaWeights& weights, size_t n, uint32_t tactic,
                                std::span<const Dims> min_dims, std::span<const Dims> max_dims,
                                DeviceBackend::TuningMemo& memo);

}  // namespace gearbox::internal
