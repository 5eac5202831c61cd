#include "devices/cuda/dispatch.h"

#include <algorithm>
#include <type_traits>

#include "devices/cuda/kernels/decode_attention.cuh"
#include "devices/cuda/kernels/elementwise.cuh"
#include "devices/cuda/kernels/embedding.cuh"
#include "devices/cuda/kernels/kv_cache.cuh"
#include "devices/cuda/kernels/norm_rope.cuh"
#include "devices/cuda/kernels/prefill_attention.cuh"
#include "devices/cuda/kernels/prefill_attention_mma.cuh"
#include "ir/shape_inference.h"

namespace gearbox::internal {

using ir::Network;
using ir::Node;
using ir::OpKind;

namespace {

/// The progress slots bound for network tensor `t` where it is an output the host copies on as
/// it lands (HostOutputs); none for any other tensor, or without a context.
cuda::GemvProgress output_progress(const Network& net, const CudaContextState* state, int32_t t) {
  if (state == nullptr) return {};
  for (size_t o = 0; o < state->host_progress.size() && o < net.outputs.size(); ++o) {
    const cuda::OutputProgress& p = state->host_progress[o];
    if (net.outputs[o] == t && p.slots != nullptr) return {p.slots, p.count, p.every};
  }
  return {};
}

/// Node n's tensors and weights as its launch sees them.
struct Operands {
  const Network& net;
  const CudaWeights& weights;
  const Node& node;
  const NodeArgs& a;

  Operands(const Network& network, const CudaWeights& w, size_t n, const NodeArgs& args)
      : net(network), weights(w), node(network.nodes[n]), a(args) {}
  void* in(size_t i) const { return a.tensors[static_cast<size_t>(node.inputs[i])]; }
  const Dims& in_dims(size_t i) const { return a.dims[static_cast<size_t>(node.inputs[i])]; }
  bool is_i64(size_t i) const { return net.tensors[static_cast<size_t>(node.inputs[i])].dtype == DataType::kI64; }
  float* out(size_t i) const { return static_cast<float*>(a.tensors[static_cast<size_t>(node.outputs[i])]); }
  const float* f(size_t i) const { return static_cast<const float*>(in(i)); }
  size_t wid(size_t i) const { return static_cast<size_t>(node.weights[i]); }
  const Dims& wdims(size_t i) const { return net.weights[wid(i)].dims; }
  /// A linear's bias of output o, or null.
  const float* bias(size_t o) const {
    return node.attrs.has_bias != 0 ? static_cast<const float*>(weights.ptr[wid(node.outputs.size() + o)]) : nullptr;
  }
  /// A linear's rows M and row length K.
  int64_t rows() const { return ir::row_count(in_dims(0)); }
  int64_t k() const { return in_dims(0)[in_dims(0).rank() - 1]; }
  /// Whether a linear's output weights lie one after another on the device (a stacked GEMM's
  /// operand).
  bool stacked_on_device() const {
    const DataType type = weights.type[wid(0)];
    int64_t rows = 0;
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      if (weights.ptr[wid(o)] != static_cast<const char*>(weights.ptr[wid(0)]) + rows * k() * data_type_size(type)) {
        return false;
      }
      rows += wdims(o)[0];
    }
    return true;
  }
};

/// Whether a cuBLASLt linear's outputs share one conversion of x (several outputs of 16-bit
/// weights: fused QKV, gate+up; or an input already converted into the scratch), converting
/// it into the scratch where no producer did.
Result<bool> shared_gemm_input(const Operands& o, const NodeArgs& a, const cuda::Launch& launch,
                               bool input_in_scratch) {
  const DataType type = o.weights.type[o.wid(0)];
  const bool shared_input = (o.node.outputs.size() > 1 || input_in_scratch) && type != DataType::kF32;
  if (shared_input && !input_in_scratch) {
    GEARBOX_RETURN_IF_ERROR(cuda::CublasLtGemm::convert_input(o.f(0), type, o.rows(), o.k(), a.scratch, launch));
  }
  return shared_input;
}

/// The stacked GEMM of a kLinearStacked tactic: sum N_i rows into the scratch after the
/// converted x; its output's address.
Result<float*> run_stacked_gemm(const Operands& o, uint32_t tactic, const NodeArgs& a, const cuda::Launch& launch,
                                bool input_in_scratch) {
  Result<bool> shared = shared_gemm_input(o, a, launch, input_in_scratch);
  if (!shared.ok()) return shared.status();
  if (!o.stacked_on_device()) return internal_error("linear weights not stacked on the device");
  const int64_t m = o.rows(), k = o.k();
  const DataType type = o.weights.type[o.wid(0)];
  int64_t total = 0;
  for (size_t i = 0; i < o.node.outputs.size(); ++i) total += o.wdims(i)[0];
  auto* y = reinterpret_cast<float*>(static_cast<char*>(a.scratch) + stacked_output_offset(m, k, type));
  auto* state = static_cast<CudaContextState*>(a.context);
  Result<const cublasLtMatmulAlgo_t*> algo = state->algo(tactic, m, total, k, type);
  if (!algo.ok()) return algo.status();
  GEARBOX_RETURN_IF_ERROR(
      state->gemm->run_converted(*algo, a.scratch, o.weights.ptr[o.wid(0)], type, nullptr, y, m, total, k, launch));
  return y;
}

}  // namespace

bool network_input(const Network& net, int32_t t) {
  return std::any_of(net.inputs.begin(), net.inputs.end(), [&](const ir::InputSpec& s) { return s.tensor == t; });
}

bool tensors_apart(const NodeArgs& a, int32_t t, int32_t u) {
  const auto bytes_of = [&](int32_t v) { return a.dims[static_cast<size_t>(v)].volume() * 4; };
  const auto* p = static_cast<const char*>(a.tensors[static_cast<size_t>(t)]);
  const auto* q = static_cast<const char*>(a.tensors[static_cast<size_t>(u)]);
  return p + bytes_of(t) <= q || q + bytes_of(u) <= p;
}

int* fault_flag(const NodeArgs& a) {
  const auto* state = static_cast<const CudaContextState*>(a.context);
  return state != nullptr ? state->fault_device : nullptr;
}

cuda::CacheSlots cache_slots(const Network& net, const Node& attention, const NodeArgs& a) {
  if (attention.inputs.size() <= 4) return {};
  const auto slots = static_cast<size_t>(attention.inputs[4]);
  return {a.tensors[slots], net.tensors[slots].dtype == DataType::kI64,
          a.dims[static_cast<size_t>(attention.inputs[0])][1]};
}

int64_t stacked_output_offset(int64_t m, int64_t k, DataType type) {
  return (cuda::CublasLtGemm::scratch_bytes(m, k, type) + 255) / 256 * 256;
}

bool stackable(const Network& net, const Node& node) {
  const DataType type = net.weights[static_cast<size_t>(node.weights[0])].dtype;
  return (type == DataType::kBF16 || type == DataType::kF16) &&
         node.outputs.size() <= static_cast<size_t>(cuda::kColumnSplitMaxTargets) &&
         ir::linear_weights_stacked(net, node);
}

bool rounded_gate_up(const Network& net, const Step* step, uint32_t tactic) {
  if (step == nullptr || step->kind != Step::kGatedLinear || is_gemv(tactic)) return false;
  const Node& linear = net.nodes[step->nodes[0]];
  const ir::WeightInfo& w = net.weights[static_cast<size_t>(linear.weights[0])];
  return (w.dtype == DataType::kBF16 || w.dtype == DataType::kF16) && linear.attrs.has_bias == 0 &&
         linear.outputs.size() == 2 && w.dims[0] % 8 == 0;
}

bool rounded_gate_up_node(const Network& net, const std::vector<Step>& steps, size_t n, uint32_t tactic) {
  const Node& node = net.nodes[n];
  if (node.kind != OpKind::kLinear || node.outputs.size() != 2 || is_gemv(tactic)) return false;
  return rounded_gate_up(net, step_starting_at(steps, n), tactic);
}

Status run_embedding(const Network& net, const CudaWeights& weights, size_t n, const NodeArgs& a,
                     const cuda::Launch& launch) {
  const Operands o(net, weights, n, a);
  return by_weight_type(weights.type[o.wid(0)], [&](auto w) {
    using W = decltype(w);
    return cuda_check(
        cuda::embedding<W>(o.in(0), o.is_i64(0), o.in_dims(0).volume(), static_cast<const W*>(weights.ptr[o.wid(0)]),
                           o.wdims(0)[0], o.wdims(0)[1], o.node.attrs.scale, o.out(0), fault_flag(a), launch),
        ir::op_kind_name(o.node.kind));
  });
}

Status run_rms_norm(const Network& net, const CudaWeights& weights, size_t n, const NodeArgs& a,
                    const cuda::Launch& launch) {
  const Operands o(net, weights, n, a);
  const ir::OpAttrs& at = o.node.attrs;
  const Dims& x = o.in_dims(0);
  const int64_t dim = at.head_dim > 0 ? at.head_dim : x[x.rank() - 1];
  return by_weight_type(weights.type[o.wid(0)], [&](auto w) {
    using W = decltype(w);
    return cuda_check(cuda::rms_norm<W>(o.f(0), static_cast<const W*>(weights.ptr[o.wid(0)]), o.out(0),
                                        x.volume() / dim, dim, at.eps, at.weight_offset, launch),
                      ir::op_kind_name(o.node.kind));
  });
}

Status run_linear_gemv(const Network& net, const CudaWeights& weights, size_t n, uint32_t tactic, const NodeArgs& a,
                       const cuda::Launch& launch, const NormInput* norm) {
  const Operands o(net, weights, n, a);
  const size_t outs = o.node.outputs.size();
  const int64_t m = o.rows(), k = o.k();
  const auto* state = static_cast<const CudaContextState*>(a.context);
  const bool mma = tactic == kLinearGemvMma;
  if (mma && (weights.type[o.wid(0)] != DataType::kBF16 || norm != nullptr)) {
    return internal_error("the tensor-core gemv takes bf16 weights and no norm input");
  }
  const char* what = norm != nullptr ? "rms_norm + add + rms_norm + linear (fused gemv)"
                                     : (mma ? "linear (tensor-core gemv)" : "linear (gemv)");
  return by_weight_type(weights.type[o.wid(0)], [&](auto w) -> Status {
    using W = decltype(w);
    const cuda::GemvNormInput<W> norm_input = norm != nullptr ? typed<W>(*norm) : cuda::GemvNormInput<W>{};
    // A host output the host copies on as it lands (host_outputs.h).
    const cuda::GemvProgress progress =
        outs == 1 && !mma ? output_progress(net, state, o.node.outputs[0]) : cuda::GemvProgress{};
    for (size_t first = 0; first < outs; first += cuda::kGemvMaxTargets) {
      cuda::GemvTarget<W> targets[cuda::kGemvMaxTargets];
      const size_t count = std::min<size_t>(cuda::kGemvMaxTargets, outs - first);
      for (size_t t = 0; t < count; ++t) {
        targets[t] = {static_cast<const W*>(weights.ptr[o.wid(first + t)]), o.bias(first + t), o.out(first + t),
                      o.wdims(first + t)[0]};
      }
      if constexpr (std::is_same_v<W, __nv_bfloat16>) {
        if (mma) {
          GEARBOX_RETURN_IF_ERROR(
              cuda_check(cuda::gemv_mma_multi(o.f(0), targets, static_cast<int>(count), m, k, launch), what));
          continue;
        }
      }
      GEARBOX_RETURN_IF_ERROR(
          cuda_check(cuda::gemv_multi<W>(o.f(0), targets, static_cast<int>(count), m, k, launch, gemv_geometry(tactic),
                                         0, norm != nullptr ? &norm_input : nullptr, progress),
                     what));
    }
    return Status();
  });
}

Status run_linear_gemm(const Network& net, const CudaWeights& weights, size_t n, uint32_t tactic, const NodeArgs& a,
                       const cuda::Launch& launch, bool input_in_scratch) {
  const Operands o(net, weights, n, a);
  const size_t outs = o.node.outputs.size();
  if (is_stacked(tactic)) {
    // One GEMM of sum N_i rows into the scratch after the converted x, then the columns.
    Result<float*> y = run_stacked_gemm(o, tactic, a, launch, input_in_scratch);
    if (!y.ok()) return y.status();
    cuda::ColumnSplit split{};
    split.count = static_cast<int>(outs);
    for (size_t i = 0; i < outs; ++i) split.targets[i] = {o.out(i), o.bias(i), o.wdims(i)[0]};
    return cuda_check(cuda::split_columns(*y, o.rows(), split, launch), "linear (stacked weights): split_columns");
  }
  Result<bool> shared_input = shared_gemm_input(o, a, launch, input_in_scratch);
  if (!shared_input.ok()) return shared_input.status();
  const int64_t m = o.rows(), k = o.k();
  const DataType type = weights.type[o.wid(0)];
  auto* state = static_cast<CudaContextState*>(a.context);
  for (size_t i = 0; i < outs; ++i) {
    Result<const cublasLtMatmulAlgo_t*> algo = state->algo(tactic, m, o.wdims(i)[0], k, type);
    if (!algo.ok()) return algo.status();
    const void* w = weights.ptr[o.wid(i)];
    GEARBOX_RETURN_IF_ERROR(
        *shared_input
            ? state->gemm->run_converted(*algo, a.scratch, w, type, o.bias(i), o.out(i), m, o.wdims(i)[0], k, launch)
            : state->gemm->run(*algo, o.f(0), w, type, o.bias(i), o.out(i), m, o.wdims(i)[0], k, a.scratch, launch));
  }
  return {};
}

Result<const float*> run_linear_stacked_kept(const Network& net, const CudaWeights& weights, size_t n, uint32_t tactic,
                                             const NodeArgs& a, const cuda::Launch& launch, bool input_in_scratch) {
  Result<float*> y = run_stacked_gemm(Operands(net, weights, n, a), tactic, a, launch, input_in_scratch);
  if (!y.ok()) return y.status();
  return static_cast<const float*>(*y);
}

Result<RoundedGateUp> run_linear_rounded(const Network& net, const CudaWeights& weights, size_t n, uint32_t tactic,
                                         const NodeArgs& a, const cuda::Launch& launch, bool input_in_scratch) {
  // Gate then up, or the stacked [M, 2N], rounded to the weights' type, in out(0)'s memory.
  const Operands o(net, weights, n, a);
  Result<bool> shared_input = shared_gemm_input(o, a, launch, input_in_scratch);
  if (!shared_input.ok()) return shared_input.status();
  if (o.node.outputs.size() != 2 || o.node.attrs.has_bias != 0 || !*shared_input) {
    return internal_error("not a 16-bit gate / up linear");
  }
  const int64_t m = o.rows(), k = o.k();
  const DataType type = weights.type[o.wid(0)];
  auto* state = static_cast<CudaContextState*>(a.context);
  const int64_t width = o.wdims(0)[0];
  auto* base = reinterpret_cast<char*>(o.out(0));
  const auto bytes = static_cast<int64_t>(data_type_size(type));
  if (is_stacked(tactic)) {
    if (!o.stacked_on_device()) return internal_error("linear weights not stacked on the device");
    Result<const cublasLtMatmulAlgo_t*> algo = state->algo(tactic, m, 2 * width, k, type, type);
    if (!algo.ok()) return algo.status();
    GEARBOX_RETURN_IF_ERROR(state->gemm->run_converted_rounded(*algo, a.scratch, weights.ptr[o.wid(0)], type, base, m,
                                                               2 * width, k, launch));
    return RoundedGateUp{base, base + width * bytes, 2 * width};
  }
  Result<const cublasLtMatmulAlgo_t*> algo = state->algo(tactic, m, width, k, type, type);
  if (!algo.ok()) return algo.status();
  for (size_t i = 0; i < 2; ++i) {
    GEARBOX_RETURN_IF_ERROR(state->gemm->run_converted_rounded(*algo, a.scratch, weights.ptr[o.wid(i)], type,
                                                               base + static_cast<int64_t>(i) * m * width * bytes, m,
                                                               width, k, launch));
  }
  return RoundedGateUp{base, base + m * width * bytes, width};
}

Status run_rope(const Network& net, const CudaWeights& weights, size_t n, const NodeArgs& a,
                const cuda::Launch& launch) {
  const Node& node = net.nodes[n];
  const ir::OpAttrs& at = node.attrs;
  const auto in = [&](size_t i) { return a.tensors[static_cast<size_t>(node.inputs[i])]; };
  const Dims& x = a.dims[static_cast<size_t>(node.inputs[0])];
  const bool pos_i64 = net.tensors[static_cast<size_t>(node.inputs[1])].dtype == DataType::kI64;
  const bool padding = net.slots > 0;  // a batched network's -1 positions
  if (!node.weights.empty()) {
    return cuda_check(cuda::rope_with_freqs(static_cast<const float*>(in(0)), in(1), pos_i64,
                                            static_cast<float*>(a.tensors[static_cast<size_t>(node.outputs[0])]),
                                            x[0] * x[1], at.heads, at.head_dim, weights.rope_table(node), at.scale,
                                            fault_flag(a), launch, padding),
                      ir::op_kind_name(node.kind));
  }
  return cuda_check(cuda::rope(static_cast<const float*>(in(0)), in(1), pos_i64,
                               static_cast<float*>(a.tensors[static_cast<size_t>(node.outputs[0])]), x[0] * x[1],
                               at.heads, at.head_dim, at.theta, at.scale, fault_flag(a), launch, padding),
                    ir::op_kind_name(node.kind));
}

Status run_attention(const Network& net, size_t n, uint32_t tactic, const NodeArgs& a, const cuda::Launch& launch) {
  const Node& node = net.nodes[n];
  const ir::OpAttrs& at = node.attrs;
  const auto in = [&](size_t i) { return a.tensors[static_cast<size_t>(node.inputs[i])]; };
  const auto f = [&](size_t i) { return static_cast<const float*>(in(i)); };
  auto* out = static_cast<float*>(a.tensors[static_cast<size_t>(node.outputs[0])]);
  const bool pos_i64 = net.tensors[static_cast<size_t>(node.inputs[3])].dtype == DataType::kI64;
  int* fault = fault_flag(a);
  const Dims& q = a.dims[static_cast<size_t>(node.inputs[0])];
  const int64_t t = q[0] * q[1];
  auto* k_cache = static_cast<float*>(a.states[static_cast<size_t>(at.state) * 2]);
  auto* v_cache = static_cast<float*>(a.states[static_cast<size_t>(at.state) * 2 + 1]);
  const int64_t width = static_cast<int64_t>(at.kv_heads) * at.head_dim;
  auto* scratch = static_cast<float*>(a.scratch);
  const cuda::CacheSlots slots = cache_slots(net, node, a);
  if (tactic == kAttentionMma && slots.ids != nullptr) {
    return internal_error("attention '" + node.name + "': the tensor-core attention takes no KV-cache slots");
  }
  if (tactic == kAttentionSplitKv && fusion_enabled()) {  // writes the new rows itself
    return cuda_check(cuda::attention_decode(f(0), f(1), f(2), k_cache, v_cache, in(3), pos_i64, out, t, at.heads,
                                             at.kv_heads, at.head_dim, net.max_context, at.window, at.scale, scratch,
                                             kMaxSplits, fault, launch, network_input(net, node.inputs[3]), slots),
                      "attention (split-KV)");
  }
  if (tactic == kAttentionMma && fusion_enabled()) {  // its first kernel writes the new rows
    return cuda_check(
        cuda::attention_prefill_mma(f(0), f(1), f(2), k_cache, v_cache, in(3), pos_i64, out, t, at.heads, at.kv_heads,
                                    at.head_dim, net.max_context, at.window, at.scale, scratch, fault, launch),
        "attention (tensor cores)");
  }
  GEARBOX_RETURN_IF_ERROR(cuda_check(cuda::kv_cache_write(f(1), f(2), in(3), pos_i64, t, width, k_cache, v_cache,
                                                          net.max_context, fault, launch, slots),
                                     "kv_cache_write"));
  if (tactic == kAttentionSplitKv) {
    return cuda_check(cuda::attention_decode(f(0), nullptr, nullptr, k_cache, v_cache, in(3), pos_i64, out, t, at.heads,
                                             at.kv_heads, at.head_dim, net.max_context, at.window, at.scale, scratch,
                                             kMaxSplits, fault, launch, false, slots),
                      "attention (split-KV)");
  }
  if (tactic == kAttentionMma) {
    return cuda_check(cuda::attention_prefill_mma(f(0), nullptr, nullptr, k_cache, v_cache, in(3), pos_i64, out, t,
                                                  at.heads, at.kv_heads, at.head_dim, net.max_context, at.window,
                                                  at.scale, scratch, nullptr, launch),
                      "attention (tensor cores)");
  }
  return cuda_check(cuda::attention_prefill(f(0), k_cache, v_cache, in(3), pos_i64, out, t, at.heads, at.kv_heads,
                                            at.head_dim, net.max_context, at.window, at.scale, scratch, launch, slots),
                    "attention (tiled)");
}

Status run_gated_activation(const Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch) {
  const Node& node = net.nodes[n];
  const auto f = [&](size_t i) { return static_cast<const float*>(a.tensors[static_cast<size_t>(node.inputs[i])]); };
  auto* out = static_cast<float*>(a.tensors[static_cast<size_t>(node.outputs[0])]);
  const int64_t count = a.dims[static_cast<size_t>(node.inputs[0])].volume();
  if (node.kind == OpKind::kGeluTanhMul) {
    return cuda_check(cuda::gelu_tanh_mul(f(0), f(1), out, count, launch), ir::op_kind_name(node.kind));
  }
  return cuda_check(cuda::silu_mul(f(0), f(1), out, count, launch), ir::op_kind_name(node.kind));
}

Status run_add(const Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch) {
  const Node& node = net.nodes[n];
  const auto f = [&](size_t i) { return static_cast<const float*>(a.tensors[static_cast<size_t>(node.inputs[i])]); };
  return cuda_check(cuda::add(f(0), f(1), static_cast<float*>(a.tensors[static_cast<size_t>(node.outputs[0])]),
                              a.dims[static_cast<size_t>(node.inputs[0])].volume(), launch),
                    ir::op_kind_name(node.kind));
}

Status run_take_last(const Network& net, size_t n, const NodeArgs& a, const cuda::Launch& launch) {
  const Node& node = net.nodes[n];
  const Dims& x = a.dims[static_cast<size_t>(node.inputs[0])];
  return cuda_check(
      cuda::take_last(static_cast<const float*>(a.tensors[static_cast<size_t>(node.inputs[0])]),
                      static_cast<float*>(a.tensors[static_cast<size_t>(node.outputs[0])]), x[0], x[1], x[2], launch),
      ir::op_kind_name(node.kind));
}

Status run_node(const Network& net, const CudaWeights& weights, size_t n, uint32_t tactic, const NodeArgs& a,
                const cuda::Launch& launch, bool input_in_scratch) {
  const Node& node = net.nodes[n];
  switch (node.kind) {
    case OpKind::kEmbedding: return run_embedding(net, weights, n, a, launch);
    case OpKind::kRmsNorm: return run_rms_norm(net, weights, n, a, launch);
    case OpKind::kLinear:
      return is_gemv(tactic) ? run_linear_gemv(net, weights, n, tactic, a, launch)
                             : run_linear_gemm(net, weights, n, tactic, a, launch, input_in_scratch);
    case OpKind::kRope: return run_rope(net, weights, n, a, launch);
    case OpKind::kAttention: return run_attention(net, n, tactic, a, launch);
    case OpKind::kGeluTanhMul:
    case OpKind::kSiluMul: return run_gated_activation(net, n, a, launch);
    case OpKind::kAdd: return run_add(net, n, a, launch);
    case OpKind::kTakeLast: return run_take_last(net, n, a, launch);
    case OpKind::kUnary: return run_unary(net, n, a, launch);
    case OpKind::kBinary: return run_binary(net, n, a, launch);
    case OpKind::kWhere: return run_where(net, n, a, launch);
    case OpKind::kReduce: return run_reduce(net, n, a, launch);
    case OpKind::kSoftmax: return run_softmax(net, n, a, launch);
    case OpKind::kMatmul: return run_matmul(net, n, a, launch);
    case OpKind::kSdpa: return run_sdpa(net, n, a, launch);
    case OpKind::kLayerNorm: return run_layer_norm(net, weights, n, a, launch);
    case OpKind::kPermute: return run_permute(net, n, a, launch);
    case OpKind::kReshape: return run_reshape(net, n, a, launch);
    case OpKind::kExpand: return run_expand(net, n, a, launch);
    case OpKind::kSlice: return run_slice(net, n, a, launch);
    case OpKind::kConcat: return run_concat(net, n, a, launch);
    case OpKind::kCast: return run_cast(net, n, a, launch);
    case OpKind::kIndexSelect: return run_index_select(net, n, a, launch);
    case OpKind::kGather: return run_gather(net, n, a, launch);
    case OpKind::kConstant: return run_constant(net, weights, n, a, launch);
  }
  return internal_error("unknown op kind in node " + node.name);
}

}  // namespace gearbox::internal
