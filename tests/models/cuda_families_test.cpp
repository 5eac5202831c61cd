// Every family's decoder on the CUDA device against the CPU device: the same description
// and weights built into one engine per device, then the same prompt (prefill, past every
// window) and decode steps on both. Covers what only the other families use on the GPU:
// Llama-3 RoPE tables, linear RoPE scaling without q/k norms, projection biases (f32 beside
// 16-bit weights), per-head q/k norms without Gemma's sandwich norms, windows on every
// layer. Label `gpu`: skipped without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../runtime/test_engine.h"
#include "gearbox/profile_guard.h"
#include "models/decoder.h"
#include "runtime/device_backend.h"
#include "small_decoder.h"

namespace gearbox::testing {
namespace {

using models::DecoderDescription;
using models::DecoderLayer;
using models::RopeDescription;
using models::RopeScaling;

bool have_cuda() { return internal::device_backend(DeviceKind::kCuda).ok(); }

DecoderDescription base(const std::string& family) { return small_decoder(family); }

std::vector<DecoderDescription> families() {
  std::vector<DecoderDescription> out;
  DecoderDescription llama3 = base("llama");
  for (DecoderLayer& l : llama3.layers) l.rope = {500000.0f, RopeScaling::kLlama3, 8.0f, 1.0f, 4.0f, 64};
  out.push_back(llama3);
  DecoderDescription llama2 = base("llama");
  llama2.kv_heads = 6;
  llama2.qkv_bias = llama2.o_bias = llama2.mlp_bias = true;
  llama2.tie_embeddings = true;
  for (DecoderLayer& l : llama2.layers) l.rope = {10000.0f, RopeScaling::kLinear, 3.0f};
  out.push_back(llama2);
  DecoderDescription qwen2 = base("qwen2");
  qwen2.qkv_bias = true;
  qwen2.layers = {DecoderLayer{0, {1e6f}}, DecoderLayer{4, {1e6f}}};
  out.push_back(qwen2);
  DecoderDescription qwen3 = base("qwen3");
  qwen3.qk_norm = true;
  out.push_back(qwen3);
  DecoderDescription mistral = base("mistral");
  for (DecoderLayer& l : mistral.layers) l.window = 5;
  out.push_back(mistral);
  return out;
}

Engine engine_on(const DecoderDescription& d, DeviceKind device) {
  models::RandomWeights weights(13);
  Result<models::BuiltModel> model = models::build_decoder(d, weights);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  return engine_from_model(std::move(*model), decode_prefill_profiles(32), device).engine;
}

std::vector<float> run(Session& s, const TokenInputs& in, const std::string& profile) {
  Tensor logits;
  auto pin = OptimizationProfileGuard::named(profile);
  const Status st = s.run(in.span(), std::span(&logits, 1));
  EXPECT_TRUE(st.ok()) << st.to_string();
  return {logits.data<float>(), logits.data<float>() + logits.dims.volume()};
}

double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, scale = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return err / scale;
}

void compare_devices(DataType dtype, double tolerance) {
  for (DecoderDescription d : families()) {
    d.dtype = dtype;
    SCOPED_TRACE(models::describe(d)[0].second + " " + models::describe(d).back().second);
    Engine gpu_engine = engine_on(d, DeviceKind::kCuda);
    Engine cpu_engine = engine_on(d, DeviceKind::kCpu);
    Result<Session> gpu = Session::create(gpu_engine), cpu = Session::create(cpu_engine);
    ASSERT_TRUE(gpu.ok() && cpu.ok());
    const TokenInputs prompt({2, 17, 40, 5, 66, 81, 9, 13, 50}, 0);  // past the windows of 4 and 5
    EXPECT_LT(relative_error(run(*gpu, prompt, "prefill"), run(*cpu, prompt, "prefill")), tolerance);
    for (int64_t pos = 9; pos < 20; ++pos) {
      const TokenInputs step({(pos * 7) % 97}, pos);
      const std::string profile = pos % 3 == 0 ? "prefill" : "decode";
      EXPECT_LT(relative_error(run(*gpu, step, profile), run(*cpu, step, profile)), tolerance) << "position " << pos;
    }
  }
}

TEST(CudaFamilies, F32LogitsMatchTheCpuDevice) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  compare_devices(DataType::kF32, 1e-4);
}

TEST(CudaFamilies, Bf16LogitsMatchTheCpuDevice) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  // Both devices read the same bf16 weights; the GEMMs also round activations to bf16.
  compare_devices(DataType::kBF16, 2e-2);
}

}  // namespace
}  // namespace gearbox::testing
