#include "models/network_json.h"

#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <new>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "core/bounded_json.h"
#include "core/check.h"
#include "ir/network.h"
#include "ir/shape_inference.h"

namespace gearbox::models {
namespace {

using Json = nlohmann::json;
using ir::OpKind;

Status bad(const std::string& where, const std::string& what) {
  return data_loss("network description: " + where + ": " + what);
}

// Checks that `object` has only the `allowed` keys.
Status only_keys(const Json& object, const std::string& where, std::initializer_list<const char*> allowed) {
  if (!object.is_object()) return bad(where, "must be an object");
  for (const auto& [key, value] : object.items()) {
    bool known = false;
    for (const char* a : allowed) known = known || key == a;
    if (!known) return bad(where, "unknown key '" + key + "'");
  }
  return {};
}

Result<std::string> get_string(const Json& object, const char* key, const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return bad(where, std::string("'") + key + "' must be a string");
  return it->get<std::string>();
}

Result<int64_t> get_int(const Json& object, const char* key, const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_number_integer()) {
    return bad(where, std::string("'") + key + "' must be an integer");
  }
  return it->get<int64_t>();
}

Result<std::vector<std::string>> get_strings(const Json& object, const char* key, const std::string& where,
                                             bool required = true) {
  const auto it = object.find(key);
  std::vector<std::string> out;
  if (it == object.end() && !required) return out;
  if (it == object.end() || !it->is_array()) return bad(where, std::string("'") + key + "' must be an array");
  for (const Json& v : *it) {
    if (!v.is_string()) return bad(where, std::string("'") + key + "' must hold strings");
    out.push_back(v.get<std::string>());
  }
  return out;
}

Result<DataType> parse_dtype(const std::string& s, const std::string& where) {
  for (DataType t :
       {DataType::kF32, DataType::kBF16, DataType::kF16, DataType::kI32, DataType::kI64, DataType::kBool}) {
    if (s == data_type_name(t)) return t;
  }
  return bad(where, "dtype '" + s + "' is not f32, bf16, f16, i32, i64 or bool");
}

// The dtypes a constant's weight may have beyond F32/BF16/F16 (safetensors names).
bool constant_weight_dtype(const std::string& safetensors_name, DataType& out) {
  if (safetensors_name == "I32") {
    out = DataType::kI32;
  } else if (safetensors_name == "I64") {
    out = DataType::kI64;
  } else if (safetensors_name == "BOOL") {
    out = DataType::kBool;
  } else {
    return false;
  }
  return true;
}

// A JSON number as f32, or the strings "inf" / "-inf" (JSON has no infinities): clamp's
// open bounds.
bool json_float(const Json& value, float& out) {
  if (value.is_string()) {
    const std::string& s = value.get_ref<const std::string&>();
    if (s != "inf" && s != "-inf") return false;
    out = s == "inf" ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
    return true;
  }
  if (!value.is_number()) return false;
  const double d = value.get<double>();
  if (d > std::numeric_limits<float>::max()) {
    out = std::numeric_limits<float>::infinity();
  } else if (d < -std::numeric_limits<float>::max()) {
    out = -std::numeric_limits<float>::infinity();
  } else {
    out = static_cast<float>(d);
  }
  return true;
}

Result<std::vector<int64_t>> json_ints(const Json& value, const std::string& key, const std::string& where) {
  if (!value.is_array() || value.size() > static_cast<size_t>(kMaxDims)) {
    return bad(where, "attr '" + key + "' must be an array of at most " + std::to_string(kMaxDims) + " integers");
  }
  std::vector<int64_t> out;
  for (const Json& v : value) {
    if (!v.is_number_integer()) return bad(where, "attr '" + key + "' must hold integers");
    out.push_back(v.get<int64_t>());
  }
  return out;
}

// The generic attrs and the ops that take each (docs/FORMAT.md, "Network description").
bool generic_attr_allowed(const std::string& key, OpKind kind) {
  auto any = [kind](std::initializer_list<OpKind> kinds) {
    for (OpKind k : kinds) {
      if (k == kind) return true;
    }
    return false;
  };
  if (key == "code") return any({OpKind::kUnary, OpKind::kBinary, OpKind::kReduce, OpKind::kSoftmax});
  if (key == "axis") {
    return any({OpKind::kSoftmax, OpKind::kSlice, OpKind::kConcat, OpKind::kIndexSelect, OpKind::kGather});
  }
  if (key == "alpha" || key == "beta") return kind == OpKind::kUnary;
  if (key == "axes" || key == "keepdim") return kind == OpKind::kReduce;
  if (key == "causal") return kind == OpKind::kSdpa;
  if (key == "perm") return kind == OpKind::kPermute;
  if (key == "shape") return any({OpKind::kReshape, OpKind::kExpand});
  if (key == "start" || key == "end" || key == "step") return kind == OpKind::kSlice;
  return false;
}

bool is_generic_attr(const std::string& key) {
  for (const char* k :
       {"code", "axis", "alpha", "beta", "axes", "keepdim", "causal", "perm", "shape", "start", "end", "step"}) {
    if (key == k) return true;
  }
  return false;
}

// Sets the generic attr `key` of a node of `kind` from `value`.
Status parse_generic_attr(const std::string& key, const Json& value, OpKind kind, ir::OpAttrs& a,
                          const std::string& where) {
  if (!generic_attr_allowed(key, kind)) {
    return bad(where, "attr '" + key + "' does not apply to op '" + ir::op_kind_name(kind) + "'");
  }
  if (key == "code") {
    if (!value.is_string()) return bad(where, "attr 'code' must be a string");
    const int32_t code = ir::op_code_from_name(kind, value.get<std::string>());
    if (code < 0) {
      return bad(where, "code '" + value.get<std::string>() + "' is not a " + ir::op_kind_name(kind) + " code");
    }
    a.code = code;
  } else if (key == "axis") {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > INT32_MAX) {
      return bad(where, "attr 'axis' must be an integer >= 0");
    }
    a.axis = value.get<int32_t>();
  } else if (key == "alpha" || key == "beta") {
    if (!json_float(value, key == "alpha" ? a.alpha : a.beta)) {
      return bad(where, "attr '" + key + "' must be a number, \"inf\" or \"-inf\"");
    }
  } else if (key == "keepdim" || key == "causal") {
    if (!value.is_boolean()) return bad(where, "attr '" + key + "' must be true or false");
    a.flags = value.get<bool>() ? (a.flags | 1) : (a.flags & ~1);
  } else if (key == "start" || key == "end" || key == "step") {
    if (!value.is_number_integer()) return bad(where, "attr '" + key + "' must be an integer");
    a.ints[key == "start" ? 0 : key == "end" ? 1 : 2] = value.get<int64_t>();
  } else {  // axes, perm, shape
    Result<std::vector<int64_t>> ints = json_ints(value, key, where);
    if (!ints.ok()) return ints.status();
    a.ints = std::move(*ints);
  }
  return {};
}

Result<OpKind> parse_op(const std::string& s, const std::string& where) {
  for (uint32_t k = 1; k <= ir::kMaxOpKind; ++k) {
    if (s == ir::op_kind_name(static_cast<OpKind>(k))) return static_cast<OpKind>(k);
  }
  return bad(where, "unknown op '" + s + "'");
}

Result<ir::OpAttrs> parse_attrs(const Json& node, OpKind kind, const std::string& where) {
  ir::OpAttrs a;
  // A slice without start / end / step takes the whole axis.
  if (kind == OpKind::kSlice) a.ints = {0, std::numeric_limits<int64_t>::max(), 1};
  const auto it = node.find("attrs");
  if (it == node.end()) return a;
  if (!it->is_object()) return bad(where, "'attrs' must be an object");
  const std::map<std::string, float*> floats = {
      {"eps", &a.eps}, {"weight_offset", &a.weight_offset}, {"scale", &a.scale}, {"theta", &a.theta}};
  const std::map<std::string, int32_t*> ints = {{"heads", &a.heads},       {"kv_heads", &a.kv_heads},
                                                {"head_dim", &a.head_dim}, {"window", &a.window},
                                                {"state", &a.state},       {"has_bias", &a.has_bias}};
  for (const auto& [key, value] : it->items()) {
    if (auto f = floats.find(key); f != floats.end()) {
      if (!value.is_number()) return bad(where, "attr '" + key + "' must be a number");
      *f->second = value.get<float>();
    } else if (auto i = ints.find(key); i != ints.end()) {
      if (!value.is_number_integer() || value.get<int64_t>() < INT32_MIN || value.get<int64_t>() > INT32_MAX) {
        return bad(where, "attr '" + key + "' must be a 32-bit integer");
      }
      *i->second = value.get<int32_t>();
    } else if (is_generic_attr(key)) {
      GEARBOX_RETURN_IF_ERROR(parse_generic_attr(key, value, kind, a, where));
    } else {
      return bad(where, "unknown attr '" + key + "'");
    }
  }
  return a;
}

class Reader {
 public:
  explicit Reader(const SafetensorsCheckpoint& weights) : weights_(weights) {}

  Result<DescribedModel> read(const Json& doc) {
    GEARBOX_RETURN_IF_ERROR(only_keys(
        doc, "top level", {"format", "version", "max_context", "inputs", "outputs", "states", "nodes", "metadata"}));
    Result<std::string> format = get_string(doc, "format", "top level");
    if (!format.ok()) return format.status();
    if (*format != "gearbox-network") return bad("top level", "'format' is '" + *format + "', not gearbox-network");
    Result<int64_t> version = get_int(doc, "version", "top level");
    if (!version.ok()) return version.status();
    if (*version != 1) return bad("top level", "version " + std::to_string(*version) + " (this gearbox reads 1)");
    Result<int64_t> max_context = get_int(doc, "max_context", "top level");
    if (!max_context.ok()) return max_context.status();
    if (*max_context < 1) return bad("top level", "'max_context' must be >= 1");
    net_.max_context = *max_context;

    GEARBOX_RETURN_IF_ERROR(read_inputs(doc));
    GEARBOX_RETURN_IF_ERROR(read_states(doc));
    GEARBOX_RETURN_IF_ERROR(read_nodes(doc));
    Result<std::vector<std::string>> outputs = get_strings(doc, "outputs", "top level");
    if (!outputs.ok()) return outputs.status();
    for (const std::string& name : *outputs) {
      const auto t = tensors_.find(name);
      if (t == tensors_.end()) return bad("outputs", "no tensor '" + name + "'");
      net_.outputs.push_back(t->second);
    }
    DescribedModel out;
    if (const auto m = doc.find("metadata"); m != doc.end()) {
      if (!m->is_object()) return bad("metadata", "must be an object of strings");
      for (const auto& [key, value] : m->items()) {
        if (!value.is_string()) return bad("metadata", "'" + key + "' must be a string");
        out.metadata.emplace_back(key, value.get<std::string>());
      }
    }
    payload_.resize((payload_.size() + 63) / 64 * 64, 0);
    out.model.network = std::move(net_);
    out.model.payload = std::move(payload_);
    return out;
  }

 private:
  Result<int32_t> new_tensor(const std::string& name, DataType dtype, const std::string& where) {
    if (name.empty()) return bad(where, "a tensor name is empty");
    if (!tensors_.emplace(name, static_cast<int32_t>(net_.tensors.size())).second) {
      return bad(where, "tensor '" + name + "' is produced twice");
    }
    net_.tensors.push_back({name, dtype});
    return static_cast<int32_t>(net_.tensors.size() - 1);
  }

  Status read_inputs(const Json& doc) {
    const auto it = doc.find("inputs");
    if (it == doc.end() || !it->is_array() || it->empty())
      return bad("top level", "'inputs' must be a non-empty array");
    for (size_t i = 0; i < it->size(); ++i) {
      const Json& in = (*it)[i];
      const std::string where = "inputs[" + std::to_string(i) + "]";
      GEARBOX_RETURN_IF_ERROR(only_keys(in, where, {"name", "dtype", "dims", "dim_names"}));
      Result<std::string> name = get_string(in, "name", where);
      if (!name.ok()) return name.status();
      Result<std::string> dtype_name = get_string(in, "dtype", where);
      if (!dtype_name.ok()) return dtype_name.status();
      Result<DataType> dtype = parse_dtype(*dtype_name, where);
      if (!dtype.ok()) return dtype.status();
      const auto dims = in.find("dims");
      if (dims == in.end() || !dims->is_array() || dims->size() > static_cast<size_t>(kMaxDims)) {
        return bad(where, "'dims' must be an array of at most " + std::to_string(kMaxDims) + " integers");
      }
      std::vector<int64_t> extents;
      for (const Json& d : *dims) {
        if (!d.is_number_integer() || d.get<int64_t>() < -1) return bad(where, "'dims' entries must be >= -1");
        extents.push_back(d.get<int64_t>());
      }
      Result<std::vector<std::string>> dim_names = get_strings(in, "dim_names", where);
      if (!dim_names.ok()) return dim_names.status();
      if (dim_names->size() != extents.size()) return bad(where, "'dim_names' must name every dim");
      Result<int32_t> t = new_tensor(*name, *dtype, where);
      if (!t.ok()) return t.status();
      net_.inputs.push_back({*t, Dims(extents), std::move(*dim_names)});
    }
    return {};
  }

  Status read_states(const Json& doc) {
    const auto it = doc.find("states");
    if (it == doc.end()) return {};
    if (!it->is_array()) return bad("top level", "'states' must be an array");
    for (size_t i = 0; i < it->size(); ++i) {
      const Json& s = (*it)[i];
      const std::string where = "states[" + std::to_string(i) + "]";
      GEARBOX_RETURN_IF_ERROR(only_keys(s, where, {"name", "dtype", "rows", "width"}));
      Result<std::string> name = get_string(s, "name", where);
      Result<std::string> dtype_name = get_string(s, "dtype", where);
      Result<int64_t> rows = get_int(s, "rows", where);
      Result<int64_t> width = get_int(s, "width", where);
      for (const Status& st : {name.status(), dtype_name.status(), rows.status(), width.status()}) {
        if (!st.ok()) return st;
      }
      Result<DataType> dtype = parse_dtype(*dtype_name, where);
      if (!dtype.ok()) return dtype.status();
      net_.states.push_back({*name, *dtype, *rows, *width});
    }
    return {};
  }

  // A weight's id, copying it into the payload the first time it is named. A constant's
  // weight may also be I32, I64 or BOOL.
  Result<int32_t> weight(const std::string& name, bool constant, const std::string& where) {
    if (const auto w = weight_ids_.find(name); w != weight_ids_.end()) return w->second;
    const SafetensorsTensor* found = weights_.find(name);
    DataType dtype = DataType::kF32;
    if (!(constant && found != nullptr && constant_weight_dtype(found->dtype_name, dtype))) {
      Result<const SafetensorsTensor*> t = weights_.get(name);
      if (!t.ok()) return t.status().with_context(where);
      found = *t;
      dtype = found->dtype;
    }
    ir::WeightInfo w;
    w.name = name;
    w.dtype = dtype;
    w.dims = found->dims;
    w.bytes = found->bytes.size();
    w.offset = (payload_.size() + 63) / 64 * 64;
    payload_.resize(w.offset + w.bytes, 0);
    if (w.bytes > 0) std::memcpy(payload_.data() + w.offset, found->bytes.data(), w.bytes);
    if (dtype == DataType::kBool) {  // gearbox's bool is 0 or 1
      for (uint64_t i = 0; i < w.bytes; ++i) payload_[w.offset + i] = payload_[w.offset + i] != 0 ? 1 : 0;
    }
    net_.weights.push_back(std::move(w));
    const auto id = static_cast<int32_t>(net_.weights.size() - 1);
    weight_ids_.emplace(name, id);
    return id;
  }

  Status read_nodes(const Json& doc) {
    const auto it = doc.find("nodes");
    if (it == doc.end() || !it->is_array() || it->empty()) return bad("top level", "'nodes' must be a non-empty array");
    std::set<std::string> node_names;
    for (size_t i = 0; i < it->size(); ++i) {
      const Json& n = (*it)[i];
      std::string where = "nodes[" + std::to_string(i) + "]";
      GEARBOX_RETURN_IF_ERROR(only_keys(n, where, {"op", "name", "inputs", "outputs", "dtypes", "weights", "attrs"}));
      ir::Node node;
      Result<std::string> name = get_string(n, "name", where);
      if (!name.ok()) return name.status();
      where += " '" + *name + "'";
      if (!node_names.insert(*name).second) return bad(where, "node name used twice");
      node.name = *name;
      Result<std::string> op = get_string(n, "op", where);
      if (!op.ok()) return op.status();
      Result<OpKind> kind = parse_op(*op, where);
      if (!kind.ok()) return kind.status();
      node.kind = *kind;
      Result<ir::OpAttrs> attrs = parse_attrs(n, *kind, where);
      if (!attrs.ok()) return attrs.status();
      node.attrs = *attrs;
      Result<std::vector<std::string>> inputs = get_strings(n, "inputs", where);
      Result<std::vector<std::string>> outputs = get_strings(n, "outputs", where);
      Result<std::vector<std::string>> weights = get_strings(n, "weights", where, false);
      Result<std::vector<std::string>> dtypes = get_strings(n, "dtypes", where, false);
      for (const Status& st : {inputs.status(), outputs.status(), weights.status(), dtypes.status()}) {
        if (!st.ok()) return st;
      }
      if (n.contains("dtypes") && dtypes->size() != outputs->size()) {
        return bad(where, "'dtypes' has " + std::to_string(dtypes->size()) + " entries for " +
                              std::to_string(outputs->size()) + " outputs (one per output)");
      }
      for (const std::string& in : *inputs) {
        const auto t = tensors_.find(in);
        if (t == tensors_.end()) return bad(where, "reads tensor '" + in + "' before anything produces it");
        node.inputs.push_back(t->second);
      }
      for (const std::string& w : *weights) {
        Result<int32_t> id = weight(w, node.kind == OpKind::kConstant, where);
        if (!id.ok()) return id.status();
        node.weights.push_back(*id);
      }
      for (size_t o = 0; o < outputs->size(); ++o) {
        DataType dtype = DataType::kF32;
        if (!dtypes->empty()) {
          Result<DataType> parsed = parse_dtype((*dtypes)[o], where);
          if (!parsed.ok()) return parsed.status();
          dtype = *parsed;
        }
        Result<int32_t> t = new_tensor((*outputs)[o], dtype, where);
        if (!t.ok()) return t.status();
        node.outputs.push_back(*t);
      }
      net_.nodes.push_back(std::move(node));
    }
    return {};
  }

  const SafetensorsCheckpoint& weights_;
  ir::Network net_;
  std::vector<uint8_t> payload_;
  std::map<std::string, int32_t> tensors_;
  std::map<std::string, int32_t> weight_ids_;
};

}  // namespace

Result<DescribedModel> read_network_description(const std::string& json_text, const SafetensorsCheckpoint& weights) {
  // What the JSON library or an allocation may throw becomes a Status, as in every reader.
  try {
    bool too_deep = false;
    const Json doc = parse_json_bounded(json_text, too_deep);
    if (too_deep) return data_loss("network description: " + json_too_deep_message());
    if (doc.is_discarded()) return data_loss("network description: not valid JSON");
    return Reader(weights).read(doc);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("out of memory while reading the network description");
  } catch (const std::exception& e) {
    return data_loss(std::string("network description: ") + e.what());
  }
}

}  // namespace gearbox::models
