// config.json of every family gearbox reads, as published checkpoints and transformers 4.x
// and 5.x write it, becomes the right DecoderDescription; each field that changes the math
// and that gearbox does not implement is an error naming the field and its value. The
// committed parity checkpoints (tests/data/parity) are read as the parity tests build them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config_error_cases.h"
#include "models/decoder.h"
#include "models/hf_config.h"

namespace gearbox::models {
namespace {

using Json = nlohmann::json;

// meta-llama/Llama-3.2-1B as transformers 4.45 wrote it.
Json llama32_1b() {
  return Json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
    "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})");
}

// meta-llama/Llama-2-7b-hf (transformers 4.31): no rope_theta, no head_dim.
Json llama2_7b() {
  return Json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 11008, "max_position_embeddings": 4096,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null, "tie_word_embeddings": false,
    "torch_dtype": "float16", "transformers_version": "4.31.0.dev0", "use_cache": true, "vocab_size": 32000})");
}

// Qwen/Qwen2.5-0.5B-Instruct (transformers 4.43).
Json qwen25_05b() {
  return Json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
    "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 21, "model_type": "qwen2",
    "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.1", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
}

// Qwen/Qwen3-0.6B (transformers 4.51).
Json qwen3_06b() {
  return Json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
    "initializer_range": 0.02, "intermediate_size": 3072, "max_position_embeddings": 40960,
    "max_window_layers": 28, "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000,
    "sliding_window": null, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
}

// mistralai/Mistral-7B-v0.1 (transformers 4.34).
Json mistral_7b() {
  return Json::parse(R"({
    "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768,
    "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16", "transformers_version": "4.34.0.dev0", "use_cache": true, "vocab_size": 32000})");
}

HfDecoderConfig parse_ok(const Json& config) {
  Result<HfDecoderConfig> r = parse_hf_config(config.dump());
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : HfDecoderConfig{};
}

std::vector<int64_t> windows(const DecoderDescription& d) {
  std::vector<int64_t> w;
  for (const DecoderLayer& layer : d.layers) w.push_back(layer.window);
  return w;
}

TEST(HfFamilies, Llama32OneBillion) {
  const HfDecoderConfig c = parse_ok(llama32_1b());
  const DecoderDescription& d = c.description;
  EXPECT_EQ(d.family, "llama");
  EXPECT_EQ(d.vocab, 128256);
  EXPECT_EQ(d.hidden, 2048);
  EXPECT_EQ(d.intermediate, 8192);
  EXPECT_EQ(d.heads, 32);
  EXPECT_EQ(d.kv_heads, 8);
  EXPECT_EQ(d.head_dim, 64);
  EXPECT_FLOAT_EQ(d.rms_norm_eps, 1e-5f);
  EXPECT_EQ(d.norm, NormStyle::kWeight);
  EXPECT_FALSE(d.qk_norm || d.sandwich_norms || d.qkv_bias || d.o_bias || d.mlp_bias || d.scale_embeddings);
  EXPECT_EQ(d.activation, GatedActivation::kSilu);
  EXPECT_EQ(d.query_pre_attn_scalar, 64.0f);
  EXPECT_TRUE(d.tie_embeddings);
  EXPECT_EQ(d.max_context, 8192);
  EXPECT_EQ(d.dtype, DataType::kBF16);
  ASSERT_EQ(d.layers.size(), 16u);
  const RopeDescription want{500000.0f, RopeScaling::kLlama3, 32.0f, 1.0f, 4.0f, 8192};
  for (const DecoderLayer& layer : d.layers) {
    EXPECT_EQ(layer.window, 0);
    EXPECT_EQ(layer.rope, want);
  }
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001}));
}

TEST(HfFamilies, Llama2TakesTransformersDefaults) {
  const DecoderDescription d = parse_ok(llama2_7b()).description;
  EXPECT_EQ(d.head_dim, 128);  // hidden_size / num_attention_heads
  EXPECT_EQ(d.kv_heads, 32);
  EXPECT_EQ(d.layers[0].rope, RopeDescription{10000.0f});
  EXPECT_FALSE(d.tie_embeddings);
  EXPECT_EQ(d.max_context, 4096);
  EXPECT_EQ(d.dtype, DataType::kF16);

  Json sparse = llama2_7b();  // what transformers fills in when a config leaves it out
  for (const char* key : {"num_key_value_heads", "hidden_act", "tie_word_embeddings", "rope_scaling"}) {
    sparse.erase(key);
  }
  const DecoderDescription s = parse_ok(sparse).description;
  EXPECT_EQ(s.kv_heads, 32);
  EXPECT_EQ(s.activation, GatedActivation::kSilu);
  EXPECT_FALSE(s.tie_embeddings);

  Json biased = llama2_7b();
  biased["attention_bias"] = true;
  biased["mlp_bias"] = true;
  const DecoderDescription b = parse_ok(biased).description;
  EXPECT_TRUE(b.qkv_bias && b.o_bias && b.mlp_bias);

  Json linear = llama2_7b();
  linear["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  EXPECT_EQ(parse_ok(linear).description.layers[31].rope, (RopeDescription{10000.0f, RopeScaling::kLinear, 2.0f}));
}

TEST(HfFamilies, Qwen25HasQkvBiasesAndNoWindowUnlessAsked) {
  const DecoderDescription d = parse_ok(qwen25_05b()).description;
  EXPECT_EQ(d.family, "qwen2");
  EXPECT_TRUE(d.qkv_bias);
  EXPECT_FALSE(d.o_bias || d.mlp_bias || d.qk_norm);
  EXPECT_EQ(d.head_dim, 64);
  EXPECT_EQ(d.kv_heads, 2);
  EXPECT_TRUE(d.tie_embeddings);
  EXPECT_EQ(windows(d), std::vector<int64_t>(24, 0));  // use_sliding_window false
  EXPECT_EQ(d.layers[0].rope.theta, 1e6f);

  Json sliding = qwen25_05b();
  sliding["use_sliding_window"] = true;
  std::vector<int64_t> want(24, 0);
  for (size_t i = 21; i < 24; ++i) want[i] = 32768;  // from max_window_layers on
  EXPECT_EQ(windows(parse_ok(sliding).description), want);

  sliding["layer_types"] = std::vector<std::string>(24, "full_attention");
  sliding["layer_types"][3] = "sliding_attention";
  std::vector<int64_t> listed(24, 0);
  listed[3] = 32768;
  EXPECT_EQ(windows(parse_ok(sliding).description), listed);  // layer_types wins
}

TEST(HfFamilies, Qwen3HasPerHeadQkNorms) {
  const DecoderDescription d = parse_ok(qwen3_06b()).description;
  EXPECT_EQ(d.family, "qwen3");
  EXPECT_TRUE(d.qk_norm);
  EXPECT_FALSE(d.qkv_bias || d.o_bias || d.sandwich_norms);
  EXPECT_EQ(d.norm, NormStyle::kWeight);
  EXPECT_EQ(d.head_dim, 128);  // not hidden / heads (64)
  EXPECT_EQ(d.query_pre_attn_scalar, 128.0f);
  EXPECT_EQ(windows(d), std::vector<int64_t>(28, 0));
  Json biased = qwen3_06b();
  biased["attention_bias"] = true;
  const DecoderDescription b = parse_ok(biased).description;
  EXPECT_TRUE(b.qkv_bias && b.o_bias);
  EXPECT_FALSE(b.mlp_bias);
}

TEST(HfFamilies, MistralSlidesEveryLayer) {
  const DecoderDescription d = parse_ok(mistral_7b()).description;
  EXPECT_EQ(d.family, "mistral");
  EXPECT_EQ(windows(d), std::vector<int64_t>(32, 4096));
  EXPECT_EQ(d.head_dim, 128);
  Json v03 = mistral_7b();  // Mistral-7B-v0.3: no window
  v03["sliding_window"] = nullptr;
  v03["rope_theta"] = 1000000.0;
  const DecoderDescription n = parse_ok(v03).description;
  EXPECT_EQ(windows(n), std::vector<int64_t>(32, 0));
  EXPECT_EQ(n.layers[0].rope.theta, 1e6f);
}

TEST(HfFamilies, Transformers5Spelling) {
  Json llama = llama32_1b();  // rope_parameters with rope_theta inside
  llama.erase("rope_scaling");
  llama.erase("rope_theta");
  llama["rope_parameters"] = {{"rope_type", "llama3"},  {"factor", 32.0},
                              {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                              {"rope_theta", 500000.0}, {"original_max_position_embeddings", 8192}};
  llama["dtype"] = "float32";
  const DecoderDescription d = parse_ok(llama).description;
  EXPECT_EQ(d.layers[5].rope, (RopeDescription{500000.0f, RopeScaling::kLlama3, 32.0f, 1.0f, 4.0f, 8192}));
  EXPECT_EQ(d.dtype, DataType::kF32);

  llama["rope_parameters"].erase("original_max_position_embeddings");  // max_position_embeddings then
  EXPECT_EQ(parse_ok(llama).description.layers[0].rope.original_max_positions, 131072);

  Json qwen = qwen25_05b();  // per layer type
  qwen["use_sliding_window"] = true;
  qwen["layer_types"] = std::vector<std::string>(24, "full_attention");
  qwen["layer_types"][23] = "sliding_attention";
  qwen["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1e6}}},
                             {"sliding_attention", {{"rope_type", "linear"}, {"factor", 2}, {"rope_theta", 1e4}}}};
  const DecoderDescription q = parse_ok(qwen).description;
  EXPECT_EQ(q.layers[0].rope, RopeDescription{1e6f});
  EXPECT_EQ(q.layers[23].rope, (RopeDescription{1e4f, RopeScaling::kLinear, 2.0f}));
  EXPECT_EQ(q.layers[23].window, 32768);
}

TEST(HfFamilies, Gemma3ThroughTheGenericReader) {
  const Json gemma = Json::parse(R"({
    "model_type": "gemma3_text", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
    "rms_norm_eps": 1e-06, "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 24,
    "sliding_window": 16, "sliding_window_pattern": 3, "rope_theta": 1000000.0,
    "rope_local_base_freq": 10000.0, "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    "attention_bias": false, "final_logit_softcapping": null, "attn_logit_softcapping": null})");
  const DecoderDescription d = parse_ok(gemma).description;
  EXPECT_EQ(d.family, "gemma3");
  EXPECT_EQ(d.norm, NormStyle::kOnePlusWeight);
  EXPECT_TRUE(d.qk_norm && d.sandwich_norms && d.scale_embeddings && d.tie_embeddings);
  EXPECT_EQ(d.activation, GatedActivation::kGeluTanh);
  EXPECT_EQ(d.query_pre_attn_scalar, 24.0f);
  EXPECT_EQ(windows(d), (std::vector<int64_t>{16, 16, 0}));
  EXPECT_EQ(d.layers[0].rope, RopeDescription{1e4f});  // rope_scaling: the full layers only
  EXPECT_EQ(d.layers[2].rope, (RopeDescription{1e6f, RopeScaling::kLinear, 8.0f}));
}

std::vector<ConfigErrorCase> family_errors() {
  using C = StatusCode;
  const Json llama = llama32_1b();
  const Json qwen2 = qwen25_05b();
  return {
      {"yarn",
       edited(llama,
              [](Json& j) {
                j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
              }),
       C::kUnimplemented,
       "rope_scaling.rope_type 'yarn' is not supported; gearbox supports default, linear and llama3"},
      {"dynamic, old key",
       edited(llama,
              [](Json& j) {
                j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
              }),
       C::kUnimplemented, "rope_scaling.type 'dynamic' is not supported"},
      {"5.x longrope",
       edited(llama,
              [](Json& j) {
                j.erase("rope_scaling");
                j["rope_parameters"] = {{"rope_type", "longrope"}, {"rope_theta", 1e4}};
              }),
       C::kUnimplemented, "rope_parameters.rope_type 'longrope' is not supported"},
      {"llama3 without low_freq_factor", edited(llama, [](Json& j) { j["rope_scaling"].erase("low_freq_factor"); }),
       C::kDataLoss, "rope_scaling.low_freq_factor is missing for llama3 RoPE"},
      {"llama3 bands", edited(llama, [](Json& j) { j["rope_scaling"]["high_freq_factor"] = 0.5; }), C::kInvalidArgument,
       "high_freq_factor 0.5 must be above low_freq_factor 1"},
      {"partial rotary", edited(llama, [](Json& j) { j["partial_rotary_factor"] = 0.5; }), C::kUnimplemented,
       "partial_rotary_factor 0.5 is not supported (RoPE over the whole head_dim only)"},
      {"activation", edited(llama, [](Json& j) { j["hidden_act"] = "gelu"; }), C::kUnimplemented,
       "hidden_act 'gelu' is not supported; gearbox supports silu and gelu_pytorch_tanh"},
      {"llama window", edited(llama, [](Json& j) { j["sliding_window"] = 4096; }), C::kUnimplemented,
       "sliding_window 4096 is not supported for llama (no sliding windows)"},
      {"llama layer_types", edited(llama, [](Json& j) { j["layer_types"] = {"full_attention"}; }), C::kUnimplemented,
       "layer_types is not supported for llama (every layer attends alike)"},
      {"head_dim from an uneven split",
       edited(llama,
              [](Json& j) {
                j.erase("head_dim");
                j["num_attention_heads"] = 3;
                j["num_key_value_heads"] = 1;
              }),
       C::kDataLoss, "head_dim is missing and hidden_size 2048 is not a multiple of num_attention_heads 3"},
      {"softcapping", edited(llama, [](Json& j) { j["final_logit_softcapping"] = 30.0; }), C::kUnimplemented,
       "final_logit_softcapping 30.0 is not supported"},
      {"qwen2 attention_bias", edited(qwen2, [](Json& j) { j["attention_bias"] = false; }), C::kUnimplemented,
       "attention_bias false is not supported for qwen2 (q, k and v always have biases, o_proj none)"},
      {"qwen2 mlp_bias", edited(qwen2, [](Json& j) { j["mlp_bias"] = true; }), C::kUnimplemented,
       "mlp_bias true is not supported for qwen2 (its MLP has no biases)"},
      {"qwen2 sliding layer without a window",
       edited(qwen2, [](Json& j) { j["layer_types"] = std::vector<std::string>(24, "sliding_attention"); }),
       C::kDataLoss, "layer_types[0] is sliding_attention, but sliding_window is null or use_sliding_window false"},
      {"qwen2 rope per type without sliding",
       edited(qwen2,
              [](Json& j) {
                j["use_sliding_window"] = true;
                j["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1e6}}}};
                j.erase("rope_theta");
              }),
       C::kDataLoss, "rope_parameters has no entry for the sliding_attention layers"},
      {"qwen3 mlp_bias", edited(qwen3_06b(), [](Json& j) { j["mlp_bias"] = true; }), C::kUnimplemented,
       "mlp_bias true is not supported for qwen3"},
      {"mistral attention_bias", edited(mistral_7b(), [](Json& j) { j["attention_bias"] = true; }), C::kUnimplemented,
       "attention_bias true is not supported for mistral (no projection biases)"},
      {"mistral layer_types", edited(mistral_7b(), [](Json& j) { j["layer_types"] = {"sliding_attention"}; }),
       C::kUnimplemented, "layer_types is not supported for mistral"},
      {"gqa", edited(mistral_7b(), [](Json& j) { j["num_key_value_heads"] = 5; }), C::kInvalidArgument,
       "num_attention_heads (32) must be a multiple of num_key_value_heads (5)"},
      {"another architecture", edited(llama, [](Json& j) { j["model_type"] = "phi3"; }), C::kUnimplemented,
       "model_type 'phi3' is not supported; gearbox reads gemma3, gemma3_text, llama, mistral, qwen2 and qwen3 "
       "configs"},
      {"mixture of experts", edited(qwen2, [](Json& j) { j["model_type"] = "qwen2_moe"; }), C::kUnimplemented,
       "model_type 'qwen2_moe' is not supported"},
  };
}

TEST(HfFamilies, UnsupportedFieldsAreErrorsNamingFieldAndValue) {
  for (const ConfigErrorCase& e : family_errors()) {
    SCOPED_TRACE(e.what);
    Result<HfDecoderConfig> r = parse_hf_config(e.config.dump());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), e.code) << r.status().to_string();
    EXPECT_NE(r.status().message().find(e.message), std::string::npos) << r.status().message();
  }
}

TEST(HfFamilies, TheGemmaReaderTakesOnlyGemma) {
  Result<HfModelInfo> r = parse_gemma3_config(llama32_1b().dump());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(r.status().message(), "model_type 'llama' is not a Gemma-3 config (gemma3_text or gemma3)");
}

// The committed parity checkpoints, written by transformers 5.x and some rewritten in the 4.x
// spelling (python/tools/make_parity_checkpoints.py).
TEST(HfFamilies, ParityCheckpoints) {
  const std::string root = std::string(GEARBOX_TEST_DATA) + "/parity/";
  struct Case {
    const char* name;
    const char* family;
    std::vector<int64_t> windows;
    RopeDescription last_rope;
    bool tied;
  };
  const Case cases[] = {
      {"llama3_5x", "llama", {0, 0}, {500000.0f, RopeScaling::kLlama3, 8.0f, 1.0f, 4.0f, 64}, false},
      {"llama2_4x", "llama", {0, 0}, {10000.0f, RopeScaling::kLinear, 3.0f}, true},
      {"qwen2_4x", "qwen2", {0, 5, 5}, {1e6f}, true},
      {"qwen3_5x", "qwen3", {0, 0}, {1e6f}, false},
      {"mistral_4x", "mistral", {6, 6}, {1e6f}, false},
      {"gqa_5x", "gemma3", {6, 0}, {1e6f}, false},
      {"window_4x", "gemma3", {8, 8, 0}, {1e6f}, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<HfDecoderConfig> r = read_hf_config(root + c.name);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->description.family, c.family);
    EXPECT_EQ(windows(r->description), c.windows);
    EXPECT_EQ(r->description.layers.back().rope, c.last_rope);
    EXPECT_EQ(r->description.tie_embeddings, c.tied);
    EXPECT_EQ(r->checkpoint_dtype, DataType::kF32);
  }
  Result<HfDecoderConfig> llama2 = read_hf_config(root + "llama2_4x");
  ASSERT_TRUE(llama2.ok());
  EXPECT_TRUE(llama2->description.qkv_bias && llama2->description.o_bias && llama2->description.mlp_bias);
  EXPECT_EQ(llama2->description.head_dim, 10);
  EXPECT_EQ(llama2->description.kv_heads, 4);
  Result<HfDecoderConfig> qwen3 = read_hf_config(root + "qwen3_5x");
  ASSERT_TRUE(qwen3.ok());
  EXPECT_EQ(qwen3->description.head_dim, 16);
  EXPECT_TRUE(qwen3->description.qk_norm);
}

}  // namespace
}  // namespace gearbox::models
