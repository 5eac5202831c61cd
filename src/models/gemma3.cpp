#include "models/gemma3.h"

#include <cmath>
#include <cstring>
#include <random>

#include "core/check.h"
#include "core/half.h"
#include "gearbox/binding_names.h"
#include "ir/shape_inference.h"

namespace gearbox::models {
namespace {

using ir::OpKind;

// Rounds a float to what `dtype` can hold (HF casts the embedding scale to the weight dtype).
float round_to(float v, DataType dtype) {
  if (dtype == DataType::kBF16) return internal::bf16_to_f32(internal::f32_to_bf16(v));
  if (dtype == DataType::kF16) return internal::f16_to_f32(internal::f32_to_f16(v));
  return v;
}

void store(float v, DataType dtype, uint8_t* dst) {
  if (dtype == DataType::kF32) {
    std::memcpy(dst, &v, 4);
  } else {
    const uint16_t h = dtype == DataType::kBF16 ? internal::f32_to_bf16(v) : internal::f32_to_f16(v);
    std::memcpy(dst, &h, 2);
  }
}

// Adds tensors, weights and nodes to a network and lays weights out in the payload.
class NetBuilder {
 public:
  NetBuilder(const Gemma3Config& config, WeightSource& source) : config_(config), source_(source) {}

  int32_t tensor(const std::string& name, DataType dtype = DataType::kF32) {
    net_.tensors.push_back({name, dtype});
    return static_cast<int32_t>(net_.tensors.size() - 1);
  }

  Result<int32_t> weight(const std::string& name, Dims dims) {
    ir::WeightInfo w;
    w.name = name;
    w.dtype = config_.dtype;
    w.dims = dims;
    w.bytes = static_cast<uint64_t>(ir::tensor_bytes(dims, config_.dtype));
    w.offset = (payload_.size() + 63) / 64 * 64;
    payload_.resize(w.offset + w.bytes, 0);
    GEARBOX_RETURN_IF_ERROR(
        source_.fill(name, dims, config_.dtype, std::span<uint8_t>(payload_.data() + w.offset, w.bytes)));
    net_.weights.push_back(std::move(w));
    return static_cast<int32_t>(net_.weights.size() - 1);
  }

  std::vector<int32_t> node(OpKind kind, const std::string& name, std::vector<int32_t> inputs,
                            std::vector<int32_t> weights, size_t outputs, ir::OpAttrs attrs = {}) {
    ir::Node n;
    n.kind = kind;
    n.name = name;
    n.inputs = std::move(inputs);
    n.weights = std::move(weights);
    n.attrs = attrs;
    for (size_t o = 0; o < outputs; ++o)
      n.outputs.push_back(tensor(name + (outputs > 1 ? "." + std::to_string(o) : "")));
    net_.nodes.push_back(std::move(n));
    return net_.nodes.back().outputs;
  }

  int32_t one(OpKind kind, const std::string& name, std::vector<int32_t> inputs, std::vector<int32_t> weights,
              ir::OpAttrs attrs = {}) {
    return node(kind, name, std::move(inputs), std::move(weights), 1, attrs)[0];
  }

  ir::Network& net() { return net_; }
  std::vector<uint8_t>& payload() { return payload_; }

 private:
  const Gemma3Config& config_;
  WeightSource& source_;
  ir::Network net_;
  std::vector<uint8_t> payload_;
};

}  // namespace

Gemma3Config gemma3_mini_config() {
  Gemma3Config c;
  c.vocab = 2048;
  c.hidden = 320;
  c.intermediate = 640;
  c.layers = 3;
  c.heads = 4;
  c.kv_heads = 1;
  c.head_dim = 80;
  c.sliding_window = 512;
  c.layer_is_sliding = {true, true, false};
  c.query_pre_attn_scalar = 256.0f;  // Gemma3TextConfig's default, which the seed's mini config kept
  c.max_context = 2048;
  return c;
}

Status validate_config(const Gemma3Config& c) {
  auto positive = [](int64_t v, const char* field) -> Status {
    if (v >= 1) return {};
    return invalid_argument(std::string(field) + " must be >= 1, got " + std::to_string(v));
  };
  GEARBOX_RETURN_IF_ERROR(positive(c.vocab, "vocab_size"));
  GEARBOX_RETURN_IF_ERROR(positive(c.hidden, "hidden_size"));
  GEARBOX_RETURN_IF_ERROR(positive(c.intermediate, "intermediate_size"));
  GEARBOX_RETURN_IF_ERROR(positive(c.layers, "num_hidden_layers"));
  GEARBOX_RETURN_IF_ERROR(positive(c.heads, "num_attention_heads"));
  GEARBOX_RETURN_IF_ERROR(positive(c.kv_heads, "num_key_value_heads"));
  GEARBOX_RETURN_IF_ERROR(positive(c.head_dim, "head_dim"));
  GEARBOX_RETURN_IF_ERROR(positive(c.max_context, "max context"));
  if (c.heads % c.kv_heads != 0) {
    return invalid_argument("num_attention_heads (" + std::to_string(c.heads) +
                            ") must be a multiple of num_key_value_heads (" + std::to_string(c.kv_heads) + ")");
  }
  if (c.head_dim % 2 != 0) return invalid_argument("head_dim must be even for RoPE, got " + std::to_string(c.head_dim));
  if (static_cast<int64_t>(c.layer_is_sliding.size()) != c.layers) {
    return invalid_argument("layer_types has " + std::to_string(c.layer_is_sliding.size()) + " entries for " +
                            std::to_string(c.layers) + " layers");
  }
  if (c.sliding_window < 1) return invalid_argument("sliding_window must be >= 1");
  if (!(c.rms_norm_eps > 0.0f) || !(c.rope_theta_global > 0.0f) || !(c.rope_theta_local > 0.0f) ||
      !(c.query_pre_attn_scalar > 0.0f) || !(c.rope_linear_factor_global >= 1.0f)) {
    return invalid_argument(
        "rms_norm_eps, rope thetas and query_pre_attn_scalar must be positive, the rope factor >= 1");
  }
  if (c.dtype != DataType::kF32 && c.dtype != DataType::kBF16 && c.dtype != DataType::kF16) {
    return invalid_argument(std::string("weights must be f32, bf16 or f16, not ") + data_type_name(c.dtype));
  }
  return {};
}

Status RandomWeights::fill(const std::string& name, const Dims& dims, DataType dtype, std::span<uint8_t> out) {
  std::seed_seq seq(name.begin(), name.end());
  std::vector<uint32_t> state(2);
  seq.generate(state.begin(), state.end());
  std::mt19937_64 rng(seed_ ^ (static_cast<uint64_t>(state[0]) << 32 | state[1]));
  const bool norm = name.find("norm") != std::string::npos;
  std::normal_distribution<float> dist(0.0f, norm ? 0.1f : 0.02f);
  const int64_t count = dims.volume();
  const size_t size = data_type_size(dtype);
  GEARBOX_CHECK(out.size() == static_cast<size_t>(count) * size);
  for (int64_t i = 0; i < count; ++i) store(dist(rng), dtype, out.data() + static_cast<size_t>(i) * size);
  return {};
}

Result<BuiltModel> build_gemma3(const Gemma3Config& c, WeightSource& source) {
  GEARBOX_RETURN_IF_ERROR(validate_config(c));
  NetBuilder b(c, source);
  ir::Network& net = b.net();
  net.max_context = c.max_context;

  const int32_t tokens = b.tensor(kTokensBinding, DataType::kI64);
  const int32_t positions = b.tensor(kPositionsBinding, DataType::kI64);
  net.inputs.push_back({tokens, Dims{1, -1}, {kBatchDim, kSeqDim}});
  net.inputs.push_back({positions, Dims{1, -1}, {kBatchDim, kSeqDim}});

  auto weight = [&](const std::string& name, Dims dims) { return b.weight(name, dims); };
  Result<int32_t> embed = weight("model.embed_tokens.weight", Dims{c.vocab, c.hidden});
  if (!embed.ok()) return embed.status();

  ir::OpAttrs emb;
  emb.scale = round_to(std::sqrt(static_cast<float>(c.hidden)), c.dtype);
  int32_t h = b.one(OpKind::kEmbedding, "embed", {tokens}, {*embed}, emb);

  ir::OpAttrs norm;
  norm.eps = c.rms_norm_eps;
  norm.weight_offset = 1.0f;
  ir::OpAttrs head_norm = norm;
  head_norm.head_dim = static_cast<int32_t>(c.head_dim);

  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const std::string l = "layers." + std::to_string(i) + ".";
    const int64_t qw = c.heads * c.head_dim, kvw = c.kv_heads * c.head_dim;
    Result<int32_t> in_norm = weight(p + "input_layernorm.weight", Dims{c.hidden});
    Result<int32_t> wq = weight(p + "self_attn.q_proj.weight", Dims{qw, c.hidden});
    Result<int32_t> wk = weight(p + "self_attn.k_proj.weight", Dims{kvw, c.hidden});
    Result<int32_t> wv = weight(p + "self_attn.v_proj.weight", Dims{kvw, c.hidden});
    Result<int32_t> q_norm = weight(p + "self_attn.q_norm.weight", Dims{c.head_dim});
    Result<int32_t> k_norm = weight(p + "self_attn.k_norm.weight", Dims{c.head_dim});
    Result<int32_t> wo = weight(p + "self_attn.o_proj.weight", Dims{c.hidden, qw});
    Result<int32_t> post_attn = weight(p + "post_attention_layernorm.weight", Dims{c.hidden});
    Result<int32_t> pre_ffn = weight(p + "pre_feedforward_layernorm.weight", Dims{c.hidden});
    Result<int32_t> wg = weight(p + "mlp.gate_proj.weight", Dims{c.intermediate, c.hidden});
    Result<int32_t> wu = weight(p + "mlp.up_proj.weight", Dims{c.intermediate, c.hidden});
    Result<int32_t> wd = weight(p + "mlp.down_proj.weight", Dims{c.hidden, c.intermediate});
    Result<int32_t> post_ffn = weight(p + "post_feedforward_layernorm.weight", Dims{c.hidden});
    for (const Result<int32_t>* r :
         {&in_norm, &wq, &wk, &wv, &q_norm, &k_norm, &wo, &post_attn, &pre_ffn, &wg, &wu, &wd, &post_ffn}) {
      if (!r->ok()) return r->status();
    }
    const bool sliding = c.layer_is_sliding[static_cast<size_t>(i)];

    net.states.push_back({l + "kv_cache", DataType::kF32, c.max_context, kvw});
    const int32_t x = b.one(OpKind::kRmsNorm, l + "input_norm", {h}, {*in_norm}, norm);
    const std::vector<int32_t> qkv = b.node(OpKind::kLinear, l + "qkv_proj", {x}, {*wq, *wk, *wv}, 3);
    const int32_t qn = b.one(OpKind::kRmsNorm, l + "q_norm", {qkv[0]}, {*q_norm}, head_norm);
    const int32_t kn = b.one(OpKind::kRmsNorm, l + "k_norm", {qkv[1]}, {*k_norm}, head_norm);
    ir::OpAttrs rope;
    rope.theta = sliding ? c.rope_theta_local : c.rope_theta_global;
    rope.scale = sliding ? 1.0f : 1.0f / c.rope_linear_factor_global;
    rope.head_dim = static_cast<int32_t>(c.head_dim);
    rope.heads = static_cast<int32_t>(c.heads);
    const int32_t qr = b.one(OpKind::kRope, l + "q_rope", {qn, positions}, {}, rope);
    rope.heads = static_cast<int32_t>(c.kv_heads);
    const int32_t kr = b.one(OpKind::kRope, l + "k_rope", {kn, positions}, {}, rope);
    ir::OpAttrs attn;
    attn.heads = static_cast<int32_t>(c.heads);
    attn.kv_heads = static_cast<int32_t>(c.kv_heads);
    attn.head_dim = static_cast<int32_t>(c.head_dim);
    attn.window = sliding ? static_cast<int32_t>(c.sliding_window) : 0;
    attn.scale = 1.0f / std::sqrt(c.query_pre_attn_scalar);
    attn.state = static_cast<int32_t>(i);
    const int32_t a = b.one(OpKind::kAttention, l + "attention", {qr, kr, qkv[2], positions}, {}, attn);
    const int32_t o = b.one(OpKind::kLinear, l + "o_proj", {a}, {*wo});
    const int32_t on = b.one(OpKind::kRmsNorm, l + "post_attention_norm", {o}, {*post_attn}, norm);
    h = b.one(OpKind::kAdd, l + "attention_residual", {h, on}, {});
    const int32_t f = b.one(OpKind::kRmsNorm, l + "pre_ffn_norm", {h}, {*pre_ffn}, norm);
    const std::vector<int32_t> gu = b.node(OpKind::kLinear, l + "gate_up_proj", {f}, {*wg, *wu}, 2);
    const int32_t m = b.one(OpKind::kGeluTanhMul, l + "gelu_mul", {gu[0], gu[1]}, {});
    const int32_t d = b.one(OpKind::kLinear, l + "down_proj", {m}, {*wd});
    const int32_t dn = b.one(OpKind::kRmsNorm, l + "post_ffn_norm", {d}, {*post_ffn}, norm);
    h = b.one(OpKind::kAdd, l + "ffn_residual", {h, dn}, {});
  }
  const int32_t last = c.all_logits ? h : b.one(OpKind::kTakeLast, "take_last", {h}, {});
  Result<int32_t> final_norm = weight("model.norm.weight", Dims{c.hidden});
  if (!final_norm.ok()) return final_norm.status();
  const int32_t n = b.one(OpKind::kRmsNorm, "final_norm", {last}, {*final_norm}, norm);
  int32_t head = *embed;
  if (!c.tie_embeddings) {
    Result<int32_t> lm_head = weight("lm_head.weight", Dims{c.vocab, c.hidden});
    if (!lm_head.ok()) return lm_head.status();
    head = *lm_head;
  }
  const int32_t logits = b.one(OpKind::kLinear, "logits", {n}, {head});
  net.tensors[static_cast<size_t>(logits)].name = kLogitsBinding;
  net.outputs.push_back(logits);

  BuiltModel model;
  model.network = std::move(net);
  model.payload = std::move(b.payload());
  model.payload.resize((model.payload.size() + 63) / 64 * 64, 0);
  return model;
}

}  // namespace gearbox::models
