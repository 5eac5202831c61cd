// One decoder-only transformer builder for every model family gearbox reads (Gemma-3,
// Llama, Mistral, Qwen2, Qwen3). A DecoderDescription says where the families differ: the
// norm style, q/k norms, projection biases, the gated activation, RoPE per layer, sliding
// windows, the embedding scale, the attention scale and whether lm_head is tied. It comes
// from a checkpoint's config.json (hf_config.h) or from a family's own config struct
// (gemma3.h), and build_decoder() turns it into a network and its weight payload.
//
//   Result<models::HfCheckpointConfig> hf = models::read_hf_config(dir);
//   models::DecoderDescription d = hf->description;
//   d.max_context = 4096;
//   models::CheckpointWeights weights(checkpoint, prefix);
//   Result<models::BuiltModel> model = models::build_decoder(d, weights);
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gearbox/data_type.h"
#include "gearbox/dims.h"
#include "gearbox/status.h"
#include "ir/network.h"

namespace gearbox::models {

/// How RMSNorm applies its weight: y = x_hat * w (Llama, Qwen, Mistral) or x_hat * (1 + w)
/// (Gemma).
enum class NormStyle { kWeight, kOnePlusWeight };

/// The gated MLP's activation: act(gate) * up.
enum class GatedActivation { kGeluTanh, kSilu };

/// How RoPE scales its frequencies (HF `rope_type`).
enum class RopeScaling {
  kNone,    ///< "default": inv_freq_i = theta^(-2i / head_dim)
  kLinear,  ///< "linear": positions divided by `factor`
  kLlama3,  ///< "llama3": low frequencies divided by `factor`, a smooth ramp between the bands
};

/// One layer's rotary position embedding (HF `rope_parameters`).
struct RopeDescription {
  float theta = 10000.0f;
  RopeScaling scaling = RopeScaling::kNone;
  float factor = 1.0f;                 ///< kLinear, kLlama3
  float low_freq_factor = 1.0f;        ///< kLlama3
  float high_freq_factor = 4.0f;       ///< kLlama3
  int64_t original_max_positions = 0;  ///< kLlama3: the pretraining context
  bool operator==(const RopeDescription&) const = default;
};

/// What differs from layer to layer: the attention window and the RoPE.
struct DecoderLayer {
  /// Sliding window: a query at position p sees keys j with p - window < j <= p; 0 = all j <= p.
  int64_t window = 0;
  RopeDescription rope;
  bool operator==(const DecoderLayer&) const = default;
};

/// A decoder-only transformer: embedding, `layers.size()` pre-norm decoder layers (attention
/// with GQA, then a gated MLP, each added to the residual), a final RMSNorm and lm_head.
/// Weights use HF names ("model.layers.N.self_attn.q_proj.weight", ...).
struct DecoderDescription {
  std::string family;  ///< "gemma3", "llama", "mistral", "qwen2", "qwen3": metadata and messages
  int64_t vocab = 0;
  int64_t hidden = 0;
  int64_t intermediate = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  std::vector<DecoderLayer> layers;
  float rms_norm_eps = 1e-6f;
  NormStyle norm = NormStyle::kWeight;
  /// Per-head RMSNorm of q and k before RoPE (self_attn.q_norm / k_norm, [head_dim]).
  bool qk_norm = false;
  /// Gemma's four norms per layer: the attention and MLP outputs are normalized before they
  /// are added (post_attention_layernorm, post_feedforward_layernorm) and the MLP input by
  /// pre_feedforward_layernorm. Otherwise two: input_layernorm and post_attention_layernorm
  /// (the MLP input).
  bool sandwich_norms = false;
  bool qkv_bias = false;  ///< q_proj, k_proj, v_proj have biases
  bool o_bias = false;    ///< o_proj has a bias
  bool mlp_bias = false;  ///< gate_proj, up_proj, down_proj have biases
  GatedActivation activation = GatedActivation::kSilu;
  /// Embeddings are multiplied by sqrt(hidden), rounded to the weight dtype (Gemma).
  bool scale_embeddings = false;
  /// Attention scores are scaled by 1 / sqrt(query_pre_attn_scalar): Gemma's field of that
  /// name, head_dim for the other families.
  float query_pre_attn_scalar = 0.0f;
  bool tie_embeddings = false;      ///< lm_head is the embedding table
  int64_t max_context = 2048;       ///< the KV caches' rows
  DataType dtype = DataType::kF32;  ///< weight dtype (biases and RoPE tables are always f32)
  /// Logits for every position ([1, T, V]) instead of the last one ([1, 1, V]).
  bool all_logits = false;
  /// KV-cache slots of a batched network (the most sequences one session holds): inputs
  /// `tokens` and `positions` [B, seq] and `slots` [B]. 0: today's batch-1 network.
  int64_t max_batch = 0;
};

/// Checks sizes and values: positive extents, heads a multiple of kv_heads, an even
/// head_dim, at least one layer, windows >= 0, positive thetas, scaling factors >= 1,
/// llama3's high_freq_factor above its low_freq_factor. Errors: kInvalidArgument naming
/// the config.json field.
Status validate_description(const DecoderDescription& description);

/// RoPE's inverse frequencies [head_dim / 2] after `rope`'s scaling, in f32 as HF
/// transformers computes them (kLlama3); kNone and kLinear give the unscaled ones (a linear
/// factor scales the positions instead).
std::vector<float> rope_inv_freq(const RopeDescription& rope, int64_t head_dim);

/// The description as short "model.*" metadata pairs, one line each (family, dims,
/// norms, attention, MLP, embedding, layers, RoPE), so that `gearbox inspect` shows what an
/// engine was built from.
std::vector<std::pair<std::string, std::string>> describe(const DecoderDescription& description);

/// Supplies weight bytes: `name` (HF naming), `dims` and a dtype; writes volume * dtype size
/// bytes to `out`.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual Status fill(const std::string& name, const Dims& dims, DataType dtype, std::span<uint8_t> out) = 0;
};

/// Seeded random weights (no download): N(0, 0.02) for projections and embeddings, and
/// small random norm weights, so that every weight matters to the output.
class RandomWeights final : public WeightSource {
 public:
  explicit RandomWeights(uint64_t seed) : seed_(seed) {}
  Status fill(const std::string& name, const Dims& dims, DataType dtype, std::span<uint8_t> out) override;

 private:
  uint64_t seed_;
};

/// A network and its weight payload (64-byte aligned weights).
struct BuiltModel {
  ir::Network network;
  std::vector<uint8_t> payload;
};

/// Builds the network: inputs `tokens` and `positions` ([1, seq], i64), output `logits`
/// (f32, [1, 1, vocab] or [1, seq, vocab] with all_logits); with max_batch > 0, `tokens`
/// and `positions` [batch, seq], `slots` [batch] (i64) and logits [batch, 1, vocab]
/// (docs/ARCHITECTURE.md, "Batches and KV-cache slots"). Llama3-scaled RoPE carries its
/// inverse frequencies as an f32 weight "rope.inv_freq.K" (one per distinct RoPE). Errors:
/// validate_description()'s, then the weight source's.
Result<BuiltModel> build_decoder(const DecoderDescription& description, WeightSource& weights);

}  // namespace gearbox::models
