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
//                positions [B, T], optional slots [B] (i32/i64)  state: index `state` (K
//                and V caches, [max(1, slots) * max_ctx, kv_heads*hd])  out: [B, T, heads*hd].
//                Writes k, v at their positions, then each query at position p attends
//                causally to cache rows j <= p (and j > p - window when window > 0), scores
//                scaled by `scale`, query head h reading kv head h / (heads / kv_heads).
//                Without slots B must be 1 (one cache). With slots (a batched network,
//                Network::slots > 0) row b uses cache slots[b] (rows slots[b] * max_ctx
//                on); a position of -1 is left padding (no write, output 0), a row with
//                slot -1 is all padding.
//   kGeluTanhMul in: gate, up [..., F]  out: gelu_tanh(gate) * up
//   kSiluMul     in: gate, up [..., F]  out: silu(gate) * up
//   kAdd         in: a, b (same shape)  out: a + b
//   kTakeLast    in: x [B, T, F]  out: [B, 1, F], the last position.
//
// Generic ops: tensors of any rank 0..kMaxDims, row-major and contiguous. A node's output
// dtype is its TensorInfo's. Float math is f32 (bf16/f16 appear only through kCast and
// kConstant); integer tensors (i32, i64) and bool where stated. "Broadcast" is numpy's:
// dims aligned right, each pair of extents equal or one of them 1.
//   kUnary        in: x  out: f(x), same shape. code: UnaryCode. f32, except kNeg/kAbs on
//                 i32/i64 and kLogicalNot on bool. alpha/beta: kPowScalar x^alpha,
//                 kAffine x*alpha + beta, kClamp min(max(x, alpha), beta) (+-inf allowed).
//   kBinary       in: a, b (broadcast)  out: code: BinaryCode. Arithmetic: a, b, out of one
//                 dtype (f32, i32, i64); integer arithmetic wraps, div truncates toward
//                 zero (a zero divisor is an error of the call), pow by a negative
//                 exponent is 1 / a^-e truncated. Comparisons: a, b of one dtype, out bool.
//                 Logical: all bool.
//   kWhere        in: cond (bool), a, b (three-way broadcast)  out: cond ? a : b.
//   kReduce       in: x  out: code ReduceCode over the axes in `ints` (sorted, unique, in
//                 [0, rank); empty = all); flags bit 0 keeps reduced dims as 1. f32.
//   kSoftmax      in: x  out: like x; softmax (code 0) or log_softmax (code 1) over `axis`.
//   kMatmul       in: a [..., M, K], b [..., K, N] (rank >= 2, batch dims broadcast)
//                 out: [..., M, N]; f32 accumulate.
//   kSdpa         in: q [..., Lq, D], k [..., Lk, D], v [..., Lk, Dv], optional mask
//                 (bool: true = attend; or f32: added) broadcastable to [..., Lq, Lk]
//                 out: [..., Lq, Dv] = softmax(q k^T * scale + mask) v; batch dims of
//                 q/k/v/mask broadcast. flags bit 0 causal: query i sees keys j <= i. A row
//                 with every key excluded (or masked to -inf) is 0.
//   kLayerNorm    in: x [..., F]  w: none, [w], or [w, b] (has_bias = 1 with b)  out: like x;
//                 (x - mean) * rsqrt(var + eps) * w + b over the last dim, biased variance.
//   kPermute      in: x  out: dims[i] = x.dims[perm[i]], `ints` = perm.
//   kReshape      in: x  out: `ints` is a shape spec (below), same volume, same bytes.
//   kExpand       in: x  out: `ints` is a shape spec of rank >= x's, x aligned right; an
//                 x extent of 1 repeats, the others must equal.
//   kSlice        in: x  out: along `axis`, `ints` = {start, end, step}: Python semantics
//                 (negative counts from the end, then clamped to [0, extent]); step >= 1.
//   kConcat       in: x0..xn (one or more)  out: along `axis`; same dtype and rank, other
//                 extents equal.
//   kCast         in: x  out: x converted to out's dtype (f32 bf16 f16 i32 i64 bool).
//                 Float -> int truncates toward zero, saturating (NaN -> 0); i64 -> i32
//                 wraps; -> bool is x != 0; -> bf16 / f16 rounds to nearest even.
//   kIndexSelect  in: x, index [n] (i32/i64)  out: x with dim `axis` of extent n, row j
//                 being x's row index[j]; an index outside [-extent, extent) is an error
//                 of the call (negative wraps).
//   kGather       in: x, index (same rank, i32/i64)  out: index's dims; torch.gather along
//                 `axis` (index extents <= x's on the other dims); bad index: as above.
//   kConstant     w: [w]  out: the weight (its dims and dtype).
// kPermute, kReshape, kExpand, kSlice, kConcat, kIndexSelect/kGather's x and kConstant
// move bytes of any dtype.
//
// Shape spec (kReshape, kExpand `ints`), one value v per output extent: v >= 0 is the
// extent; v == -1 is inferred from the volume (kReshape, at most one) or x's extent at the
// same position from the right (kExpand); v <= -2 is x's extent at dim (-v - 2). So
// x.view(1, s, 4, 16) of x [1, s, 64] is [1, -3, 4, 16], every dynamic extent symbolic.
//
// Storage: a device keeps a tensor in storage_type(dtype) (runtime/device_backend.h). The
// CPU device stores bf16/f16 tensors as f32: a kCast to bf16/f16 rounds to that type and
// stores the rounded value as f32, and a bf16/f16 kConstant outputs its values as f32.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
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
  kUnary = 10,
  kBinary = 11,
  kWhere = 12,
  kReduce = 13,
  kSoftmax = 14,
  kMatmul = 15,
  kSdpa = 16,
  kLayerNorm = 17,
  kPermute = 18,
  kReshape = 19,
  kExpand = 20,
  kSlice = 21,
  kConcat = 22,
  kCast = 23,
  kIndexSelect = 24,
  kGather = 25,
  kConstant = 26,
};
inline constexpr uint32_t kMaxOpKind = 26;

/// kUnary's function (OpAttrs::code). Stored in engine files: append, never renumber.
enum class UnaryCode : int32_t {
  kNeg = 1,
  kExp = 2,
  kLog = 3,
  kSqrt = 4,
  kRsqrt = 5,
  kTanh = 6,
  kSigmoid = 7,
  kSilu = 8,
  kGeluErf = 9,
  kGeluTanh = 10,
  kRelu = 11,
  kAbs = 12,
  kSin = 13,
  kCos = 14,
  kReciprocal = 15,
  kPowScalar = 16,  ///< x ^ alpha
  kAffine = 17,     ///< x * alpha + beta
  kClamp = 18,      ///< min(max(x, alpha), beta)
  kLogicalNot = 19,
  kErf = 20,
};
inline constexpr int32_t kMaxUnaryCode = 20;

/// kBinary's function (OpAttrs::code). Stored in engine files: append, never renumber.
enum class BinaryCode : int32_t {
  kAdd = 1,
  kSub = 2,
  kMul = 3,
  kDiv = 4,
  kMaximum = 5,
  kMinimum = 6,
  kPow = 7,
  kEq = 8,
  kNe = 9,
  kLt = 10,
  kLe = 11,
  kGt = 12,
  kGe = 13,
  kLogicalAnd = 14,
  kLogicalOr = 15,
};
inline constexpr int32_t kMaxBinaryCode = 15;

/// kReduce's function (OpAttrs::code). Stored in engine files: append, never renumber.
enum class ReduceCode : int32_t { kSum = 1, kMean = 2, kAmax = 3, kAmin = 4 };
inline constexpr int32_t kMaxReduceCode = 4;

/// kSoftmax's function (OpAttrs::code).
enum class SoftmaxCode : int32_t { kSoftmax = 0, kLogSoftmax = 1 };
inline constexpr int32_t kMaxSoftmaxCode = 1;

/// OpAttrs::flags bits.
inline constexpr int32_t kFlagKeepdim = 1;  ///< kReduce
inline constexpr int32_t kFlagCausal = 1;   ///< kSdpa

/// "embedding", "rms_norm", ...
const char* op_kind_name(OpKind kind) noexcept;
/// Whether `kind` is a generic op (unary, binary, ..., constant): one that takes its
/// parameters from OpAttrs and runs through the generic shape rules and kernels, not a
/// fused decoder op (embedding, rms_norm, linear, rope, attention, ...).
bool is_generic(OpKind kind) noexcept;
/// "neg", "exp", ...; nullptr for a code outside the enum.
const char* unary_code_name(int32_t code) noexcept;
/// "add", "sub", ...; nullptr for a code outside the enum.
const char* binary_code_name(int32_t code) noexcept;
/// "sum", "mean", "amax", "amin"; nullptr for a code outside the enum.
const char* reduce_code_name(int32_t code) noexcept;
/// "softmax", "log_softmax"; nullptr for a code outside the enum.
const char* softmax_code_name(int32_t code) noexcept;
/// The name of `code` for an op that has codes (kUnary, kBinary, kReduce, kSoftmax);
/// nullptr for another op or a code outside its enum.
const char* op_code_name(OpKind kind, int32_t code) noexcept;
/// The code named `name` for `kind` (inverse of op_code_name); -1 when there is none.
int32_t op_code_from_name(OpKind kind, std::string_view name) noexcept;
/// Whether kBinary's `code` compares (eq..ge): its output is bool.
bool binary_code_compares(int32_t code) noexcept;
/// Whether kBinary's `code` is logical (and, or): all of its tensors are bool.
bool binary_code_logical(int32_t code) noexcept;

/// Attributes of every op in one flat, fixed-layout struct (fields an op does not use stay
/// at their defaults). Stored field by field in engine files.
struct OpAttrs {
  float eps = 0.0f;            ///< kRmsNorm, kLayerNorm
  float weight_offset = 0.0f;  ///< kRmsNorm: 1 for Gemma's (1 + w), 0 for Llama's w
  float scale = 1.0f;          ///< kEmbedding: output scale; kAttention, kSdpa: score scale; kRope: position scale
  float theta = 0.0f;          ///< kRope: base
  int32_t heads = 0;           ///< kRope, kAttention: query heads (kRope: heads of its input)
  int32_t kv_heads = 0;        ///< kAttention
  int32_t head_dim = 0;        ///< kRope, kAttention; kRmsNorm: 0 = whole last dim
  int32_t window = 0;          ///< kAttention: sliding window, 0 = none
  int32_t state = -1;          ///< kAttention: state slot (KV cache) index
  int32_t has_bias = 0;        ///< kLinear, kLayerNorm: 1 when biases follow the weights
  int32_t code = 0;            ///< kUnary / kBinary / kReduce / kSoftmax: which function
  int32_t axis = 0;            ///< kSoftmax, kSlice, kConcat, kIndexSelect, kGather: an axis >= 0
  int32_t flags = 0;           ///< kReduce: kFlagKeepdim; kSdpa: kFlagCausal
  float alpha = 0.0f;          ///< kUnary: see UnaryCode
  float beta = 0.0f;           ///< kUnary: see UnaryCode
  /// kReduce axes, kPermute perm, kReshape/kExpand shape spec, kSlice {start, end, step}.
  std::vector<int64_t> ints;
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
  /// KV-cache slots of a batched network (each state holds this many caches of
  /// max_context rows; the attention nodes take a `slots` input); 0: one sequence, no slots.
  int64_t slots = 0;

  /// The caches each state holds: one per KV-cache slot, or one.
  int64_t caches() const { return slots > 0 ? slots : 1; }
};

}  // namespace gearbox::ir
