#include "models/hf_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <new>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "format/mapped_file.h"
#include "models/json_describe.h"

namespace gearbox::models {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

constexpr int64_t kMaxExtent = std::numeric_limits<int32_t>::max();  // kernels index with int32
constexpr int64_t kMaxLayers = 1 << 16;
constexpr int64_t kContextCap = 8192;
constexpr int64_t kContextWithoutConfig = 2048;

// Gemma3TextConfig's defaults (transformers 4.50+). They apply only inside a multimodal
// config's text_config: transformers writes a sub-config as its difference from these, so
// there a missing field means "this value". A gemma3_text config writes every field.
namespace text_defaults {
constexpr int64_t kVocab = 262208;
constexpr int64_t kHidden = 2304;
constexpr int64_t kIntermediate = 9216;
constexpr int64_t kLayers = 26;
constexpr int64_t kHeads = 8;
constexpr int64_t kKvHeads = 4;
constexpr int64_t kHeadDim = 256;
constexpr double kRmsNormEps = 1e-6;
constexpr double kRopeTheta = 1e6;
constexpr double kRopeLocalTheta = 1e4;
constexpr double kQueryPreAttnScalar = 256;
constexpr int64_t kSlidingWindow = 4096;
constexpr int64_t kSlidingWindowPattern = 6;
constexpr int64_t kMaxPositionEmbeddings = 131072;
constexpr int64_t kBos = 2;
constexpr int64_t kEos = 1;
}  // namespace text_defaults

bool read_int64(const Json& v, int64_t& out) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    out = static_cast<int64_t>(u);
    return true;
  }
  if (!v.is_number_integer()) return false;
  out = v.get<int64_t>();
  return true;
}

// A positive, finite float.
Status read_positive(const Json& v, const std::string& name, float& out) {
  if (v.is_number()) {
    const auto d = v.get<double>();
    if (std::isfinite(d) && d > 0 && d <= static_cast<double>(std::numeric_limits<float>::max())) {
      out = static_cast<float>(d);
      if (out > 0.0f) return {};
    }
  }
  return data_loss(name + " must be a positive number, got " + describe_json(v));
}

Status read_token_ids(const Json& v, const std::string& name, std::vector<int64_t>& out) {
  out.clear();
  const auto one = [&out](const Json& x) {
    int64_t id = 0;
    if (!read_int64(x, id) || id < 0) return false;
    out.push_back(id);
    return true;
  };
  bool ok = true;
  if (v.is_array()) {
    for (const Json& x : v) ok = ok && one(x);
  } else {
    ok = one(v);
  }
  if (!ok) return data_loss(name + " must be a token id or a list of token ids, got " + describe_json(v));
  return {};
}

// The fields of one JSON object, named `prefix` + key in messages. With `use_defaults`, a
// missing field takes Gemma3TextConfig's default instead of being an error.
class Fields {
 public:
  Fields(const Json& object, std::string prefix, bool use_defaults)
      : object_(object), prefix_(std::move(prefix)), use_defaults_(use_defaults) {}

  bool use_defaults() const { return use_defaults_; }
  std::string name(std::string_view key) const { return prefix_ + std::string(key); }

  /// The value of `key`; nullptr when absent or null.
  const Json* find(const char* key) const {
    const auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  Status integer(const char* key, int64_t min, int64_t max, int64_t fallback, int64_t& out) const {
    const Json* v = find(key);
    if (v == nullptr) {
      if (!use_defaults_) return data_loss(name(key) + " is missing");
      out = fallback;
      return {};
    }
    if (!read_int64(*v, out)) return data_loss(name(key) + " must be an integer, got " + describe_json(*v));
    if (out < min || out > max) {
      return data_loss(name(key) + " is " + std::to_string(out) + ", outside [" + std::to_string(min) + ", " +
                       std::to_string(max) + "]");
    }
    return {};
  }

  Status positive(const char* key, double fallback, float& out) const {
    const Json* v = find(key);
    if (v == nullptr) {
      if (!use_defaults_) return data_loss(name(key) + " is missing");
      out = static_cast<float>(fallback);
      return {};
    }
    return read_positive(*v, name(key), out);
  }

  Status boolean(const char* key, bool& out) const {  // leaves `out` alone when absent
    const Json* v = find(key);
    if (v == nullptr) return {};
    if (!v->is_boolean()) return data_loss(name(key) + " must be true or false, got " + describe_json(*v));
    out = v->get<bool>();
    return {};
  }

 private:
  const Json& object_;
  std::string prefix_;
  bool use_defaults_;
};

Status read_sizes(const Fields& f, Gemma3Config& c) {
  namespace d = text_defaults;
  GEARBOX_RETURN_IF_ERROR(f.integer("vocab_size", 1, kMaxExtent, d::kVocab, c.vocab));
  GEARBOX_RETURN_IF_ERROR(f.integer("hidden_size", 1, kMaxExtent, d::kHidden, c.hidden));
  GEARBOX_RETURN_IF_ERROR(f.integer("intermediate_size", 1, kMaxExtent, d::kIntermediate, c.intermediate));
  GEARBOX_RETURN_IF_ERROR(f.integer("num_hidden_layers", 1, kMaxLayers, d::kLayers, c.layers));
  GEARBOX_RETURN_IF_ERROR(f.integer("num_attention_heads", 1, kMaxExtent, d::kHeads, c.heads));
  GEARBOX_RETURN_IF_ERROR(f.integer("num_key_value_heads", 1, kMaxExtent, d::kKvHeads, c.kv_heads));
  GEARBOX_RETURN_IF_ERROR(f.integer("head_dim", 1, kMaxExtent, d::kHeadDim, c.head_dim));
  GEARBOX_RETURN_IF_ERROR(f.integer("sliding_window", 1, kMaxExtent, d::kSlidingWindow, c.sliding_window));
  GEARBOX_RETURN_IF_ERROR(f.positive("rms_norm_eps", d::kRmsNormEps, c.rms_norm_eps));
  GEARBOX_RETURN_IF_ERROR(f.positive("query_pre_attn_scalar", d::kQueryPreAttnScalar, c.query_pre_attn_scalar));
  const Json* mpe = f.find("max_position_embeddings");
  if (mpe != nullptr || f.use_defaults()) {
    int64_t positions = 0;
    GEARBOX_RETURN_IF_ERROR(f.integer("max_position_embeddings", 1, std::numeric_limits<int64_t>::max(),
                                      d::kMaxPositionEmbeddings, positions));
    c.max_context = std::min(positions, kContextCap);
  } else {
    c.max_context = kContextWithoutConfig;
  }
  return {};
}

Status check_unsupported(const Fields& f) {
  const Json* act = f.find("hidden_activation");
  const char* act_key = "hidden_activation";
  if (act == nullptr) {
    act = f.find("hidden_act");
    act_key = "hidden_act";
  }
  if (act != nullptr && !(act->is_string() && *act->get_ptr<const std::string*>() == "gelu_pytorch_tanh")) {
    return unimplemented(f.name(act_key) + " " + describe_json(*act) +
                         " is not supported; Gemma-3 uses gelu_pytorch_tanh");
  }
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"}) {
    const Json* cap = f.find(key);
    if (cap != nullptr) return unimplemented(f.name(key) + " " + describe_json(*cap) + " is not supported");
  }
  // Gemma-3 projections have no bias; a checkpoint that says otherwise would load wrong.
  const Json* bias = f.find("attention_bias");
  if (bias != nullptr && !(bias->is_boolean() && !bias->get<bool>())) {
    return unimplemented(f.name("attention_bias") + " " + describe_json(*bias) +
                         " is not supported (no projection biases)");
  }
  return {};
}

// One RoPE description: {"rope_type" (or "type"): "default" | "linear", "factor", "rope_theta"}.
struct RopeEntry {
  float factor = 1.0f;
  const Json* theta = nullptr;  // absent or null: take it from elsewhere
};

Status read_rope_entry(const Json& entry, const std::string& name, RopeEntry& out) {
  if (!entry.is_object()) return data_loss(name + " must be a JSON object, got " + describe_json(entry));
  std::string type = "default";
  auto type_it = entry.find("rope_type");
  if (type_it == entry.end() || type_it->is_null()) type_it = entry.find("type");
  if (type_it != entry.end() && !type_it->is_null()) {
    if (!type_it->is_string()) return data_loss(name + ".rope_type must be a string, got " + describe_json(*type_it));
    type = *type_it->get_ptr<const std::string*>();
  }
  if (type == "linear") {
    const auto factor = entry.find("factor");
    if (factor == entry.end() || factor->is_null()) return data_loss(name + ".factor is missing for linear RoPE");
    GEARBOX_RETURN_IF_ERROR(read_positive(*factor, name + ".factor", out.factor));
  } else if (type != "default") {
    return unimplemented(name + " rope type " + describe_json(Json(type)) +
                         " is not supported; gearbox supports default and linear");
  }
  const auto theta = entry.find("rope_theta");
  if (theta != entry.end() && !theta->is_null()) out.theta = &*theta;
  return {};
}

Status read_rope(const Fields& f, Gemma3Config& c) {
  RopeEntry global;
  RopeEntry local;
  std::string global_name;
  std::string local_name;
  if (const Json* params = f.find("rope_parameters"); params != nullptr) {
    if (!params->is_object()) return data_loss(f.name("rope_parameters") + " must be a JSON object");
    if (params->contains("full_attention") || params->contains("sliding_attention")) {  // per layer type (5.x)
      for (const char* type : {"full_attention", "sliding_attention"}) {
        const auto it = params->find(type);
        if (it == params->end() || it->is_null()) continue;
        RopeEntry& e = std::string_view(type) == "full_attention" ? global : local;
        std::string& e_name = std::string_view(type) == "full_attention" ? global_name : local_name;
        e_name = f.name("rope_parameters.") + type;
        GEARBOX_RETURN_IF_ERROR(read_rope_entry(*it, e_name, e));
      }
      if (local.factor != 1.0f) {
        return unimplemented(local_name + ": RoPE scaling on sliding layers is not supported");
      }
    } else {  // one description for the global layers
      global_name = f.name("rope_parameters");
      GEARBOX_RETURN_IF_ERROR(read_rope_entry(*params, global_name, global));
    }
  } else if (const Json* scaling = f.find("rope_scaling"); scaling != nullptr) {  // 4.x: global layers only
    GEARBOX_RETURN_IF_ERROR(read_rope_entry(*scaling, f.name("rope_scaling"), global));
    global.theta = nullptr;  // rope_theta is its own field in 4.x
  }
  c.rope_linear_factor_global = global.factor;
  if (global.theta != nullptr) {
    GEARBOX_RETURN_IF_ERROR(read_positive(*global.theta, global_name + ".rope_theta", c.rope_theta_global));
  } else {
    GEARBOX_RETURN_IF_ERROR(f.positive("rope_theta", text_defaults::kRopeTheta, c.rope_theta_global));
  }
  if (local.theta != nullptr) {
    GEARBOX_RETURN_IF_ERROR(read_positive(*local.theta, local_name + ".rope_theta", c.rope_theta_local));
  } else {
    GEARBOX_RETURN_IF_ERROR(f.positive("rope_local_base_freq", text_defaults::kRopeLocalTheta, c.rope_theta_local));
  }
  return {};
}

Status read_layer_types(const Fields& f, Gemma3Config& c) {
  const auto layers = static_cast<size_t>(c.layers);
  c.layer_is_sliding.clear();
  if (const Json* types = f.find("layer_types"); types != nullptr) {
    if (!types->is_array()) return data_loss(f.name("layer_types") + " must be a list, got " + describe_json(*types));
    if (types->size() != layers) {
      return data_loss(f.name("layer_types") + " has " + std::to_string(types->size()) + " entries for " +
                       std::to_string(layers) + " layers (num_hidden_layers)");
    }
    for (size_t i = 0; i < layers; ++i) {
      const Json& t = (*types)[i];
      const std::string name = f.name("layer_types") + "[" + std::to_string(i) + "]";
      if (!t.is_string()) return data_loss(name + " must be a string, got " + describe_json(t));
      const std::string& type = *t.get_ptr<const std::string*>();
      if (type != "sliding_attention" && type != "full_attention") {
        return unimplemented(name + " " + describe_json(t) +
                             " is not supported; use sliding_attention or full_attention");
      }
      c.layer_is_sliding.push_back(type == "sliding_attention");
    }
    return {};
  }
  if (f.find("sliding_window_pattern") == nullptr && !f.use_defaults()) {
    return data_loss(f.name("layer_types") + " and " + f.name("sliding_window_pattern") + " are both missing");
  }
  int64_t pattern = 0;
  GEARBOX_RETURN_IF_ERROR(
      f.integer("sliding_window_pattern", 1, kMaxLayers, text_defaults::kSlidingWindowPattern, pattern));
  for (size_t i = 0; i < layers; ++i) c.layer_is_sliding.push_back((static_cast<int64_t>(i) + 1) % pattern != 0);
  return {};
}

// `dtype` (transformers >= 4.56) or `torch_dtype`; absent leaves `out` alone.
Status read_dtype(const Fields& f, DataType& out) {
  for (const char* key : {"torch_dtype", "dtype"}) {  // the newer name wins
    const Json* v = f.find(key);
    if (v == nullptr) continue;
    if (!v->is_string()) return data_loss(f.name(key) + " must be a string, got " + describe_json(*v));
    const std::string& s = *v->get_ptr<const std::string*>();
    if (s == "float32") {
      out = DataType::kF32;
    } else if (s == "bfloat16") {
      out = DataType::kBF16;
    } else if (s == "float16") {
      out = DataType::kF16;
    } else {
      return unimplemented(f.name(key) + " " + describe_json(*v) +
                           " is not supported; use float32, bfloat16 or float16");
    }
  }
  return {};
}

// bos_token_id / eos_token_id of one object; absent leaves the outputs alone.
Status read_tokens(const Fields& f, int64_t& bos, std::vector<int64_t>& eos) {
  if (const Json* v = f.find("bos_token_id"); v != nullptr) {
    if (!read_int64(*v, bos) || bos < 0) {
      return data_loss(f.name("bos_token_id") + " must be a token id, got " + describe_json(*v));
    }
  }
  if (const Json* v = f.find("eos_token_id"); v != nullptr) {
    GEARBOX_RETURN_IF_ERROR(read_token_ids(*v, f.name("eos_token_id"), eos));
  }
  return {};
}

Result<HfModelInfo> parse_config(std::string_view json_text) {
  const Json root = Json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return data_loss("config is not valid JSON");
  if (!root.is_object()) return data_loss("config is not a JSON object");
  const Fields top(root, "", /*use_defaults=*/false);
  const Json* model_type = top.find("model_type");
  if (model_type == nullptr) return data_loss("model_type is missing");
  if (!model_type->is_string()) return data_loss("model_type must be a string, got " + describe_json(*model_type));

  const Json* text = &root;
  const bool multimodal = *model_type->get_ptr<const std::string*>() == "gemma3";
  if (multimodal) {
    text = top.find("text_config");
    if (text == nullptr) return data_loss("text_config is missing from a gemma3 config");
    if (!text->is_object()) return data_loss("text_config must be a JSON object, got " + describe_json(*text));
  } else if (*model_type->get_ptr<const std::string*>() != "gemma3_text") {
    return unimplemented("model_type " + describe_json(*model_type) +
                         " is not supported; gearbox reads gemma3_text and gemma3 configs");
  }
  const Fields f(*text, multimodal ? "text_config." : "", /*use_defaults=*/multimodal);

  HfModelInfo info;
  Gemma3Config& c = info.config;
  GEARBOX_RETURN_IF_ERROR(read_sizes(f, c));
  GEARBOX_RETURN_IF_ERROR(check_unsupported(f));
  GEARBOX_RETURN_IF_ERROR(read_rope(f, c));
  GEARBOX_RETURN_IF_ERROR(read_layer_types(f, c));

  c.tie_embeddings = true;
  if (multimodal) GEARBOX_RETURN_IF_ERROR(top.boolean("tie_word_embeddings", c.tie_embeddings));
  GEARBOX_RETURN_IF_ERROR(f.boolean("tie_word_embeddings", c.tie_embeddings));  // the text model's own wins

  // The text config first, then (multimodal) the top level, which transformers consults.
  if (multimodal) {
    info.bos_token_id = text_defaults::kBos;
    info.eos_token_ids = {text_defaults::kEos};
  }
  GEARBOX_RETURN_IF_ERROR(read_dtype(f, info.checkpoint_dtype));
  GEARBOX_RETURN_IF_ERROR(read_tokens(f, info.bos_token_id, info.eos_token_ids));
  if (multimodal) {
    GEARBOX_RETURN_IF_ERROR(read_dtype(top, info.checkpoint_dtype));
    GEARBOX_RETURN_IF_ERROR(read_tokens(top, info.bos_token_id, info.eos_token_ids));
  }
  c.dtype = info.checkpoint_dtype;
  GEARBOX_RETURN_IF_ERROR(validate_config(c));
  return info;
}

Status merge_generation_config(std::string_view json_text, HfModelInfo& info) {
  const Json root = Json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return data_loss("not valid JSON");
  if (!root.is_object()) return data_loss("not a JSON object");
  std::vector<int64_t> eos;
  GEARBOX_RETURN_IF_ERROR(read_tokens(Fields(root, "", false), info.bos_token_id, eos));
  for (const int64_t id : eos) {
    if (std::find(info.eos_token_ids.begin(), info.eos_token_ids.end(), id) == info.eos_token_ids.end()) {
      info.eos_token_ids.push_back(id);
    }
  }
  return {};
}

std::string_view as_text(std::span<const uint8_t> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

}  // namespace

Result<HfModelInfo> parse_gemma3_config(std::string_view json_text) {
  try {
    return parse_config(json_text);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("out of memory while reading the config");
  } catch (const std::exception& e) {
    return internal_error(std::string("reading the config: ") + e.what());
  }
}

Result<HfModelInfo> read_gemma3_config(const std::string& checkpoint_dir) {
  try {
    const fs::path config_path = fs::path(checkpoint_dir) / "config.json";
    Result<format::MappedFile> config_file = format::MappedFile::open(config_path.string());
    if (!config_file.ok()) return config_file.status();
    Result<HfModelInfo> info = parse_config(as_text(config_file->bytes()));
    if (!info.ok()) return info.status().with_context(config_path.string());

    const fs::path generation_path = fs::path(checkpoint_dir) / "generation_config.json";
    std::error_code ec;
    if (fs::exists(generation_path, ec)) {
      Result<format::MappedFile> generation_file = format::MappedFile::open(generation_path.string());
      if (!generation_file.ok()) return generation_file.status();
      GEARBOX_RETURN_IF_ERROR(
          merge_generation_config(as_text(generation_file->bytes()), *info).with_context(generation_path.string()));
    }
    return info;
  } catch (const std::bad_alloc&) {
    return resource_exhausted("out of memory while reading the config in " + checkpoint_dir);
  } catch (const std::exception& e) {
    return internal_error("reading the config in " + checkpoint_dir + ": " + e.what());
  }
}

Result<std::string> detect_weight_prefix(const SafetensorsCheckpoint& checkpoint) {
  for (const char* prefix : {"model.", "language_model.model.", "model.language_model."}) {
    if (checkpoint.find(std::string(prefix) + "embed_tokens.weight") != nullptr) return std::string(prefix);
  }
  return not_found(
      "checkpoint has no embed_tokens.weight under 'model.', 'language_model.model.' or 'model.language_model.'");
}

}  // namespace gearbox::models
