// Gemma-3's text decoder by its own hyperparameters (HF transformers `models/gemma3`
// semantics), built as a DecoderDescription (decoder.h): RMSNorm x * (1 + w), q/k norms,
// four norms per layer, GELU-tanh, embeddings scaled by sqrt(hidden), sliding layers with
// their own RoPE base.
//
//   models::Gemma3Config config = models::gemma3_mini_config();
//   models::RandomWeights weights(/*seed=*/1);
//   Result<models::BuiltModel> model = models::build_gemma3(config, weights);
#pragma once

#include <cstdint>
#include <vector>

#include "gearbox/data_type.h"
#include "gearbox/status.h"
#include "models/decoder.h"

namespace gearbox::models {

struct Gemma3Config {
  int64_t vocab = 0;
  int64_t hidden = 0;
  int64_t intermediate = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  float rms_norm_eps = 1e-6f;
  float rope_theta_global = 1e6f;
  float rope_theta_local = 1e4f;
  /// Linear RoPE scaling of the global (full-attention) layers: positions / factor
  /// (HF `rope_scaling: {rope_type: linear, factor}`); 1 = none.
  float rope_linear_factor_global = 1.0f;
  int64_t sliding_window = 512;
  std::vector<bool> layer_is_sliding;  ///< one per layer
  float query_pre_attn_scalar = 256.0f;
  bool tie_embeddings = true;
  int64_t max_context = 2048;
  DataType dtype = DataType::kF32;  ///< weight dtype
  /// Logits for every position ([1, T, V]) instead of the last one ([1, 1, V]).
  bool all_logits = false;
};

/// The seed's mini config: vocab 2048, hidden 320, intermediate 640, 3 layers, 4 heads,
/// 1 KV head, head_dim 80, window 512, layers [sliding, sliding, full].
Gemma3Config gemma3_mini_config();

/// Checks sizes (positive, heads % kv_heads == 0, head_dim even, one layer type per
/// layer...). Errors: kInvalidArgument naming the field.
Status validate_config(const Gemma3Config& config);

/// The decoder `config` describes (family "gemma3"). `config` must be valid.
DecoderDescription gemma3_description(const Gemma3Config& config);

/// The Gemma3Config of a Gemma-3 description: the inverse of gemma3_description(). Errors:
/// kUnimplemented naming what Gemma3Config cannot hold (another family, sliding layers of
/// different windows, scaled RoPE on sliding layers, llama3 scaling, ...).
Result<Gemma3Config> gemma3_config(const DecoderDescription& description);

/// validate_config(), then build_decoder(gemma3_description(config), weights).
Result<BuiltModel> build_gemma3(const Gemma3Config& config, WeightSource& weights);

}  // namespace gearbox::models
