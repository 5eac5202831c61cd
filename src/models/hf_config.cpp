#include "models/hf_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <new>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/bounded_json.h"
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
constexpr double kDefaultRopeTheta = 10000.0;  // transformers' default_theta

enum class Family { kGemma3, kLlama, kMistral, kQwen2, kQwen3 };

const char* family_name(Family f) {
  switch (f) {
    case Family::kGemma3: return "gemma3";
    case Family::kLlama: return "llama";
    case Family::kMistral: return "mistral";
    case Family::kQwen2: return "qwen2";
    case Family::kQwen3: return "qwen3";
  }
  return "";
}

// Gemma3TextConfig's defaults (transformers 4.50+). They apply only inside a multimodal
// config's text_config: transformers writes a sub-config as its difference from these, so
// there a missing field means "this value". A gemma3_text config writes every field.
namespace gemma_defaults {
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
}  // namespace gemma_defaults

// Qwen2Config's and Qwen3Config's defaults where their configs may leave a field out.
constexpr int64_t kQwenMaxWindowLayers = 28;
constexpr int64_t kQwen3HeadDim = 128;

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

bool is_string(const Json& v, std::string_view s) { return v.is_string() && *v.get_ptr<const std::string*>() == s; }

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

  /// A missing field is an error unless use_defaults(), when it is `fallback`.
  Status integer(const char* key, int64_t min, int64_t max, int64_t fallback, int64_t& out) const {
    if (find(key) == nullptr && !use_defaults_) return data_loss(name(key) + " is missing");
    return integer_or(key, min, max, fallback, out);
  }

  /// A missing field is `fallback`.
  Status integer_or(const char* key, int64_t min, int64_t max, int64_t fallback, int64_t& out) const {
    const Json* v = find(key);
    if (v == nullptr) {
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

  /// A missing field is an error unless use_defaults(), when it is `fallback`.
  Status positive(const char* key, double fallback, float& out) const {
    if (find(key) == nullptr && !use_defaults_) return data_loss(name(key) + " is missing");
    return positive_or(key, fallback, out);
  }

  /// A missing field is `fallback`.
  Status positive_or(const char* key, double fallback, float& out) const {
    const Json* v = find(key);
    if (v == nullptr) {
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

// ---- sizes, activation, biases ----------------------------------------------------------------

Status read_sizes(const Fields& f, Family family, DecoderDescription& d, int64_t& layers) {
  namespace g = gemma_defaults;
  GEARBOX_RETURN_IF_ERROR(f.integer("vocab_size", 1, kMaxExtent, g::kVocab, d.vocab));
  GEARBOX_RETURN_IF_ERROR(f.integer("hidden_size", 1, kMaxExtent, g::kHidden, d.hidden));
  GEARBOX_RETURN_IF_ERROR(f.integer("intermediate_size", 1, kMaxExtent, g::kIntermediate, d.intermediate));
  GEARBOX_RETURN_IF_ERROR(f.integer("num_hidden_layers", 1, kMaxLayers, g::kLayers, layers));
  GEARBOX_RETURN_IF_ERROR(f.integer("num_attention_heads", 1, kMaxExtent, g::kHeads, d.heads));
  GEARBOX_RETURN_IF_ERROR(f.positive("rms_norm_eps", g::kRmsNormEps, d.rms_norm_eps));
  if (family == Family::kGemma3) {
    GEARBOX_RETURN_IF_ERROR(f.integer("num_key_value_heads", 1, kMaxExtent, g::kKvHeads, d.kv_heads));
    GEARBOX_RETURN_IF_ERROR(f.integer("head_dim", 1, kMaxExtent, g::kHeadDim, d.head_dim));
    GEARBOX_RETURN_IF_ERROR(f.positive("query_pre_attn_scalar", g::kQueryPreAttnScalar, d.query_pre_attn_scalar));
  } else {
    GEARBOX_RETURN_IF_ERROR(f.integer_or("num_key_value_heads", 1, kMaxExtent, d.heads, d.kv_heads));
    if (family == Family::kQwen3) {
      GEARBOX_RETURN_IF_ERROR(f.integer_or("head_dim", 1, kMaxExtent, kQwen3HeadDim, d.head_dim));
    } else if (f.find("head_dim") != nullptr) {
      GEARBOX_RETURN_IF_ERROR(f.integer_or("head_dim", 1, kMaxExtent, 0, d.head_dim));
    } else if (d.hidden % d.heads != 0) {
      return data_loss(f.name("head_dim") + " is missing and " + f.name("hidden_size") + " " +
                       std::to_string(d.hidden) + " is not a multiple of " + f.name("num_attention_heads") + " " +
                       std::to_string(d.heads));
    } else {
      d.head_dim = d.hidden / d.heads;
    }
    d.query_pre_attn_scalar = static_cast<float>(d.head_dim);
  }
  const Json* mpe = f.find("max_position_embeddings");
  if (mpe != nullptr || f.use_defaults()) {
    int64_t positions = 0;
    GEARBOX_RETURN_IF_ERROR(f.integer("max_position_embeddings", 1, std::numeric_limits<int64_t>::max(),
                                      g::kMaxPositionEmbeddings, positions));
    d.max_context = std::min(positions, kContextCap);
  } else {
    d.max_context = kContextWithoutConfig;
  }
  return {};
}

Status read_activation(const Fields& f, Family family, DecoderDescription& d) {
  // Gemma-3 reads hidden_activation; the others hidden_act.
  const char* key =
      family == Family::kGemma3 && f.find("hidden_activation") != nullptr ? "hidden_activation" : "hidden_act";
  const Json* act = f.find(key);
  if (act == nullptr) {
    d.activation = family == Family::kGemma3 ? GatedActivation::kGeluTanh : GatedActivation::kSilu;
  } else if (is_string(*act, "gelu_pytorch_tanh")) {
    d.activation = GatedActivation::kGeluTanh;
  } else if (is_string(*act, "silu")) {
    d.activation = GatedActivation::kSilu;
  } else {
    return unimplemented(f.name(key) + " " + describe_json(*act) +
                         " is not supported; gearbox supports silu and gelu_pytorch_tanh");
  }
  return {};
}

// Fields that change the math in a way gearbox does not implement.
Status check_unsupported(const Fields& f, Family family) {
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"}) {
    const Json* cap = f.find(key);
    if (cap != nullptr) return unimplemented(f.name(key) + " " + describe_json(*cap) + " is not supported");
  }
  if (const Json* v = f.find("partial_rotary_factor"); v != nullptr && !(v->is_number() && v->get<double>() == 1.0)) {
    return unimplemented(f.name("partial_rotary_factor") + " " + describe_json(*v) +
                         " is not supported (RoPE over the whole head_dim only)");
  }
  if (const Json* v = f.find("use_bidirectional_attention"); v != nullptr && !(v->is_boolean() && !v->get<bool>())) {
    return unimplemented(f.name("use_bidirectional_attention") + " " + describe_json(*v) +
                         " is not supported (causal attention only)");
  }
  if (family != Family::kLlama) {
    if (const Json* v = f.find("mlp_bias"); v != nullptr && !(v->is_boolean() && !v->get<bool>())) {
      return unimplemented(f.name("mlp_bias") + " " + describe_json(*v) + " is not supported for " +
                           family_name(family) + " (its MLP has no biases)");
    }
  }
  return {};
}

Status read_biases(const Fields& f, Family family, DecoderDescription& d) {
  const Json* attention = f.find("attention_bias");
  switch (family) {
    case Family::kLlama:
      GEARBOX_RETURN_IF_ERROR(f.boolean("attention_bias", d.qkv_bias));
      d.o_bias = d.qkv_bias;
      return f.boolean("mlp_bias", d.mlp_bias);
    case Family::kQwen3:
      GEARBOX_RETURN_IF_ERROR(f.boolean("attention_bias", d.qkv_bias));
      d.o_bias = d.qkv_bias;
      return {};
    case Family::kQwen2:
      // q, k and v always have biases and o never; a config that says otherwise would load wrong.
      d.qkv_bias = true;
      if (attention != nullptr) {
        return unimplemented(f.name("attention_bias") + " " + describe_json(*attention) +
                             " is not supported for qwen2 (q, k and v always have biases, o_proj none)");
      }
      return {};
    case Family::kGemma3:
    case Family::kMistral:
      if (attention != nullptr && !(attention->is_boolean() && !attention->get<bool>())) {
        return unimplemented(f.name("attention_bias") + " " + describe_json(*attention) + " is not supported for " +
                             family_name(family) + " (no projection biases)");
      }
      return {};
  }
  return {};
}

// ---- RoPE -------------------------------------------------------------------------------------

// A config's RoPE before thetas are settled: the entry's own rope_theta, if any.
struct RopeEntry {
  RopeDescription rope;
  const Json* theta = nullptr;  // absent or null: take it from elsewhere
};

// {"rope_type" (or "type"): "default" | "linear" | "llama3", "factor", "rope_theta",
//  "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}.
// `original_context` is used by llama3 when the entry has no original_max_position_embeddings.
Status read_rope_entry(const Json& entry, const std::string& name, int64_t original_context, RopeEntry& out) {
  if (!entry.is_object()) return data_loss(name + " must be a JSON object, got " + describe_json(entry));
  auto field = [&](const char* key) -> const Json* {
    const auto it = entry.find(key);
    return it == entry.end() || it->is_null() ? nullptr : &*it;
  };
  std::string type = "default";
  const char* type_key = field("rope_type") != nullptr ? "rope_type" : "type";
  if (const Json* t = field(type_key); t != nullptr) {
    if (!t->is_string()) return data_loss(name + "." + type_key + " must be a string, got " + describe_json(*t));
    type = *t->get_ptr<const std::string*>();
  }
  auto positive = [&](const char* key, float& value) -> Status {
    const Json* v = field(key);
    if (v == nullptr) return data_loss(name + "." + key + " is missing for " + type + " RoPE");
    return read_positive(*v, name + "." + key, value);
  };
  RopeDescription& r = out.rope;
  if (type == "linear") {
    r.scaling = RopeScaling::kLinear;
    GEARBOX_RETURN_IF_ERROR(positive("factor", r.factor));
  } else if (type == "llama3") {
    r.scaling = RopeScaling::kLlama3;
    GEARBOX_RETURN_IF_ERROR(positive("factor", r.factor));
    GEARBOX_RETURN_IF_ERROR(positive("low_freq_factor", r.low_freq_factor));
    GEARBOX_RETURN_IF_ERROR(positive("high_freq_factor", r.high_freq_factor));
    r.original_max_positions = original_context;
    if (const Json* v = field("original_max_position_embeddings"); v != nullptr) {
      if (!read_int64(*v, r.original_max_positions) || r.original_max_positions < 1) {
        return data_loss(name + ".original_max_position_embeddings must be a positive integer, got " +
                         describe_json(*v));
      }
    }
    if (r.original_max_positions < 1) {
      return data_loss(name + ".original_max_position_embeddings is missing for llama3 RoPE");
    }
  } else if (type != "default") {
    return unimplemented(name + "." + type_key + " " + describe_json(Json(type)) +
                         " is not supported; gearbox supports default, linear and llama3");
  }
  if (const Json* v = field("partial_rotary_factor"); v != nullptr && !(v->is_number() && v->get<double>() == 1.0)) {
    return unimplemented(name + ".partial_rotary_factor " + describe_json(*v) +
                         " is not supported (RoPE over the whole head_dim only)");
  }
  out.theta = field("rope_theta");
  return {};
}

// The RoPE of full-attention and of sliding layers.
struct LayerRopes {
  RopeEntry full;
  RopeEntry sliding;
  std::string full_name;        // where full's came from, for messages
  std::string sliding_name;     // empty: no entry for sliding layers
  bool per_layer_type = false;  // rope_parameters by layer type
};

// llama3's pretraining context when its entry does not say: the config's
// original_max_position_embeddings, else max_position_embeddings (as transformers does).
Status original_context(const Fields& f, int64_t& out) {
  out = 0;
  for (const char* key : {"original_max_position_embeddings", "max_position_embeddings"}) {
    if (f.find(key) == nullptr) continue;
    return f.integer_or(key, 1, std::numeric_limits<int64_t>::max(), 0, out);
  }
  return {};
}

Status read_rope(const Fields& f, Family family, LayerRopes& out) {
  int64_t original = 0;
  GEARBOX_RETURN_IF_ERROR(original_context(f, original));
  // transformers 5 takes a non-null rope_scaling over rope_parameters; 4.x wrote only it.
  const Json* scaling = f.find("rope_scaling");
  const Json* params = scaling == nullptr ? f.find("rope_parameters") : nullptr;
  if (params != nullptr && params->is_object() &&
      (params->contains("full_attention") || params->contains("sliding_attention"))) {  // per layer type (5.x)
    out.per_layer_type = true;
    for (const char* type : {"full_attention", "sliding_attention"}) {
      const auto it = params->find(type);
      if (it == params->end() || it->is_null()) continue;
      const bool full = std::string_view(type) == "full_attention";
      std::string& name = full ? out.full_name : out.sliding_name;
      name = f.name("rope_parameters.") + type;
      GEARBOX_RETURN_IF_ERROR(read_rope_entry(*it, name, original, full ? out.full : out.sliding));
    }
  } else if (params != nullptr || scaling != nullptr) {
    // One description: Gemma's full-attention layers (its sliding layers keep the default
    // with rope_local_base_freq), every layer of the other families.
    out.full_name = f.name(params != nullptr ? "rope_parameters" : "rope_scaling");
    GEARBOX_RETURN_IF_ERROR(read_rope_entry(params != nullptr ? *params : *scaling, out.full_name, original, out.full));
    if (scaling != nullptr) out.full.theta = nullptr;  // 4.x: rope_theta is its own field
    if (family != Family::kGemma3) {
      out.sliding = out.full;
      out.sliding_name = out.full_name;
    }
  }
  // Thetas the entries leave out.
  const bool gemma = family == Family::kGemma3;
  if (out.full.theta != nullptr) {
    GEARBOX_RETURN_IF_ERROR(read_positive(*out.full.theta, out.full_name + ".rope_theta", out.full.rope.theta));
  } else if (gemma) {
    GEARBOX_RETURN_IF_ERROR(f.positive("rope_theta", gemma_defaults::kRopeTheta, out.full.rope.theta));
  } else {
    GEARBOX_RETURN_IF_ERROR(f.positive_or("rope_theta", kDefaultRopeTheta, out.full.rope.theta));
  }
  if (out.sliding.theta != nullptr) {
    GEARBOX_RETURN_IF_ERROR(
        read_positive(*out.sliding.theta, out.sliding_name + ".rope_theta", out.sliding.rope.theta));
  } else if (gemma) {
    GEARBOX_RETURN_IF_ERROR(
        f.positive("rope_local_base_freq", gemma_defaults::kRopeLocalTheta, out.sliding.rope.theta));
  } else {
    GEARBOX_RETURN_IF_ERROR(f.positive_or("rope_theta", kDefaultRopeTheta, out.sliding.rope.theta));
  }
  return {};
}

// ---- layer kinds and windows --------------------------------------------------------------------

// `layer_types` into one sliding flag per layer.
Status read_layer_types(const Fields& f, const Json& types, size_t layers, std::vector<bool>& sliding) {
  if (!types.is_array()) return data_loss(f.name("layer_types") + " must be a list, got " + describe_json(types));
  if (types.size() != layers) {
    return data_loss(f.name("layer_types") + " has " + std::to_string(types.size()) + " entries for " +
                     std::to_string(layers) + " layers (num_hidden_layers)");
  }
  for (size_t i = 0; i < layers; ++i) {
    const Json& t = types[i];
    const std::string name = f.name("layer_types") + "[" + std::to_string(i) + "]";
    if (!t.is_string()) return data_loss(name + " must be a string, got " + describe_json(t));
    if (!is_string(t, "sliding_attention") && !is_string(t, "full_attention")) {
      return unimplemented(name + " " + describe_json(t) +
                           " is not supported; use sliding_attention or full_attention");
    }
    sliding.push_back(is_string(t, "sliding_attention"));
  }
  return {};
}

// One sliding flag per layer, and the window of sliding layers.
Status read_windows(const Fields& f, Family family, size_t layers, std::vector<bool>& sliding, int64_t& window) {
  const Json* types = f.find("layer_types");
  switch (family) {
    case Family::kGemma3: {
      GEARBOX_RETURN_IF_ERROR(f.integer("sliding_window", 1, kMaxExtent, gemma_defaults::kSlidingWindow, window));
      if (types != nullptr) return read_layer_types(f, *types, layers, sliding);
      if (f.find("sliding_window_pattern") == nullptr && !f.use_defaults()) {
        return data_loss(f.name("layer_types") + " and " + f.name("sliding_window_pattern") + " are both missing");
      }
      int64_t pattern = 0;
      GEARBOX_RETURN_IF_ERROR(
          f.integer("sliding_window_pattern", 1, kMaxLayers, gemma_defaults::kSlidingWindowPattern, pattern));
      for (size_t i = 0; i < layers; ++i) sliding.push_back((static_cast<int64_t>(i) + 1) % pattern != 0);
      return {};
    }
    case Family::kLlama:
    case Family::kMistral: {
      if (types != nullptr) {
        return unimplemented(f.name("layer_types") + " is not supported for " + family_name(family) +
                             " (every layer attends alike)");
      }
      const bool windowed = family == Family::kMistral && f.find("sliding_window") != nullptr;
      if (family == Family::kLlama && f.find("sliding_window") != nullptr) {
        return unimplemented(f.name("sliding_window") + " " + describe_json(*f.find("sliding_window")) +
                             " is not supported for llama (no sliding windows)");
      }
      if (windowed) GEARBOX_RETURN_IF_ERROR(f.integer_or("sliding_window", 1, kMaxExtent, 0, window));
      sliding.assign(layers, windowed);
      return {};
    }
    case Family::kQwen2:
    case Family::kQwen3: {
      // transformers drops sliding_window unless use_sliding_window; the layers from
      // max_window_layers on slide unless layer_types says which.
      bool use = false;
      GEARBOX_RETURN_IF_ERROR(f.boolean("use_sliding_window", use));
      const bool windowed = use && f.find("sliding_window") != nullptr;
      if (windowed) GEARBOX_RETURN_IF_ERROR(f.integer_or("sliding_window", 1, kMaxExtent, 0, window));
      if (types != nullptr) {
        GEARBOX_RETURN_IF_ERROR(read_layer_types(f, *types, layers, sliding));
        const auto first = std::find(sliding.begin(), sliding.end(), true);
        if (first != sliding.end() && !windowed) {
          return data_loss(f.name("layer_types") + "[" + std::to_string(first - sliding.begin()) +
                           "] is sliding_attention, but " + f.name("sliding_window") +
                           " is null or use_sliding_window false");
        }
        return {};
      }
      int64_t full_layers = 0;
      GEARBOX_RETURN_IF_ERROR(f.integer_or("max_window_layers", 0, kMaxLayers, kQwenMaxWindowLayers, full_layers));
      for (size_t i = 0; i < layers; ++i) sliding.push_back(windowed && static_cast<int64_t>(i) >= full_layers);
      return {};
    }
  }
  return {};
}

// ---- dtype and tokens ---------------------------------------------------------------------------

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

// ---- the whole config ---------------------------------------------------------------------------

const char* const kModelTypes = "gemma3, gemma3_text, llama, mistral, qwen2 and qwen3";

Result<Json> parse_json(std::string_view json_text) {
  bool too_deep = false;
  Json root = parse_json_bounded(json_text, too_deep);
  if (too_deep) return data_loss("config: " + json_too_deep_message());
  if (root.is_discarded()) return data_loss("config is not valid JSON");
  if (!root.is_object()) return data_loss("config is not a JSON object");
  return root;
}

Result<std::string> model_type(const Json& root) {
  const Fields top(root, "", /*use_defaults=*/false);
  const Json* type = top.find("model_type");
  if (type == nullptr) return data_loss("model_type is missing");
  if (!type->is_string()) return data_loss("model_type must be a string, got " + describe_json(*type));
  return *type->get_ptr<const std::string*>();
}

Result<HfDecoderConfig> parse_root(const Json& root) {
  Result<std::string> type = model_type(root);
  if (!type.ok()) return type.status();
  Family family;
  if (*type == "gemma3" || *type == "gemma3_text") {
    family = Family::kGemma3;
  } else if (*type == "llama") {
    family = Family::kLlama;
  } else if (*type == "mistral") {
    family = Family::kMistral;
  } else if (*type == "qwen2") {
    family = Family::kQwen2;
  } else if (*type == "qwen3") {
    family = Family::kQwen3;
  } else {
    return unimplemented("model_type " + describe_json(Json(*type)) + " is not supported; gearbox reads " +
                         kModelTypes + " configs");
  }
  const Fields top(root, "", /*use_defaults=*/false);
  const Json* text = &root;
  const bool multimodal = *type == "gemma3";
  if (multimodal) {
    text = top.find("text_config");
    if (text == nullptr) return data_loss("text_config is missing from a gemma3 config");
    if (!text->is_object()) return data_loss("text_config must be a JSON object, got " + describe_json(*text));
  }
  const Fields f(*text, multimodal ? "text_config." : "", /*use_defaults=*/multimodal);

  HfDecoderConfig out;
  DecoderDescription& d = out.description;
  d.family = family_name(family);
  int64_t layers = 0;
  GEARBOX_RETURN_IF_ERROR(read_sizes(f, family, d, layers));
  // read_sizes checked it (a positive integer) when present.
  if (const Json* positions = f.find("max_position_embeddings"); positions != nullptr) {
    if (!read_int64(*positions, out.max_position_embeddings)) out.max_position_embeddings = -1;
  } else if (f.use_defaults()) {
    out.max_position_embeddings = gemma_defaults::kMaxPositionEmbeddings;
  }
  GEARBOX_RETURN_IF_ERROR(check_unsupported(f, family));
  GEARBOX_RETURN_IF_ERROR(read_activation(f, family, d));
  GEARBOX_RETURN_IF_ERROR(read_biases(f, family, d));
  LayerRopes ropes;
  GEARBOX_RETURN_IF_ERROR(read_rope(f, family, ropes));
  std::vector<bool> sliding;
  int64_t window = 0;
  GEARBOX_RETURN_IF_ERROR(read_windows(f, family, static_cast<size_t>(layers), sliding, window));
  for (const bool s : sliding) d.layers.push_back({s ? window : 0, s ? ropes.sliding.rope : ropes.full.rope});
  if (ropes.per_layer_type && family != Family::kGemma3) {  // Gemma's fields fill in a missing type
    for (const bool s : {false, true}) {
      if ((s ? ropes.sliding_name : ropes.full_name).empty() &&
          std::find(sliding.begin(), sliding.end(), s) != sliding.end()) {
        return data_loss(f.name("rope_parameters") + " has no entry for the " +
                         (s ? "sliding_attention" : "full_attention") + " layers");
      }
    }
  }

  const bool gemma = family == Family::kGemma3;
  d.norm = gemma ? NormStyle::kOnePlusWeight : NormStyle::kWeight;
  d.qk_norm = gemma || family == Family::kQwen3;
  d.sandwich_norms = gemma;
  d.scale_embeddings = gemma;
  d.tie_embeddings = gemma;  // Gemma3TextConfig ties by default, the others do not
  if (multimodal) GEARBOX_RETURN_IF_ERROR(top.boolean("tie_word_embeddings", d.tie_embeddings));
  GEARBOX_RETURN_IF_ERROR(f.boolean("tie_word_embeddings", d.tie_embeddings));  // the text model's own wins

  // The text config first, then (multimodal) the top level, which transformers consults.
  if (multimodal) {
    out.bos_token_id = gemma_defaults::kBos;
    out.eos_token_ids = {gemma_defaults::kEos};
  }
  GEARBOX_RETURN_IF_ERROR(read_dtype(f, out.checkpoint_dtype));
  GEARBOX_RETURN_IF_ERROR(read_tokens(f, out.bos_token_id, out.eos_token_ids));
  if (multimodal) {
    GEARBOX_RETURN_IF_ERROR(read_dtype(top, out.checkpoint_dtype));
    GEARBOX_RETURN_IF_ERROR(read_tokens(top, out.bos_token_id, out.eos_token_ids));
  }
  d.dtype = out.checkpoint_dtype;
  GEARBOX_RETURN_IF_ERROR(validate_description(d));
  return out;
}

Status merge_generation_config(std::string_view json_text, int64_t& bos, std::vector<int64_t>& eos_ids) {
  bool too_deep = false;
  const Json root = parse_json_bounded(json_text, too_deep);
  if (too_deep) return data_loss(json_too_deep_message());
  if (root.is_discarded()) return data_loss("not valid JSON");
  if (!root.is_object()) return data_loss("not a JSON object");
  std::vector<int64_t> eos;
  GEARBOX_RETURN_IF_ERROR(read_tokens(Fields(root, "", false), bos, eos));
  for (const int64_t id : eos) {
    if (std::find(eos_ids.begin(), eos_ids.end(), id) == eos_ids.end()) eos_ids.push_back(id);
  }
  return {};
}

std::string_view as_text(std::span<const uint8_t> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// Catches what the JSON library or an allocation may throw.
template <typename F>
auto guarded(const std::string& what, F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return resource_exhausted("out of memory while " + what);
  } catch (const std::exception& e) {
    return internal_error(what + ": " + e.what());
  }
}

Result<HfDecoderConfig> parse_text(std::string_view json_text, bool gemma_only) {
  Result<Json> root = parse_json(json_text);
  if (!root.ok()) return root.status();
  if (gemma_only) {
    Result<std::string> type = model_type(*root);
    if (!type.ok()) return type.status();
    if (*type != "gemma3" && *type != "gemma3_text") {
      return unimplemented("model_type " + describe_json(Json(*type)) +
                           " is not a Gemma-3 config (gemma3_text or gemma3)");
    }
  }
  return parse_root(*root);
}

Result<HfDecoderConfig> read_dir(const std::string& checkpoint_dir, bool gemma_only) {
  const fs::path config_path = fs::path(checkpoint_dir) / "config.json";
  Result<format::MappedFile> config_file = format::MappedFile::open(config_path.string(), InputKind::kHfConfig);
  if (!config_file.ok()) return config_file.status();
  Result<HfDecoderConfig> config = parse_text(as_text(config_file->bytes()), gemma_only);
  if (!config.ok()) return config.status().with_context(config_path.string());

  const fs::path generation_path = fs::path(checkpoint_dir) / "generation_config.json";
  // Optional: absent is fine, anything else that cannot be read (a directory, a FIFO, a
  // symbolic link loop) is an error naming it.
  Result<format::MappedFile> generation_file = format::MappedFile::open(generation_path.string(), InputKind::kHfConfig);
  if (!generation_file.ok() && generation_file.status().code() != StatusCode::kNotFound) {
    return generation_file.status();
  }
  if (generation_file.ok()) {
    GEARBOX_RETURN_IF_ERROR(
        merge_generation_config(as_text(generation_file->bytes()), config->bos_token_id, config->eos_token_ids)
            .with_context(generation_path.string()));
  }
  return config;
}

Result<HfModelInfo> gemma3_info(Result<HfDecoderConfig> config) {
  if (!config.ok()) return config.status();
  Result<Gemma3Config> gemma = gemma3_config(config->description);
  if (!gemma.ok()) return gemma.status();
  HfModelInfo info;
  info.config = *gemma;
  info.bos_token_id = config->bos_token_id;
  info.eos_token_ids = std::move(config->eos_token_ids);
  info.checkpoint_dtype = config->checkpoint_dtype;
  return info;
}

}  // namespace

Result<HfDecoderConfig> parse_hf_config(std::string_view json_text) {
  return guarded("reading the config", [&] { return parse_text(json_text, /*gemma_only=*/false); });
}

Result<HfDecoderConfig> read_hf_config(const std::string& checkpoint_dir) {
  return guarded("reading the config in " + checkpoint_dir,
                 [&] { return read_dir(checkpoint_dir, /*gemma_only=*/false); });
}

Result<HfModelInfo> parse_gemma3_config(std::string_view json_text) {
  return guarded("reading the config", [&] { return gemma3_info(parse_text(json_text, /*gemma_only=*/true)); });
}

Result<HfModelInfo> read_gemma3_config(const std::string& checkpoint_dir) {
  return guarded("reading the config in " + checkpoint_dir,
                 [&] { return gemma3_info(read_dir(checkpoint_dir, /*gemma_only=*/true)); });
}

Result<std::string> detect_weight_prefix(const SafetensorsCheckpoint& checkpoint) {
  for (const char* prefix : {"model.", "language_model.model.", "model.language_model."}) {
    if (checkpoint.find(std::string(prefix) + "embed_tokens.weight") != nullptr) return std::string(prefix);
  }
  return not_found(
      "checkpoint has no embed_tokens.weight under 'model.', 'language_model.model.' or 'model.language_model.'");
}

}  // namespace gearbox::models
