#include "models/hf_weights.h"

#include <cstring>

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
  return {};
}

}  // namespace gearbox::models
