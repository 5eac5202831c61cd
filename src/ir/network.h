// The network IR: typed ops over tensors, weights by name, state (KV caches) by slot.
//
// A Network is what the builder tunes and what an engine file stores. Tensors have a
// dtype; their shapes are inferred per call from the network inputs' dims (see
// shape_inference.h), so every shape rule is written once. Activations are laid out
// row-major with the last dim contiguous; [B, T, F] is B*T rows of F features.
//
// Op semantics (shapes in brackets; B = batch, T = sequence, H = hidden):
//   kEmbedding   in: ids [B, T] (i32/i64)  w: table [V, H]   out: [B, T, H]
//                out = table[ids] * scale. An id outside [0, V) is an error, never a zero.
//   kRmsNorm     in: x [..., F]  w: weight [D]  out: like x. D = F, or D = head_dim when
//                head_dim > 0 (normalizes each head_dim-long chunk: per-head q/k norm).
//                y = x * rsqrt(mean(x^2) + eps) * (w + weight_offset)  (Gemma: offset 1).
//   kLinear      in: x [..., K]  w: W_i [N_i, K] (HF layout), then optional biases b_i [N_i]
//                (attrs.has_bias)  out: one [..., N_i] per weight (fused QKV, gate/up).
//   kRope        in: x [B, T, heads * head_dim], positions [B, T] (i32/i64)
//                w: optional inv_freq [head_dim / 2] (f32)  out: like x.
//                Rotate-half over the whole head_dim, angle = (position * scale) * inv_freq_i
//                (scale < 1: linear RoPE scaling), inv_freq_i from the weight when there is
//                one (Llama-3 scaling precomputes them), else theta^(-2i/head_dim).
//   kAttention   in: q [B, T, heads*hd], k [B, T, kv_heads*hd], v [B, T, kv_heads*hd],
//                positions [B, T]  state: slot `state` (K and V caches, [max_ctx, kv_heads*hd])
//                out: [B, T, heads*hd]. B must be 1. Writes k, v at their positions, then
//                each query at position p attends causally to cache rows j <= p (and
//                j > p - window when window > 0), scores scaled by `scale`, query head h
//                reading kv head h / (heads / kv_heads).
//   kGeluTanhMul in: gate, up [..., F]  out: gelu_tanh(gate) * up
//   kSiluMul     in: gate, up [..., F]  out: silu(gate) * up
//   kAdd         in: a, b (same shape)  out: a + b
//   kTakeLast    in: x [B, T, F]  out: [B, 1, F], the last position.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gearbox/data_type.h"
#include "gearbox/dims.h"

namespace gearbox::ir {

/// Op kinds. The numeric values are stored in engine files: append, never renumber.
enum class OpKind : uint32_t {
  kEmbedding = 1,
  kRmsNorm = 2,
  kLinear = 3,
  kRope = 4,
  kAttention = 5,
  kGeluTanhMul = 6,
  kSiluMul = 7,
  kAdd = 8,
  kTakeLast = 9,
};
inline constexpr uint32_t kMaxOpKind = 9;

/// "embedding", "rms_norm", ...
const char* op_kind_name(OpKind kind) noexcept;

/// Attributes of every op in one flat, fixed-layout struct (fields an op does not use stay
/// at their defaults). Stored field by field in engine files.
struct OpAttrs {
  float eps = 0.0f;            ///< kRmsNorm
  float weight_offset = 0.0f;  ///< kRmsNorm: 1 for Gemma's (1 + w), 0 for Llama's w
  float scale = 1.0f;          ///< kEmbedding: output scale; kAttention: score scale; kRope: position scale
  float theta = 0.0f;          ///< kRope: base
  int32_t heads = 0;           ///< kRope, kAttention: query heads (kRope: heads of its input)
  int32_t kv_heads = 0;        ///< kAttention
  int32_t head_dim = 0;        ///< kRope, kAttention; kRmsNorm: 0 = whole last dim
  int32_t window = 0;          ///< kAttention: sliding window, 0 = none
  int32_t state = -1;          ///< kAttention: state slot (KV cache) index
  int32_t has_bias = 0;        ///< kLinear: 1 when biases follow the weights
  bool operator==(const OpAttrs&) const = default;
};

/// A tensor produced by an op or fed as a network input.
struct TensorInfo {
  std::string name;
  DataType dtype = DataType::kF32;
};

/// A weight: name (the checkpoint's), dtype, dims, and where its bytes are in the payload.
struct WeightInfo {
  std::string name;
  DataType dtype = DataType::kF32;
  Dims dims;
  uint64_t offset = 0;  ///< byte offset in the weight payload
  uint64_t bytes = 0;   ///< dims.volume() * data_type_size(dtype)
};

/// One network input. `dims` has -1 for each dynamic extent; `dim_names` names every dim
/// (e.g. {"batch", "seq"}) for error messages and bindings.
struct InputSpec {
  int32_t tensor = -1;
  Dims dims;
  std::vector<std::string> dim_names;
};

/// Per-context state, e.g. one attention layer's KV cache: `rows` x `width` elements of
/// `dtype`, twice (K and V). rows is the engine's maximum context length.
struct StateSpec {
  std::string name;
  DataType dtype = DataType::kF32;
  int64_t rows = 0;
  int64_t width = 0;
};

/// One op application.
struct Node {
  OpKind kind = OpKind::kAdd;
  std::string name;
  std::vector<int32_t> inputs;   ///< tensor ids
  std::vector<int32_t> outputs;  ///< tensor ids
  std::vector<int32_t> weights;  ///< weight ids
  OpAttrs attrs;
};

/// A whole network. Nodes are in execution order; every tensor is produced once (by a
/// node or as an input) before it is read.
struct Network {
  std::vector<TensorInfo> tensors;
  std::vector<WeightInfo> weights;
  std::vector<InputSpec> inputs;
  std::vector<int32_t> outputs;  ///< tensor ids
  std::vector<StateSpec> states;
  std::vector<Node> nodes;
  int64_t max_context = 0;  ///< the KV caches' rows; positions must stay below it
};

}  // namespace gearbox::ir
