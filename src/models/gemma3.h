// The Gemma-3 text decoder as a gearbox network (HF transformers `models/gemma3`
// semantics; see docs/ARCHITECTURE.md and the formulas in the reference notes).
//
//   models::Gemma3Config config = models::gemma3_mini_config();
//   models::RandomWeights weights(/*seed=*/1);
//   Result<models::BuiltModel> model = models::build_gemma3(config, weights);
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "gearbox/data_type.h"
#include "gearbox/status.h"
#include "ir/network.h"

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

/// Supplies weight bytes: `name` (HF naming), `dims` and the config's dtype; writes
/// volume * dtype size bytes to `out`.
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
/// (f32, [1, 1, vocab] or [1, seq, vocab] with all_logits).
Result<BuiltModel> build_gemma3(const Gemma3Config& config, WeightSource& weights);

}  // namespace gearbox::models
