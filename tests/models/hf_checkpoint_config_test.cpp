// config.json as transformers 4.x and 5.x write it (text-only and multimodal) becomes the
// right Gemma3Config, every bad field is an error naming it, and a checkpoint directory's
// config.json and generation_config.json are read together.
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

#include "config_error_cases.h"
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

// ---- config.json -------------------------------------------------------------------------------

// google/gemma-3-1b-it as transformers 4.50 wrote it.
Json gemma3_1b_config() {
  return Json::parse(R"({
    "architectures": ["Gemma3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "attn_logit_softcapping": null, "bos_token_id": 2, "cache_implementation": "hybrid",
    "eos_token_id": [1, 106], "final_logit_softcapping": null, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "initializer_range": 0.02,
    "intermediate_size": 6912, "max_position_embeddings": 32768, "model_type": "gemma3_text",
    "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1, "pad_token_id": 0,
    "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000,
    "rope_scaling": null, "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6,
    "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0", "use_cache": true, "vocab_size": 262144})");
}

// google/gemma-3-4b-it's shape: text_config holds only what differs from Gemma3TextConfig.
Json multimodal_config() {
  return Json::parse(R"({
    "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999,
    "eoi_token_index": 256000, "eos_token_id": [1, 106], "image_token_index": 262144,
    "initializer_range": 0.02, "mm_tokens_per_image": 256, "model_type": "gemma3",
    "text_config": {
      "hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
      "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
      "sliding_window": 1024},
    "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
    "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model"}})");
}

Result<HfModelInfo> parse(const Json& config) { return parse_gemma3_config(config.dump()); }

TEST(HfConfig, Gemma3OneBillionFromTransformers4) {
  Result<HfModelInfo> info = parse(gemma3_1b_config());
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  const Gemma3Config& c = info->config;
  EXPECT_EQ(c.vocab, 262144);
  EXPECT_EQ(c.hidden, 1152);
  EXPECT_EQ(c.intermediate, 6912);
  EXPECT_EQ(c.layers, 26);
  EXPECT_EQ(c.heads, 4);
  EXPECT_EQ(c.kv_heads, 1);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_EQ(c.rope_theta_global, 1e6f);
  EXPECT_EQ(c.rope_theta_local, 1e4f);
  EXPECT_EQ(c.rope_linear_factor_global, 1.0f);
  EXPECT_EQ(c.sliding_window, 512);
  ASSERT_EQ(c.layer_is_sliding.size(), 26u);
  for (size_t i = 0; i < 26; ++i) EXPECT_EQ(c.layer_is_sliding[i], (i + 1) % 6 != 0) << i;
  EXPECT_EQ(c.query_pre_attn_scalar, 256.0f);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(c.max_context, 8192);
  EXPECT_EQ(c.dtype, DataType::kBF16);
  EXPECT_EQ(info->checkpoint_dtype, DataType::kBF16);
  EXPECT_EQ(info->bos_token_id, 2);
  EXPECT_EQ(info->eos_token_ids, (std::vector<int64_t>{1, 106}));
  EXPECT_EQ(info->weight_prefix, "");
}

TEST(HfConfig, TextModelFromTransformers5) {
  Result<HfModelInfo> info = parse(v5_config());
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  const Gemma3Config& c = info->config;
  EXPECT_EQ(c.vocab, 512);
  EXPECT_EQ(c.layers, 4);
  EXPECT_EQ(c.layer_is_sliding, (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(c.rope_theta_global, 500000.0f);
  EXPECT_EQ(c.rope_theta_local, 5000.0f);
  EXPECT_EQ(c.rope_linear_factor_global, 4.0f);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_EQ(c.query_pre_attn_scalar, 32.0f);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_EQ(c.max_context, 2048);  // no max_position_embeddings
  EXPECT_EQ(info->checkpoint_dtype, DataType::kF16);
  EXPECT_EQ(info->eos_token_ids, (std::vector<int64_t>{1}));
}

TEST(HfConfig, MultimodalTakesTextDefaultsForWhatItOmits) {
  Result<HfModelInfo> info = parse(multimodal_config());
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  const Gemma3Config& c = info->config;
  EXPECT_EQ(c.vocab, 262208);
  EXPECT_EQ(c.hidden, 2560);
  EXPECT_EQ(c.intermediate, 10240);
  EXPECT_EQ(c.layers, 34);
  EXPECT_EQ(c.heads, 8);
  EXPECT_EQ(c.kv_heads, 4);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.sliding_window, 1024);
  EXPECT_EQ(c.rope_linear_factor_global, 8.0f);
  EXPECT_EQ(c.rope_theta_global, 1e6f);
  EXPECT_EQ(c.rope_theta_local, 1e4f);
  EXPECT_EQ(c.query_pre_attn_scalar, 256.0f);
  ASSERT_EQ(c.layer_is_sliding.size(), 34u);
  EXPECT_FALSE(c.layer_is_sliding[5]);
  EXPECT_TRUE(c.layer_is_sliding[6]);
  EXPECT_FALSE(c.layer_is_sliding[29]);
  EXPECT_EQ(c.max_context, 8192);
  EXPECT_EQ(info->checkpoint_dtype, DataType::kBF16);
  EXPECT_EQ(info->bos_token_id, 2);
  EXPECT_EQ(info->eos_token_ids, (std::vector<int64_t>{1, 106}));
}

TEST(HfConfig, RopeVariants) {
  Json flat = gemma3_1b_config();  // one rope_parameters dict for the global layers
  flat.erase("rope_theta");
  flat["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2}, {"rope_theta", 20000.0}};
  Result<HfModelInfo> a = parse(flat);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->config.rope_theta_global, 20000.0f);
  EXPECT_EQ(a->config.rope_theta_local, 1e4f);
  EXPECT_EQ(a->config.rope_linear_factor_global, 2.0f);

  Json old_key = gemma3_1b_config();  // rope_scaling with the old "type" key
  old_key["rope_scaling"] = {{"type", "linear"}, {"factor", 8.0}};
  Result<HfModelInfo> b = parse(old_key);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->config.rope_linear_factor_global, 8.0f);
  EXPECT_EQ(b->config.rope_theta_global, 1e6f);

  Json theta_outside = v5_config();  // per-type entries without thetas take the fields
  theta_outside["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}}},
                                      {"sliding_attention", {{"rope_type", "default"}}}};
  theta_outside["rope_theta"] = 123.0;
  theta_outside["rope_local_base_freq"] = 45.0;
  Result<HfModelInfo> c = parse(theta_outside);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->config.rope_theta_global, 123.0f);
  EXPECT_EQ(c->config.rope_theta_local, 45.0f);
  EXPECT_EQ(c->config.rope_linear_factor_global, 1.0f);
}

std::vector<ConfigErrorCase> config_errors() {
  const Json base = gemma3_1b_config();
  using C = StatusCode;
  return {
      {"missing hidden_size", edited(base, [](Json& j) { j.erase("hidden_size"); }), C::kDataLoss,
       "hidden_size is missing"},
      {"null head_dim", edited(base, [](Json& j) { j["head_dim"] = nullptr; }), C::kDataLoss, "head_dim is missing"},
      {"string size", edited(base, [](Json& j) { j["vocab_size"] = "262144"; }), C::kDataLoss,
       "vocab_size must be an integer, got '262144'"},
      {"fractional size", edited(base, [](Json& j) { j["num_hidden_layers"] = 26.5; }), C::kDataLoss,
       "num_hidden_layers must be an integer, got 26.5"},
      {"zero size", edited(base, [](Json& j) { j["num_attention_heads"] = 0; }), C::kDataLoss,
       "num_attention_heads is 0, outside [1, 2147483647]"},
      {"missing rms_norm_eps", edited(base, [](Json& j) { j.erase("rms_norm_eps"); }), C::kDataLoss,
       "rms_norm_eps is missing"},
      {"negative eps", edited(base, [](Json& j) { j["rms_norm_eps"] = -1; }), C::kDataLoss,
       "rms_norm_eps must be a positive number, got -1"},
      {"final softcapping", edited(base, [](Json& j) { j["final_logit_softcapping"] = 30.0; }), C::kUnimplemented,
       "final_logit_softcapping 30.0 is not supported"},
      {"attention softcapping", edited(base, [](Json& j) { j["attn_logit_softcapping"] = 50.0; }), C::kUnimplemented,
       "attn_logit_softcapping 50.0 is not supported"},
      {"unknown rope type",
       edited(base,
              [](Json& j) {
                j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4}};
              }),
       C::kUnimplemented,
       "rope_scaling.rope_type 'yarn' is not supported; gearbox supports default, linear and llama3"},
      {"unknown 5.x rope type",
       edited(v5_config(), [](Json& j) { j["rope_parameters"]["full_attention"]["rope_type"] = "dynamic"; }),
       C::kUnimplemented, "rope_parameters.full_attention.rope_type 'dynamic' is not supported"},
      {"llama3 RoPE, which Gemma3Config cannot hold",
       edited(v5_config(),
              [](Json& j) {
                j["rope_parameters"]["full_attention"] = {{"rope_type", "llama3"},
                                                          {"factor", 8},
                                                          {"low_freq_factor", 1},
                                                          {"high_freq_factor", 4},
                                                          {"original_max_position_embeddings", 64},
                                                          {"rope_theta", 5e5}};
              }),
       C::kUnimplemented, "a Gemma3Config cannot hold llama3 RoPE scaling"},
      {"linear without factor",
       edited(base,
              [](Json& j) {
                j["rope_scaling"] = {{"rope_type", "linear"}};
              }),
       C::kDataLoss, "rope_scaling.factor is missing for linear RoPE"},
      {"scaled sliding layers",
       edited(
           v5_config(),
           [](Json& j) {
             j["rope_parameters"]["sliding_attention"] = {{"rope_type", "linear"}, {"factor", 2}, {"rope_theta", 1e4}};
           }),
       C::kUnimplemented, "a Gemma3Config cannot hold RoPE scaling on sliding layers"},
      {"missing rope_theta", edited(base, [](Json& j) { j.erase("rope_theta"); }), C::kDataLoss,
       "rope_theta is missing"},
      {"layer_types length",
       edited(base,
              [](Json& j) {
                j["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention"};
              }),
       C::kDataLoss, "layer_types has 3 entries for 26 layers (num_hidden_layers)"},
      {"unknown layer type", edited(v5_config(), [](Json& j) { j["layer_types"][2] = "chunked_attention"; }),
       C::kUnimplemented, "layer_types[2] 'chunked_attention' is not supported"},
      {"no layer kinds", edited(base, [](Json& j) { j.erase("sliding_window_pattern"); }), C::kDataLoss,
       "layer_types and sliding_window_pattern are both missing"},
      {"bad activation", edited(base, [](Json& j) { j["hidden_activation"] = "gelu"; }), C::kUnimplemented,
       "hidden_activation 'gelu' is not supported; gearbox supports silu and gelu_pytorch_tanh"},
      {"bad hidden_act",
       edited(base,
              [](Json& j) {
                j.erase("hidden_activation");
                j["hidden_act"] = "relu";
              }),
       C::kUnimplemented, "hidden_act 'relu' is not supported"},
      {"bidirectional attention", edited(base, [](Json& j) { j["use_bidirectional_attention"] = true; }),
       C::kUnimplemented, "use_bidirectional_attention true is not supported (causal attention only)"},
      {"attention bias", edited(base, [](Json& j) { j["attention_bias"] = true; }), C::kUnimplemented,
       "attention_bias true is not supported for gemma3 (no projection biases)"},
      {"bad dtype", edited(base, [](Json& j) { j["torch_dtype"] = "float64"; }), C::kUnimplemented,
       "torch_dtype 'float64' is not supported; use float32, bfloat16 or float16"},
      {"bad eos",
       edited(base,
              [](Json& j) {
                j["eos_token_id"] = {1, "x"};
              }),
       C::kDataLoss, "eos_token_id must be a token id or a list of token ids, got a list"},
      {"bad tie", edited(base, [](Json& j) { j["tie_word_embeddings"] = "yes"; }), C::kDataLoss,
       "tie_word_embeddings must be true or false, got 'yes'"},
      {"other model", edited(base, [](Json& j) { j["model_type"] = "llama"; }), C::kUnimplemented,
       "model_type 'llama' is not a Gemma-3 config (gemma3_text or gemma3)"},
      {"no model_type", edited(base, [](Json& j) { j.erase("model_type"); }), C::kDataLoss, "model_type is missing"},
      {"multimodal without text_config", edited(multimodal_config(), [](Json& j) { j.erase("text_config"); }),
       C::kDataLoss, "text_config is missing from a gemma3 config"},
      {"multimodal bad field", edited(multimodal_config(), [](Json& j) { j["text_config"]["head_dim"] = -2; }),
       C::kDataLoss, "text_config.head_dim is -2, outside"},
      {"not an object", Json::array({1, 2}), C::kDataLoss, "config is not a JSON object"},
      {"heads not a multiple of kv heads", edited(base, [](Json& j) { j["num_key_value_heads"] = 3; }),
       C::kInvalidArgument, "must be a multiple of num_key_value_heads"},
  };
}

TEST(HfConfig, ErrorsNameTheField) {
  for (const ConfigErrorCase& e : config_errors()) {
    SCOPED_TRACE(e.what);
    Result<HfModelInfo> info = parse(e.config);
    ASSERT_FALSE(info.ok());
    expect_error(info.status(), e.code, e.message);
  }
  Result<HfModelInfo> not_json = parse_gemma3_config("{\"model_type\": ");
  ASSERT_FALSE(not_json.ok());
  expect_error(not_json.status(), StatusCode::kDataLoss, "config is not valid JSON");
}

TEST_F(HfCheckpoint, ReadsConfigAndGenerationConfig) {
  Json config = gemma3_1b_config();
  config["eos_token_id"] = 1;
  config["bos_token_id"] = 7;
  write_text(path("config.json"), config.dump());
  write_text(path("generation_config.json"), R"({"bos_token_id": 2, "eos_token_id": [1, 106], "do_sample": true})");
  Result<HfModelInfo> info = read_gemma3_config(dir());
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->bos_token_id, 2);
  EXPECT_EQ(info->eos_token_ids, (std::vector<int64_t>{1, 106}));
  EXPECT_EQ(info->config.hidden, 1152);

  write_text(path("generation_config.json"), R"({"eos_token_id": "end"})");
  Result<HfModelInfo> bad = read_gemma3_config(dir());
  ASSERT_FALSE(bad.ok());
  expect_error(bad.status(), StatusCode::kDataLoss, "generation_config.json: eos_token_id must be a token id");

  fs::remove(path("generation_config.json"));
  config.erase("hidden_size");
  write_text(path("config.json"), config.dump());
  Result<HfModelInfo> broken = read_gemma3_config(dir());
  ASSERT_FALSE(broken.ok());
  expect_error(broken.status(), StatusCode::kDataLoss, "config.json: hidden_size is missing");

  fs::remove(path("config.json"));
  EXPECT_EQ(read_gemma3_config(dir()).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace gearbox::models
