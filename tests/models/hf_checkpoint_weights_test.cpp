// CheckpointWeights: dtypes convert exactly, non-finite values and wrong shapes are errors
// naming the tensor, name prefixes are detected, and a model built from a checkpoint carries
// the same payload as one built from the source.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/half.h"
#include "hf_checkpoint_fixture.h"
#include "models/gemma3.h"
#include "models/hf_config.h"
#include "models/hf_weights.h"
#include "models/safetensors.h"
#include "safetensors_writer.h"

namespace gearbox::models {
namespace {

using Bytes = std::vector<uint8_t>;
using Json = nlohmann::json;
namespace fs = std::filesystem;

template <typename T>
std::vector<T> fill_as(CheckpointWeights& weights, const std::string& name, const Dims& dims, DataType dtype,
                       Status* status) {
  std::vector<T> out(static_cast<size_t>(dims.volume()));
  *status = weights.fill(name, dims, dtype,
                         std::span<uint8_t>(reinterpret_cast<uint8_t*>(out.data()), out.size() * sizeof(T)));
  return out;
}

uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST_F(HfCheckpoint, Bf16ToF32IsExact) {
  const std::vector<uint16_t> bf16 = {0x3f80, 0xc020, 0x3f81, 0x0001, 0x8000, 0x7f80, 0xff80, 0x4049};
  Result<SafetensorsCheckpoint> ckpt = write_and_open(dir_, {{"model.norm.weight", "BF16", {8}, u16_bytes(bf16)}});
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  CheckpointWeights weights(*ckpt, "model.");
  weights.allow_non_finite(true);  // infinities among the patterns
  Status s;
  const std::vector<float> got = fill_as<float>(weights, "model.norm.weight", Dims{8}, DataType::kF32, &s);
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (size_t i = 0; i < bf16.size(); ++i) EXPECT_EQ(f32_bits(got[i]), static_cast<uint32_t>(bf16[i]) << 16) << i;
  EXPECT_EQ(got[0], 1.0f);
  EXPECT_EQ(got[1], -2.5f);
  EXPECT_EQ(got[2], 1.0078125f);
}

TEST_F(HfCheckpoint, F32ToBf16RoundsToNearestEven) {
  const std::vector<uint32_t> bits = {
      0x3f800000,  // 1.0 -> 0x3f80
      0x3f808000,  // halfway, even below -> 0x3f80
      0x3f818000,  // halfway, even above -> 0x3f82
      0x3f808001,  // just above halfway -> 0x3f81
      0x3f807fff,  // just below halfway -> 0x3f80
      0xc0200000,  // -2.5 -> 0xc020
      0x7f7fffff,  // FLT_MAX rounds to +inf
      0x7fc00001,  // NaN stays NaN
  };
  const std::vector<uint16_t> want = {0x3f80, 0x3f80, 0x3f82, 0x3f81, 0x3f80, 0xc020, 0x7f80};
  std::vector<float> values;
  values.reserve(bits.size());
  for (uint32_t b : bits) values.push_back(bits_f32(b));
  Result<SafetensorsCheckpoint> ckpt = write_and_open(dir_, {{"model.w", "F32", {2, 4}, f32_bytes(values)}});
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  CheckpointWeights weights(*ckpt, "model.");
  weights.allow_non_finite(true);  // an overflow to infinity and a NaN among the patterns
  Status s;
  const std::vector<uint16_t> got = fill_as<uint16_t>(weights, "model.w", Dims{2, 4}, DataType::kBF16, &s);
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << i;
  EXPECT_EQ(got[7] & 0x7f80, 0x7f80);
  EXPECT_NE(got[7] & 0x007f, 0);
}

TEST_F(HfCheckpoint, NonFiniteWeightsAreAnErrorNamingTheTensor) {
  const std::vector<float> nan_at_2 = {1.0f, 2.0f, std::numeric_limits<float>::quiet_NaN(), 4.0f};
  const std::vector<float> big = {1.0f, 1e10f, 3.0f, 4.0f};  // finite in f32, infinite in f16
  Result<SafetensorsCheckpoint> ckpt =
      write_and_open(dir_, {{"model.a", "F32", {4}, f32_bytes(nan_at_2)}, {"model.b", "F32", {4}, f32_bytes(big)}});
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  CheckpointWeights weights(*ckpt, "model.");
  Status s;
  (void)fill_as<float>(weights, "model.a", Dims{4}, DataType::kF32, &s);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("tensor 'model.a' holds a non-finite value (NaN or infinity) at element 2"),
            std::string::npos)
      << s.message();
  (void)fill_as<uint16_t>(weights, "model.b", Dims{4}, DataType::kF16, &s);
  EXPECT_NE(s.message().find("at element 1 once rounded to f16"), std::string::npos) << s.message();
  (void)fill_as<float>(weights, "model.b", Dims{4}, DataType::kF32, &s);
  EXPECT_TRUE(s.ok()) << s.to_string();
  weights.allow_non_finite(true);
  (void)fill_as<float>(weights, "model.a", Dims{4}, DataType::kF32, &s);
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST_F(HfCheckpoint, F16AndSameDtypeConversions) {
  const std::vector<uint16_t> f16 = {0x3c00, 0xc100, 0x0001, 0x7bff};  // 1, -2.5, smallest subnormal, 65504
  Result<SafetensorsCheckpoint> ckpt = write_and_open(dir_, {{"model.h", "F16", {4}, u16_bytes(f16)}});
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  CheckpointWeights weights(*ckpt, "model.");
  Status s;
  const std::vector<float> as_f32 = fill_as<float>(weights, "model.h", Dims{4}, DataType::kF32, &s);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(as_f32, (std::vector<float>{1.0f, -2.5f, 5.9604644775390625e-8f, 65504.0f}));
  const std::vector<uint16_t> same = fill_as<uint16_t>(weights, "model.h", Dims{4}, DataType::kF16, &s);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(same, f16);
  const std::vector<uint16_t> as_bf16 = fill_as<uint16_t>(weights, "model.h", Dims{4}, DataType::kBF16, &s);
  ASSERT_TRUE(s.ok());
  for (size_t i = 0; i < f16.size(); ++i) EXPECT_EQ(as_bf16[i], internal::f32_to_bf16(as_f32[i])) << i;
}

TEST_F(HfCheckpoint, WeightErrors) {
  Result<SafetensorsCheckpoint> ckpt = write_and_open(dir_, {{"model.norm.weight", "F32", {4}, f32_bytes({1, 2, 3, 4})},
                                                             {"model.f64", "F64", {1}, pattern_bytes(8, 1)}});
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  CheckpointWeights weights(*ckpt, "model.");
  Status s;
  fill_as<float>(weights, "model.norm.weight", Dims{8}, DataType::kF32, &s);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "model.safetensors: tensor 'model.norm.weight' has shape [4], but the config needs [8]");
  fill_as<float>(weights, "model.norm.weight", Dims{2, 2}, DataType::kF32, &s);
  expect_error(s, StatusCode::kDataLoss, "has shape [4], but the config needs [2, 2]");
  fill_as<float>(weights, "model.layers.3.mlp.up_proj.weight", Dims{4}, DataType::kF32, &s);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "checkpoint has no tensor 'model.layers.3.mlp.up_proj.weight'");
  fill_as<float>(weights, "model.f64", Dims{1}, DataType::kF32, &s);
  expect_error(s, StatusCode::kUnimplemented, "has dtype F64");
  fill_as<float>(weights, "vision_tower.x", Dims{1}, DataType::kF32, &s);
  expect_error(s, StatusCode::kInvalidArgument, "is neither model.* nor lm_head.weight");
  fill_as<int32_t>(weights, "model.norm.weight", Dims{4}, DataType::kI32, &s);
  expect_error(s, StatusCode::kInvalidArgument, "cannot be written as i32");
  std::vector<uint8_t> small(3);
  s = weights.fill("model.norm.weight", Dims{4}, DataType::kF32, small);
  expect_error(s, StatusCode::kInvalidArgument, "the buffer holds 3 bytes");
}

TEST_F(HfCheckpoint, PrefixesAreDetectedAndApplied) {
  struct Case {
    std::string prefix;
    std::string lm_head;
  };
  for (const Case& c :
       {Case{"model.", "lm_head.weight"}, Case{"language_model.model.", "language_model.lm_head.weight"},
        Case{"model.language_model.", "lm_head.weight"}}) {
    SCOPED_TRACE(c.prefix);
    Result<SafetensorsCheckpoint> ckpt = write_and_open(
        dir_, {{c.prefix + "embed_tokens.weight", "F32", {1, 2}, f32_bytes({1, 2})},
               {c.prefix + "layers.0.mlp.up_proj.weight", "F32", {1}, f32_bytes({3})},
               {c.lm_head, "F32", {1}, f32_bytes({4})},
               {"vision_tower.vision_model.embeddings.patch_embedding.weight", "F32", {1}, f32_bytes({5})}});
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
    Result<std::string> prefix = detect_weight_prefix(*ckpt);
    ASSERT_TRUE(prefix.ok()) << prefix.status().to_string();
    EXPECT_EQ(*prefix, c.prefix);
    CheckpointWeights weights(*ckpt, *prefix);
    EXPECT_EQ(weights.checkpoint_name("model.layers.0.mlp.up_proj.weight"), c.prefix + "layers.0.mlp.up_proj.weight");
    EXPECT_EQ(weights.checkpoint_name("lm_head.weight"), c.lm_head);
    Status s;
    EXPECT_EQ(fill_as<float>(weights, "model.layers.0.mlp.up_proj.weight", Dims{1}, DataType::kF32, &s),
              std::vector<float>{3});
    EXPECT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(fill_as<float>(weights, "lm_head.weight", Dims{1}, DataType::kF32, &s), std::vector<float>{4});
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  Result<SafetensorsCheckpoint> none = write_and_open(dir_, {{"embed_tokens.weight", "F32", {1}, f32_bytes({1})}});
  ASSERT_TRUE(none.ok());
  expect_error(detect_weight_prefix(*none).status(), StatusCode::kNotFound, "checkpoint has no embed_tokens.weight");
}

// Records what build_gemma3 asks for, answering from RandomWeights.
class RecordingWeights final : public WeightSource {
 public:
  Status fill(const std::string& name, const Dims& dims, DataType dtype, std::span<uint8_t> out) override {
    GEARBOX_RETURN_IF_ERROR(random_.fill(name, dims, dtype, out));
    specs.push_back({name,
                     dtype == DataType::kBF16  ? "BF16"
                     : dtype == DataType::kF16 ? "F16"
                                               : "F32",
                     std::vector<int64_t>(dims.extents().begin(), dims.extents().end()),
                     Bytes(out.begin(), out.end())});
    return {};
  }
  std::vector<TensorSpec> specs;

 private:
  RandomWeights random_{7};
};

TEST_F(HfCheckpoint, ModelFromCheckpointMatchesItsSource) {
  Json tiny = v5_config();
  tiny["dtype"] = "bfloat16";
  tiny["tie_word_embeddings"] = false;
  Result<HfModelInfo> info = parse_gemma3_config(tiny.dump());
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  RecordingWeights recorder;
  Result<BuiltModel> direct = build_gemma3(info->config, recorder);
  ASSERT_TRUE(direct.ok()) << direct.status().to_string();
  ASSERT_GT(recorder.specs.size(), 10u);

  // Shard the weights the way transformers 5.x names a multimodal model.
  std::vector<TensorSpec> first;
  std::vector<TensorSpec> second;
  Json weight_map = Json::object();
  for (size_t i = 0; i < recorder.specs.size(); ++i) {
    TensorSpec spec = recorder.specs[i];
    if (spec.name.starts_with("model.")) spec.name = "model.language_model." + spec.name.substr(6);
    const bool in_first = i % 2 == 0;
    weight_map[spec.name] = in_first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    (in_first ? first : second).push_back(std::move(spec));
  }
  write_file(path("model-00001-of-00002.safetensors"), safetensors_file(first));
  write_file(path("model-00002-of-00002.safetensors"), safetensors_file(second));
  write_text(path("model.safetensors.index.json"), Json{{"weight_map", weight_map}}.dump());

  Result<SafetensorsCheckpoint> ckpt = SafetensorsCheckpoint::open(dir());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  Result<std::string> prefix = detect_weight_prefix(*ckpt);
  ASSERT_TRUE(prefix.ok()) << prefix.status().to_string();
  EXPECT_EQ(*prefix, "model.language_model.");
  CheckpointWeights weights(*ckpt, *prefix);
  Result<BuiltModel> loaded = build_gemma3(info->config, weights);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->payload, direct->payload);

  // The same checkpoint read as f32: every weight widens exactly.
  Gemma3Config f32_config = info->config;
  f32_config.dtype = DataType::kF32;
  Result<BuiltModel> widened = build_gemma3(f32_config, weights);
  ASSERT_TRUE(widened.ok()) << widened.status().to_string();
  EXPECT_GT(widened->payload.size(), direct->payload.size());
}

}  // namespace
}  // namespace gearbox::models
