// Reads a Hugging Face checkpoint's `config.json` (and `generation_config.json`) into a
// DecoderDescription, accepting what transformers 4.x and 5.x write for the families gearbox
// builds: gemma3_text and gemma3 (Gemma-3), llama (Llama 2, 3.x), mistral, qwen2 (Qwen2,
// Qwen2.5) and qwen3. A field that changes the math and that gearbox does not implement is an
// error naming the field and its value, never ignored.
//
//   Result<models::HfDecoderConfig> hf = models::read_hf_config(dir);
//   Result<models::SafetensorsCheckpoint> ckpt = models::SafetensorsCheckpoint::open(dir);
//   Result<std::string> prefix = models::detect_weight_prefix(*ckpt);
//   models::CheckpointWeights weights(*ckpt, *prefix);
//   Result<models::BuiltModel> model = models::build_decoder(hf->description, weights);
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gearbox/data_type.h"
#include "gearbox/status.h"
#include "models/decoder.h"
#include "models/gemma3.h"
#include "models/safetensors.h"

namespace gearbox::models {

/// What a Hugging Face config says about a decoder.
struct HfDecoderConfig {
  /// The decoder; `dtype` is `checkpoint_dtype` and `max_context` min(max_position_embeddings,
  /// 8192), or 2048 without one (a multimodal Gemma-3 text_config always has one: its default
  /// is 131072). A caller may override both, and all_logits.
  DecoderDescription description;
  /// -1 when the config names none.
  int64_t bos_token_id = -1;
  /// Generation stops at any of these; empty when the config names none.
  std::vector<int64_t> eos_token_ids;
  /// `dtype` / `torch_dtype` ("float32", "bfloat16", "float16"); f32 when absent.
  DataType checkpoint_dtype = DataType::kF32;
  /// max_position_embeddings (the positions the model was trained for); -1 when absent.
  int64_t max_position_embeddings = -1;
};

/// Parses config.json text. By model_type:
/// - "gemma3_text" reads the top level; "gemma3" (multimodal) reads `text_config`, where
///   transformers writes only the fields that differ from Gemma3TextConfig's defaults, so
///   there (and only there) a missing field takes that default. Layer kinds from
///   `layer_types`, else `sliding_window_pattern`; sliding layers take `rope_local_base_freq`
///   (4.x) and `rope_scaling` scales the full-attention layers only.
/// - "llama", "mistral", "qwen2", "qwen3": a missing num_key_value_heads, head_dim,
///   rope_theta, hidden_act or tie_word_embeddings takes transformers' default, as
///   transformers does. Biases: llama's attention_bias (q, k, v, o) and mlp_bias, qwen3's
///   attention_bias, qwen2's fixed q/k/v biases. Windows: mistral's `sliding_window` on every
///   layer; qwen2/qwen3's `layer_types`, else `use_sliding_window` + `max_window_layers`.
/// RoPE: `rope_theta` + `rope_scaling` (4.x) or `rope_parameters`, flat or per layer type
/// (5.x); rope types "default", "linear" and "llama3".
///
/// Errors: kDataLoss (not JSON, a missing or mistyped field, named in the message);
/// kUnimplemented (another model_type, an activation other than silu or gelu_pytorch_tanh,
/// softcapping, partial rotary embeddings, a rope type gearbox lacks, a bias or window field
/// the family does not use, an unknown layer type or dtype); kInvalidArgument from
/// validate_description() (e.g. heads not a multiple of kv heads).
Result<HfDecoderConfig> parse_hf_config(std::string_view json_text);

/// Reads `checkpoint_dir`/config.json, then `generation_config.json` when present: its
/// bos_token_id replaces the config's and its eos_token_id (int or list) is added to the
/// config's (duplicates dropped). Errors: those of parse_hf_config(), prefixed with the
/// file; kNotFound without config.json.
Result<HfDecoderConfig> read_hf_config(const std::string& checkpoint_dir);

/// The prefix that the checkpoint puts before "embed_tokens.weight", "layers.N...." and
/// "norm.weight": "model." (text-only checkpoints), "language_model.model." (multimodal,
/// transformers 4.x naming) or "model.language_model." (multimodal, 5.x naming), tried in
/// that order. Errors: kNotFound when none holds embed_tokens.weight.
Result<std::string> detect_weight_prefix(const SafetensorsCheckpoint& checkpoint);

/// A Gemma-3 checkpoint as a Gemma3Config, for callers that build with build_gemma3().
struct HfModelInfo {
  /// As HfDecoderConfig::description says it.
  Gemma3Config config;
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;
  /// Always ""; see detect_weight_prefix().
  std::string weight_prefix;
  DataType checkpoint_dtype = DataType::kF32;
};

/// parse_hf_config() for gemma3_text and gemma3 configs only, as a Gemma3Config. Errors:
/// parse_hf_config()'s; kUnimplemented for another model_type, or a Gemma-3 description
/// that Gemma3Config cannot hold (gemma3_config()).
Result<HfModelInfo> parse_gemma3_config(std::string_view json_text);

/// read_hf_config() for gemma3_text and gemma3 configs only, as a Gemma3Config.
Result<HfModelInfo> read_gemma3_config(const std::string& checkpoint_dir);

}  // namespace gearbox::models
