// Writes safetensors files for tests: well-formed ones from tensor specs, or any header
// verbatim (for damage cases).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gearbox::models {

using Bytes = std::vector<uint8_t>;

struct TensorSpec {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  Bytes data;
};

inline Bytes f32_bytes(const std::vector<float>& values) {
  Bytes out(values.size() * 4);
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

inline Bytes u16_bytes(const std::vector<uint16_t>& values) {
  Bytes out(values.size() * 2);
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

inline Bytes pattern_bytes(size_t n, uint8_t seed) {
  Bytes out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(seed + i * 7);
  return out;
}

// A file: the 8-byte little-endian length, `header` verbatim, then `data`.
// (Sized once and copied into: GCC 12 at -O3 reports a bogus -Warray-bounds inside
// std::vector::insert after a vector of 8 bytes.)
inline Bytes raw_file(const std::string& header, const Bytes& data = {}) {
  Bytes out(8 + header.size() + data.size());
  const uint64_t n = header.size();
  for (size_t i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  std::memcpy(out.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
  return out;
}

// A well-formed file holding `tensors` back to back, in the given order.
inline Bytes safetensors_file(const std::vector<TensorSpec>& tensors, const nlohmann::json& metadata = nullptr) {
  nlohmann::json header = nlohmann::json::object();
  Bytes data;
  for (const TensorSpec& t : tensors) {
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.data.size()}}};
    data.insert(data.end(), t.data.begin(), t.data.end());
  }
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  return raw_file(header.dump(), data);
}

}  // namespace gearbox::models
