#include "models/gemma3.h"

#include <string>

#include "core/check.h"

namespace gearbox::models {

Gemma3Config gemma3_mini_config() {
  Gemma3Config c;
  c.vocab = 2048;
  c.hidden = 320;
  c.intermediate = 640;
  c.layers = 3;
  c.heads = 4;
  c.kv_heads = 1;
  c.head_dim = 80;
  c.sliding_window = 512;
  c.layer_is_sliding = {true, true, false};
  c.query_pre_attn_scalar = 256.0f;  // Gemma3TextConfig's default, which the seed's mini config kept
  c.max_context = 2048;
  return c;
}

Status validate_config(const Gemma3Config& c) {
  auto positive = [](int64_t v, const char* field) -> Status {
    if (v >= 1) return {};
    return invalid_argument(std::string(field) + " must be >= 1, got " + std::to_string(v));
  };
  GEARBOX_RETURN_IF_ERROR(positive(c.vocab, "vocab_size"));
  GEARBOX_RETURN_IF_ERROR(positive(c.hidden, "hidden_size"));
  GEARBOX_RETURN_IF_ERROR(positive(c.intermediate, "intermediate_size"));
  GEARBOX_RETURN_IF_ERROR(positive(c.layers, "num_hidden_layers"));
  GEARBOX_RETURN_IF_ERROR(positive(c.heads, "num_attention_heads"));
  GEARBOX_RETURN_IF_ERROR(positive(c.kv_heads, "num_key_value_heads"));
  GEARBOX_RETURN_IF_ERROR(positive(c.head_dim, "head_dim"));
  GEARBOX_RETURN_IF_ERROR(positive(c.max_context, "max context"));
  if (c.heads % c.kv_heads != 0) {
    return invalid_argument("num_attention_heads (" + std::to_string(c.heads) +
                            ") must be a multiple of num_key_value_heads (" + std::to_string(c.kv_heads) + ")");
  }
  if (c.head_dim % 2 != 0) return invalid_argument("head_dim must be even for RoPE, got " + std::to_string(c.head_dim));
  if (static_cast<int64_t>(c.layer_is_sliding.size()) != c.layers) {
    return invalid_argument("layer_types has " + std::to_string(c.layer_is_sliding.size()) + " entries for " +
                            std::to_string(c.layers) + " layers");
  }
  if (c.sliding_window < 1) return invalid_argument("sliding_window must be >= 1");
  if (!(c.rms_norm_eps > 0.0f) || !(c.rope_theta_global > 0.0f) || !(c.rope_theta_local > 0.0f) ||
      !(c.query_pre_attn_scalar > 0.0f) || !(c.rope_linear_factor_global >= 1.0f)) {
    return invalid_argument(
        "rms_norm_eps, rope thetas and query_pre_attn_scalar must be positive, the rope factor >= 1");
  }
  if (c.dtype != DataType::kF32 && c.dtype != DataType::kBF16 && c.dtype != DataType::kF16) {
    return invalid_argument(std::string("weights must be f32, bf16 or f16, not ") + data_type_name(c.dtype));
  }
  return {};
}

DecoderDescription gemma3_description(const Gemma3Config& c) {
  DecoderDescription d;
  d.family = "gemma3";
  d.vocab = c.vocab;
  d.hidden = c.hidden;
  d.intermediate = c.intermediate;
  d.heads = c.heads;
  d.kv_heads = c.kv_heads;
  d.head_dim = c.head_dim;
  DecoderLayer sliding;
  sliding.window = c.sliding_window;
  sliding.rope.theta = c.rope_theta_local;
  DecoderLayer full;
  full.rope.theta = c.rope_theta_global;
  if (c.rope_linear_factor_global != 1.0f) {
    full.rope.scaling = RopeScaling::kLinear;
    full.rope.factor = c.rope_linear_factor_global;
  }
  for (const bool is_sliding : c.layer_is_sliding) d.layers.push_back(is_sliding ? sliding : full);
  d.rms_norm_eps = c.rms_norm_eps;
  d.norm = NormStyle::kOnePlusWeight;
  d.qk_norm = true;
  d.sandwich_norms = true;
  d.activation = GatedActivation::kGeluTanh;
  d.scale_embeddings = true;
  d.query_pre_attn_scalar = c.query_pre_attn_scalar;
  d.tie_embeddings = c.tie_embeddings;
  d.max_context = c.max_context;
  d.dtype = c.dtype;
  d.all_logits = c.all_logits;
  return d;
}

Result<Gemma3Config> gemma3_config(const DecoderDescription& d) {
  auto cannot = [](const std::string& what) { return unimplemented("a Gemma3Config cannot hold " + what); };
  if (d.family != "gemma3") return cannot("a " + d.family + " model");
  if (d.norm != NormStyle::kOnePlusWeight || !d.qk_norm || !d.sandwich_norms || d.qkv_bias || d.o_bias || d.mlp_bias ||
      d.activation != GatedActivation::kGeluTanh || !d.scale_embeddings) {
    return cannot("a decoder whose norms, biases, activation or embedding scale differ from Gemma-3's");
  }
  Gemma3Config c;
  c.vocab = d.vocab;
  c.hidden = d.hidden;
  c.intermediate = d.intermediate;
  c.layers = static_cast<int64_t>(d.layers.size());
  c.heads = d.heads;
  c.kv_heads = d.kv_heads;
  c.head_dim = d.head_dim;
  c.rms_norm_eps = d.rms_norm_eps;
  c.query_pre_attn_scalar = d.query_pre_attn_scalar;
  c.tie_embeddings = d.tie_embeddings;
  c.max_context = d.max_context;
  c.dtype = d.dtype;
  c.all_logits = d.all_logits;
  bool seen_sliding = false, seen_full = false;
  for (const DecoderLayer& layer : d.layers) {
    const bool sliding = layer.window > 0;
    c.layer_is_sliding.push_back(sliding);
    const RopeDescription& r = layer.rope;
    if (sliding) {
      if (r.scaling != RopeScaling::kNone) return cannot("RoPE scaling on sliding layers");
      if (seen_sliding && (layer.window != c.sliding_window || r.theta != c.rope_theta_local)) {
        return cannot("sliding layers of different windows or RoPE");
      }
      c.sliding_window = layer.window;
      c.rope_theta_local = r.theta;
      seen_sliding = true;
    } else {
      if (r.scaling == RopeScaling::kLlama3) return cannot("llama3 RoPE scaling");
      const float factor = r.scaling == RopeScaling::kLinear ? r.factor : 1.0f;
      if (seen_full && (r.theta != c.rope_theta_global || factor != c.rope_linear_factor_global)) {
        return cannot("full-attention layers of different RoPE");
      }
      c.rope_theta_global = r.theta;
      c.rope_linear_factor_global = factor;
      seen_full = true;
    }
  }
  return c;
}

Result<BuiltModel> build_gemma3(const Gemma3Config& config, WeightSource& weights) {
  GEARBOX_RETURN_IF_ERROR(validate_config(config));
  return build_decoder(gemma3_description(config), weights);
}

}  // namespace gearbox::models
