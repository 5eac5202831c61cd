// End to end: a network description of generic ops only (an MLP: matmul, bias add,
// layer norm, GELU, a bf16 constant cast to f32, matmul, softmax) built with
// `gearbox build --network` and run through the engine API on the CPU, against values
// computed here independently in double precision.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gearbox/engine.h"
#include "gearbox/profile_selection.h"
#include "models/safetensors_writer.h"

namespace gearbox {
namespace {

namespace fs = std::filesystem;
using models::Bytes;

constexpr int64_t kHidden = 8, kOut = 5;

// Values bf16 holds exactly: multiples of 1/16 in [-1, 1).
float w1_value(int64_t i) { return static_cast<float>((i * 7) % 32 - 16) / 16.0f; }

Bytes bf16_bytes(const std::vector<float>& values) {
  std::vector<uint16_t> h;
  for (float v : values) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    h.push_back(static_cast<uint16_t>(bits >> 16));
  }
  return models::u16_bytes(h);
}

const char* kDescription = R"({
  "format": "gearbox-network", "version": 1, "max_context": 16,
  "inputs": [{"name": "x", "dtype": "f32", "dims": [1, -1], "dim_names": ["batch", "seq"]}],
  "outputs": ["probs"],
  "nodes": [
    {"op": "reshape", "name": "cols", "inputs": ["x"], "outputs": ["xc"], "attrs": {"shape": [-3, 1]}},
    {"op": "constant", "name": "w0", "inputs": [], "outputs": ["w0"], "weights": ["up.weight"]},
    {"op": "matmul", "name": "up", "inputs": ["xc", "w0"], "outputs": ["h"]},
    {"op": "constant", "name": "b0", "inputs": [], "outputs": ["b0"], "weights": ["up.bias"]},
    {"op": "binary", "name": "bias", "inputs": ["h", "b0"], "outputs": ["hb"], "attrs": {"code": "add"}},
    {"op": "layer_norm", "name": "ln", "inputs": ["hb"], "outputs": ["hn"], "weights": ["ln.weight", "ln.bias"],
     "attrs": {"eps": 1e-5, "has_bias": 1}},
    {"op": "unary", "name": "act", "inputs": ["hn"], "outputs": ["a"], "attrs": {"code": "gelu_erf"}},
    {"op": "constant", "name": "w1", "inputs": [], "outputs": ["w1"], "dtypes": ["bf16"], "weights": ["down.weight"]},
    {"op": "cast", "name": "w1f", "inputs": ["w1"], "outputs": ["w1f"]},
    {"op": "matmul", "name": "down", "inputs": ["a", "w1f"], "outputs": ["logits"]},
    {"op": "softmax", "name": "probs", "inputs": ["logits"], "outputs": ["probs"], "attrs": {"axis": 1}}
  ]
})";

TEST(GenericNetwork, BuiltWithTheCliAndRunOnTheCpu) {
  const fs::path dir = fs::temp_directory_path() / ("gearbox_generic_e2e_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<float> w0(kHidden), b0(kHidden), lw(kHidden), lb(kHidden), w1(kHidden * kOut);
  for (int64_t i = 0; i < kHidden; ++i) {
    const auto u = static_cast<size_t>(i);
    w0[u] = 0.3f * static_cast<float>(i) - 1.0f;
    b0[u] = 0.1f * static_cast<float>(i % 3);
    lw[u] = 1.0f + 0.05f * static_cast<float>(i);
    lb[u] = -0.02f * static_cast<float>(i);
  }
  for (int64_t i = 0; i < kHidden * kOut; ++i) w1[static_cast<size_t>(i)] = w1_value(i);
  const Bytes file = models::safetensors_file({{"up.weight", "F32", {1, kHidden}, models::f32_bytes(w0)},
                                               {"up.bias", "F32", {kHidden}, models::f32_bytes(b0)},
                                               {"ln.weight", "F32", {kHidden}, models::f32_bytes(lw)},
                                               {"ln.bias", "F32", {kHidden}, models::f32_bytes(lb)},
                                               {"down.weight", "BF16", {kHidden, kOut}, bf16_bytes(w1)}});
  std::ofstream(dir / "w.safetensors", std::ios::binary)
      .write(reinterpret_cast<const char*>(file.data()), static_cast<std::streamsize>(file.size()));
  std::ofstream(dir / "net.json") << kDescription;
  const std::string command = std::string(GEARBOX_CLI) + " build --network " + (dir / "net.json").string() +
                              " --weights " + (dir / "w.safetensors").string() + " -o " + (dir / "mlp.gbx").string() +
                              " --device cpu > " + (dir / "log").string() + " 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << std::ifstream(dir / "log").rdbuf();

  Result<Engine> engine = Engine::load_file((dir / "mlp.gbx").string());
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  SessionOptions options;
  options.default_request = ProfileRequest::automatic();
  Result<Session> session = Session::create(*engine, options);
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  for (const std::vector<float>& x : {std::vector<float>{0.5f, -1.25f, 2.0f}, std::vector<float>{0.75f}}) {
    const auto t = static_cast<int64_t>(x.size());
    std::vector<float> in = x;
    const TensorView view{in.data(), DataType::kF32, Dims{1, t}};
    std::vector<Tensor> out(1);
    out[0].dtype = DataType::kF32;
    const Status run = session->run(std::span<const TensorView>(&view, 1), out);
    ASSERT_TRUE(run.ok()) << run.to_string();
    ASSERT_EQ(out[0].dims, (Dims{t, kOut}));
    const auto* got = reinterpret_cast<const float*>(out[0].bytes.data());
    for (int64_t r = 0; r < t; ++r) {
      // up + bias, layer norm, GELU (erf), down, softmax: in double.
      std::vector<double> h(kHidden), a(kHidden), logits(kOut, 0.0);
      double mean = 0, var = 0;
      for (size_t i = 0; i < h.size(); ++i) mean += (h[i] = double{x[static_cast<size_t>(r)]} * w0[i] + b0[i]);
      mean /= kHidden;
      for (double v : h) var += (v - mean) * (v - mean);
      var /= kHidden;
      for (size_t i = 0; i < h.size(); ++i) {
        const double n = (h[i] - mean) / std::sqrt(var + 1e-5) * lw[i] + lb[i];
        a[i] = 0.5 * n * (1.0 + std::erf(n / std::sqrt(2.0)));
      }
      for (size_t j = 0; j < logits.size(); ++j) {
        for (size_t i = 0; i < a.size(); ++i) logits[j] += a[i] * w1[i * kOut + j];
      }
      double mx = logits[0], sum = 0;
      for (double l : logits) mx = std::max(mx, l);
      for (double l : logits) sum += std::exp(l - mx);
      for (int64_t j = 0; j < kOut; ++j) {
        const double want = std::exp(logits[static_cast<size_t>(j)] - mx) / sum;
        EXPECT_NEAR(got[r * kOut + j], want, 1e-5) << "row " << r << " class " << j;
      }
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gearbox
