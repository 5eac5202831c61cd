#include "models/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numbers>
#include <random>

#include "core/check.h"
#include "core/half.h"
#include "devices/cpu/kernels.h"
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

// Adds tensors, weights and nodes to a network and lays weights out in the payload. The
// first failed weight fill is kept in status(); later weights are then skipped.
class NetBuilder {
 public:
  explicit NetBuilder(WeightSource& source) : source_(source) {}

  int32_t tensor(const std::string& name, DataType dtype = DataType::kF32) {
    net_.tensors.push_back({name, dtype});
    return static_cast<int32_t>(net_.tensors.size() - 1);
  }

  /// A checkpoint weight, filled by the source.
  int32_t weight(const std::string& name, Dims dims, DataType dtype) {
    const int32_t id = place(name, dims, dtype);
    if (status_.ok()) status_ = source_.fill(name, dims, dtype, bytes_of(id));
    return id;
  }

  /// A weight gearbox computes (f32 values).
  int32_t computed(const std::string& name, const std::vector<float>& values) {
    const int32_t id = place(name, Dims{static_cast<int64_t>(values.size())}, DataType::kF32);
    std::memcpy(bytes_of(id).data(), values.data(), values.size() * sizeof(float));
    return id;
  }

  std::vector<int32_t> node(OpKind kind, const std::string& name, std::vector<int32_t> inputs,
                            std::vector<int32_t> weights, size_t outputs, ir::OpAttrs attrs = {}) {
    ir::Node n;
    n.kind = kind;
    n.name = name;
    n.inputs = std::move(inputs);
    n.weights = std::move(weights);
    n.attrs = std::move(attrs);
    for (size_t o = 0; o < outputs; ++o)
      n.outputs.push_back(tensor(name + (outputs > 1 ? "." + std::to_string(o) : "")));
    net_.nodes.push_back(std::move(n));
    return net_.nodes.back().outputs;
  }

  int32_t one(OpKind kind, const std::string& name, std::vector<int32_t> inputs, std::vector<int32_t> weights,
              ir::OpAttrs attrs = {}) {
    return node(kind, name, std::move(inputs), std::move(weights), 1, std::move(attrs))[0];
  }

  const Status& status() const { return status_; }
  ir::Network& net() { return net_; }
  std::vector<uint8_t>& payload() { return payload_; }

 private:
  int32_t place(const std::string& name, const Dims& dims, DataType dtype) {
    ir::WeightInfo w;
    w.name = name;
    w.dtype = dtype;
    w.dims = dims;
    w.bytes = static_cast<uint64_t>(ir::tensor_bytes(dims, dtype));
    w.offset = (payload_.size() + 63) / 64 * 64;
    payload_.resize(w.offset + w.bytes, 0);
    net_.weights.push_back(std::move(w));
    return static_cast<int32_t>(net_.weights.size() - 1);
  }

  std::span<uint8_t> bytes_of(int32_t id) {
    const ir::WeightInfo& w = net_.weights[static_cast<size_t>(id)];
    return {payload_.data() + w.offset, w.bytes};
  }

  WeightSource& source_;
  ir::Network net_;
  std::vector<uint8_t> payload_;
  Status status_;
};

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string rope_text(const RopeDescription& r) {
  std::string s = "theta " + num(r.theta);
  switch (r.scaling) {
    case RopeScaling::kNone: break;
    case RopeScaling::kLinear: s += ", linear factor " + num(r.factor); break;
    case RopeScaling::kLlama3:
      s += ", llama3 factor " + num(r.factor) + " low " + num(r.low_freq_factor) + " high " + num(r.high_freq_factor) +
           " original " + std::to_string(r.original_max_positions);
      break;
  }
  return s;
}

// The distinct layers in order of appearance, and each layer's index among them.
struct LayerKinds {
  std::vector<DecoderLayer> kinds;
  std::vector<size_t> of_layer;
};

LayerKinds layer_kinds(const std::vector<DecoderLayer>& layers) {
  LayerKinds k;
  for (const DecoderLayer& layer : layers) {
    size_t i = 0;
    while (i < k.kinds.size() && !(k.kinds[i] == layer)) ++i;
    if (i == k.kinds.size()) k.kinds.push_back(layer);
    k.of_layer.push_back(i);
  }
  return k;
}

// "sliding 512" or "full" (as a metadata key: "sliding" or "full"), numbered when two
// kinds would read the same.
std::vector<std::string> kind_names(const std::vector<DecoderLayer>& kinds, bool as_key) {
  std::vector<std::string> names;
  names.reserve(kinds.size());
  for (const DecoderLayer& k : kinds) {
    names.push_back(k.window == 0 ? "full" : as_key ? "sliding" : "sliding " + std::to_string(k.window));
  }
  for (size_t i = 0; i < names.size(); ++i) {
    for (size_t j = i + 1; j < names.size(); ++j) {
      if (names[j] == names[i]) names[j] += as_key ? "." + std::to_string(j) : " (" + std::to_string(j) + ")";
    }
  }
  return names;
}

// "5 x sliding 512, 1 x full" for layers [begin, end).
std::string runs(const LayerKinds& k, const std::vector<std::string>& names, size_t begin, size_t end) {
  std::string s;
  for (size_t i = begin; i < end;) {
    size_t j = i;
    while (j < end && k.of_layer[j] == k.of_layer[i]) ++j;
    s += (s.empty() ? "" : ", ") + std::to_string(j - i) + " x " + names[k.of_layer[i]];
    i = j;
  }
  return s;
}

std::string layers_text(const LayerKinds& k, const std::vector<std::string>& names) {
  const size_t n = k.of_layer.size();
  for (size_t period = 2; k.kinds.size() > 1 && 2 * period <= n; ++period) {
    bool repeats = true;
    for (size_t i = period; i < n && repeats; ++i) repeats = k.of_layer[i] == k.of_layer[i % period];
    if (repeats) return std::to_string(n) + " layers: (" + runs(k, names, 0, period) + ") repeated";
  }
  return std::to_string(n) + " layers: " + runs(k, names, 0, n);
}

}  // namespace

Status validate_description(const DecoderDescription& d) {
  auto positive = [](int64_t v, const char* field) -> Status {
    if (v >= 1) return {};
    return invalid_argument(std::string(field) + " must be >= 1, got " + std::to_string(v));
  };
  auto positive_float = [](float v, const std::string& field) -> Status {
    if (std::isfinite(v) && v > 0.0f) return {};
    return invalid_argument(field + " must be positive and finite, got " + num(v));
  };
  if (d.family.empty()) return invalid_argument("the model family is empty");
  GEARBOX_RETURN_IF_ERROR(positive(d.vocab, "vocab_size"));
  GEARBOX_RETURN_IF_ERROR(positive(d.hidden, "hidden_size"));
  GEARBOX_RETURN_IF_ERROR(positive(d.intermediate, "intermediate_size"));
  GEARBOX_RETURN_IF_ERROR(positive(static_cast<int64_t>(d.layers.size()), "num_hidden_layers"));
  GEARBOX_RETURN_IF_ERROR(positive(d.heads, "num_attention_heads"));
  GEARBOX_RETURN_IF_ERROR(positive(d.kv_heads, "num_key_value_heads"));
  GEARBOX_RETURN_IF_ERROR(positive(d.head_dim, "head_dim"));
  GEARBOX_RETURN_IF_ERROR(positive(d.max_context, "max context"));
  if (d.max_batch < 0) return invalid_argument("the maximum batch must be >= 0, got " + std::to_string(d.max_batch));
  if (d.heads % d.kv_heads != 0) {
    return invalid_argument("num_attention_heads (" + std::to_string(d.heads) +
                            ") must be a multiple of num_key_value_heads (" + std::to_string(d.kv_heads) + ")");
  }
  if (d.head_dim % 2 != 0) return invalid_argument("head_dim must be even for RoPE, got " + std::to_string(d.head_dim));
  GEARBOX_RETURN_IF_ERROR(positive_float(d.rms_norm_eps, "rms_norm_eps"));
  GEARBOX_RETURN_IF_ERROR(positive_float(d.query_pre_attn_scalar, "the attention scale's query_pre_attn_scalar"));
  for (size_t i = 0; i < d.layers.size(); ++i) {
    const DecoderLayer& layer = d.layers[i];
    const std::string name = "layer " + std::to_string(i);
    if (layer.window < 0) return invalid_argument(name + ": sliding_window " + std::to_string(layer.window) + " < 0");
    const RopeDescription& r = layer.rope;
    GEARBOX_RETURN_IF_ERROR(positive_float(r.theta, name + ": rope_theta"));
    if (r.scaling == RopeScaling::kNone) continue;
    if (!(std::isfinite(r.factor) && r.factor >= 1.0f)) {
      return invalid_argument(name + ": the RoPE scaling factor must be >= 1, got " + num(r.factor));
    }
    if (r.scaling != RopeScaling::kLlama3) continue;
    GEARBOX_RETURN_IF_ERROR(positive_float(r.low_freq_factor, name + ": low_freq_factor"));
    if (!(std::isfinite(r.high_freq_factor) && r.high_freq_factor > r.low_freq_factor)) {
      return invalid_argument(name + ": high_freq_factor " + num(r.high_freq_factor) +
                              " must be above low_freq_factor " + num(r.low_freq_factor));
    }
    GEARBOX_RETURN_IF_ERROR(positive(r.original_max_positions, "original_max_position_embeddings"));
  }
  if (d.dtype != DataType::kF32 && d.dtype != DataType::kBF16 && d.dtype != DataType::kF16) {
    return invalid_argument(std::string("weights must be f32, bf16 or f16, not ") + data_type_name(d.dtype));
  }
  return {};
}

std::vector<float> rope_inv_freq(const RopeDescription& rope, int64_t head_dim) {
  std::vector<float> inv_freq;
  for (int64_t i = 0; i < head_dim / 2; ++i) inv_freq.push_back(cpu::rope_inv_freq(rope.theta, i, head_dim));
  if (rope.scaling != RopeScaling::kLlama3) return inv_freq;
  // HF's _compute_llama3_parameters, one f32 tensor op at a time: `scalar / tensor` is
  // reciprocal(tensor) * scalar, and Python scalars meet f32 tensors as f32.
  const double old_context = static_cast<double>(rope.original_max_positions);
  const auto low_wavelen = static_cast<float>(old_context / rope.low_freq_factor);
  const auto high_wavelen = static_cast<float>(old_context / rope.high_freq_factor);
  const auto two_pi = static_cast<float>(2.0 * std::numbers::pi);
  const auto band = static_cast<float>(static_cast<double>(rope.high_freq_factor) - rope.low_freq_factor);
  for (float& f : inv_freq) {
    const float wavelen = (1.0f / f) * two_pi;
    const float scaled = wavelen > low_wavelen ? f / rope.factor : f;
    const float smooth = ((1.0f / wavelen) * static_cast<float>(old_context) - rope.low_freq_factor) / band;
    const float low_part = (1.0f - smooth) * scaled / rope.factor;
    const float high_part = smooth * scaled;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    f = medium ? low_part + high_part : scaled;
  }
  return inv_freq;
}

std::vector<std::pair<std::string, std::string>> describe(const DecoderDescription& d) {
  std::vector<std::pair<std::string, std::string>> out;
  out.emplace_back("model.family", d.family);
  out.emplace_back("model.dims", "hidden " + std::to_string(d.hidden) + ", ffn " + std::to_string(d.intermediate) +
                                     ", heads " + std::to_string(d.heads) + ", kv heads " + std::to_string(d.kv_heads) +
                                     ", head_dim " + std::to_string(d.head_dim));
  std::string norm = std::string(d.norm == NormStyle::kOnePlusWeight ? "rms_norm x * (1 + w)" : "rms_norm x * w") +
                     ", eps " + num(d.rms_norm_eps);
  if (d.qk_norm) norm += ", q/k per head";
  if (d.sandwich_norms) norm += ", sandwich";
  out.emplace_back("model.norm", norm);
  std::string biases;
  if (d.qkv_bias) biases += " q k v";
  if (d.o_bias) biases += " o";
  out.emplace_back("model.attention", "scores / sqrt(" + num(d.query_pre_attn_scalar) + "), " +
                                          (biases.empty() ? "no biases" : "biases on" + biases));
  out.emplace_back("model.mlp", std::string(d.activation == GatedActivation::kSilu ? "silu" : "gelu_tanh") +
                                    "(gate) * up" + (d.mlp_bias ? ", biases" : ""));
  out.emplace_back("model.embedding", std::string(d.scale_embeddings ? "x sqrt(hidden)" : "x 1") + ", lm_head " +
                                          (d.tie_embeddings ? "tied" : "untied"));
  const LayerKinds kinds = layer_kinds(d.layers);
  const std::vector<std::string> names = kind_names(kinds.kinds, /*as_key=*/false);
  out.emplace_back("model.layers", layers_text(kinds, names));
  std::vector<RopeDescription> ropes;
  for (const DecoderLayer& k : kinds.kinds) {
    if (std::find(ropes.begin(), ropes.end(), k.rope) == ropes.end()) ropes.push_back(k.rope);
  }
  if (ropes.size() == 1) {
    out.emplace_back("model.rope", rope_text(ropes[0]));
  } else {
    const std::vector<std::string> keys = kind_names(kinds.kinds, /*as_key=*/true);
    for (size_t i = 0; i < kinds.kinds.size(); ++i) {
      out.emplace_back("model.rope." + keys[i], rope_text(kinds.kinds[i].rope));
    }
  }
  return out;
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

Result<BuiltModel> build_decoder(const DecoderDescription& c, WeightSource& source) {
  GEARBOX_RETURN_IF_ERROR(validate_description(c));
  NetBuilder b(source);
  ir::Network& net = b.net();
  net.max_context = c.max_context;

  const bool batched = c.max_batch > 0;
  const int64_t batch = batched ? -1 : 1;
  const int32_t tokens = b.tensor(kTokensBinding, DataType::kI64);
  const int32_t positions = b.tensor(kPositionsBinding, DataType::kI64);
  net.inputs.push_back({tokens, Dims{batch, -1}, {kBatchDim, kSeqDim}});
  net.inputs.push_back({positions, Dims{batch, -1}, {kBatchDim, kSeqDim}});
  int32_t slots = -1;
  if (batched) {
    if (c.all_logits) return invalid_argument("a batched network gives the last position's logits only");
    net.slots = c.max_batch;
    slots = b.tensor(kSlotsBinding, DataType::kI64);
    net.inputs.push_back({slots, Dims{-1}, {kBatchDim}});
  }

  const DataType wt = c.dtype;
  auto weight = [&](const std::string& name, Dims dims) { return b.weight(name, dims, wt); };
  // Biases are f32 whatever the weight dtype: every device adds them in f32.
  auto bias = [&](const std::string& name, int64_t n) { return b.weight(name, Dims{n}, DataType::kF32); };
  const int32_t embed = weight("model.embed_tokens.weight", Dims{c.vocab, c.hidden});

  ir::OpAttrs emb;
  emb.scale = c.scale_embeddings ? round_to(std::sqrt(static_cast<float>(c.hidden)), wt) : 1.0f;
  int32_t h = b.one(OpKind::kEmbedding, "embed", {tokens}, {embed}, emb);

  ir::OpAttrs norm;
  norm.eps = c.rms_norm_eps;
  norm.weight_offset = c.norm == NormStyle::kOnePlusWeight ? 1.0f : 0.0f;
  ir::OpAttrs head_norm = norm;
  head_norm.head_dim = static_cast<int32_t>(c.head_dim);
  const char* activation_name = c.activation == GatedActivation::kSilu ? "silu_mul" : "gelu_mul";
  const OpKind activation = c.activation == GatedActivation::kSilu ? OpKind::kSiluMul : OpKind::kGeluTanhMul;
  std::vector<std::pair<RopeDescription, int32_t>> rope_tables;  // llama3 inverse frequencies, shared

  for (size_t i = 0; i < c.layers.size(); ++i) {
    const DecoderLayer& layer = c.layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const std::string l = "layers." + std::to_string(i) + ".";
    const int64_t qw = c.heads * c.head_dim, kvw = c.kv_heads * c.head_dim;
    const int32_t in_norm = weight(p + "input_layernorm.weight", Dims{c.hidden});
    std::vector<int32_t> qkv_weights = {weight(p + "self_attn.q_proj.weight", Dims{qw, c.hidden}),
                                        weight(p + "self_attn.k_proj.weight", Dims{kvw, c.hidden}),
                                        weight(p + "self_attn.v_proj.weight", Dims{kvw, c.hidden})};
    if (c.qkv_bias) {
      qkv_weights.push_back(bias(p + "self_attn.q_proj.bias", qw));
      qkv_weights.push_back(bias(p + "self_attn.k_proj.bias", kvw));
      qkv_weights.push_back(bias(p + "self_attn.v_proj.bias", kvw));
    }
    const int32_t q_norm = c.qk_norm ? weight(p + "self_attn.q_norm.weight", Dims{c.head_dim}) : -1;
    const int32_t k_norm = c.qk_norm ? weight(p + "self_attn.k_norm.weight", Dims{c.head_dim}) : -1;
    std::vector<int32_t> o_weights = {weight(p + "self_attn.o_proj.weight", Dims{c.hidden, qw})};
    if (c.o_bias) o_weights.push_back(bias(p + "self_attn.o_proj.bias", c.hidden));
    const int32_t post_attn = c.sandwich_norms ? weight(p + "post_attention_layernorm.weight", Dims{c.hidden}) : -1;
    const int32_t pre_ffn =
        weight(p + (c.sandwich_norms ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight"),
               Dims{c.hidden});
    std::vector<int32_t> gate_up_weights = {weight(p + "mlp.gate_proj.weight", Dims{c.intermediate, c.hidden}),
                                            weight(p + "mlp.up_proj.weight", Dims{c.intermediate, c.hidden})};
    std::vector<int32_t> down_weights = {weight(p + "mlp.down_proj.weight", Dims{c.hidden, c.intermediate})};
    if (c.mlp_bias) {
      gate_up_weights.push_back(bias(p + "mlp.gate_proj.bias", c.intermediate));
      gate_up_weights.push_back(bias(p + "mlp.up_proj.bias", c.intermediate));
      down_weights.push_back(bias(p + "mlp.down_proj.bias", c.hidden));
    }
    const int32_t post_ffn = c.sandwich_norms ? weight(p + "post_feedforward_layernorm.weight", Dims{c.hidden}) : -1;
    GEARBOX_RETURN_IF_ERROR(b.status());

    std::vector<int32_t> rope_weights;
    if (layer.rope.scaling == RopeScaling::kLlama3) {
      auto it =
          std::find_if(rope_tables.begin(), rope_tables.end(), [&](const auto& t) { return t.first == layer.rope; });
      if (it == rope_tables.end()) {
        const std::string name = "rope.inv_freq." + std::to_string(rope_tables.size());
        rope_tables.emplace_back(layer.rope, b.computed(name, rope_inv_freq(layer.rope, c.head_dim)));
        it = rope_tables.end() - 1;
      }
      rope_weights.push_back(it->second);
    }

    net.states.push_back({l + "kv_cache", DataType::kF32, c.max_context, kvw});
    const int32_t x = b.one(OpKind::kRmsNorm, l + "input_norm", {h}, {in_norm}, norm);
    ir::OpAttrs linear;
    linear.has_bias = c.qkv_bias ? 1 : 0;
    const std::vector<int32_t> qkv = b.node(OpKind::kLinear, l + "qkv_proj", {x}, qkv_weights, 3, linear);
    int32_t q = qkv[0], k = qkv[1];
    if (c.qk_norm) {
      q = b.one(OpKind::kRmsNorm, l + "q_norm", {q}, {q_norm}, head_norm);
      k = b.one(OpKind::kRmsNorm, l + "k_norm", {k}, {k_norm}, head_norm);
    }
    ir::OpAttrs rope;
    rope.theta = layer.rope.theta;
    rope.scale = layer.rope.scaling == RopeScaling::kLinear ? 1.0f / layer.rope.factor : 1.0f;
    rope.head_dim = static_cast<int32_t>(c.head_dim);
    rope.heads = static_cast<int32_t>(c.heads);
    const int32_t qr = b.one(OpKind::kRope, l + "q_rope", {q, positions}, rope_weights, rope);
    rope.heads = static_cast<int32_t>(c.kv_heads);
    const int32_t kr = b.one(OpKind::kRope, l + "k_rope", {k, positions}, rope_weights, rope);
    ir::OpAttrs attn;
    attn.heads = static_cast<int32_t>(c.heads);
    attn.kv_heads = static_cast<int32_t>(c.kv_heads);
    attn.head_dim = static_cast<int32_t>(c.head_dim);
    attn.window = static_cast<int32_t>(layer.window);
    attn.scale = 1.0f / std::sqrt(c.query_pre_attn_scalar);
    attn.state = static_cast<int32_t>(i);
    std::vector<int32_t> attn_inputs = {qr, kr, qkv[2], positions};
    if (batched) attn_inputs.push_back(slots);
    const int32_t a = b.one(OpKind::kAttention, l + "attention", std::move(attn_inputs), {}, attn);
    linear.has_bias = c.o_bias ? 1 : 0;
    int32_t o = b.one(OpKind::kLinear, l + "o_proj", {a}, o_weights, linear);
    if (c.sandwich_norms) o = b.one(OpKind::kRmsNorm, l + "post_attention_norm", {o}, {post_attn}, norm);
    h = b.one(OpKind::kAdd, l + "attention_residual", {h, o}, {});
    const int32_t f = b.one(OpKind::kRmsNorm, l + "pre_ffn_norm", {h}, {pre_ffn}, norm);
    linear.has_bias = c.mlp_bias ? 1 : 0;
    const std::vector<int32_t> gu = b.node(OpKind::kLinear, l + "gate_up_proj", {f}, gate_up_weights, 2, linear);
    const int32_t m = b.one(activation, l + activation_name, {gu[0], gu[1]}, {});
    int32_t d = b.one(OpKind::kLinear, l + "down_proj", {m}, down_weights, linear);
    if (c.sandwich_norms) d = b.one(OpKind::kRmsNorm, l + "post_ffn_norm", {d}, {post_ffn}, norm);
    h = b.one(OpKind::kAdd, l + "ffn_residual", {h, d}, {});
  }
  const int32_t last = c.all_logits ? h : b.one(OpKind::kTakeLast, "take_last", {h}, {});
  const int32_t final_norm = weight("model.norm.weight", Dims{c.hidden});
  const int32_t n = b.one(OpKind::kRmsNorm, "final_norm", {last}, {final_norm}, norm);
  const int32_t head = c.tie_embeddings ? embed : weight("lm_head.weight", Dims{c.vocab, c.hidden});
  GEARBOX_RETURN_IF_ERROR(b.status());
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
