// validate_network's checks of the generic ops' arity, codes, attrs and dtypes.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/check.h"
#include "ir/validate.h"

namespace gearbox::ir {
namespace {

std::string num(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(v));
  return buf;
}

std::string ints_string(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i > 0 ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

bool is_int(DataType t) { return t == DataType::kI32 || t == DataType::kI64; }
bool is_float_weight(DataType t) { return t == DataType::kF32 || t == DataType::kBF16 || t == DataType::kF16; }

class GenericValidator {
 public:
  GenericValidator(const Network& net, const Node& node, const std::string& label)
      : net_(net), node_(node), label_(label) {}

  Status run() const {
    const OpAttrs& a = node_.attrs;
    switch (node_.kind) {
      case OpKind::kUnary: return unary();
      case OpKind::kBinary: return binary();
      case OpKind::kWhere:
        GEARBOX_RETURN_IF_ERROR(arity(3, 3, 0, "(cond, a, b)"));
        GEARBOX_RETURN_IF_ERROR(need_dtype(in(0), DataType::kBool, "cond"));
        return same_dtypes({in(1), in(2), out()}, "a, b and the output");
      case OpKind::kReduce: {
        GEARBOX_RETURN_IF_ERROR(arity(1, 1, 0, "(x)"));
        GEARBOX_RETURN_IF_ERROR(code_in_range());
        GEARBOX_RETURN_IF_ERROR(only_flags(kFlagKeepdim, "keepdim"));
        GEARBOX_RETURN_IF_ERROR(all_f32({in(0), out()}));
        for (size_t i = 0; i < a.ints.size(); ++i) {
          if (a.ints[i] < 0 || a.ints[i] >= kMaxDims || (i > 0 && a.ints[i] <= a.ints[i - 1])) {
            return error("axes " + ints_string(a.ints) + " must be sorted, unique and in [0, " +
                         std::to_string(kMaxDims) + ")");
          }
        }
        return {};
      }
      case OpKind::kSoftmax:
        GEARBOX_RETURN_IF_ERROR(arity(1, 1, 0, "(x)"));
        GEARBOX_RETURN_IF_ERROR(code_in_range());
        GEARBOX_RETURN_IF_ERROR(need_axis());
        return all_f32({in(0), out()});
      case OpKind::kMatmul: GEARBOX_RETURN_IF_ERROR(arity(2, 2, 0, "(a, b)")); return all_f32({in(0), in(1), out()});
      case OpKind::kSdpa: return sdpa();
      case OpKind::kLayerNorm: return layer_norm();
      case OpKind::kPermute: {
        GEARBOX_RETURN_IF_ERROR(arity(1, 1, 0, "(x)"));
        std::vector<bool> seen(a.ints.size(), false);
        bool ok = a.ints.size() <= static_cast<size_t>(kMaxDims);
        for (int64_t p : a.ints) {
          ok = ok && p >= 0 && static_cast<size_t>(p) < a.ints.size() && !seen[static_cast<size_t>(p)];
          if (ok) seen[static_cast<size_t>(p)] = true;
        }
        if (!ok)
          return error("perm " + ints_string(a.ints) + " is not a permutation of 0.." + std::to_string(a.ints.size()) +
                       "-1");
        return same_dtypes({in(0), out()}, "x and the output");
      }
      case OpKind::kReshape:
      case OpKind::kExpand: return shape_spec();
      case OpKind::kSlice:
        GEARBOX_RETURN_IF_ERROR(arity(1, 1, 0, "(x)"));
        GEARBOX_RETURN_IF_ERROR(need_axis());
        if (a.ints.size() != 3) return error("needs ints {start, end, step}, has " + ints_string(a.ints));
        if (a.ints[2] < 1) return error("step " + std::to_string(a.ints[2]) + " must be >= 1");
        return same_dtypes({in(0), out()}, "x and the output");
      case OpKind::kConcat: {
        if (node_.inputs.empty()) return error("needs at least 1 input");
        GEARBOX_RETURN_IF_ERROR(arity(node_.inputs.size(), node_.inputs.size(), 0, "(x0, x1, ...)"));
        GEARBOX_RETURN_IF_ERROR(need_axis());
        std::vector<DataType> types;
        for (size_t i = 0; i < node_.inputs.size(); ++i) types.push_back(in(i));
        types.push_back(out());
        return same_dtypes(types, "the inputs and the output");
      }
      case OpKind::kCast: return arity(1, 1, 0, "(x)");
      case OpKind::kIndexSelect:
      case OpKind::kGather:
        GEARBOX_RETURN_IF_ERROR(arity(2, 2, 0, "(x, index)"));
        GEARBOX_RETURN_IF_ERROR(need_axis());
        if (!is_int(in(1))) return error(std::string("index must be i32 or i64, not ") + data_type_name(in(1)));
        return same_dtypes({in(0), out()}, "x and the output");
      case OpKind::kConstant: {
        GEARBOX_RETURN_IF_ERROR(arity(0, 0, 1, "()"));
        const WeightInfo& w = net_.weights[static_cast<size_t>(node_.weights[0])];
        if (w.dtype != out()) {
          return error(std::string("the output is ") + data_type_name(out()) + " but weight '" + w.name + "' is " +
                       data_type_name(w.dtype));
        }
        return {};
      }
      default: return error("is not a generic op");
    }
  }

 private:
  DataType in(size_t i) const { return net_.tensors[static_cast<size_t>(node_.inputs[i])].dtype; }
  DataType out() const { return net_.tensors[static_cast<size_t>(node_.outputs[0])].dtype; }
  Status error(const std::string& what) const { return invalid_argument(label_ + ": " + what); }

  // Between inputs_min and inputs_max inputs, one output, `weights` weights.
  Status arity(size_t inputs_min, size_t inputs_max, size_t weights, const char* names) const {
    if (node_.inputs.size() < inputs_min || node_.inputs.size() > inputs_max) {
      const std::string want = inputs_min == inputs_max
                                   ? std::to_string(inputs_min)
                                   : std::to_string(inputs_min) + " or " + std::to_string(inputs_max);
      return error("needs " + want + " inputs " + names + ", has " + std::to_string(node_.inputs.size()));
    }
    if (node_.outputs.size() != 1) return error("needs 1 output, has " + std::to_string(node_.outputs.size()));
    if (node_.weights.size() != weights) {
      return error("needs " + std::to_string(weights) + " weights, has " + std::to_string(node_.weights.size()));
    }
    return {};
  }

  Status code_in_range() const {
    if (op_code_name(node_.kind, node_.attrs.code) != nullptr) return {};
    return error("code " + std::to_string(node_.attrs.code) + " is not a " + op_kind_name(node_.kind) + " code");
  }

  Status only_flags(int32_t allowed, const char* names) const {
    if ((node_.attrs.flags & ~allowed) == 0) return {};
    return error("flags " + std::to_string(node_.attrs.flags) + " has bits other than " + names);
  }

  Status need_axis() const {
    if (node_.attrs.axis >= 0 && node_.attrs.axis < kMaxDims) return {};
    return error("axis " + std::to_string(node_.attrs.axis) + " must be in [0, " + std::to_string(kMaxDims) + ")");
  }

  Status need_dtype(DataType t, DataType want, const char* what) const {
    if (t == want) return {};
    return error(std::string(what) + " must be " + data_type_name(want) + ", not " + data_type_name(t));
  }

  Status all_f32(std::initializer_list<DataType> types) const {
    for (DataType t : types) {
      if (t != DataType::kF32) {
        return error(std::string("takes and produces f32 tensors, not ") + data_type_name(t) + " (cast to f32 first)");
      }
    }
    return {};
  }

  Status same_dtypes(const std::vector<DataType>& types, const char* what) const {
    for (DataType t : types) {
      if (t != types.front()) {
        return error(std::string(what) + " must share one dtype; found " + data_type_name(types.front()) + " and " +
                     data_type_name(t));
      }
    }
    return {};
  }

  Status unary() const {
    GEARBOX_RETURN_IF_ERROR(arity(1, 1, 0, "(x)"));
    GEARBOX_RETURN_IF_ERROR(code_in_range());
    const OpAttrs& a = node_.attrs;
    const auto code = static_cast<UnaryCode>(a.code);
    const DataType x = in(0);
    GEARBOX_RETURN_IF_ERROR(same_dtypes({x, out()}, "x and the output"));
    const std::string name = unary_code_name(a.code);
    if (code == UnaryCode::kLogicalNot) {
      if (x != DataType::kBool) return error("logical_not takes bool, not " + std::string(data_type_name(x)));
    } else if (code == UnaryCode::kNeg || code == UnaryCode::kAbs) {
      if (x != DataType::kF32 && !is_int(x)) {
        return error(name + " takes f32, i32 or i64, not " + data_type_name(x));
      }
    } else if (x != DataType::kF32) {
      return error(name + " takes f32, not " + data_type_name(x) + " (cast to f32 first)");
    }
    if ((code == UnaryCode::kPowScalar || code == UnaryCode::kAffine) &&
        !(std::isfinite(a.alpha) && std::isfinite(a.beta))) {
      return error(name + ": alpha " + num(a.alpha) + " and beta " + num(a.beta) + " must be finite");
    }
    if (code == UnaryCode::kClamp && (std::isnan(a.alpha) || std::isnan(a.beta) || a.alpha > a.beta)) {
      return error("clamp: alpha " + num(a.alpha) + " (min) and beta " + num(a.beta) + " (max) must be ordered");
    }
    return {};
  }

  Status binary() const {
    GEARBOX_RETURN_IF_ERROR(arity(2, 2, 0, "(a, b)"));
    GEARBOX_RETURN_IF_ERROR(code_in_range());
    const int32_t code = node_.attrs.code;
    const std::string name = binary_code_name(code);
    GEARBOX_RETURN_IF_ERROR(same_dtypes({in(0), in(1)}, "a and b"));
    const DataType t = in(0);
    if (binary_code_logical(code)) {
      if (t != DataType::kBool || out() != DataType::kBool) {
        return error(name + " takes and produces bool, not " + data_type_name(t) + " -> " + data_type_name(out()));
      }
    } else if (binary_code_compares(code)) {
      if (t != DataType::kF32 && !is_int(t) && t != DataType::kBool) {
        return error(name + " compares f32, i32, i64 or bool, not " + data_type_name(t));
      }
      if (out() != DataType::kBool) return error(name + " produces bool, not " + data_type_name(out()));
    } else {
      if (t != DataType::kF32 && !is_int(t)) {
        return error(name + " takes f32, i32 or i64, not " + data_type_name(t));
      }
      GEARBOX_RETURN_IF_ERROR(same_dtypes({t, out()}, "a, b and the output"));
    }
    return {};
  }

  Status sdpa() const {
    GEARBOX_RETURN_IF_ERROR(arity(3, 4, 0, "(q, k, v[, mask])"));
    GEARBOX_RETURN_IF_ERROR(only_flags(kFlagCausal, "causal"));
    GEARBOX_RETURN_IF_ERROR(all_f32({in(0), in(1), in(2), out()}));
    if (node_.inputs.size() == 4 && in(3) != DataType::kBool && in(3) != DataType::kF32) {
      return error(std::string("mask must be bool or f32, not ") + data_type_name(in(3)));
    }
    if (!std::isfinite(node_.attrs.scale)) return error("scale is not finite");
    return {};
  }

  Status layer_norm() const {
    const OpAttrs& a = node_.attrs;
    if (node_.inputs.size() != 1 || node_.outputs.size() != 1 || node_.weights.size() > 2) {
      return error("needs 1 input (x), 1 output and at most 2 weights (w, b); has " +
                   std::to_string(node_.inputs.size()) + ", " + std::to_string(node_.outputs.size()) + " and " +
                   std::to_string(node_.weights.size()));
    }
    if (a.has_bias != (node_.weights.size() == 2 ? 1 : 0)) {
      return error("has_bias " + std::to_string(a.has_bias) + " with " + std::to_string(node_.weights.size()) +
                   " weights (has_bias is 1 exactly when a bias b follows w)");
    }
    if (!(a.eps > 0.0f && std::isfinite(a.eps))) return error("eps " + num(a.eps) + " must be positive and finite");
    GEARBOX_RETURN_IF_ERROR(all_f32({in(0), out()}));
    for (int32_t id : node_.weights) {
      const WeightInfo& w = net_.weights[static_cast<size_t>(id)];
      if (w.dims.rank() != 1 || !is_float_weight(w.dtype)) {
        return error("weight '" + w.name + "' is " + data_type_name(w.dtype) + " " + w.dims.to_string() +
                     "; it must be one f32, bf16 or f16 vector");
      }
    }
    return {};
  }

  Status shape_spec() const {
    GEARBOX_RETURN_IF_ERROR(arity(1, 1, 0, "(x)"));
    const std::vector<int64_t>& spec = node_.attrs.ints;
    const bool reshape = node_.kind == OpKind::kReshape;
    const std::string what = std::string(reshape ? "reshape" : "expand") + " shape " + ints_string(spec);
    if (spec.size() > static_cast<size_t>(kMaxDims)) {
      return error(what + " has more than " + std::to_string(kMaxDims) + " dims");
    }
    int inferred = 0;
    for (int64_t v : spec) {
      if (v < -(int64_t{kMaxDims} + 1)) {
        return error(what + ": " + std::to_string(v) + " names dim " + std::to_string(-v - 2) +
                     ", beyond the largest rank " + std::to_string(kMaxDims));
      }
      inferred += v == -1 ? 1 : 0;
    }
    if (reshape && inferred > 1) return error(what + " has more than one -1");
    return same_dtypes({in(0), out()}, "x and the output");
  }

  const Network& net_;
  const Node& node_;
  const std::string& label_;
};

}  // namespace

Status validate_generic_node(const Network& network, const Node& node, const std::string& label) {
  return GenericValidator(network, node, label).run();
}

}  // namespace gearbox::ir
