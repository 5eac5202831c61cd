#include "ir/network.h"

#include <array>

namespace gearbox::ir {
namespace {

// Index = code; an empty name is a code outside the enum.
constexpr std::array<const char*, kMaxUnaryCode + 1> kUnaryNames = {
    "",        "neg",        "exp",        "log",       "sqrt",  "rsqrt",       "tanh",
    "sigmoid", "silu",       "gelu_erf",   "gelu_tanh", "relu",  "abs",         "sin",
    "cos",     "reciprocal", "pow_scalar", "affine",    "clamp", "logical_not", "erf"};
constexpr std::array<const char*, kMaxBinaryCode + 1> kBinaryNames = {
    "",   "add", "sub", "mul", "div", "maximum", "minimum",     "pow",
    "eq", "ne",  "lt",  "le",  "gt",  "ge",      "logical_and", "logical_or"};
constexpr std::array<const char*, kMaxReduceCode + 1> kReduceNames = {"", "sum", "mean", "amax", "amin"};
constexpr std::array<const char*, kMaxSoftmaxCode + 1> kSoftmaxNames = {"softmax", "log_softmax"};

template <size_t N>
const char* lookup(const std::array<const char*, N>& names, int32_t code) {
  if (code < 0 || static_cast<size_t>(code) >= N || names[static_cast<size_t>(code)][0] == '\0') return nullptr;
  return names[static_cast<size_t>(code)];
}

template <size_t N>
int32_t find(const std::array<const char*, N>& names, std::string_view name) {
  if (name.empty()) return -1;
  for (size_t i = 0; i < N; ++i) {
    if (name == names[i]) return static_cast<int32_t>(i);
  }
  return -1;
}

}  // namespace

const char* op_kind_name(OpKind kind) noexcept {
  switch (kind) {
    case OpKind::kEmbedding: return "embedding";
    case OpKind::kRmsNorm: return "rms_norm";
    case OpKind::kLinear: return "linear";
    case OpKind::kRope: return "rope";
    case OpKind::kAttention: return "attention";
    case OpKind::kGeluTanhMul: return "gelu_tanh_mul";
    case OpKind::kSiluMul: return "silu_mul";
    case OpKind::kAdd: return "add";
    case OpKind::kTakeLast: return "take_last";
    case OpKind::kUnary: return "unary";
    case OpKind::kBinary: return "binary";
    case OpKind::kWhere: return "where";
    case OpKind::kReduce: return "reduce";
    case OpKind::kSoftmax: return "softmax";
    case OpKind::kMatmul: return "matmul";
    case OpKind::kSdpa: return "sdpa";
    case OpKind::kLayerNorm: return "layer_norm";
    case OpKind::kPermute: return "permute";
    case OpKind::kReshape: return "reshape";
    case OpKind::kExpand: return "expand";
    case OpKind::kSlice: return "slice";
    case OpKind::kConcat: return "concat";
    case OpKind::kCast: return "cast";
    case OpKind::kIndexSelect: return "index_select";
    case OpKind::kGather: return "gather";
    case OpKind::kConstant: return "constant";
  }
  return "?";
}

bool is_generic(OpKind kind) noexcept {
  switch (kind) {
    case OpKind::kEmbedding:
    case OpKind::kRmsNorm:
    case OpKind::kLinear:
    case OpKind::kRope:
    case OpKind::kAttention:
    case OpKind::kGeluTanhMul:
    case OpKind::kSiluMul:
    case OpKind::kAdd:
    case OpKind::kTakeLast: return false;
    case OpKind::kUnary:
    case OpKind::kBinary:
    case OpKind::kWhere:
    case OpKind::kReduce:
    case OpKind::kSoftmax:
    case OpKind::kMatmul:
    case OpKind::kSdpa:
    case OpKind::kLayerNorm:
    case OpKind::kPermute:
    case OpKind::kReshape:
    case OpKind::kExpand:
    case OpKind::kSlice:
    case OpKind::kConcat:
    case OpKind::kCast:
    case OpKind::kIndexSelect:
    case OpKind::kGather:
    case OpKind::kConstant: return true;
  }
  return false;
}

const char* unary_code_name(int32_t code) noexcept { return lookup(kUnaryNames, code); }
const char* binary_code_name(int32_t code) noexcept { return lookup(kBinaryNames, code); }
const char* reduce_code_name(int32_t code) noexcept { return lookup(kReduceNames, code); }
const char* softmax_code_name(int32_t code) noexcept { return lookup(kSoftmaxNames, code); }

const char* op_code_name(OpKind kind, int32_t code) noexcept {
  switch (kind) {
    case OpKind::kUnary: return unary_code_name(code);
    case OpKind::kBinary: return binary_code_name(code);
    case OpKind::kReduce: return reduce_code_name(code);
    case OpKind::kSoftmax: return softmax_code_name(code);
    default: return nullptr;
  }
}

int32_t op_code_from_name(OpKind kind, std::string_view name) noexcept {
  switch (kind) {
    case OpKind::kUnary: return find(kUnaryNames, name);
    case OpKind::kBinary: return find(kBinaryNames, name);
    case OpKind::kReduce: return find(kReduceNames, name);
    case OpKind::kSoftmax: return find(kSoftmaxNames, name);
    default: return -1;
  }
}

bool binary_code_compares(int32_t code) noexcept {
  return code >= static_cast<int32_t>(BinaryCode::kEq) && code <= static_cast<int32_t>(BinaryCode::kGe);
}

bool binary_code_logical(int32_t code) noexcept {
  return code == static_cast<int32_t>(BinaryCode::kLogicalAnd) || code == static_cast<int32_t>(BinaryCode::kLogicalOr);
}

}  // namespace gearbox::ir
