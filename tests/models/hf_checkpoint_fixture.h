// Hugging Face checkpoint tests' shared pieces: a fresh directory per test and the files
// written into it.
//
//   TEST_F(HfCheckpoint, Example) {
//     write_file(path("model.safetensors"), safetensors_file({{"w", "F32", {1}, f32_bytes({1})}}));
//   }
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/safetensors.h"
#include "safetensors_writer.h"

namespace gearbox::models {

inline void write_file(const std::filesystem::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  write_file(path, Bytes(text.begin(), text.end()));
}

// A fresh directory per test, removed afterwards. One class for every file's HfCheckpoint
// tests: gtest requires one fixture type per test suite.
class HfCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = std::filesystem::temp_directory_path() /
           ("gearbox_hf_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter.fetch_add(1)));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string dir() const { return dir_.string(); }
  std::filesystem::path path(const std::string& name) const { return dir_ / name; }

  std::filesystem::path dir_;
};

// Expects `s` to carry `code` and a message containing `substring`.
inline void expect_error(const Status& s, StatusCode code, const std::string& substring) {
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(substring), std::string::npos) << s.message();
}

// Writes `specs` as dir/model.safetensors and opens the directory.
inline Result<SafetensorsCheckpoint> write_and_open(const std::filesystem::path& dir,
                                                    const std::vector<TensorSpec>& specs) {
  write_file(dir / "model.safetensors", safetensors_file(specs));
  return SafetensorsCheckpoint::open(dir.string());
}

// A small text model as transformers 5.x writes it: layer_types and per-type rope_parameters.
inline nlohmann::json v5_config() {
  return nlohmann::json::parse(R"({
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "dtype": "float16",
    "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
    "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32, "rms_norm_eps": 1e-05,
    "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 32, "sliding_window": 16,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    "rope_parameters": {
      "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 500000.0},
      "sliding_attention": {"rope_type": "default", "rope_theta": 5000.0}},
    "tie_word_embeddings": false, "bos_token_id": 2, "eos_token_id": 1,
    "final_logit_softcapping": null, "attn_logit_softcapping": null, "transformers_version": "5.0.0"})");
}

}  // namespace gearbox::models
