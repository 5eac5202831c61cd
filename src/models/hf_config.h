// Reads a Hugging Face Gemma-3 `config.json` (and `generation_config.json`) into a
// Gemma3Config, accepting what transformers 4.x and 5.x write.
//
//   Result<models::HfModelInfo> info = models::read_gemma3_config(dir);
//   Result<models::SafetensorsCheckpoint> ckpt = models::SafetensorsCheckpoint::open(dir);
//   Result<std::string> prefix = models::detect_weight_prefix(*ckpt);
//   models::CheckpointWeights weights(*ckpt, *prefix);
//   Result<models::BuiltModel> model = models::build_gemma3(info->config, weights);
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gearbox/data_type.h"
#include "gearbox/status.h"
#include "models/gemma3.h"
#include "models/safetensors.h"

namespace gearbox::models {

/// What a Hugging Face config says about a Gemma-3 text model.
struct HfModelInfo {
  /// The decoder; `config.dtype` is set to `checkpoint_dtype` and `config.max_context` to
  /// min(max_position_embeddings, 8192), or 2048 without one (a multimodal text_config
  /// always has one: its default is 131072). The CLI may override both.
  Gemma3Config config;
  /// -1 when the config names none.
  int64_t bos_token_id = -1;
  /// Generation stops at any of these; empty when the config names none.
  std::vector<int64_t> eos_token_ids;
  /// Always "" from the config (it cannot tell how the weights are named); see
  /// detect_weight_prefix().
  std::string weight_prefix;
  /// `dtype` / `torch_dtype` ("float32", "bfloat16", "float16"); f32 when absent.
  DataType checkpoint_dtype = DataType::kF32;
};

/// Parses config.json text. model_type "gemma3_text" reads the top level; "gemma3"
/// (multimodal) reads `text_config`, where transformers writes only the fields that
/// differ from Gemma3TextConfig's defaults, so there (and only there) a missing field takes
/// that default. RoPE: `rope_theta` + `rope_local_base_freq` + `rope_scaling` (4.x), or
/// `rope_parameters`, per layer type or flat (5.x); only "default" and "linear" (global
/// layers) are supported. Layer kinds: `layer_types`, else `sliding_window_pattern`.
///
/// Errors: kDataLoss (not JSON, a missing or mistyped field, named in the message);
/// kUnimplemented (another model_type, an activation other than gelu_pytorch_tanh,
/// softcapping, a rope type gearbox lacks, an unknown layer type or dtype);
/// kInvalidArgument from validate_config() (e.g. heads not a multiple of kv heads).
Result<HfModelInfo> parse_gemma3_config(std::string_view json_text);

/// Reads `checkpoint_dir`/config.json, then `generation_config.json` when present: its
/// bos_token_id replaces the config's and its eos_token_id (int or list) is added to the
/// config's (duplicates dropped). Errors: those of parse_gemma3_config(), prefixed with the
/// file; kNotFound without config.json.
Result<HfModelInfo> read_gemma3_config(const std::string& checkpoint_dir);

/// The prefix that the checkpoint puts before "embed_tokens.weight", "layers.N...." and
/// "norm.weight": "model." (text-only checkpoints), "language_model.model." (multimodal,
/// transformers 4.x naming) or "model.language_model." (multimodal, 5.x naming), tried in
/// that order. Errors: kNotFound when none holds embed_tokens.weight.
Result<std::string> detect_weight_prefix(const SafetensorsCheckpoint& checkpoint);

}  // namespace gearbox::models
