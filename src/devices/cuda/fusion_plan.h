// The CUDA device's launch plan of a network: which nodes run as one fused launch, computed
// once per network (CudaWeights::steps, at upload) as plain data, so that the CPU build and
// its tests see it too.
//
// The decode step is launch-bound (hundreds of small kernels), so chains of row-local ops
// run as one kernel each (kernels/norm_rope.cu, residual_norm.cu), decided per network from
// its structure:
//   kHeadNormRope: [rms_norm(q, per head), rms_norm(k, per head), rope(q'), rope(k')], or
//                  one [rms_norm, rope] pair, whose norm outputs feed only their rope. When
//                  the rotated q and k feed only the next node, an attention, a decode
//                  attention may compute the chain itself (head_norm_into_attention)
//   kRopes:        [rope(q), rope(k)] at the same positions and head_dim: a family without
//                  q / k norms (Llama, Qwen2, Mistral), one head_norm_rope launch that only
//                  rotates
//   kNormAddNorm:  [rms_norm(x), add(residual, x'), rms_norm(sum)] or without the last norm,
//                  whose first norm output feeds only the add (Gemma's sandwich norms). When
//                  the next step's linear alone reads the last norm (the next layer's QKV,
//                  the MLP's gate and up) and runs cuBLASLt on 16-bit weights, the norm
//                  writes that linear's input converted into the scratch its GEMM reads
//                  (norm_add_norm_to; nothing runs between the two; norm_writes_gemm_input),
//                  so no conversion runs
//   kAddNorm:      [add(residual, x), rms_norm(sum)]: the same step without the first norm
//                  (a pre-norm family's residual add and the next pre-norm), run and fed
//                  to the next linear as kNormAddNorm is
//   kGatedLinear:  [linear(x) -> gate, up; gelu_tanh_mul or silu_mul(gate, up)], gate and up
//                  read by nothing else: one gemv_gated launch when the linear's tactic is
//                  the GEMV (decode), else the two nodes one after the other; and the
//                  linear after them when it alone reads the activation (the down
//                  projection): with a cuBLASLt tactic and 16-bit weights the activation
//                  writes its input converted (gated_activation_to), so no conversion runs
// Intermediates inside a chain are not written. The memory plan keeps every tensor a chain
// reads alive until the chain's last node (launch_group_ends), so a fused launch never
// writes over what another of its nodes still reads. GEARBOX_CUDA_FUSION=0 turns fusion
// off (fusion_enabled).
//
//   const std::vector<Step> steps = plan_steps(net, settings().cuda_fusion);
#pragma once

#include <cstddef>
#include <vector>

#include "ir/network.h"

namespace gearbox::internal {

// One launch of the network: a single node, or a fused chain of nodes (see plan_steps).
struct Step {
  enum Kind { kSingle, kHeadNormRope, kNormAddNorm, kGatedLinear, kRopes, kAddNorm } kind = kSingle;
  std::vector<size_t> nodes;
  // kNormAddNorm of three nodes (post-norm, add, pre-norm) or kAddNorm: its last norm is read
  // only by the next step's first node, a linear. Set on no other step.
  bool feeds_linear = false;
  // kSingle, a linear of three outputs (q, k, v) with stacked weights and no bias, whose q
  // and k are read only by the next step, a kHeadNormRope of both: with a kLinearStacked
  // tactic that step reads q and k from the stacked GEMM's output and copies v out of it
  // (no split_columns launch).
  bool stacked_into_head_norm = false;
  // kHeadNormRope of four nodes (q and k norms, then their ropes) whose rotated q and k are
  // read only by the next node, an attention, at the ropes' positions. Set on no other step.
  bool feeds_attention = false;
};

/// The steps of `net` in order, each node in exactly one. fuse false (GEARBOX_CUDA_FUSION=0):
/// every node is a kSingle step of its own.
std::vector<Step> plan_steps(const ir::Network& net, bool fuse);

/// The nodes of a kNormAddNorm or kAddNorm step: its first norm (null in kAddNorm), the add,
/// and its last norm (null where the step ends with the add).
struct ResidualStepNodes {
  const ir::Node* first_norm = nullptr;
  const ir::Node* add = nullptr;
  const ir::Node* last_norm = nullptr;
};
ResidualStepNodes residual_step_nodes(const ir::Network& net, const Step& step);

/// The step of `steps` whose first node is n, or null.
const Step* step_starting_at(const std::vector<Step>& steps, size_t n);

}  // namespace gearbox::internal
