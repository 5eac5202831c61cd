// The fused steps of the launch plan (fusion_plan.h) and run_all, which walks the plan.
#include <algorithm>
#include <array>
#include <optional>
#include <type_traits>

#include "devices/cuda/dispatch.h"
#include "devices/cuda/kernels/decode_attention.cuh"
#include "devices/cuda/kernels/elementwise.cuh"
#include "devices/cuda/kernels/norm_rope.cuh"
#include "devices/cuda/kernels/residual_norm.cuh"
#include "ir/shape_inference.h"

namespace gearbox::internal {

using ir::Network;
using ir::Node;
using ir::OpKind;

namespace {

/// The activation of a kGatedLinear step's second node (gelu_tanh_mul or silu_mul).
cuda::GatedActivation gated_activation(const Node& act) {
  return act.kind == OpKind::kGeluTanhMul ? cuda::GatedActivation::kGeluTanh : cuda::GatedActivation::kSilu;
}

/// A stacked QKV linear's output left in the scratch (run_linear_stacked_kept) for the
/// kHeadNormRope step after it (Step::stacked_into_head_norm): y [M, row], q, k and v side
/// by side.
struct StackedQkv {
  const float* y = nullptr;
  int64_t row = 0;     // Nq + Nk + Nv floats
  int64_t k_col = 0;   // Nq
  int64_t v_col = 0;   // Nq + Nk
  float* v = nullptr;  // the linear's v output, which the step copies out of y
  int64_t v_heads = 0;
};

/// What a kNormAddNorm or kAddNorm step computes from: sum = residual + post_norm(x), the
/// post-norm absent (null) in kAddNorm, where x is the add's second input (the sum does not
/// depend on the order).
struct ResidualInputs {
  int32_t x = -1;
  int32_t residual = -1;
  const Node* post_norm = nullptr;
};
ResidualInputs residual_inputs(const ResidualStepNodes& nodes) {
  const Node& add = *nodes.add;
  if (nodes.first_norm == nullptr) return {add.inputs[1], add.inputs[0], nullptr};
  const int32_t normed = nodes.first_norm->outputs[0];
  return {nodes.first_norm->inputs[0], add.inputs[0] == normed ? add.inputs[1] : add.inputs[0], nodes.first_norm};
}

/// A head_norm_rope part for one rope node: x is the rope's input, or the input of the norm
/// before it, whose weights are w; w null: the part only rotates (a kRopes step).
template <typename W>
cuda::HeadNormRope<W> rope_part(const Node& rope, const CudaWeights& weights, const NodeArgs& a, const float* x,
                                const W* w) {
  cuda::HeadNormRope<W> part{x,
                             w,
                             static_cast<float*>(a.tensors[static_cast<size_t>(rope.outputs[0])]),
                             rope.attrs.heads,
                             rope.attrs.theta,
                             rope.attrs.scale,
                             weights.rope_table(rope)};
  part.rotate_only = w == nullptr;
  return part;
}

/// A fused chain. into_gemm_input (a kNormAddNorm or kAddNorm step, norm_writes_gemm_input): the last
/// norm goes into the scratch, rounded to the weights' type, as the next linear's GEMM input;
/// its f32 output is never stored. qkv (a kHeadNormRope step of q and k): they are read from
/// the stacked output, and v is copied out of it in the same launch.
Status run_fused(const Network& net, const CudaWeights& weights, const Step& step, const NodeArgs& a,
                 const cuda::Launch& launch, bool into_gemm_input = false, const StackedQkv* qkv = nullptr) {
  auto tensor = [&](int32_t t) { return a.tensors[static_cast<size_t>(t)]; };
  auto weight = [&](const Node& n) { return weights.ptr[static_cast<size_t>(n.weights[0])]; };
  int* fault = fault_flag(a);
  if (step.kind == Step::kRopes) {  // no norm weights: rotated only
    cuda::HeadNormRope<float> parts[2];
    for (size_t p = 0; p < 2; ++p) {
      const Node& rope = net.nodes[step.nodes[p]];
      parts[p] = rope_part<float>(rope, weights, a, static_cast<const float*>(tensor(rope.inputs[0])), nullptr);
    }
    const Node& rope0 = net.nodes[step.nodes[0]];
    const Dims& x0 = a.dims[static_cast<size_t>(rope0.inputs[0])];
    const bool pos_i64 = net.tensors[static_cast<size_t>(rope0.inputs[1])].dtype == DataType::kI64;
    return cuda_check(cuda::head_norm_rope<float>(parts, 2, tensor(rope0.inputs[1]), pos_i64, x0[0] * x0[1],
                                                  rope0.attrs.head_dim, 0.0f, 0.0f, fault, launch, net.slots > 0),
                      "rope of q and k (fused)");
  }
  const ResidualStepNodes residual_nodes =
      step.kind == Step::kHeadNormRope ? ResidualStepNodes{} : residual_step_nodes(net, step);
  // The node whose weights set the type: the first norm, or kAddNorm's only norm.
  const Node& first = step.kind == Step::kAddNorm ? *residual_nodes.last_norm : net.nodes[step.nodes[0]];
  const ir::OpAttrs& norm = first.attrs;
  return by_weight_type(weights.type[static_cast<size_t>(first.weights[0])], [&](auto tag) -> Status {
    using W = decltype(tag);
    if (step.kind == Step::kHeadNormRope) {
      const size_t pairs = step.nodes.size() / 2;
      cuda::HeadNormRope<W> parts[cuda::kHeadNormRopeMaxParts];
      const Node& rope0 = net.nodes[step.nodes[pairs]];
      const Dims& x0 = a.dims[static_cast<size_t>(rope0.inputs[0])];
      for (size_t p = 0; p < pairs; ++p) {
        const Node& nn = net.nodes[step.nodes[p]];
        parts[p] = rope_part<W>(net.nodes[step.nodes[pairs + p]], weights, a,
                                static_cast<const float*>(tensor(nn.inputs[0])), static_cast<const W*>(weight(nn)));
      }
      size_t count = pairs;
      if (qkv != nullptr) {
        parts[0].x = qkv->y;
        parts[1].x = qkv->y + qkv->k_col;
        parts[0].x_row_stride = parts[1].x_row_stride = qkv->row;
        parts[2] = {qkv->y + qkv->v_col, nullptr, qkv->v, qkv->v_heads, 0.0f, 0.0f, nullptr, qkv->row};
        count = 3;
      }
      const bool pos_i64 = net.tensors[static_cast<size_t>(rope0.inputs[1])].dtype == DataType::kI64;
      return cuda_check(
          cuda::head_norm_rope<W>(parts, static_cast<int>(count), tensor(rope0.inputs[1]), pos_i64, x0[0] * x0[1],
                                  norm.head_dim, norm.eps, norm.weight_offset, fault, launch, net.slots > 0),
          qkv != nullptr ? "rms_norm + rope (fused, from the stacked QKV output)" : "rms_norm + rope (fused)");
    }
    const ResidualInputs in = residual_inputs(residual_nodes);
    const Node* next = residual_nodes.last_norm;
    const Dims& x = a.dims[static_cast<size_t>(in.x)];
    const int64_t dim = x[x.rank() - 1];
    const W* w_post = in.post_norm != nullptr ? static_cast<const W*>(weight(*in.post_norm)) : nullptr;
    const bool post = w_post != nullptr;
    if (into_gemm_input) {
      return cuda_check(cuda::norm_add_norm_to<W>(static_cast<const float*>(tensor(in.x)), w_post,
                                                  static_cast<const float*>(tensor(in.residual)),
                                                  static_cast<float*>(tensor(residual_nodes.add->outputs[0])),
                                                  static_cast<const W*>(weight(*next)), static_cast<W*>(a.scratch),
                                                  x.volume() / dim, dim, norm.eps, norm.weight_offset, launch),
                        post ? "rms_norm + add + rms_norm into the GEMM input (fused)"
                             : "add + rms_norm into the GEMM input (fused)");
    }
    return cuda_check(cuda::norm_add_norm<W>(static_cast<const float*>(tensor(in.x)), w_post,
                                             static_cast<const float*>(tensor(in.residual)),
                                             static_cast<float*>(tensor(residual_nodes.add->outputs[0])),
                                             next != nullptr ? static_cast<const W*>(weight(*next)) : nullptr,
                                             next != nullptr ? static_cast<float*>(tensor(next->outputs[0])) : nullptr,
                                             x.volume() / dim, dim, norm.eps, norm.weight_offset, launch),
                      post ? "rms_norm + add + rms_norm (fused)" : "add + rms_norm (fused)");
  });
}

/// Whether the attention after a kHeadNormRope step computes that step itself
/// (cuda::attention_decode_head_norm): the step's rotated q and k are read only by that
/// attention (Step::feeds_attention), which runs the split-KV tactic on one token with
/// head_dim <= kAttentionMaxHeadDim, and its output overlaps none of the projections it reads;
/// and the launch before, the q / k / v projection, is a one-row GEMV of fewer blocks than
/// the device has SMs. The attention's loads before its wait, and its clusters' placement,
/// overlap the launch before it only where that launch leaves SMs free; after a GEMV that
/// fills them they land on the critical path and cost more than the separate launch.
/// The memory plan keeps both steps' tensors apart (launch_group_ends).
bool head_norm_into_attention(const Network& net, const CudaWeights& weights, const Step* prev, const Step& step,
                              const Step* next, const NodeArgs& a, const std::vector<uint32_t>& tactics) {
  if (!step.feeds_attention || prev == nullptr || next == nullptr || prev->kind != Step::kSingle ||
      next->kind != Step::kSingle || tactics[next->nodes[0]] != kAttentionSplitKv ||
      !is_simt_gemv(tactics[prev->nodes[0]])) {
    return false;
  }
  const Node& linear = net.nodes[prev->nodes[0]];
  if (linear.kind != OpKind::kLinear || linear.outputs.size() > static_cast<size_t>(cuda::kGemvMaxTargets)) {
    return false;
  }
  std::array<int64_t, cuda::kGemvMaxTargets> rows{};
  for (size_t o = 0; o < linear.outputs.size(); ++o) {
    rows[o] = net.weights[static_cast<size_t>(linear.weights[o])].dims[0];
  }
  const int64_t k = net.weights[static_cast<size_t>(linear.weights[0])].dims[1];
  const int64_t blocks =
      cuda::gemv_blocks(rows.data(), static_cast<int>(linear.outputs.size()), k,
                        static_cast<int64_t>(data_type_size(weights.type[static_cast<size_t>(linear.weights[0])])),
                        gemv_geometry(tactics[prev->nodes[0]]));
  if (blocks >= backend_limits().sm_count) return false;
  const Node& attention = net.nodes[next->nodes[0]];
  const Dims& q = a.dims[static_cast<size_t>(attention.inputs[0])];
  if (q[0] * q[1] != 1 || attention.attrs.head_dim > cuda::kAttentionMaxHeadDim) return false;
  const int32_t out = attention.outputs[0];
  return tensors_apart(a, out, net.nodes[step.nodes[0]].inputs[0]) &&
         tensors_apart(a, out, net.nodes[step.nodes[1]].inputs[0]) && tensors_apart(a, out, attention.inputs[2]);
}

/// The attention node n computing the q / k norms and RoPE of the kHeadNormRope step before it
/// (head_norm_into_attention holds): one attention_decode_head_norm launch.
Status run_attention_head_norm(const Network& net, const CudaWeights& weights, const Step& head_norm, size_t n,
                               const NodeArgs& a, const cuda::Launch& launch) {
  const Node& q_norm = net.nodes[head_norm.nodes[0]];
  const Node& k_norm = net.nodes[head_norm.nodes[1]];
  const Node& rope = net.nodes[head_norm.nodes[2]];
  const Node& node = net.nodes[n];
  const ir::OpAttrs& at = node.attrs;
  auto tensor = [&](int32_t t) { return static_cast<float*>(a.tensors[static_cast<size_t>(t)]); };
  auto weight = [&](const Node& w) { return weights.ptr[static_cast<size_t>(w.weights[0])]; };
  auto* k_cache = static_cast<float*>(a.states[static_cast<size_t>(at.state) * 2]);
  auto* v_cache = static_cast<float*>(a.states[static_cast<size_t>(at.state) * 2 + 1]);
  const bool pos_i64 = net.tensors[static_cast<size_t>(node.inputs[3])].dtype == DataType::kI64;
  return by_weight_type(weights.type[static_cast<size_t>(q_norm.weights[0])], [&](auto tag) -> Status {
    using W = decltype(tag);
    const cuda::AttentionHeadNorm<W> norm{static_cast<const W*>(weight(q_norm)),
                                          static_cast<const W*>(weight(k_norm)),
                                          q_norm.attrs.eps,
                                          q_norm.attrs.weight_offset,
                                          rope.attrs.theta,
                                          rope.attrs.scale,
                                          weights.rope_table(rope)};
    return cuda_check(cuda::attention_decode_head_norm<W>(
                          tensor(q_norm.inputs[0]), tensor(k_norm.inputs[0]), tensor(node.inputs[2]), k_cache, v_cache,
                          tensor(node.inputs[3]), pos_i64, tensor(node.outputs[0]), at.heads, at.kv_heads, at.head_dim,
                          net.max_context, at.window, at.scale, norm, static_cast<float*>(a.scratch), kMaxSplits,
                          fault_flag(a), launch, network_input(net, node.inputs[3]), cache_slots(net, node, a)),
                      "rms_norm + rope + attention (split-KV)");
  });
}

/// Whether a kNormAddNorm or kAddNorm step writes its last norm into the scratch, rounded to the weights'
/// type, for the next step's linear (see plan_steps): that linear runs cuBLASLt on 16-bit
/// weights of the norms' type.
bool norm_writes_gemm_input(const Network& net, const CudaWeights& weights, const Step& step, const Step* next,
                            const std::vector<uint32_t>& tactics) {
  if ((step.kind != Step::kNormAddNorm && step.kind != Step::kAddNorm) || !step.feeds_linear || next == nullptr) {
    return false;
  }
  const size_t linear = next->nodes[0];
  const DataType type = weights.type[static_cast<size_t>(net.nodes[linear].weights[0])];
  const ResidualStepNodes nodes = residual_step_nodes(net, step);
  const auto norm_type = [&](const Node* n) {
    return n == nullptr || weights.type[static_cast<size_t>(n->weights[0])] == type;
  };
  return !is_gemv(tactics[linear]) && type != DataType::kF32 && norm_type(nodes.first_norm) &&
         norm_type(nodes.last_norm);
}

/// Whether the GEMV of the step after a kNormAddNorm or kAddNorm step computes that step in its prologue
/// (cuda::GemvNormInput), and with what: the step's last norm is read only by the next
/// step's linear (plan_steps), which runs the GEMV tactic as one launch (a single linear of
/// at most cuda::kGemvMaxTargets outputs, or a gated pair) on one row of K that the GEMV
/// serves with a norm input, with weights of the norms' type and 16-byte aligned vectors.
/// The memory plan keeps both steps' tensors apart (launch_group_ends).
std::optional<NormInput> norm_into_gemv(const Network& net, const CudaWeights& weights, const Step& step,
                                        const Step* next, const NodeArgs& a, const std::vector<uint32_t>& tactics) {
  if (!step.feeds_linear || next == nullptr || (next->kind != Step::kSingle && next->kind != Step::kGatedLinear)) {
    return std::nullopt;
  }
  const Node& linear = net.nodes[next->nodes[0]];
  if (linear.kind != OpKind::kLinear || !is_simt_gemv(tactics[next->nodes[0]]) ||
      (next->kind == Step::kSingle && linear.outputs.size() > static_cast<size_t>(cuda::kGemvMaxTargets))) {
    return std::nullopt;
  }
  const ResidualStepNodes nodes = residual_step_nodes(net, step);
  const ResidualInputs inputs = residual_inputs(nodes);
  const Node& add = *nodes.add;
  const Node& last = *nodes.last_norm;
  const DataType type = weights.type[static_cast<size_t>(linear.weights[0])];
  if ((nodes.first_norm != nullptr && weights.type[static_cast<size_t>(nodes.first_norm->weights[0])] != type) ||
      weights.type[static_cast<size_t>(last.weights[0])] != type) {
    return std::nullopt;
  }
  const Dims& x = a.dims[static_cast<size_t>(inputs.x)];
  const int64_t k = x[x.rank() - 1];
  bool served = false;
  (void)by_weight_type(type, [&](auto tag) -> Status {
    served = cuda::gemv_norm_input_served<decltype(tag)>(ir::row_count(x), k);
    return {};
  });
  const auto tensor = [&](int32_t t) { return static_cast<float*>(a.tensors[static_cast<size_t>(t)]); };
  const NormInput in{
      tensor(inputs.x),
      inputs.post_norm != nullptr ? weights.ptr[static_cast<size_t>(inputs.post_norm->weights[0])] : nullptr,
      tensor(inputs.residual),
      tensor(add.outputs[0]),
      weights.ptr[static_cast<size_t>(last.weights[0])],
      last.attrs.eps,
      last.attrs.weight_offset};
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (!served || !aligned(in.x) || !aligned(in.residual) || !aligned(in.sum) || !aligned(in.w_post) ||
      !aligned(in.w_next)) {
    return std::nullopt;
  }
  // Every block reads x and residual while block 0 writes sum and the others their outputs:
  // none may overlap.
  const Node& writer = next->kind == Step::kGatedLinear ? net.nodes[next->nodes[1]] : linear;
  std::array<int32_t, 1 + cuda::kGemvMaxTargets> written{add.outputs[0]};
  const size_t count = 1 + writer.outputs.size();  // <= kGemvMaxTargets outputs (checked above)
  std::copy(writer.outputs.begin(), writer.outputs.end(), written.begin() + 1);
  for (size_t w = 0; w < count; ++w) {
    for (int32_t read : {inputs.x, inputs.residual}) {
      if (!tensors_apart(a, written[w], read)) return std::nullopt;
    }
    for (size_t v = w + 1; v < count; ++v) {
      if (!tensors_apart(a, written[w], written[v])) return std::nullopt;
    }
  }
  return in;
}

}  // namespace

Status run_gated_gemv(const Network& net, const CudaWeights& weights, const Step& step, uint32_t tactic,
                      const NodeArgs& a, const cuda::Launch& launch, const NormInput* norm) {
  const Node& linear = net.nodes[step.nodes[0]];
  const Node& act = net.nodes[step.nodes[1]];
  const Dims& x = a.dims[static_cast<size_t>(linear.inputs[0])];
  const auto wid = [&](size_t i) { return static_cast<size_t>(linear.weights[i]); };
  const auto bias = [&](size_t o) {
    return linear.attrs.has_bias != 0 ? static_cast<const float*>(weights.ptr[wid(2 + o)]) : nullptr;
  };
  const cuda::GatedActivation activation = gated_activation(act);
  if (tactic == kLinearGemvMma) {
    if (weights.type[wid(0)] != DataType::kBF16 || norm != nullptr) {
      return internal_error("the tensor-core gemv takes bf16 weights and no norm input");
    }
    return cuda_check(
        cuda::gemv_mma_gated(static_cast<const float*>(a.tensors[static_cast<size_t>(linear.inputs[0])]),
                             static_cast<const __nv_bfloat16*>(weights.ptr[wid(0)]),
                             static_cast<const __nv_bfloat16*>(weights.ptr[wid(1)]), bias(0), bias(1), activation,
                             static_cast<float*>(a.tensors[static_cast<size_t>(act.outputs[0])]), ir::row_count(x),
                             net.weights[wid(0)].dims[0], x[x.rank() - 1], launch),
        "linear + gated activation (fused tensor-core gemv)");
  }
  return by_weight_type(weights.type[wid(0)], [&](auto tag) -> Status {
    using W = decltype(tag);
    const cuda::GemvNormInput<W> norm_input = norm != nullptr ? typed<W>(*norm) : cuda::GemvNormInput<W>{};
    return cuda_check(cuda::gemv_gated<W>(static_cast<const float*>(a.tensors[static_cast<size_t>(linear.inputs[0])]),
                                          static_cast<const W*>(weights.ptr[wid(0)]),
                                          static_cast<const W*>(weights.ptr[wid(1)]), bias(0), bias(1), activation,
                                          static_cast<float*>(a.tensors[static_cast<size_t>(act.outputs[0])]),
                                          ir::row_count(x), net.weights[wid(0)].dims[0], x[x.rank() - 1], launch,
                                          gemv_geometry(tactic), 0, norm != nullptr ? &norm_input : nullptr),
                      norm != nullptr ? "rms_norm + add + rms_norm + linear + gated activation (fused gemv)"
                                      : "linear + gated activation (fused gemv)");
  });
}

Status run_gated_gemm(const Network& net, const CudaWeights& weights, const Step& step,
                      std::span<const uint32_t> tactics, const NodeArgs& args, const cuda::Launch& launch,
                      bool input_in_scratch) {
  const auto run = [&](size_t node, bool in_scratch) {
    return run_node(net, weights, node, tactics[node], args, launch, in_scratch).with_context(net.nodes[node].name);
  };
  const Node& act = net.nodes[step.nodes[1]];
  const bool has_down = step.nodes.size() == 3;
  const size_t down = has_down ? step.nodes[2] : step.nodes[1];
  const DataType type = has_down ? weights.type[static_cast<size_t>(net.nodes[down].weights[0])] : DataType::kF32;
  const bool into_down_gemm = has_down && !is_gemv(tactics[down]) && type != DataType::kF32;
  const size_t linear = step.nodes[0];
  if (rounded_gate_up(net, &step, tactics[linear])) {
    Result<RoundedGateUp> rounded =
        run_linear_rounded(net, weights, linear, tactics[linear], args, launch, input_in_scratch);
    if (!rounded.ok()) return rounded.status().with_context(net.nodes[linear].name);
    const RoundedGateUp& g = *rounded;
    const Dims& gate_dims = args.dims[static_cast<size_t>(act.inputs[0])];
    const int64_t rows = ir::row_count(gate_dims), width = gate_dims[gate_dims.rank() - 1];
    const DataType gate_type = weights.type[static_cast<size_t>(net.nodes[linear].weights[0])];
    const bool to_down = into_down_gemm && type == gate_type;
    GEARBOX_RETURN_IF_ERROR(
        by_weight_type(gate_type, [&](auto tag) -> Status {
          using W = decltype(tag);
          if constexpr (std::is_same_v<W, float>) {
            return internal_error("f32 weights have no rounded gate / up");
          } else {
            const auto activate = [&](auto* out, const char* what) {
              return cuda_check(cuda::gated_activation_rows(static_cast<const W*>(g.gate), static_cast<const W*>(g.up),
                                                            g.ld, gated_activation(act), out, rows, width, launch),
                                what);
            };
            return to_down
                       ? activate(static_cast<W*>(args.scratch), "gated activation of 16-bit rows into the GEMM input")
                       : activate(static_cast<float*>(args.tensors[static_cast<size_t>(act.outputs[0])]),
                                  "gated activation of 16-bit rows");
          }
        }).with_context(act.name));
    if (step.nodes.size() == 2) return {};
    return run(down, to_down);
  }
  GEARBOX_RETURN_IF_ERROR(run(linear, input_in_scratch));
  if (!into_down_gemm) {
    for (size_t i = 1; i < step.nodes.size(); ++i) GEARBOX_RETURN_IF_ERROR(run(step.nodes[i], false));
    return {};
  }
  const auto tensor = [&](int32_t t) { return static_cast<const float*>(args.tensors[static_cast<size_t>(t)]); };
  const int64_t n = args.dims[static_cast<size_t>(act.inputs[0])].volume();
  GEARBOX_RETURN_IF_ERROR(by_weight_type(type, [&](auto tag) -> Status {
                            using W = decltype(tag);
                            return cuda_check(cuda::gated_activation_to(tensor(act.inputs[0]), tensor(act.inputs[1]),
                                                                        gated_activation(act),
                                                                        static_cast<W*>(args.scratch), n, launch),
                                              "gated activation into the GEMM input (fused)");
                          }).with_context(act.name));
  return run(down, true);
}

Status run_all(const Network& net, const CudaWeights& weights, const NetworkLaunch& launch, cudaStream_t stream,
               const std::vector<Step>& steps) {
  const NodeArgs args{launch.tensors, launch.dims, launch.scratch, launch.states, launch.context};
  bool scratch_input = false;
  std::optional<NormInput> norm;    // the previous step's norms, for this step's GEMV
  const Step* head_norm = nullptr;  // the previous step (q / k norms and RoPE), for this step's attention
  // The first step that launches goes out plainly, so that the network's first kernel waits
  // for everything ahead of the network (launch.h): the decode attention reads the positions
  // input before its own wait. The steps after it are dependent launches where enabled.
  bool launched = false;
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& step = steps[i];
    const size_t n = step.nodes[0];
    Status s;
    // The step that runs next.
    const Step* next = i + 1 < steps.size() ? &steps[i + 1] : nullptr;
    // The previous step left its norms to this step's GEMV.
    const std::optional<NormInput> norm_input = norm;
    norm = norm_into_gemv(net, weights, step, next, args, launch.tactics);
    if (norm) {
      scratch_input = false;
      continue;
    }
    const Step* head_norm_step = head_norm;
    head_norm =
        head_norm_into_attention(net, weights, i > 0 ? &steps[i - 1] : nullptr, step, next, args, launch.tactics)
            ? &step
            : nullptr;
    if (head_norm != nullptr) {
      scratch_input = false;
      continue;
    }
    const cuda::Launch on = launch_on(stream, /*first_plain=*/!launched);
    launched = true;
    // The previous step wrote this step's linear input into the scratch.
    const bool input_in_scratch = scratch_input;
    scratch_input = norm_writes_gemm_input(net, weights, step, next, launch.tactics);
    if (head_norm_step != nullptr) {
      s = run_attention_head_norm(net, weights, *head_norm_step, n, args, on);
    } else if (step.kind == Step::kSingle) {
      // A stacked QKV linear whose output the next step (the q / k norms and RoPE) reads.
      const bool defer = step.stacked_into_head_norm && is_stacked(launch.tactics[n]);
      const float* stacked = nullptr;
      if (defer) {
        Result<const float*> kept =
            run_linear_stacked_kept(net, weights, n, launch.tactics[n], args, on, input_in_scratch);
        s = kept.status();
        if (kept.ok()) stacked = *kept;
      } else if (norm_input) {  // a GEMV (norm_into_gemv)
        s = run_linear_gemv(net, weights, n, launch.tactics[n], args, on, &*norm_input);
      } else {
        s = run_node(net, weights, n, launch.tactics[n], args, on, input_in_scratch);
      }
      if (s.ok() && defer) {
        const Node& linear = net.nodes[n];
        const auto rows = [&](size_t o) { return net.weights[static_cast<size_t>(linear.weights[o])].dims[0]; };
        const int64_t head_dim = net.nodes[steps[i + 1].nodes[0]].attrs.head_dim;
        const StackedQkv qkv{stacked,
                             rows(0) + rows(1) + rows(2),
                             rows(0),
                             rows(0) + rows(1),
                             static_cast<float*>(args.tensors[static_cast<size_t>(linear.outputs[2])]),
                             rows(2) / head_dim};
        ++i;
        s = run_fused(net, weights, steps[i], args, on, false, &qkv);
      }
    } else if (step.kind != Step::kGatedLinear) {
      s = run_fused(net, weights, step, args, on, scratch_input);
    } else if (is_gemv(launch.tactics[n])) {
      s = run_gated_gemv(net, weights, step, launch.tactics[n], args, on, norm_input ? &*norm_input : nullptr);
      if (s.ok() && step.nodes.size() == 3) {  // the down projection
        const size_t down = step.nodes[2];
        s = run_node(net, weights, down, launch.tactics[down], args, on).with_context(net.nodes[down].name);
      }
    } else {  // a GEMM: the linear, then the activation (into the down projection's GEMM)
      s = run_gated_gemm(net, weights, step, launch.tactics, args, on, input_in_scratch);
    }
    if (!s.ok()) return s.with_context(net.nodes[n].name);
  }
  return {};
}

}  // namespace gearbox::internal
