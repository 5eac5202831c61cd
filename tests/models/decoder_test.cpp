// The decoder builder: what each family's description turns into (nodes, weights and their
// dtypes, RoPE tables, windows), Llama-3 RoPE frequencies as HF transformers computes them,
// the metadata description, validation errors, and Gemma3Config <-> description.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ir/validate.h"
#include "models/decoder.h"
#include "models/gemma3.h"

namespace gearbox::models {
namespace {

using ir::OpKind;

DecoderDescription small(const std::string& family) {
  DecoderDescription d;
  d.family = family;
  d.vocab = 33;
  d.hidden = 24;
  d.intermediate = 40;
  d.heads = 4;
  d.kv_heads = 2;
  d.head_dim = 6;
  d.layers.assign(2, DecoderLayer{});
  d.query_pre_attn_scalar = 6.0f;
  d.max_context = 32;
  return d;
}

const ir::Node& node(const BuiltModel& m, const std::string& name) {
  for (const ir::Node& n : m.network.nodes) {
    if (n.name == name) return n;
  }
  ADD_FAILURE() << "no node " << name;
  return m.network.nodes.front();
}

const ir::WeightInfo& weight(const BuiltModel& m, int32_t id) { return m.network.weights[static_cast<size_t>(id)]; }

std::vector<std::string> node_names(const BuiltModel& m) {
  std::vector<std::string> names;
  for (const ir::Node& n : m.network.nodes) names.push_back(n.name);
  return names;
}

BuiltModel build(const DecoderDescription& d) {
  RandomWeights weights(3);
  Result<BuiltModel> m = build_decoder(d, weights);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return {};
  const Status valid = ir::validate_network(m->network, m->payload.size());
  EXPECT_TRUE(valid.ok()) << valid.to_string();
  return std::move(*m);
}

TEST(Decoder, LlamaLayersHaveTwoNormsAndNoQkNorm) {
  DecoderDescription d = small("llama");
  BuiltModel m = build(d);
  const std::vector<std::string> layer0 = {"layers.0.input_norm",
                                           "layers.0.qkv_proj",
                                           "layers.0.q_rope",
                                           "layers.0.k_rope",
                                           "layers.0.attention",
                                           "layers.0.o_proj",
                                           "layers.0.attention_residual",
                                           "layers.0.pre_ffn_norm",
                                           "layers.0.gate_up_proj",
                                           "layers.0.silu_mul",
                                           "layers.0.down_proj",
                                           "layers.0.ffn_residual"};
  const std::vector<std::string> names = node_names(m);
  ASSERT_EQ(names.size(), 1 + 2 * layer0.size() + 3);
  for (size_t i = 0; i < layer0.size(); ++i) EXPECT_EQ(names[1 + i], layer0[i]);
  EXPECT_EQ(names.back(), "logits");
  EXPECT_EQ(weight(m, node(m, "layers.0.pre_ffn_norm").weights[0]).name,
            "model.layers.0.post_attention_layernorm.weight");
  EXPECT_EQ(node(m, "layers.0.input_norm").attrs.weight_offset, 0.0f);
  EXPECT_EQ(node(m, "embed").attrs.scale, 1.0f);
  EXPECT_FLOAT_EQ(node(m, "layers.1.attention").attrs.scale, 1.0f / std::sqrt(6.0f));
  EXPECT_EQ(node(m, "layers.1.attention").attrs.window, 0);
  // Untied: lm_head is its own weight, the last one.
  EXPECT_EQ(weight(m, node(m, "logits").weights[0]).name, "lm_head.weight");
  d.tie_embeddings = true;
  BuiltModel tied = build(d);
  EXPECT_EQ(weight(tied, node(tied, "logits").weights[0]).name, "model.embed_tokens.weight");
}

TEST(Decoder, BiasesAreF32WhateverTheWeightDtype) {
  DecoderDescription d = small("llama");
  d.dtype = DataType::kBF16;
  d.qkv_bias = d.o_bias = d.mlp_bias = true;
  BuiltModel m = build(d);
  const ir::Node& qkv = node(m, "layers.1.qkv_proj");
  EXPECT_EQ(qkv.attrs.has_bias, 1);
  ASSERT_EQ(qkv.weights.size(), 6u);
  EXPECT_EQ(weight(m, qkv.weights[0]).dtype, DataType::kBF16);
  EXPECT_EQ(weight(m, qkv.weights[3]).name, "model.layers.1.self_attn.q_proj.bias");
  for (size_t i = 3; i < 6; ++i) EXPECT_EQ(weight(m, qkv.weights[i]).dtype, DataType::kF32);
  EXPECT_EQ(weight(m, qkv.weights[4]).dims, Dims{12});
  EXPECT_EQ(node(m, "layers.1.o_proj").attrs.has_bias, 1);
  EXPECT_EQ(weight(m, node(m, "layers.1.o_proj").weights[1]).name, "model.layers.1.self_attn.o_proj.bias");
  EXPECT_EQ(node(m, "layers.1.gate_up_proj").weights.size(), 4u);
  EXPECT_EQ(weight(m, node(m, "layers.1.down_proj").weights[1]).name, "model.layers.1.mlp.down_proj.bias");

  d.o_bias = d.mlp_bias = false;  // Qwen2: q, k, v only
  BuiltModel qwen2 = build(d);
  EXPECT_EQ(node(qwen2, "layers.0.o_proj").attrs.has_bias, 0);
  EXPECT_EQ(node(qwen2, "layers.0.o_proj").weights.size(), 1u);
  EXPECT_EQ(node(qwen2, "layers.0.down_proj").weights.size(), 1u);
}

TEST(Decoder, QkNormsNormalizeEachHeadBeforeRope) {
  DecoderDescription d = small("qwen3");
  d.qk_norm = true;
  BuiltModel m = build(d);
  const ir::Node& q_norm = node(m, "layers.0.q_norm");
  EXPECT_EQ(q_norm.attrs.head_dim, 6);
  EXPECT_EQ(q_norm.attrs.weight_offset, 0.0f);
  EXPECT_EQ(weight(m, q_norm.weights[0]).name, "model.layers.0.self_attn.q_norm.weight");
  EXPECT_EQ(node(m, "layers.0.q_rope").inputs[0], q_norm.outputs[0]);
  EXPECT_EQ(node(m, "layers.0.k_rope").inputs[0], node(m, "layers.0.k_norm").outputs[0]);
}

TEST(Decoder, WindowsAndRopePerLayer) {
  DecoderDescription d = small("qwen2");
  d.layers = {DecoderLayer{0, {1e6f}}, DecoderLayer{5, {1e4f, RopeScaling::kLinear, 4.0f}}};
  BuiltModel m = build(d);
  EXPECT_EQ(node(m, "layers.0.attention").attrs.window, 0);
  EXPECT_EQ(node(m, "layers.1.attention").attrs.window, 5);
  EXPECT_EQ(node(m, "layers.0.q_rope").attrs.theta, 1e6f);
  EXPECT_EQ(node(m, "layers.0.q_rope").attrs.scale, 1.0f);
  EXPECT_EQ(node(m, "layers.1.k_rope").attrs.theta, 1e4f);
  EXPECT_EQ(node(m, "layers.1.k_rope").attrs.scale, 0.25f);
  EXPECT_TRUE(node(m, "layers.1.k_rope").weights.empty());  // linear scales the positions
  EXPECT_EQ(node(m, "layers.1.q_rope").attrs.heads, 4);
  EXPECT_EQ(node(m, "layers.1.k_rope").attrs.heads, 2);
}

TEST(Decoder, Llama3RopeSharesOneTablePerDistinctRope) {
  DecoderDescription d = small("llama");
  RopeDescription llama3{500000.0f, RopeScaling::kLlama3, 8.0f, 1.0f, 4.0f, 64};
  d.layers = {DecoderLayer{0, llama3}, DecoderLayer{0, llama3}, DecoderLayer{0, {1e4f}}};
  BuiltModel m = build(d);
  const ir::Node& q0 = node(m, "layers.0.q_rope");
  ASSERT_EQ(q0.weights.size(), 1u);
  EXPECT_EQ(node(m, "layers.0.k_rope").weights, q0.weights);
  EXPECT_EQ(node(m, "layers.1.q_rope").weights, q0.weights);
  EXPECT_TRUE(node(m, "layers.2.q_rope").weights.empty());
  const ir::WeightInfo& table = weight(m, q0.weights[0]);
  EXPECT_EQ(table.name, "rope.inv_freq.0");
  EXPECT_EQ(table.dtype, DataType::kF32);
  EXPECT_EQ(table.dims, Dims{3});
  const std::vector<float> want = rope_inv_freq(llama3, 6);
  std::vector<float> got(3);
  std::memcpy(got.data(), m.payload.data() + table.offset, 12);
  EXPECT_EQ(got, want);
}

// transformers 5.23 `_compute_llama3_parameters` for Llama-3.2-1B's RoPE (theta 500000,
// head_dim 64, factor 32, low_freq_factor 1, high_freq_factor 4, original 8192), as f32 bits.
TEST(Decoder, Llama3FrequenciesMatchTransformers) {
  const std::vector<uint32_t> want = {
      0x3f800000, 0x3f29e1c6, 0x3ee177bc, 0x3e959ee3, 0x3e4693b0, 0x3e03c6a0, 0x3daee4ad, 0x3d681e67,
      0x3d1a08c8, 0x3ccc6f49, 0x3c87a9c3, 0x3c340d6d, 0x3beef74f, 0x3b9e9402, 0x3b527720, 0x3aa9279b,
      0x39e13620, 0x38cb98f7, 0x37a3418d, 0x3758ac81, 0x370fc8f8, 0x36bed4f4, 0x367d45c3, 0x3628126b,
      0x35df10c4, 0x359406cb, 0x35447610, 0x35025f34, 0x34ad07a7, 0x3465a54d, 0x341864a7, 0x33ca41b0};
  const std::vector<float> got = rope_inv_freq({500000.0f, RopeScaling::kLlama3, 32.0f, 1.0f, 4.0f, 8192}, 64);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    // Within one ulp: the unscaled frequencies come from the platform's powf.
    const auto bits = std::bit_cast<uint32_t>(got[i]);
    EXPECT_LE(bits > want[i] ? bits - want[i] : want[i] - bits, 1u) << "frequency " << i;
  }
  // default and linear leave the frequencies alone.
  EXPECT_EQ(rope_inv_freq({500000.0f, RopeScaling::kLinear, 32.0f}, 64), rope_inv_freq({500000.0f}, 64));
}

TEST(Decoder, GemmaThroughTheDescriptionIsTheGemmaNetwork) {
  Gemma3Config c = gemma3_mini_config();
  c.vocab = 50;
  c.hidden = 16;
  c.intermediate = 24;
  c.head_dim = 8;
  c.rope_linear_factor_global = 8.0f;
  c.dtype = DataType::kBF16;
  RandomWeights weights(5);
  Result<BuiltModel> m = build_gemma3(c, weights);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const std::vector<std::string> layer = {"layers.2.input_norm",
                                          "layers.2.qkv_proj",
                                          "layers.2.q_norm",
                                          "layers.2.k_norm",
                                          "layers.2.q_rope",
                                          "layers.2.k_rope",
                                          "layers.2.attention",
                                          "layers.2.o_proj",
                                          "layers.2.post_attention_norm",
                                          "layers.2.attention_residual",
                                          "layers.2.pre_ffn_norm",
                                          "layers.2.gate_up_proj",
                                          "layers.2.gelu_mul",
                                          "layers.2.down_proj",
                                          "layers.2.post_ffn_norm",
                                          "layers.2.ffn_residual"};
  const std::vector<std::string> names = node_names(*m);
  ASSERT_EQ(names.size(), 1 + 3 * layer.size() + 3);
  for (size_t i = 0; i < layer.size(); ++i) EXPECT_EQ(names[1 + 2 * layer.size() + i], layer[i]);
  EXPECT_EQ(node(*m, "layers.0.input_norm").attrs.weight_offset, 1.0f);
  EXPECT_EQ(node(*m, "embed").attrs.scale, 4.0f);  // sqrt(16), exact in bf16
  EXPECT_EQ(node(*m, "layers.0.attention").attrs.window, 512);
  EXPECT_EQ(node(*m, "layers.2.attention").attrs.window, 0);
  EXPECT_EQ(node(*m, "layers.0.q_rope").attrs.theta, 1e4f);
  EXPECT_EQ(node(*m, "layers.0.q_rope").attrs.scale, 1.0f);
  EXPECT_EQ(node(*m, "layers.2.q_rope").attrs.theta, 1e6f);
  EXPECT_EQ(node(*m, "layers.2.q_rope").attrs.scale, 0.125f);
  EXPECT_FLOAT_EQ(node(*m, "layers.2.attention").attrs.scale, 1.0f / 16.0f);  // 1 / sqrt(256)

  Result<Gemma3Config> back = gemma3_config(gemma3_description(c));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->layer_is_sliding, c.layer_is_sliding);
  EXPECT_EQ(back->sliding_window, c.sliding_window);
  EXPECT_EQ(back->rope_theta_local, c.rope_theta_local);
  EXPECT_EQ(back->rope_theta_global, c.rope_theta_global);
  EXPECT_EQ(back->rope_linear_factor_global, c.rope_linear_factor_global);
  EXPECT_EQ(back->query_pre_attn_scalar, c.query_pre_attn_scalar);
  EXPECT_EQ(back->dtype, c.dtype);
  EXPECT_EQ(back->vocab, c.vocab);
}

TEST(Decoder, Gemma3ConfigNamesWhatItCannotHold) {
  DecoderDescription d = gemma3_description(gemma3_mini_config());
  d.layers[0].rope.scaling = RopeScaling::kLinear;
  d.layers[0].rope.factor = 2.0f;
  EXPECT_EQ(gemma3_config(d).status().message(), "a Gemma3Config cannot hold RoPE scaling on sliding layers");
  d = gemma3_description(gemma3_mini_config());
  d.layers[2].rope = {1e6f, RopeScaling::kLlama3, 8.0f, 1.0f, 4.0f, 8192};
  EXPECT_EQ(gemma3_config(d).status().message(), "a Gemma3Config cannot hold llama3 RoPE scaling");
  EXPECT_EQ(gemma3_config(small("llama")).status().code(), StatusCode::kUnimplemented);
}

TEST(Decoder, DescribeSaysWhatTheEngineWasBuiltFrom) {
  Gemma3Config c = gemma3_mini_config();
  c.layers = 26;
  c.layer_is_sliding.clear();
  for (int i = 0; i < 26; ++i) c.layer_is_sliding.push_back((i + 1) % 6 != 0);
  const std::vector<std::pair<std::string, std::string>> gemma = describe(gemma3_description(c));
  const std::map<std::string, std::string> g(gemma.begin(), gemma.end());
  EXPECT_EQ(gemma.size(), g.size()) << "a key repeats";
  EXPECT_EQ(gemma.front(), (std::pair<std::string, std::string>{"model.family", "gemma3"}));
  EXPECT_EQ(g.at("model.dims"), "hidden 320, ffn 640, heads 4, kv heads 1, head_dim 80");
  EXPECT_EQ(g.at("model.norm"), "rms_norm x * (1 + w), eps 1e-06, q/k per head, sandwich");
  EXPECT_EQ(g.at("model.attention"), "scores / sqrt(256), no biases");
  EXPECT_EQ(g.at("model.mlp"), "gelu_tanh(gate) * up");
  EXPECT_EQ(g.at("model.embedding"), "x sqrt(hidden), lm_head tied");
  EXPECT_EQ(g.at("model.layers"), "26 layers: (5 x sliding 512, 1 x full) repeated");
  EXPECT_EQ(g.at("model.rope.sliding"), "theta 10000");
  EXPECT_EQ(g.at("model.rope.full"), "theta 1e+06");

  DecoderDescription q = small("qwen2");
  q.qkv_bias = true;
  q.layers = {DecoderLayer{0, {1e6f}}, DecoderLayer{5, {1e6f}}, DecoderLayer{5, {1e6f}}};
  const std::vector<std::pair<std::string, std::string>> qwen = describe(q);
  const std::map<std::string, std::string> w(qwen.begin(), qwen.end());
  EXPECT_EQ(w.at("model.layers"), "3 layers: 1 x full, 2 x sliding 5");
  EXPECT_EQ(w.at("model.rope"), "theta 1e+06");
  EXPECT_EQ(w.at("model.attention"), "scores / sqrt(6), biases on q k v");
  EXPECT_EQ(w.at("model.embedding"), "x 1, lm_head untied");
  for (const auto& [key, value] : qwen) EXPECT_LE(value.size(), 80u) << key;  // inspect prints up to 80

  DecoderDescription mixed = small("qwen2");  // kinds that share a name are numbered
  mixed.layers = {DecoderLayer{4, {1e4f}}, DecoderLayer{0, {1e6f}}, DecoderLayer{8, {1e4f}}, DecoderLayer{0, {1e5f}}};
  const std::vector<std::pair<std::string, std::string>> m = describe(mixed);
  const std::map<std::string, std::string> k(m.begin(), m.end());
  EXPECT_EQ(m.size(), k.size()) << "a key repeats";
  EXPECT_EQ(k.at("model.layers"), "4 layers: 1 x sliding 4, 1 x full, 1 x sliding 8, 1 x full (3)");
  EXPECT_EQ(k.at("model.rope.sliding"), "theta 10000");
  EXPECT_EQ(k.at("model.rope.full"), "theta 1e+06");
  EXPECT_EQ(k.at("model.rope.sliding.2"), "theta 10000");
  EXPECT_EQ(k.at("model.rope.full.3"), "theta 100000");
}

TEST(Decoder, ValidationNamesTheField) {
  struct Case {
    const char* what;
    void (*edit)(DecoderDescription&);
    const char* message;
  };
  const Case cases[] = {
      {"no layers", [](DecoderDescription& d) { d.layers.clear(); }, "num_hidden_layers must be >= 1, got 0"},
      {"gqa", [](DecoderDescription& d) { d.kv_heads = 3; },
       "num_attention_heads (4) must be a multiple of num_key_value_heads (3)"},
      {"odd head_dim", [](DecoderDescription& d) { d.head_dim = 5; }, "head_dim must be even for RoPE, got 5"},
      {"negative window", [](DecoderDescription& d) { d.layers[1].window = -1; }, "layer 1: sliding_window -1 < 0"},
      {"theta", [](DecoderDescription& d) { d.layers[0].rope.theta = 0.0f; },
       "layer 0: rope_theta must be positive and finite, got 0"},
      {"factor",
       [](DecoderDescription& d) {
         d.layers[0].rope = {1e4f, RopeScaling::kLinear, 0.5f};
       },
       "layer 0: the RoPE scaling factor must be >= 1, got 0.5"},
      {"llama3 band",
       [](DecoderDescription& d) { d.layers[0].rope = {1e4f, RopeScaling::kLlama3, 8.0f, 4.0f, 4.0f, 64}; },
       "layer 0: high_freq_factor 4 must be above low_freq_factor 4"},
      {"eps", [](DecoderDescription& d) { d.rms_norm_eps = -1.0f; }, "rms_norm_eps must be positive and finite"},
      {"dtype", [](DecoderDescription& d) { d.dtype = DataType::kI32; }, "weights must be f32, bf16 or f16, not i32"},
  };
  for (const Case& c : cases) {
    DecoderDescription d = small("llama");
    c.edit(d);
    RandomWeights weights(1);
    Result<BuiltModel> m = build_decoder(d, weights);
    ASSERT_FALSE(m.ok()) << c.what;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(m.status().message().find(c.message), std::string::npos) << c.what << ": " << m.status().message();
  }
}

// A source that fails on one weight: the build returns that error, the first one met.
class FailingWeights final : public WeightSource {
 public:
  Status fill(const std::string& name, const Dims& dims, DataType dtype, std::span<uint8_t> out) override {
    if (name.find("k_proj.bias") != std::string::npos) return not_found("checkpoint has no tensor '" + name + "'");
    return random_.fill(name, dims, dtype, out);
  }

 private:
  RandomWeights random_{1};
};

TEST(Decoder, AWeightSourceErrorStopsTheBuild) {
  DecoderDescription d = small("qwen2");
  d.qkv_bias = true;
  FailingWeights weights;
  Result<BuiltModel> m = build_decoder(d, weights);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(m.status().message(), "checkpoint has no tensor 'model.layers.0.self_attn.k_proj.bias'");
}

}  // namespace
}  // namespace gearbox::models
