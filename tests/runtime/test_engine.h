// Small Gemma-3 engines built in-process for runtime tests.
#pragma once

#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "builder/builder.h"
#include "format/engine_file.h"
#include "gearbox/engine.h"
#include "models/gemma3.h"
#include "runtime/device_backend.h"

namespace gearbox::testing {

/// Tiny but complete: 2 layers (sliding window 4, then global), GQA 4/2, head_dim 8.
inline models::Gemma3Config tiny_config() {
  models::Gemma3Config c;
  c.vocab = 97;
  c.hidden = 32;
  c.intermediate = 48;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 8;
  c.sliding_window = 4;
  c.layer_is_sliding = {true, false};
  c.query_pre_attn_scalar = 16.0f;
  c.max_context = 64;
  return c;
}

inline format::ProfileDesc seq_profile(const std::string& name, int64_t lo, int64_t opt, int64_t hi) {
  const InputProfileBounds b{Dims{1, lo}, Dims{1, opt}, Dims{1, hi}};
  return {name, {b, b}};
}

/// decode [1,1]..[1,1] and prefill [1,1]..[1,max] (opt 16).
inline std::vector<format::ProfileDesc> decode_prefill_profiles(int64_t max_seq) {
  return {seq_profile("decode", 1, 1, 1), seq_profile("prefill", 1, std::min<int64_t>(16, max_seq), max_seq)};
}

struct TestEngine {
  models::BuiltModel model;
  std::vector<uint8_t> bytes;  // the engine file image
  Engine engine{nullptr};
};

/// The id of the tactic called `name` among `device`'s tactics for `node` (to force it in an
/// engine's table); a failure of the test, and 0, where it has none.
inline uint32_t tactic_id(const internal::DeviceBackend& device, const ir::Node& node, const std::string& name) {
  for (const internal::TacticInfo& t : device.tactics(node)) {
    if (name == t.name) return t.id;
  }
  ADD_FAILURE() << "no tactic " << name << " for " << node.name;
  return 0;
}

/// An engine file image loaded on `device`.
inline Result<Engine> load_bytes(std::span<const uint8_t> bytes, DeviceKind device) {
  EngineOptions load;
  load.device = device;
  return Engine::load_buffer(bytes, load);
}

/// `desc` (its tactics possibly forced) with `payload`, serialized and loaded on `device`.
inline Result<Engine> load_engine(const format::EngineDesc& desc, std::span<const uint8_t> payload, DeviceKind device) {
  Result<std::vector<uint8_t>> bytes = format::serialize_engine(desc, payload);
  if (!bytes.ok()) return bytes.status();
  return load_bytes(*bytes, device);
}

/// An engine of `model` for `profiles`, tuned on `device` (`repetitions` timed runs a tactic),
/// serialized and loaded back.
inline TestEngine engine_from_model(models::BuiltModel model, std::vector<format::ProfileDesc> profiles,
                                    DeviceKind device = DeviceKind::kCpu, int repetitions = 3) {
  TestEngine t;
  t.model = std::move(model);
  internal::BuildOptions options;
  options.repetitions = repetitions;
  options.device = device;
  Result<format::EngineDesc> desc =
      internal::build_engine(t.model.network, std::move(profiles), t.model.payload, options);
  EXPECT_TRUE(desc.ok()) << desc.status().to_string();
  Result<std::vector<uint8_t>> bytes = format::serialize_engine(*desc, t.model.payload);
  EXPECT_TRUE(bytes.ok()) << bytes.status().to_string();
  t.bytes = std::move(*bytes);
  Result<Engine> engine = load_bytes(t.bytes, device);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  t.engine = std::move(*engine);
  return t;
}

inline TestEngine make_engine(const models::Gemma3Config& c, std::vector<format::ProfileDesc> profiles,
                              uint64_t seed = 7, DeviceKind device = DeviceKind::kCpu) {
  models::RandomWeights weights(seed);
  Result<models::BuiltModel> model = models::build_gemma3(c, weights);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  return engine_from_model(std::move(*model), std::move(profiles), device);
}

/// Inputs for tokens at consecutive positions starting at `start`.
struct TokenInputs {
  std::vector<int64_t> tokens, positions;
  TensorView views[2];
  TokenInputs(std::vector<int64_t> ids, int64_t start) : tokens(std::move(ids)) {
    for (size_t i = 0; i < tokens.size(); ++i) positions.push_back(start + static_cast<int64_t>(i));
    const Dims d{1, static_cast<int64_t>(tokens.size())};
    views[0] = {tokens.data(), DataType::kI64, d};
    views[1] = {positions.data(), DataType::kI64, d};
  }
  std::span<const TensorView> span() const { return views; }
};

}  // namespace gearbox::testing
