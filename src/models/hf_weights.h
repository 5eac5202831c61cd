// Feeds build_decoder() from a safetensors checkpoint: maps gearbox's (HF) weight names
// onto the checkpoint's, checks shapes and converts dtypes.
//
//   Result<std::string> prefix = models::detect_weight_prefix(checkpoint);
//   models::CheckpointWeights weights(checkpoint, *prefix);
//   Result<models::BuiltModel> model = models::build_decoder(description, weights);
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "gearbox/data_type.h"
#include "gearbox/dims.h"
#include "gearbox/status.h"
#include "models/decoder.h"
#include "models/safetensors.h"

namespace gearbox::models {

/// A WeightSource reading a SafetensorsCheckpoint. Holds a pointer to `checkpoint`, which
/// must outlive it. Not thread-safe (fill() is called by one builder).
class CheckpointWeights final : public WeightSource {
 public:
  /// `prefix` replaces the leading "model." of gearbox's names (see detect_weight_prefix()).
  CheckpointWeights(const SafetensorsCheckpoint& checkpoint, std::string prefix)
      : checkpoint_(&checkpoint), prefix_(std::move(prefix)) {}

  /// The checkpoint's name for gearbox's `name`: "model.X" -> prefix + "X"; "lm_head.weight"
  /// stays, or becomes "language_model.lm_head.weight" under the "language_model.model."
  /// prefix (transformers 4.x multimodal naming); anything else -> "".
  std::string checkpoint_name(const std::string& name) const;

  /// Writes the tensor `name` as `dtype` (f32, bf16 or f16; round to nearest even) into
  /// `out`, which must hold volume(dims) elements. Errors: kNotFound ("checkpoint has no
  /// tensor '...'"); kDataLoss (the checkpoint's shape differs from `dims`: both named);
  /// kUnimplemented / kDataLoss (a dtype gearbox does not read); kInvalidArgument (a name
  /// outside gearbox's scheme, an unsupported `dtype`, `out` of the wrong size).
  /// Also kDataLoss when a written element is NaN or infinite (in the checkpoint, or after
  /// rounding to `dtype`), naming the tensor, unless allow_non_finite(true).
  Status fill(const std::string& name, const Dims& dims, DataType dtype, std::span<uint8_t> out) override;

  /// Lets fill() write NaN and infinite values (`gearbox build --allow-non-finite`).
  void allow_non_finite(bool allow) noexcept { allow_non_finite_ = allow; }

 private:
  const SafetensorsCheckpoint* checkpoint_;
  std::string prefix_;
  bool allow_non_finite_ = false;
};

/// Checks, before build_decoder() allocates a byte, that the sizes `description` takes
/// from config.json are those of the checkpoint's tensors: the embedding [vocab, hidden],
/// every layer's attention and MLP projections, and lm_head unless tied, each present with
/// exactly that shape, and no product of sizes overflowing. The weights build_decoder()
/// then allocates are no larger than the checkpoint. Errors: kNotFound (a tensor is
/// missing), kDataLoss (a shape differs: the config.json fields and the tensor are named),
/// kOutOfRange (a product of sizes overflows).
Status check_description_against_checkpoint(const DecoderDescription& description, const CheckpointWeights& weights,
                                            const SafetensorsCheckpoint& checkpoint);

/// The index of the first NaN or infinite element of `bytes` (`dtype` f32, bf16 or f16),
/// or -1 when every element is finite.
int64_t first_non_finite(std::span<const uint8_t> bytes, DataType dtype);

}  // namespace gearbox::models
