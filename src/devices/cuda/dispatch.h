// The CUDA device's dispatch: one call per op kind (embedding, RMS norm, linear as GEMV or
// cuBLASLt GEMM, RoPE, attention, gated activations, add, take_last, the generic ops), the fused steps of the
// launch plan (fusion_plan.h), and run_all, which walks the plan and launches each step.
//
//   GEARBOX_RETURN_IF_ERROR(run_node(net, weights, n, tactic, args, launch_on(stream)));
//   GEARBOX_RETURN_IF_ERROR(run_all(net, weights, launch, stream, weights.steps));
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "devices/cuda/backend.h"
#include "devices/cuda/fusion_plan.h"
#include "devices/cuda/kernels/gemv.cuh"
#include "devices/cuda/kernels/kv_cache.cuh"
#include "ir/network.h"
#include "runtime/device_backend.h"

namespace gearbox::internal {

/// Whether tensor t is a network input: written ahead of the network by no kernel of it (its
/// first kernel waits for whatever wrote them: run_all), so the decode attention may read
/// the positions before its wait.
bool network_input(const ir::Network& net, int32_t t);

/// Whether f32 tensors t and u of a launch share no byte (a fused launch that reads one while
/// it writes the other needs them apart: the memory plan keeps them so, bound tensors are
/// checked with this).
bool tensors_apart(const NodeArgs& a, int32_t t, int32_t u);

/// The context's error flag for the kernels (null outside a context: the builder's timing).
int* fault_flag(const NodeArgs& a);

/// The KV-cache slots an attention node of a batched network reads (its fifth input, and its
/// query rows' sequence length); none (ids null) for a one-sequence network.
cuda::CacheSlots cache_slots(const ir::Network& net, const ir::Node& attention, const NodeArgs& a);

/// f called with a value of the C++ type of weights of `type` (float, __nv_bfloat16, __half).
template <typename F>
Status by_weight_type(DataType type, F&& f) {
  switch (type) {
    case DataType::kF32: return f(float{});
    case DataType::kBF16: return f(__nv_bfloat16{});
    case DataType::kF16: return f(__half{});
    default: return internal_error("integer weights");
  }
}

/// Where a kLinearStacked tactic's GEMM output starts in the scratch: after the converted x.
int64_t stacked_output_offset(int64_t m, int64_t k, DataType type);

/// Whether a linear may take the kLinearStacked tactics.
bool stackable(const ir::Network& net, const ir::Node& node);

/// Whether the linear of `step` (nullable), a kGatedLinear step, writes gate and up rounded
/// to its 16-bit weights' type for the activation to read (run_gated_gemm): a cuBLASLt
/// tactic, no bias, and rows of whole 16-byte chunks (N % 8 == 0), so that both halves sit
/// 16-byte aligned in the gate tensor's memory (M x N f32 = two M x N 16-bit matrices).
/// Rounding the GEMM's output halves its stores and the activation's loads; each value the
/// activation reads then carries one bf16 / f16 rounding, as in HF's bf16 MLP.
bool rounded_gate_up(const ir::Network& net, const Step* step, uint32_t tactic);

/// rounded_gate_up for node n of `net` under `tactic`, planned as `steps` (the builder's
/// timing and the memory plan, which see a node, not a step).
bool rounded_gate_up_node(const ir::Network& net, const std::vector<Step>& steps, size_t n, uint32_t tactic);

/// A GEMV's input computed by the GEMV itself: the residual step of a kNormAddNorm or kAddNorm step whose
/// last norm only that linear reads (norm_into_gemv), its weights of the linear's type W,
/// which typed() restores.
using NormInput = cuda::GemvNormInput<void>;
template <typename W>
cuda::GemvNormInput<W> typed(const NormInput& n) {
  return {n.x, static_cast<const W*>(n.w_post), n.residual, n.sum, static_cast<const W*>(n.w_next), n.eps, n.offset};
}

/// A gated linear's gate and up as rounded_gate_up leaves them: [M, N] each, row stride ld
/// elements of the weights' type, in the memory of the linear's first output tensor.
struct RoundedGateUp {
  const void* gate = nullptr;
  const void* up = nullptr;
  int64_t ld = 0;
};

// ---- one node ---------------------------------------------------------------------------------
// Each takes node n of `net` with its tensors in `a`, launched as `launch` says.

Status run_embedding(const ir::Network& net, const CudaWeights& weights, size_t n, const NodeArgs& a,
                     const cuda::Launch& launch);
Status run_rms_norm(const ir::Network& net, const CudaWeights& weights, size_t n, const NodeArgs& a,
                    const cuda::Launch& launch);
/// A linear under a GEMV tactic. norm (nullable): the GEMV computes its input from the
/// kNormAddNorm step before it (norm_into_gemv).
Status run_linear_gemv(const ir::Network& net, const CudaWeights& weights, size_t n, uint32_t tactic, const NodeArgs& a,
                       const cuda::Launch& launch, const NormInput* norm = nullptr);
/// A linear under a cuBLASLt tactic (per output, or one GEMM over stacked weights then the
/// columns). input_in_scratch (16-bit weights only): its input is already in a.scratch,
/// rounded to the weights' type (a fused producer wrote it).
Status run_linear_gemm(const ir::Network& net, const CudaWeights& weights, size_t n, uint32_t tactic, const NodeArgs& a,
                       const cuda::Launch& launch, bool input_in_scratch);
/// A linear under a kLinearStacked tactic whose stacked GEMM output [M, sum N_i] stays in the
/// scratch for the next step (Step::stacked_into_head_norm): its address; no split.
Result<const float*> run_linear_stacked_kept(const ir::Network& net, const CudaWeights& weights, size_t n,
                                             uint32_t tactic, const NodeArgs& a, const cuda::Launch& launch,
                                             bool input_in_scratch);
/// The gate / up linear of a step where rounded_gate_up holds: the GEMMs write gate and up
/// rounded to the weights' type into the first output's memory, described by the result; the
/// second output tensor is not written.
Result<RoundedGateUp> run_linear_rounded(const ir::Network& net, const CudaWeights& weights, size_t n, uint32_t tactic,
                                         const NodeArgs& a, const cuda::Launch& launch, bool input_in_scratch);
Status run_rope(const ir::Network& net, const CudaWeights& weights, size_t n, const NodeArgs& a,
                const cuda::Launch& launch);
Status run_attention(const ir::Network& net, size_t n, uint32_t tactic, const NodeArgs& a, const cuda::Launch& launch);
/// gelu_tanh_mul or silu_mul.
Status run_gated_activation(const ir::Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch);
Status run_add(const ir::Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch);
Status run_take_last(const ir::Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch);

// ---- generic ops (dispatch_generic.cpp) ---------------------------------------------------------
// One launch of kernels/generic.cuh per node (concat: one per input), never fused.

/// How the CUDA device stores a tensor declared `declared` (DeviceBackend::storage_type), as
/// the CPU device does: i32, i64 and bool as declared, every float type in f32 (a bf16 / f16
/// tensor holds values rounded to that type).
DataType cuda_storage_type(DataType declared);

Status run_unary(const ir::Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch);
Status run_binary(const ir::Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch);
Status run_where(const ir::Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch);
Status run_reduce(const ir::Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch);
Status run_softmax(const ir::Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch);
Status run_matmul(const ir::Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch);
Status run_sdpa(const ir::Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch);
Status run_layer_norm(const ir::Network& net, const CudaWeights& weights, size_t n, const NodeArgs& a,
                      const cuda::Launch& launch);
Status run_permute(const ir::Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch);
/// A device copy of the input (the memory plan gives the output its own buffer).
Status run_reshape(const ir::Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch);
Status run_expand(const ir::Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch);
Status run_slice(const ir::Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch);
Status run_concat(const ir::Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch);
Status run_cast(const ir::Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch);
/// An index outside its axis sets the context's error flag (fault_flag; take_input_fault
/// turns it into the call's error) and fills its output elements with 0xff bytes.
Status run_index_select(const ir::Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch);
Status run_gather(const ir::Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch);
/// The weight copied (or widened to f32 storage) into the output.
Status run_constant(const ir::Network& net, const CudaWeights& weights, size_t n, const NodeArgs& a,
                    const cuda::Launch& launch);

/// Node n under `tactic`: the call of its op kind (a linear's by its tactic).
/// input_in_scratch: as run_linear_gemm's (linears with a cuBLASLt tactic only).
Status run_node(const ir::Network& net, const CudaWeights& weights, size_t n, uint32_t tactic, const NodeArgs& a,
                const cuda::Launch& launch, bool input_in_scratch = false);

// ---- fused steps ------------------------------------------------------------------------------

/// A kGatedLinear step with the GEMV tactic: one gemv_gated launch. norm (nullable): as
/// run_linear_gemv's.
Status run_gated_gemv(const ir::Network& net, const CudaWeights& weights, const Step& step, uint32_t tactic,
                      const NodeArgs& a, const cuda::Launch& launch, const NormInput* norm = nullptr);

/// A kGatedLinear step whose linear is a GEMM (its input already in the scratch when
/// input_in_scratch): the linear, then the activation; with a down
/// projection in the step that runs cuBLASLt on 16-bit weights, the activation writes its
/// output rounded to the weights' type into the scratch the GEMM reads (what its own
/// conversion would have written), and the f32 activation is never stored. Where
/// rounded_gate_up holds, the GEMMs write gate and up in the weights' type and the
/// activation reads them so (gated_activation_rows).
Status run_gated_gemm(const ir::Network& net, const CudaWeights& weights, const Step& step,
                      std::span<const uint32_t> tactics, const NodeArgs& args, const cuda::Launch& launch,
                      bool input_in_scratch);

/// Every step of the network on `stream`.
Status run_all(const ir::Network& net, const CudaWeights& weights, const NetworkLaunch& launch, cudaStream_t stream,
               const std::vector<Step>& steps);

}  // namespace gearbox::internal
