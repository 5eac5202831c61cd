#include "models/hf_weights.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/half.h"

namespace gearbox::models {
namespace {

constexpr std::string_view kModelPrefix = "model.";
constexpr std::string_view kLmHead = "lm_head.weight";

bool readable(DataType t) { return t == DataType::kF32 || t == DataType::kBF16 || t == DataType::kF16; }

float load(const uint8_t* p, DataType t) {
  if (t == DataType::kF32) {
    float v;
    std::memcpy(&v, p, sizeof(v));
    return v;
  }
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return t == DataType::kBF16 ? internal::bf16_to_f32(h) : internal::f16_to_f32(h);
}

void store(float v, DataType t, uint8_t* p) {
  if (t == DataType::kF32) {
    std::memcpy(p, &v, sizeof(v));
    return;
  }
  const uint16_t h = t == DataType::kBF16 ? internal::f32_to_bf16(v) : internal::f32_to_f16(v);
  std::memcpy(p, &h, sizeof(h));
}

// Every pair goes through f32, which holds bf16 and f16 exactly, so each element is rounded
// once. The pair is fixed per call: hoisting the dtype branches out of the loop keeps
// multi-hundred-megabyte embeddings quick.
template <DataType kFrom, DataType kTo>
void convert_all(const uint8_t* src, uint8_t* dst, size_t count) {
  const size_t from = data_type_size(kFrom);
  const size_t to = data_type_size(kTo);
  for (size_t i = 0; i < count; ++i) store(load(src + i * from, kFrom), kTo, dst + i * to);
}

template <DataType kFrom>
void convert_from(const uint8_t* src, DataType to, uint8_t* dst, size_t count) {
  switch (to) {
    case DataType::kF32: convert_all<kFrom, DataType::kF32>(src, dst, count); break;
    case DataType::kBF16: convert_all<kFrom, DataType::kBF16>(src, dst, count); break;
    default: convert_all<kFrom, DataType::kF16>(src, dst, count); break;
  }
}

void convert(const uint8_t* src, DataType from, uint8_t* dst, DataType to, size_t count) {
  if (from == to) {
    if (count != 0) std::memcpy(dst, src, count * data_type_size(from));
    return;
  }
  switch (from) {
    case DataType::kF32: convert_from<DataType::kF32>(src, to, dst, count); break;
    case DataType::kBF16: convert_from<DataType::kBF16>(src, to, dst, count); break;
    default: convert_from<DataType::kF16>(src, to, dst, count); break;
  }
}

}  // namespace

std::string CheckpointWeights::checkpoint_name(const std::string& name) const {
  if (name == kLmHead) return prefix_ == "language_model.model." ? "language_model.lm_head.weight" : name;
  if (name.starts_with(kModelPrefix)) return prefix_ + name.substr(kModelPrefix.size());
  return {};
}

Status CheckpointWeights::fill(const std::string& name, const Dims& dims, DataType dtype, std::span<uint8_t> out) {
  const std::string source = checkpoint_name(name);
  if (source.empty()) return invalid_argument("weight '" + name + "' is neither model.* nor lm_head.weight");
  if (!readable(dtype)) {
    return invalid_argument(std::string("weight '") + name + "' cannot be written as " + data_type_name(dtype));
  }
  const int64_t volume = dims.volume();
  if (volume < 0 || out.size() != static_cast<size_t>(volume) * data_type_size(dtype)) {
    return invalid_argument("weight '" + name + "' " + dims.to_string() + " " + data_type_name(dtype) + " needs " +
                            std::to_string(volume) + " elements; the buffer holds " + std::to_string(out.size()) +
                            " bytes");
  }
  Result<const SafetensorsTensor*> tensor = checkpoint_->get(source);
  if (!tensor.ok()) return tensor.status();
  const SafetensorsTensor& t = **tensor;
  if (!(t.dims == dims)) {
    return data_loss(t.file + ": tensor '" + source + "' has shape " + t.dims.to_string() + ", but the config needs " +
                     dims.to_string());
  }
  // parse_safetensors checked bytes == volume * element size for the checkpoint's dtype.
  convert(t.bytes.data(), t.dtype, out.data(), dtype, static_cast<size_t>(volume));
  if (!allow_non_finite_) {
    if (const int64_t at = first_non_finite(out, dtype); at >= 0) {
      const bool in_source = first_non_finite(t.bytes, t.dtype) >= 0;
      return data_loss(t.file + ": tensor '" + source + "' holds a non-finite value (NaN or infinity) at element " +
                       std::to_string(at) +
                       (in_source ? "" : std::string(" once rounded to ") + data_type_name(dtype)) +
                       "; gearbox build --allow-non-finite builds it anyway");
    }
  }
  return {};
}

int64_t first_non_finite(std::span<const uint8_t> bytes, DataType dtype) {
  if (!readable(dtype)) return -1;
  const size_t size = data_type_size(dtype);
  const size_t count = bytes.size() / size;
  if (dtype == DataType::kF32) {
    for (size_t i = 0; i < count; ++i) {
      float v;
      std::memcpy(&v, bytes.data() + i * size, sizeof v);
      if (!std::isfinite(v)) return static_cast<int64_t>(i);
    }
    return -1;
  }
  // bf16: all exponent bits set is 0x7f80; f16: 0x7c00 (NaN or infinity either way).
  const uint16_t exponent = dtype == DataType::kBF16 ? 0x7f80 : 0x7c00;
  for (size_t i = 0; i < count; ++i) {
    uint16_t h;
    std::memcpy(&h, bytes.data() + i * size, sizeof h);
    if ((h & exponent) == exponent) return static_cast<int64_t>(i);
  }
  return -1;
}

namespace {

// An expected tensor: its gearbox name, the config.json fields its sizes come from, and
// the sizes (rows, columns; columns 0 for a vector).
struct Expected {
  std::string name;
  std::string fields;
  int64_t rows;
  int64_t cols;
};

}  // namespace

Status check_description_against_checkpoint(const DecoderDescription& d, const CheckpointWeights& weights,
                                            const SafetensorsCheckpoint& checkpoint) {
  int64_t qw = 0, kvw = 0;
  if (__builtin_mul_overflow(d.heads, d.head_dim, &qw) || __builtin_mul_overflow(d.kv_heads, d.head_dim, &kvw)) {
    return out_of_range("config.json: num_attention_heads / num_key_value_heads times head_dim overflows");
  }
  std::vector<Expected> expected = {{"model.embed_tokens.weight", "vocab_size, hidden_size", d.vocab, d.hidden}};
  if (!d.tie_embeddings) expected.push_back({"lm_head.weight", "vocab_size, hidden_size", d.vocab, d.hidden});
  for (size_t i = 0; i < d.layers.size(); ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const std::string heads = "num_attention_heads * head_dim, hidden_size";
    const std::string kv = "num_key_value_heads * head_dim, hidden_size";
    expected.push_back({p + "self_attn.q_proj.weight", heads, qw, d.hidden});
    expected.push_back({p + "self_attn.k_proj.weight", kv, kvw, d.hidden});
    expected.push_back({p + "self_attn.v_proj.weight", kv, kvw, d.hidden});
    expected.push_back({p + "self_attn.o_proj.weight", "hidden_size, num_attention_heads * head_dim", d.hidden, qw});
    expected.push_back({p + "mlp.gate_proj.weight", "intermediate_size, hidden_size", d.intermediate, d.hidden});
    expected.push_back({p + "mlp.up_proj.weight", "intermediate_size, hidden_size", d.intermediate, d.hidden});
    expected.push_back({p + "mlp.down_proj.weight", "hidden_size, intermediate_size", d.hidden, d.intermediate});
  }
  for (const Expected& e : expected) {
    int64_t volume = 0;
    if (__builtin_mul_overflow(e.rows, e.cols, &volume) || volume > (int64_t{1} << 48)) {
      return out_of_range("config.json: " + e.fields + " (" + std::to_string(e.rows) + " x " + std::to_string(e.cols) +
                          ") make tensor '" + e.name + "' too large");
    }
    const std::string source = weights.checkpoint_name(e.name);
    const SafetensorsTensor* t = checkpoint.find(source);
    if (t == nullptr) return not_found("checkpoint has no tensor '" + source + "'");
    const Dims want{e.rows, e.cols};
    if (!(t->dims == want)) {
      return data_loss("config.json: " + e.fields + " give tensor '" + source + "' the shape " + want.to_string() +
                       ", but " + t->file + " holds it as " + t->dims.to_string());
    }
  }
  return {};
}

}  // namespace gearbox::models
